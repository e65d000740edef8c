//! The HTTP machinery shared by the leaf services: a pooled hyper client (HTTP/1.1 and HTTP/2, TLS by rustls),
//! timeouts, status-to-error mapping, and the SSE body stream.

use std::collections::VecDeque;
use std::fmt;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use futures_core::Stream;
use http::header::HeaderName;
use http::{HeaderMap, HeaderValue, StatusCode, Uri};
use http_body::Body;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::time::{Instant, Sleep};

use crate::error::{ChatError, ErrorKind, TimeoutPhase};

use crate::event::ChatEvent;
use crate::sse::{SseDecoder, SseEvent};
use crate::stream::ChatStream;
/// The TLS library the transport uses, for [`HttpTransport::with_tls`].
pub use rustls;

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

/// A secret (an API key). Its `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a secret.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself, for building a header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Replace every occurrence of the secret in `text` (providers sometimes echo keys in error messages).
    pub(crate) fn redact(&self, text: String) -> String {
        if self.0.len() >= 4 && text.contains(&self.0) {
            text.replace(&self.0, "[redacted]")
        } else {
            text
        }
    }

    /// A sensitive header value (hyper's HPACK never indexes it; `Debug` of the header map hides it).
    pub(crate) fn header_value(&self, prefix: &str) -> Result<HeaderValue, ChatError> {
        let mut value = HeaderValue::try_from(format!("{prefix}{}", self.0)).map_err(|_| {
            ChatError::new(
                ErrorKind::InvalidRequest,
                "the API key contains characters not allowed in an HTTP header",
            )
        })?;
        value.set_sensitive(true);
        Ok(value)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

type HyperClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// A pooled HTTPS/HTTP client with timeouts. Cheap to clone (the pool is shared).
#[derive(Clone)]
pub struct HttpTransport {
    client: HyperClient,
    timeouts: Timeouts,
}

impl fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpTransport")
            .field("timeouts", &self.timeouts)
            .finish_non_exhaustive()
    }
}

/// The most bytes of an error response body read to find the provider's message.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

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
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .http2_only(http2_prior_knowledge)
            .pool_idle_timeout(Duration::from_secs(90))
            // Without a timer the idle timeout is only checked when a connection is checked out: an idle
            // connection (an HTTP/2 one with the state of every stream it carried) would stay open for good.
            .pool_timer(TokioTimer::new())
            .build(https);
        Ok(HttpTransport { client, timeouts })
    }

    /// The configured deadlines.
    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// Whether the client can take a request now (hyper's pool is always ready; kept for an honest `poll_ready`).
    pub(crate) fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), ChatError>> {
        tower_service::Service::<http::Request<Full<Bytes>>>::poll_ready(&mut self.client, cx)
            .map_err(|e| ChatError::new(ErrorKind::Connection, "HTTP client failed").with_source(e))
    }

    /// Send a request and wait for a success status. Any other status becomes a typed error carrying the
    /// provider's message (read by `provider_message` from at most 64 KiB of the body), with `secret` redacted.
    pub(crate) async fn send(
        &self,
        request: http::Request<Full<Bytes>>,
        secret: Option<&Secret>,
        provider_message: fn(&[u8]) -> Option<String>,
    ) -> Result<http::Response<Incoming>, ChatError> {
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
        let status = response.status();
        let retry_after = retry_after(response.headers());
        let body = with_timeout(
            self.timeouts.idle,
            TimeoutPhase::Idle,
            Limited::new(response.into_body(), ERROR_BODY_LIMIT).collect(),
        )
        .await
        .ok()
        .and_then(|r| r.ok())
        .map(|c| c.to_bytes())
        .unwrap_or_default();
        let message = provider_message(&body).unwrap_or_else(|| {
            let text = String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned();
            // JSON without a message we know of says nothing more than the status does.
            if text.trim().is_empty() || serde_json::from_slice::<serde_json::Value>(&body).is_ok()
            {
                status.canonical_reason().unwrap_or("no message").to_owned()
            } else {
                text
            }
        });
        let message = match secret {
            Some(secret) => secret.redact(message),
            None => message,
        };
        Err(ChatError::new(status_kind(status, retry_after), message).with_status(status))
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

async fn with_timeout<F: std::future::Future>(
    limit: Option<Duration>,
    phase: TimeoutPhase,
    future: F,
) -> Result<F::Output, ChatError> {
    match limit {
        Some(limit) => tokio::time::timeout(limit, future).await.map_err(|_| {
            ChatError::new(
                ErrorKind::Timeout(phase),
                format!("no answer within {limit:?}"),
            )
        }),
        None => Ok(future.await),
    }
}

fn client_error(error: hyper_util::client::legacy::Error) -> ChatError {
    let timed_out = {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
        let mut found = false;
        while let Some(e) = source {
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                found |= io.kind() == std::io::ErrorKind::TimedOut;
            }
            source = e.source();
        }
        found
    };
    if error.is_connect() && timed_out {
        return ChatError::new(
            ErrorKind::Timeout(TimeoutPhase::Connect),
            "connecting to the provider timed out",
        )
        .with_source(error);
    }
    let what = if error.is_connect() {
        "could not connect to the provider"
    } else {
        "the connection to the provider failed"
    };
    ChatError::new(ErrorKind::Connection, what).with_source(error)
}

fn body_error(error: hyper::Error) -> ChatError {
    ChatError::new(
        ErrorKind::Connection,
        "the provider closed the connection mid-response",
    )
    .with_source(error)
}

fn status_kind(status: StatusCode, retry_after: Option<Duration>) -> ErrorKind {
    match status.as_u16() {
        401 | 403 => ErrorKind::Authentication,
        429 => ErrorKind::RateLimited { retry_after },
        408 => ErrorKind::Timeout(TimeoutPhase::FirstByte),
        400..=499 => ErrorKind::InvalidRequest,
        _ => ErrorKind::Upstream,
    }
}

/// `retry-after-ms` (OpenAI) wins over `Retry-After` (seconds or an HTTP date).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::from_secs_f64(ms / 1000.0));
        }
    }
    let value = header("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let date = httpdate::parse_http_date(value).ok()?;
    Some(
        date.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

/// Maps one provider's SSE events to chat events.
pub(crate) trait WireDecoder: Send + Unpin + 'static {
    /// Map one SSE event, pushing zero or more chat events.
    fn on_event(&mut self, event: SseEvent, out: &mut VecDeque<ChatEvent>)
        -> Result<(), ChatError>;
    /// The body ended: push what is still owed, or fail if the provider stopped before finishing.
    fn on_end(&mut self, out: &mut VecDeque<ChatEvent>) -> Result<(), ChatError>;
    /// Whether the provider's end marker was seen (later bytes are read and ignored, so the connection can be
    /// reused).
    fn is_done(&self) -> bool;
}

/// SSE decoding plus one provider's event mapping, fed bytes and drained of results; shared by the body stream
/// and the public byte-level decoders.
///
/// Decoding is pulled: a fed chunk is kept as it is and decoded one SSE event at a time as results are asked for,
/// so only one event's strings are alive at a time instead of a whole chunk's (a chunk often holds a hundred).
pub(crate) struct EventDecoder<D> {
    sse: SseDecoder,
    wire: D,
    /// Bytes fed but not decoded yet.
    pending: Bytes,
    /// Chat events mapped from the last SSE event, not taken yet.
    ready: VecDeque<ChatEvent>,
    failure: Option<ChatError>,
    ended: bool,
}

impl<D: WireDecoder> EventDecoder<D> {
    pub(crate) fn new(wire: D) -> Self {
        EventDecoder {
            sse: SseDecoder::new(),
            wire,
            pending: Bytes::new(),
            ready: VecDeque::new(),
            failure: None,
            ended: false,
        }
    }

    /// Whether nothing more is wanted from the body (the end marker was seen, or it failed).
    pub(crate) fn is_complete(&self) -> bool {
        self.wire.is_done() || self.failure.is_some()
    }

    /// Queue the next chunk of the body; it is decoded as items are taken.
    pub(crate) fn push(&mut self, data: Bytes) {
        if self.is_complete() {
            return;
        }
        if !self.pending.is_empty() {
            // Fed again before the last chunk was drained: decode that one now to keep a single pending chunk.
            self.decode_pending();
        }
        self.pending = data;
    }

    /// Queue a chunk borrowed from the caller (copied).
    pub(crate) fn feed(&mut self, data: &[u8]) {
        self.push(Bytes::copy_from_slice(data));
    }

    /// Decode one SSE event from the pending bytes, mapping it to chat events; `false` when no event completed.
    fn decode_one(&mut self) -> bool {
        let mut input = &self.pending[..];
        let event = self.sse.decode_next(&mut input);
        let used = self.pending.len() - input.len();
        self.pending.advance(used);
        let Some(event) = event else {
            return false;
        };
        if let Err(error) = self.wire.on_event(event, &mut self.ready) {
            self.failure = Some(error);
        }
        true
    }

    fn decode_pending(&mut self) {
        while !self.is_complete() && self.decode_one() {}
        if self.is_complete() {
            // Bytes after the end marker or a failure are ignored.
            self.pending.clear();
        }
    }

    /// The body ended (normally, or with `error`).
    pub(crate) fn end(&mut self, error: Option<ChatError>) {
        if self.ended {
            return;
        }
        self.ended = true;
        self.decode_pending();
        if self.is_complete() {
            return;
        }
        if let Some(error) = error {
            self.failure = Some(error);
            return;
        }
        if let Some(event) = self.sse.finish() {
            self.failure = self.wire.on_event(event, &mut self.ready).err();
        }
        if !self.is_complete() {
            self.failure = self.wire.on_end(&mut self.ready).err();
        }
    }

    /// The next decoded item: events first, then the failure that ended decoding; `None` when more bytes are
    /// needed (or everything was taken).
    pub(crate) fn next_item(&mut self) -> Option<Result<ChatEvent, ChatError>> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(Ok(event));
            }
            if self.is_complete() || self.pending.is_empty() {
                break;
            }
            self.decode_one();
        }
        self.pending.clear();
        self.failure.take().map(Err)
    }
}

/// A streaming body decoded as SSE and mapped to chat events, with an idle deadline between chunks.
pub(crate) struct SseChatStream<D> {
    body: Option<Incoming>,
    decoder: EventDecoder<D>,
    idle: Option<Duration>,
    idle_deadline: Option<Instant>,
    idle_timer: Option<Pin<Box<Sleep>>>,
}

impl<D: WireDecoder> SseChatStream<D> {
    pub(crate) fn new(body: Incoming, wire: D, idle: Option<Duration>) -> Self {
        SseChatStream {
            body: Some(body),
            decoder: EventDecoder::new(wire),
            idle,
            idle_deadline: None,
            idle_timer: None,
        }
    }

    pub(crate) fn boxed(self) -> ChatStream {
        Box::pin(self)
    }

    /// Whether the idle deadline passed; re-arms the timer lazily so a busy stream costs one clock read per chunk
    /// instead of a timer-wheel update.
    fn idle_expired(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(deadline) = self.idle_deadline else {
            return false;
        };
        let timer = self
            .idle_timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                return false;
            }
            if Instant::now() >= deadline {
                return true;
            }
            timer.as_mut().reset(deadline);
        }
    }
}

impl<D: WireDecoder> Stream for SseChatStream<D> {
    type Item = Result<ChatEvent, ChatError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(item) = this.decoder.next_item() {
                if item.is_err() {
                    this.body = None;
                }
                return Poll::Ready(Some(item));
            }
            let Some(body) = this.body.as_mut() else {
                return Poll::Ready(None);
            };
            // After the end marker the rest of the body is still read (and ignored) while it is at hand, so
            // the connection goes back to the pool instead of being closed.
            if this.idle_deadline.is_none() {
                this.idle_deadline = this.idle.map(|idle| Instant::now() + idle);
            }
            match Pin::new(body).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(idle) = this.idle {
                        this.idle_deadline = Some(Instant::now() + idle);
                    }
                    if let Ok(data) = frame.into_data() {
                        this.decoder.push(data);
                    }
                }
                Poll::Ready(Some(Err(error))) => {
                    this.body = None;
                    this.decoder.end(Some(body_error(error)));
                }
                Poll::Ready(None) => {
                    this.body = None;
                    this.decoder.end(None);
                }
                // The end marker was seen but the body's last bytes are still on their way: end the stream now,
                // and let a task read the rest so the connection goes back to the pool instead of closing.
                Poll::Pending if this.decoder.is_complete() => {
                    if let Some(rest) = this.body.take() {
                        tokio::spawn(drain(rest));
                    }
                    return Poll::Ready(None);
                }
                Poll::Pending => {
                    if !this.idle_expired(cx) {
                        return Poll::Pending;
                    }
                    this.body = None;
                    let idle = this.idle.unwrap_or_default();
                    this.decoder.end(Some(ChatError::new(
                        ErrorKind::Timeout(TimeoutPhase::Idle),
                        format!("no data from the provider for {idle:?}"),
                    )));
                }
            }
        }
    }
}

/// Read what is left of a finished response (a few bytes: the chunked terminator, a trailing newline), bounded in
/// size and time, so hyper can reuse the connection.
async fn drain(mut body: Incoming) {
    const LIMIT: usize = 64 * 1024;
    let read_rest = async {
        let mut read = 0;
        while let Some(Ok(frame)) = body.frame().await {
            read += frame.data_ref().map_or(0, Bytes::len);
            if read > LIMIT {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), read_rest).await;
}

/// How one provider's responses are read.
pub(crate) struct ProviderWire<D> {
    /// Finds the provider's message in an error body.
    pub(crate) provider_message: fn(&[u8]) -> Option<String>,
    /// Maps a whole non-streaming body to events.
    pub(crate) decode_whole: fn(&[u8]) -> Result<Vec<ChatEvent>, ChatError>,
    /// A fresh decoder for a streaming body.
    pub(crate) stream_decoder: fn() -> D,
}

impl HttpTransport {
    /// Send a provider request and turn the answer into a [`ChatStream`]: the shared body of every leaf's `call`.
    /// The future resolves once the status is known; a request's cancellation token aborts the wait and ends the
    /// stream.
    pub(crate) async fn execute<D: WireDecoder>(
        &self,
        request: http::Request<Full<Bytes>>,
        streaming: bool,
        secret: Option<&Secret>,
        cancel: Option<crate::CancellationToken>,
        wire: ProviderWire<D>,
    ) -> Result<ChatStream, ChatError> {
        let send = self.send(request, secret, wire.provider_message);
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
                (wire.stream_decoder)(),
                self.timeouts.idle,
            )
            .boxed()
        } else {
            let events = self
                .read_body(response.into_body())
                .await
                .and_then(|body| (wire.decode_whole)(&body));
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

/// `base` joined with `path`, validated once at build time.
pub(crate) fn endpoint(base: &str, path: &str) -> Result<Uri, ChatError> {
    let url = format!("{}/{path}", base.trim_end_matches('/'));
    let uri: Uri = url.parse().map_err(|e| {
        ChatError::new(
            ErrorKind::InvalidRequest,
            format!("invalid base URL {base:?}"),
        )
        .with_source(e)
    })?;
    match uri.scheme_str() {
        Some("http") | Some("https") if uri.host().is_some() => Ok(uri),
        _ => Err(ChatError::new(
            ErrorKind::InvalidRequest,
            format!("base URL {base:?} must be an absolute http:// or https:// URL"),
        )),
    }
}

pub(crate) fn parse_headers(headers: &[(String, String)]) -> Result<HeaderMap, ChatError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let name = HeaderName::try_from(name.as_str()).map_err(|e| {
            ChatError::new(
                ErrorKind::InvalidRequest,
                format!("invalid header name {name:?}"),
            )
            .with_source(e)
        })?;
        let value = HeaderValue::try_from(value.as_str()).map_err(|e| {
            ChatError::new(
                ErrorKind::InvalidRequest,
                format!("invalid value for header {name}"),
            )
            .with_source(e)
        })?;
        map.append(name, value);
    }
    Ok(map)
}

/// The request's model, or the leaf's default.
pub(crate) fn resolve_model<'a>(
    options: &'a crate::ChatOptions,
    default_model: Option<&'a str>,
) -> Result<&'a str, ChatError> {
    options.model.as_deref().or(default_model).ok_or_else(|| {
        ChatError::new(
            ErrorKind::InvalidRequest,
            "no model: set ChatOptions::model or the leaf's default model",
        )
    })
}

/// Provider-specific fields win over ours, without duplicate keys in the body.
pub(crate) fn merge_extra(
    body: &impl serde::Serialize,
    extra: &serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut value = serde_json::to_value(body)?;
    if let serde_json::Value::Object(fields) = &mut value {
        for (key, extra_value) in extra {
            fields.insert(key.clone(), extra_value.clone());
        }
    }
    serde_json::to_vec(&value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_hidden_from_debug_and_redacted_from_messages() {
        let secret = Secret::new("sk-test-123456");
        assert_eq!(format!("{secret:?}"), "Secret([redacted])");
        assert_eq!(
            secret.redact("Incorrect API key provided: sk-test-123456.".into()),
            "Incorrect API key provided: [redacted]."
        );
        assert!(secret.header_value("Bearer ").unwrap().is_sensitive());
    }

    #[test]
    fn statuses_map_to_kinds() {
        assert_eq!(
            status_kind(StatusCode::UNAUTHORIZED, None),
            ErrorKind::Authentication
        );
        assert_eq!(
            status_kind(StatusCode::BAD_REQUEST, None),
            ErrorKind::InvalidRequest
        );
        assert_eq!(
            status_kind(StatusCode::from_u16(529).unwrap(), None),
            ErrorKind::Upstream
        );
        assert_eq!(
            status_kind(StatusCode::TOO_MANY_REQUESTS, Some(Duration::from_secs(2))),
            ErrorKind::RateLimited {
                retry_after: Some(Duration::from_secs(2))
            }
        );
    }

    #[test]
    fn retry_after_reads_ms_seconds_and_dates() {
        let mut headers = HeaderMap::new();
        headers.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(1500)));
        let mut headers = HeaderMap::new();
        let later = std::time::SystemTime::now() + Duration::from_secs(120);
        headers.insert(
            "retry-after",
            HeaderValue::try_from(httpdate::fmt_http_date(later)).unwrap(),
        );
        let wait = retry_after(&headers).unwrap();
        assert!(
            wait > Duration::from_secs(100) && wait <= Duration::from_secs(120),
            "{wait:?}"
        );
    }
}
