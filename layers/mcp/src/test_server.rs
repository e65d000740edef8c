//! A small MCP server written with rmcp, for tests, examples and benchmarks (feature `test-server`).
//!
//! Tools:
//! - `echo {text}` (read-only): answers `{name}: {text}`, where `name` is the server's name.
//! - `add {a, b}` (read-only): `{"sum": a + b}` as structured content (mirrored in a text block).
//! - `fail {message}`: an error result (`isError: true`) with the message.
//! - `hang {}`: never answers; when the client cancels it (`notifications/cancelled`) the server counts it.
//! - `cancellations {at_least}`: waits (up to 10 s) until that many calls were cancelled, then answers the count.
//! - `meet {count, wait_ms}`: waits (up to `wait_ms`, default 500) until `count` calls have run at once, then
//!   answers the most that were running at once so far (to test a client's concurrency limit).
//! - `crash {}`: the process exits mid-call (stdio only; over HTTP it answers an error instead).
//! - `add_tool {name}`: adds a tool of that name (it echoes like `echo`) and sends
//!   `notifications/tools/list_changed`.
//! - `write_note {key, text}` (not destructive), `read_note {key}` (read-only), `delete_note {key}` (destructive):
//!   an in-memory note store, for approval tests.
//! - any tool given to [`DemoServer::listing`]: listed only (a call to it fails), e.g. to offer a schema a
//!   client cannot compile.
//!
//! [`serve_stdio`] serves it on stdin/stdout (the `tower-chat-mcp-test-server` binary); [`serve_http`] serves it
//! over streamable HTTP on 127.0.0.1, optionally behind a bearer token.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, JsonObject,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    ToolAnnotations,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Value};
use tokio::sync::Notify;
use tower_chat::CancellationToken;

/// What a running demo server has seen; shared by every connection it serves (in-process, over HTTP).
#[derive(Debug, Default)]
pub struct DemoState {
    cancelled: AtomicUsize,
    calls: AtomicUsize,
    running: AtomicUsize,
    most_running: AtomicUsize,
    changed: Notify,
    extra: Mutex<Vec<String>>,
    notes: Mutex<BTreeMap<String, String>>,
}

impl DemoState {
    /// How many calls clients cancelled.
    pub fn cancelled(&self) -> usize {
        self.cancelled.load(Ordering::SeqCst)
    }

    /// How many `tools/call` requests arrived.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// The most calls that were running at once.
    pub fn most_running(&self) -> usize {
        self.most_running.load(Ordering::SeqCst)
    }

    /// Wait until at least `n` calls have been running at once (the first to return may end before the others
    /// look again, so "are running now" could miss it).
    async fn wait_running(&self, n: usize) {
        loop {
            let notified = self.changed.notified();
            if self.most_running() >= n {
                return;
            }
            notified.await;
        }
    }

    /// Wait until at least `n` calls were cancelled.
    pub async fn wait_cancelled(&self, n: usize) {
        loop {
            let notified = self.changed.notified();
            if self.cancelled() >= n {
                return;
            }
            notified.await;
        }
    }

    /// The notes.
    pub fn notes(&self) -> BTreeMap<String, String> {
        self.notes.lock().unwrap().clone()
    }
}

/// The demo MCP server.
#[derive(Clone, Debug)]
pub struct DemoServer {
    name: String,
    state: Arc<DemoState>,
    can_exit: bool,
    /// Tools listed beside the demo tools (see [`DemoServer::listing`]); calls to them fail.
    listed: Arc<Vec<Tool>>,
}

impl DemoServer {
    /// A server called `name`; `can_exit` lets `crash` end the process (only for a server in its own process).
    pub fn new(name: impl Into<String>, can_exit: bool) -> Self {
        DemoServer {
            name: name.into(),
            state: Arc::default(),
            can_exit,
            listed: Arc::default(),
        }
    }

    /// Also list `tool` (after the demo tools), e.g. one with a schema a client cannot compile. A call to it
    /// fails with "no tool".
    pub fn listing(mut self, tool: Tool) -> Self {
        Arc::make_mut(&mut self.listed).push(tool);
        self
    }

    /// What it has seen.
    pub fn state(&self) -> Arc<DemoState> {
        self.state.clone()
    }

    fn tools(&self) -> Vec<Tool> {
        let object =
            |v: Value| -> Arc<JsonObject> { Arc::new(v.as_object().cloned().unwrap_or_default()) };
        let text = |field: &str| {
            object(
                json!({"type": "object", "properties": {field: {"type": "string"}}, "required": [field]}),
            )
        };
        let read_only = ToolAnnotations::new().read_only(true);
        let mut tools = vec![
            Tool::new("echo", "Echo a text", text("text")).with_annotations(read_only.clone()),
            Tool::new(
                "add",
                "Add two numbers",
                object(json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]})),
            )
            .with_raw_output_schema(object(json!({"type": "object", "properties": {"sum": {"type": "number"}}})))
            .with_annotations(read_only.clone()),
            Tool::new("fail", "Always fails", text("message")),
            Tool::new("hang", "Never answers", object(json!({"type": "object"}))),
            Tool::new(
                "cancellations",
                "How many calls were cancelled",
                object(json!({"type": "object", "properties": {"at_least": {"type": "integer", "minimum": 0}}})),
            ),
            Tool::new(
                "meet",
                "Wait for other calls",
                object(json!({"type": "object", "properties": {
                    "count": {"type": "integer", "minimum": 1},
                    "wait_ms": {"type": "integer", "minimum": 0}
                }})),
            ),
            Tool::new("crash", "Exit mid-call", object(json!({"type": "object"}))),
            Tool::new("add_tool", "Add a tool", text("name")),
            Tool::new(
                "write_note",
                "Write a note",
                object(json!({"type": "object", "properties": {"key": {"type": "string"}, "text": {"type": "string"}}, "required": ["key", "text"]})),
            )
            .with_annotations(ToolAnnotations::new().read_only(false).destructive(false)),
            Tool::new("read_note", "Read a note", text("key")).with_annotations(read_only),
            Tool::new("delete_note", "Delete a note", text("key"))
                .with_annotations(ToolAnnotations::new().read_only(false).destructive(true)),
        ];
        for extra in self.state.extra.lock().unwrap().iter() {
            tools.push(Tool::new(extra.clone(), "An added echo tool", text("text")));
        }
        tools.extend(self.listed.iter().cloned());
        tools
    }

    async fn run(
        &self,
        name: &str,
        args: &JsonObject,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        let string = |field: &str| -> Result<String, ErrorData> {
            args.get(field)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| {
                    ErrorData::invalid_params(format!("`{field}` must be a string"), None)
                })
        };
        let extra = self.state.extra.lock().unwrap().iter().any(|t| t == name);
        match name {
            "echo" => Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                "{}: {}",
                self.name,
                string("text")?
            ))])),
            _ if extra => Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                "{name}: {}",
                string("text")?
            ))])),
            "add" => {
                let number = |f: &str| args.get(f).and_then(Value::as_f64).unwrap_or_default();
                Ok(CallToolResult::structured(
                    json!({"sum": number("a") + number("b")}),
                ))
            }
            "fail" => Ok(CallToolResult::error(vec![ContentBlock::text(string(
                "message",
            )?)])),
            "hang" => {
                context.ct.cancelled().await;
                self.state.cancelled.fetch_add(1, Ordering::SeqCst);
                self.state.changed.notify_waiters();
                Err(ErrorData::internal_error("cancelled", None))
            }
            "cancellations" => {
                let at_least = args.get("at_least").and_then(Value::as_u64).unwrap_or(0) as usize;
                let _ = tokio::time::timeout(
                    Duration::from_secs(10),
                    self.state.wait_cancelled(at_least),
                )
                .await;
                Ok(CallToolResult::success(vec![ContentBlock::text(
                    self.state.cancelled().to_string(),
                )]))
            }
            "meet" => {
                let count = args.get("count").and_then(Value::as_u64).unwrap_or(1) as usize;
                let wait = args.get("wait_ms").and_then(Value::as_u64).unwrap_or(500);
                let _ = tokio::time::timeout(
                    Duration::from_millis(wait),
                    self.state.wait_running(count),
                )
                .await;
                Ok(CallToolResult::success(vec![ContentBlock::text(
                    self.state.most_running().to_string(),
                )]))
            }
            "crash" if self.can_exit => {
                eprintln!("{}: crashing on request", self.name);
                std::process::exit(3)
            }
            "crash" => Ok(CallToolResult::error(vec![ContentBlock::text(
                "cannot crash in-process",
            )])),
            "add_tool" => {
                let added = string("name")?;
                self.state.extra.lock().unwrap().push(added.clone());
                if let Err(e) = context.peer.notify_tool_list_changed().await {
                    return Err(ErrorData::internal_error(
                        format!("notify failed: {e}"),
                        None,
                    ));
                }
                Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                    "added {added}"
                ))]))
            }
            "write_note" => {
                let (key, text) = (string("key")?, string("text")?);
                self.state.notes.lock().unwrap().insert(key.clone(), text);
                Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                    "wrote {key}"
                ))]))
            }
            "read_note" => {
                let key = string("key")?;
                let notes = self.state.notes.lock().unwrap();
                Ok(match notes.get(&key) {
                    Some(text) => CallToolResult::success(vec![ContentBlock::text(text.clone())]),
                    None => {
                        CallToolResult::error(vec![ContentBlock::text(format!("no note {key}"))])
                    }
                })
            }
            "delete_note" => {
                let key = string("key")?;
                let removed = self.state.notes.lock().unwrap().remove(&key).is_some();
                Ok(CallToolResult::success(vec![ContentBlock::text(
                    if removed {
                        format!("deleted {key}")
                    } else {
                        format!("no note {key}")
                    },
                )]))
            }
            other => Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        }
    }
}

/// Counts a call as running until dropped (also when the call's future is dropped).
struct Running<'a>(&'a DemoState);

impl<'a> Running<'a> {
    fn start(state: &'a DemoState) -> Self {
        let now = state.running.fetch_add(1, Ordering::SeqCst) + 1;
        state.most_running.fetch_max(now, Ordering::SeqCst);
        state.changed.notify_waiters();
        Running(state)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl ServerHandler for DemoServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.state.calls.fetch_add(1, Ordering::SeqCst);
        let _running = Running::start(&self.state);
        let args = request.arguments.unwrap_or_default();
        self.run(&request.name, &args, context)
            .await
            .map(Into::into)
    }

    async fn on_cancelled(
        &self,
        _notification: rmcp::model::CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
    }
}

/// Serve `server` on this process's stdin and stdout until the client disconnects.
pub async fn serve_stdio(server: DemoServer) -> std::io::Result<()> {
    let running = server
        .serve(rmcp::transport::stdio())
        .await
        .map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}

/// A demo server served over streamable HTTP on 127.0.0.1; stopped when dropped.
#[derive(Debug)]
pub struct HttpServer {
    url: String,
    addr: SocketAddr,
    state: Arc<DemoState>,
    sessions: Arc<LocalSessionManager>,
    stop: CancellationToken,
}

impl HttpServer {
    /// The MCP endpoint (`http://127.0.0.1:{port}/mcp`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What the server has seen.
    pub fn state(&self) -> &Arc<DemoState> {
        &self.state
    }

    /// How many MCP sessions are open: a client that stops deletes its session.
    pub async fn sessions(&self) -> usize {
        self.sessions.sessions.read().await.len()
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Serve `server` over streamable HTTP on an ephemeral 127.0.0.1 port. With `bearer`, requests without
/// `Authorization: Bearer {bearer}` get 401.
pub async fn serve_http(server: DemoServer, bearer: Option<String>) -> std::io::Result<HttpServer> {
    serve_http_at(server, bearer, SocketAddr::from(([127, 0, 0, 1], 0))).await
}

/// [`serve_http`] on `addr` (e.g. the address of a server that was stopped, to bring it back).
pub async fn serve_http_at(
    server: DemoServer,
    bearer: Option<String>,
    addr: SocketAddr,
) -> std::io::Result<HttpServer> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let state = server.state();
    let stop = CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(stop.child_token())
        .with_sse_keep_alive(None);
    let sessions = Arc::new(LocalSessionManager::default());
    let service = StreamableHttpService::new(move || Ok(server.clone()), sessions.clone(), config);
    let expected = bearer.map(|token| format!("Bearer {token}"));
    let accept_stop = stop.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = tokio::select! {
                accepted = listener.accept() => match accepted { Ok(a) => a, Err(_) => continue },
                () = accept_stop.cancelled() => return,
            };
            let service = service.clone();
            let expected = expected.clone();
            let conn_stop = accept_stop.clone();
            tokio::spawn(async move {
                let handler =
                    hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                        let service = service.clone();
                        let expected = expected.clone();
                        async move {
                            let given = request
                                .headers()
                                .get(http::header::AUTHORIZATION)
                                .and_then(|v| v.to_str().ok());
                            if let Some(expected) = &expected {
                                if given != Some(expected.as_str()) {
                                    let body = Full::new(Bytes::from_static(b"unauthorized"));
                                    let mut refused = hyper::Response::new(body.boxed());
                                    *refused.status_mut() = http::StatusCode::UNAUTHORIZED;
                                    return Ok::<_, Infallible>(refused);
                                }
                            }
                            Ok(service.handle(request).await)
                        }
                    });
                let connection = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), handler);
                tokio::select! {
                    _ = connection => {}
                    () = conn_stop.cancelled() => {}
                }
            });
        }
    });
    Ok(HttpServer {
        url: format!("http://{addr}/mcp"),
        addr,
        state,
        sessions,
        stop,
    })
}
