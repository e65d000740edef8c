//! The formats as axum routes over any chat service ([`WireRouter`]), and the checks every route makes
//! ([`read_body`], [`check_inbound`]), for a route of one's own that reads the same bodies (a token count).

use std::collections::HashSet;
use std::marker::PhantomData;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::response::Response;
use axum::routing::post;
use axum::{Extension, Router};
use futures_util::StreamExt;
use http::{header, HeaderMap, HeaderValue, StatusCode};
use tower::ServiceExt;
use tower_chat::{
    CallerIdentity, CancellationToken, ChatError, ChatRequest, ChatStream, ErrorKind,
};

use crate::anthropic_messages::AnthropicMessages;
use crate::chat_completions::ChatCompletions;
use crate::error::{json_bytes_response, ApiError};
use crate::extensions::{ResponseHeaders, TurnContext};
use crate::format::{Encoder, Inbound, ParseContext, UpstreamFormat, WireFormat};
use crate::limits::RequestLimits;
use crate::respond::{self, ApprovalNotices, Turn};
use crate::responses::Responses;

/// The default body limit (the gateway's `--body-limit`): the bytes of a request body besides its media (4 MiB).
pub const DEFAULT_BODY_LIMIT: usize = 4 * 1024 * 1024;

/// The wire formats' routes over one chat service `S`, to merge into an axum app beside its own routes and
/// middleware.
///
/// Each route parses its format's body into a [`ChatRequest`], checks it against the [`RequestLimits`], calls
/// the service, and answers in the same format — a whole JSON answer or, for `"stream": true`, SSE events —
/// with errors in the format's own shape (OpenAI's, or Anthropic's on `/v1/messages`). Every tool the client
/// declares has its calls handed back to the client; calls of tools the service runs itself are not shown.
/// A [`CallerIdentity`] that the app's own middleware put in the request's extensions goes along to the service,
/// and an `x-conversation-id` header becomes the request's [`ConversationId`](tower_chat::ConversationId)
/// (scoped to that caller); [`crate::extensions`] lists what else goes along. By default a paused turn shows
/// only its finish reason, and approval decisions and `previous_response_id` are refused: a service with a
/// layer that resumes turns says so with [`keeps_turns`](WireRouter::keeps_turns).
///
/// ```
/// use tower_chat::{ChatError, ChatRequest, ChatStream};
/// use tower_chat_wire::WireRouter;
///
/// fn app<S>(service: S) -> axum::Router
/// where
///     S: tower::Service<ChatRequest, Response = ChatStream, Error = ChatError> + Clone + Send + Sync + 'static,
///     S::Future: Send + 'static,
/// {
///     axum::Router::new()
///         .route("/health", axum::routing::get(|| async { "ok" }))
///         .merge(WireRouter::new(service).chat_completions())
/// }
/// ```
#[derive(Clone, Debug)]
pub struct WireRouter<S> {
    service: S,
    parse: ParseContext,
    body_limit: usize,
    notices: ApprovalNotices,
    cut: CancellationToken,
}

impl<S> WireRouter<S>
where
    S: tower::Service<ChatRequest, Response = ChatStream, Error = ChatError>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    /// Routes over `service`, with the gateway's default limits ([`RequestLimits::DEFAULT`],
    /// [`DEFAULT_BODY_LIMIT`]) for an OpenAI-compatible upstream.
    pub fn new(service: S) -> Self {
        WireRouter {
            service,
            parse: ParseContext::default(),
            body_limit: DEFAULT_BODY_LIMIT,
            notices: ApprovalNotices::Hidden,
            cut: CancellationToken::new(),
        }
    }

    /// The service keeps turns (a layer of its own pauses and resumes them, and stores answers): approval
    /// decisions, `previous_response_id` and the id a Responses answer is stored under go to it in a
    /// [`TurnContext`] with the request's headers, a Responses answer says `"store": true` unless the request
    /// said otherwise, and a paused turn's answer names the approvals it waits for, each under the id of its
    /// [`ChatEvent::ApprovalRequest`](tower_chat::ChatEvent::ApprovalRequest) (`notices`: who decides them).
    pub fn keeps_turns(mut self, notices: ApprovalNotices) -> Self {
        self.parse.stores_responses = true;
        self.notices = notices;
        self
    }

    /// When `cut` is cancelled (a server's drain time is over), a request still waiting for its answer is a
    /// `503 shutting_down`, and a stream waiting for its next event ends with the format's error event of that
    /// code.
    pub fn cut(mut self, cut: CancellationToken) -> Self {
        self.cut = cut;
        self
    }

    /// The per-request limits (counts, id lengths, media bytes).
    pub fn limits(mut self, limits: RequestLimits) -> Self {
        self.parse.limits = limits;
        self
    }

    /// The most bytes of a body besides its media (base64 media is bounded by
    /// [`RequestLimits::max_media_bytes`] on top); a larger body is a 413.
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// The API the service's upstream speaks: Anthropic-only options in a request (`thinking`, `top_k`) are
    /// forwarded to an [`UpstreamFormat::Anthropic`] upstream and dropped for an OpenAI one.
    pub fn upstream(mut self, upstream: UpstreamFormat) -> Self {
        self.parse.upstream = upstream;
        self
    }

    /// `POST /v1/chat/completions`: OpenAI Chat Completions.
    pub fn chat_completions<T: Clone + Send + Sync + 'static>(&self) -> Router<T> {
        self.route::<ChatCompletions, T>("/v1/chat/completions")
    }

    /// `POST /v1/messages`: Anthropic Messages.
    pub fn messages<T: Clone + Send + Sync + 'static>(&self) -> Router<T> {
        self.route::<AnthropicMessages, T>("/v1/messages")
    }

    /// `POST /v1/responses`: OpenAI Responses, without stored responses: every answer says `"store": false`
    /// and a `previous_response_id` is a 400.
    pub fn responses<T: Clone + Send + Sync + 'static>(&self) -> Router<T> {
        self.route::<Responses, T>("/v1/responses")
    }

    /// All three routes.
    pub fn all<T: Clone + Send + Sync + 'static>(&self) -> Router<T> {
        self.chat_completions()
            .merge(self.messages())
            .merge(self.responses())
    }

    fn route<F: WireFormat, T: Clone + Send + Sync + 'static>(&self, path: &str) -> Router<T> {
        let shared = Arc::new(Shared {
            service: self.service.clone(),
            parse: self.parse,
            body_limit: self.body_limit,
            notices: self.notices,
            cut: self.cut.clone(),
            format: PhantomData::<F>,
        });
        Router::new()
            .route(path, post(endpoint::<F, S>))
            .layer(DefaultBodyLimit::max(
                self.parse.limits.body_allowance(self.body_limit),
            ))
            .with_state(shared)
    }
}

struct Shared<S, F> {
    service: S,
    parse: ParseContext,
    body_limit: usize,
    notices: ApprovalNotices,
    cut: CancellationToken,
    format: PhantomData<F>,
}

async fn endpoint<F, S>(
    State(shared): State<Arc<Shared<S, F>>>,
    caller: Option<Extension<CallerIdentity>>,
    uri: http::Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response
where
    F: WireFormat,
    S: tower::Service<ChatRequest, Response = ChatStream, Error = ChatError>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let caller = caller.map(|Extension(c)| c);
    let handled = tokio::select! {
        biased;
        handled = turn::<F, S>(&shared, caller, headers, uri.query(), body) => handled,
        () = shared.cut.cancelled() => Err(ApiError::shutting_down()),
    };
    match handled {
        Ok(response) => response,
        Err(error) => F::error_response(error),
    }
}

async fn turn<F, S>(
    shared: &Shared<S, F>,
    caller: Option<CallerIdentity>,
    headers: HeaderMap,
    query: Option<&str>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError>
where
    F: WireFormat,
    S: tower::Service<ChatRequest, Response = ChatStream, Error = ChatError> + Clone,
{
    let limits = &shared.parse.limits;
    let body = read_body(body, shared.body_limit, limits)?;
    let (inbound, encoder) = F::parse(&body, &shared.parse)?;
    check_inbound(&inbound, body.len(), shared.body_limit, limits)?;
    // The request is parsed (its media checked, their base64 moved out of the parsed JSON, not copied): the
    // body's bytes are not needed any more, and a stream may hold its request for minutes.
    drop(body);
    let keeps_turns = shared.parse.stores_responses;
    if !keeps_turns && !inbound.approvals.is_empty() {
        return Err(ApiError::invalid_request(
            "approvals_unavailable",
            "`tower_chat.approvals` needs a server that keeps paused turns; this one runs no approvals",
        ));
    }
    if !keeps_turns && inbound.previous_response_id.is_some() {
        return Err(ApiError::invalid_request(
            "previous_response_unavailable",
            "`previous_response_id` needs a server that stores responses; this one stores none",
        ));
    }
    let conversation = limits.conversation(
        caller.as_ref(),
        headers.get("x-conversation-id").map(|v| v.as_bytes()),
    )?;
    let mut request = inbound.request;
    request.extensions.insert(F::ROUTE);
    let dropped = crate::carry::forward(F::ROUTE, &headers, query, &inbound.dropped, &mut request);
    if let Some(caller) = caller {
        request.extensions.insert(caller);
    }
    if let Some(conversation) = conversation {
        request.extensions.insert(conversation);
    }
    let added = ResponseHeaders::default();
    request.extensions.insert(added.clone());
    if keeps_turns {
        request.extensions.insert(TurnContext {
            approvals: inbound.approvals,
            previous_response_id: inbound.previous_response_id,
            record_id: inbound.record_id,
            headers,
        });
    }
    let turn = Turn {
        model: inbound.model,
        client_tools: client_tools(&request),
        notices: shared.notices,
    };
    let stream = shared
        .service
        .clone()
        .oneshot(request)
        .await
        .map_err(|e| ApiError::from_chat(&e))?;
    let mut response = answer(stream, inbound.stream, turn, encoder, shared.cut.clone()).await?;
    added.apply(response.headers_mut());
    crate::carry::name_dropped(&dropped, &mut response);
    Ok(response)
}

/// The names of the tools a request declares: the client's own, whose calls it is shown (a tool namespace's
/// tools by their joined names, as upstreams call them).
fn client_tools(request: &ChatRequest) -> HashSet<String> {
    request
        .options
        .tools
        .iter()
        .map(|t| t.name.clone())
        .chain(
            tower_chat::namespaced_tools(&request.options.tools)
                .into_iter()
                .map(|(joined, ..)| joined),
        )
        .collect()
}

/// A route's body, or its error: a body over the limit (`body_limit` bytes of text plus the media the
/// [`RequestLimits`] allow) is a 413 naming both, another failure to read it a 400 `invalid_body`.
pub fn read_body(
    body: Result<Bytes, BytesRejection>,
    body_limit: usize,
    limits: &RequestLimits,
) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError {
                message: format!(
                    "the request body is larger than the server's limit of {} bytes of text ({}) and {} \
                     bytes of media ({})",
                    body_limit,
                    limits.setting("body_limit"),
                    limits.max_media_bytes,
                    limits.setting("max_media_bytes")
                ),
                ..ApiError::too_large(body_limit)
            }
        } else {
            ApiError::invalid_request("invalid_body", rejection.body_text())
        }
    })
}

/// A parsed request against the limits, before anything is looked up, spliced or called: its size in things
/// (messages, tools, ids, media), its text bytes against `body_limit`, and its approval decisions.
pub fn check_inbound(
    inbound: &Inbound,
    body_len: usize,
    body_limit: usize,
    limits: &RequestLimits,
) -> Result<(), ApiError> {
    limits.check(&inbound.request)?;
    limits.check_text_bytes(&inbound.request, body_len, body_limit)?;
    limits.check_approvals(inbound.approvals.iter().map(|a| a.id.as_str()))
}

/// The answer to a turn whose stack call returned `stream`: one JSON answer, or (`sse`) an event stream. A
/// stream waits for its first event before it commits to `200`, so a failure before any output is still an HTTP
/// error with its status; after that, a failure is the format's error event. `cut` ends a waiting stream with
/// a `shutting_down` error event (a server's drain time); a token never cancelled never cuts.
async fn answer<E: Encoder>(
    mut stream: ChatStream,
    sse: bool,
    turn: Turn,
    encoder: E,
    cut: CancellationToken,
) -> Result<Response, ApiError> {
    if !sse {
        let body = respond::complete(stream, turn, encoder).await?;
        return Ok(json_bytes_response(StatusCode::OK, body));
    }
    let first = match stream.next().await {
        Some(Ok(event)) => event,
        Some(Err(error)) => return Err(ApiError::from_chat(&error)),
        None => {
            return Err(ApiError::from_chat(&ChatError::new(
                ErrorKind::Protocol,
                "the response ended before any event",
            )))
        }
    };
    let body = Body::from_stream(respond::stream(stream, first, turn, encoder, cut));
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}
