//! The pooled HTTP client (HTTP/1.1 and HTTP/2, TLS by rustls) with its deadlines, and the one exchange every
//! leaf makes: send, map a failure status, stream or read the body.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::body::SseChatStream;
use super::connect::{StaleConnections, WatchedConnector};
use super::deadline::with_timeout;
use super::sent::SentCredentials;
use super::status::{body_error, client_error, error_from_response, ErrorReaders};
use crate::error::{ChatError, ErrorKind, TimeoutPhase};
use crate::leaf::ProviderWire;
use crate::stream::ChatStream;

/// Deadlines of one HTTP call. `None` disables one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP + TLS connection setup. Default 10 s.
    pub connect: Option<Duration>,
    /// From sending the request to the response status and headers. Default 120 s.
    pub first_byte: Option<Duration>,
    /// Between two chunks of a streaming body, and for reading a whole non-streaming body. Default 120 s.
    pub idle: Option<Duration>,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Some(Duration::from_secs(10)),
            first_byte: Some(Duration::from_secs(120)),
            idle: Some(Duration::from_secs(120)),
        }
    }
}

type HyperClient = Client<HttpsConnector<WatchedConnector>, Full<Bytes>>;

/// A pooled HTTPS/HTTP client with timeouts. Cheap to clone (the pool is shared).
#[derive(Clone)]
pub struct HttpTransport {
    client: HyperClient,
    timeouts: Timeouts,
    stale: StaleConnections,
}

impl fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpTransport")
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

impl HttpTransport {
    /// A client with these timeouts, trusting the Mozilla root certificates (webpki-roots). HTTP/2 is negotiated
    /// by ALPN over TLS; `http2_prior_knowledge` also uses HTTP/2 over plain `http://` (h2c, as some vLLM
    /// deployments and gateways offer).
    pub fn new(timeouts: Timeouts, http2_prior_knowledge: bool) -> Result<Self, ChatError> {
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| ChatError::new(ErrorKind::Other, "TLS setup failed").with_source(e))?
        .with_root_certificates(rustls::RootCertStore::from_iter(
            webpki_roots::TLS_SERVER_ROOTS.iter().cloned(),
        ))
        .with_no_client_auth();
        Self::with_tls(timeouts, http2_prior_knowledge, tls)
    }

    /// A client with your own TLS configuration: a private CA (a corporate proxy, a self-hosted model server),
    /// client certificates, another crypto provider. ALPN is set here (`h2`, `http/1.1`).
    pub fn with_tls(
        timeouts: Timeouts,
        http2_prior_knowledge: bool,
        tls: rustls::ClientConfig,
    ) -> Result<Self, ChatError> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(timeouts.connect);
        let stale = StaleConnections::default();
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(WatchedConnector::new(http, stale.clone()));
        let client = Client::builder(TokioExecutor::new())
            .http2_only(http2_prior_knowledge)
            .pool_idle_timeout(Duration::from_secs(90))
            // Without a timer the idle timeout is only checked when a connection is checked out: an idle
            // connection (an HTTP/2 one with the state of every stream it carried) would stay open for good.
            .pool_timer(TokioTimer::new())
            // The default, stated: a request whose pooled connection turned out closed before the request was
            // written to it is sent again on another connection (see `connect`).
            .retry_canceled_requests(true)
            .build(https);
        Ok(HttpTransport {
            client,
            timeouts,
            stale,
        })
    }

    /// How many requests found their pooled connection closed by the upstream before they were written, and
    /// were sent again on another connection (shared by this transport's clones).
    pub fn stale_connections(&self) -> &StaleConnections {
        &self.stale
    }

    /// The configured deadlines.
    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// Whether the client can take a request now: always. hyper's pooled client has no readiness of its own
    /// (its `poll_ready` answers `Ready(Ok)` without looking at anything); a connection is checked out, or made,
    /// by the request itself, under the connect timeout.
    pub(crate) fn poll_ready(&self, _cx: &mut Context<'_>) -> Poll<Result<(), ChatError>> {
        Poll::Ready(Ok(()))
    }

    /// Send a request and wait for a success status. Any other status becomes a typed error read by `readers`
    /// (from at most 64 KiB of the body), with every credential the request carried redacted.
    async fn send(
        &self,
        request: http::Request<Full<Bytes>>,
        readers: ErrorReaders,
    ) -> Result<http::Response<Incoming>, ChatError> {
        // Taken from the request as it goes out: signing and configured headers add credentials of their own.
        let sent = SentCredentials::of(request.headers());
        let response = with_timeout(
            self.timeouts.first_byte,
            TimeoutPhase::FirstByte,
            self.client.request(request),
        )
        .await?
        .map_err(client_error)?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(error_from_response(response, self.timeouts.idle, &sent, readers).await)
    }

    /// Send a request, wait for a success status (any other is the typed error a chat call would get, read by
    /// `P`'s readers) and read its whole body: a provider's endpoints beside the chat call.
    pub(crate) async fn fetch<P: ProviderWire>(
        &self,
        request: http::Request<Full<Bytes>>,
    ) -> Result<Bytes, ChatError> {
        let readers = ErrorReaders {
            message: P::error_message,
            detail: P::error_detail,
            retry_after: P::error_retry_after,
        };
        let response = self.send(request, readers).await?;
        self.read_body(response.into_body()).await
    }

    /// Send a request as it is and return its response whatever the status, with only the connect timeout
    /// applied: for callers that read statuses and bodies themselves (the OTLP exporter of `tower-chat-tracing`).
    pub async fn send_unchecked(
        &self,
        request: http::Request<Full<Bytes>>,
    ) -> Result<http::Response<Incoming>, ChatError> {
        self.client.request(request).await.map_err(client_error)
    }

    /// Read a whole (non-streaming) body within the idle deadline.
    pub(crate) async fn read_body(&self, body: Incoming) -> Result<Bytes, ChatError> {
        let collected =
            with_timeout(self.timeouts.idle, TimeoutPhase::Idle, body.collect()).await?;
        collected.map(|c| c.to_bytes()).map_err(body_error)
    }
}

impl HttpTransport {
    /// Send a provider request and turn the answer into a [`ChatStream`]: the shared body of every leaf's `call`.
    /// The future resolves once the status is known; a request's cancellation token aborts the wait and ends the
    /// stream.
    pub(crate) async fn execute<P: ProviderWire>(
        &self,
        request: http::Request<Full<Bytes>>,
        streaming: bool,
        cancel: Option<crate::CancellationToken>,
    ) -> Result<ChatStream, ChatError> {
        let readers = ErrorReaders {
            message: P::error_message,
            detail: P::error_detail,
            retry_after: P::error_retry_after,
        };
        let send = self.send(request, readers);
        let response = match &cancel {
            Some(token) => tokio::select! {
                biased;
                _ = token.cancelled() => return Err(ChatError::cancelled()),
                response = send => response?,
            },
            None => send.await?,
        };
        let stream: ChatStream = if streaming {
            SseChatStream::new(
                response.into_body(),
                P::Decoder::default(),
                self.timeouts.idle,
            )
            .boxed()
        } else {
            let events = self
                .read_body(response.into_body())
                .await
                .and_then(|body| P::decode_whole(&body));
            match events {
                Ok(events) => Box::pin(futures_util::stream::iter(events.into_iter().map(Ok))),
                // A body that arrived but did not decode is a failure after the status: a stream item.
                Err(error) => Box::pin(futures_util::stream::iter([Err(error)])),
            }
        };
        Ok(match cancel {
            Some(token) => crate::stream::cancellable(stream, token),
            None => stream,
        })
    }
}
