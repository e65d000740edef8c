//! One MCP server: connecting (child process or streamable HTTP), listing its tools, following
//! `notifications/tools/list_changed`, and reconnecting with backoff when the connection ends.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, Peer, RoleClient};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::Notify;
use tower_chat::CancellationToken;

use crate::config::{HttpConfig, McpServerConfig, McpTransport, StdioConfig};

/// How many of a child's last stderr lines are kept for error reports.
const STDERR_TAIL_LINES: usize = 20;
/// How often rmcp may try to resume a broken SSE stream of a streamable HTTP server (200 ms, 400 ms, 800 ms).
const SSE_RETRIES: usize = 3;
/// How long to wait for a failed child's stderr to reach its end before reporting without the rest.
const STDERR_DRAIN: Duration = Duration::from_secs(2);

/// Whom a server's supervisor tells that its listing changed: the hub, which recomputes the offered tools.
pub(crate) trait Listings: Send + Sync {
    /// Recompute the offered tools from every server's latest listing.
    fn rebuild(&self);
}

/// Where one server stands, as [`McpTools::status`](crate::McpTools::status) reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpServerStatus {
    /// The server's name.
    pub name: String,
    /// Whether a connection is up now.
    pub connected: bool,
    /// How many connections have been made (1 after a clean start, 2 after one restart, …).
    pub connections: u64,
    /// How many tools the last listing had.
    pub tools: usize,
    /// Why the last connection attempt failed or the last connection ended (with the child's stderr tail when
    /// there is one); cleared by a successful listing.
    pub last_error: Option<String>,
}

/// One listing of a server's tools: the hub compiles each listing once.
#[derive(Debug)]
pub(crate) struct Listing {
    /// Unique per listing across the process, so the hub can tell a new listing from one it compiled already.
    pub(crate) id: u64,
    pub(crate) tools: Vec<rmcp::model::Tool>,
}

pub(crate) struct Server {
    pub(crate) config: McpServerConfig,
    state: Mutex<State>,
}

struct State {
    peer: Option<Peer<RoleClient>>,
    listing: Option<Arc<Listing>>,
    status: McpServerStatus,
}

impl Server {
    pub(crate) fn new(config: McpServerConfig) -> Arc<Self> {
        Arc::new(Server {
            state: Mutex::new(State {
                peer: None,
                listing: None,
                status: McpServerStatus {
                    name: config.name.clone(),
                    connected: false,
                    connections: 0,
                    tools: 0,
                    last_error: None,
                },
            }),
            config,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// The connection calls go to, or why there is none.
    pub(crate) fn peer(&self) -> Result<Peer<RoleClient>, String> {
        let state = self.state();
        match &state.peer {
            Some(peer) => Ok(peer.clone()),
            None => Err(match &state.status.last_error {
                Some(error) => format!(
                    "MCP server `{}` is not connected (reconnecting; last error: {error})",
                    self.config.name
                ),
                None => format!("MCP server `{}` is not connected yet", self.config.name),
            }),
        }
    }

    pub(crate) fn listing(&self) -> Option<Arc<Listing>> {
        self.state().listing.clone()
    }

    pub(crate) fn status(&self) -> McpServerStatus {
        self.state().status.clone()
    }

    /// Keep a new listing of the tools (and the connection it came over).
    pub(crate) fn store_listing(
        &self,
        peer: Option<Peer<RoleClient>>,
        tools: Vec<rmcp::model::Tool>,
    ) {
        static LISTINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let id = LISTINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut state = self.state();
        let new_connection = state.peer.is_none();
        state.peer = peer;
        state.status.connected = true;
        if new_connection {
            state.status.connections += 1;
        }
        state.status.tools = tools.len();
        state.status.last_error = None;
        state.listing = Some(Arc::new(Listing { id, tools }));
    }

    fn set_error(&self, error: String) {
        tracing::warn!(mcp.server = %self.config.name, "{error}");
        let mut state = self.state();
        state.peer = None;
        state.status.connected = false;
        state.status.last_error = Some(error);
    }
}

/// Receives the server's notifications: a tool-list change wakes the supervisor.
#[derive(Clone)]
struct Handler {
    info: ClientConfig,
    tools_changed: Arc<Notify>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }
}

fn client_info() -> ClientConfig {
    // 2025-06-18 is the version servers in the field speak most widely; it has structured content, tool
    // annotations and unscoped `notifications/tools/list_changed`.
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("tower-chat-mcp", env!("CARGO_PKG_VERSION")),
    )
    .with_protocol_version(ProtocolVersion::V_2025_06_18)
}

type Running = RunningService<RoleClient, Handler>;

/// Keep the server connected until `shutdown`: connect, list, follow list changes, and after a failure or an
/// ended connection wait out the backoff and connect again. `first` hears how the first attempt went.
pub(crate) async fn supervise(
    server: Arc<Server>,
    hub: Weak<dyn Listings>,
    shutdown: CancellationToken,
    first: tokio::sync::oneshot::Sender<()>,
) {
    let mut first = Some(first);
    let mut attempt: u32 = 0;
    let tools_changed = Arc::new(Notify::new());
    loop {
        let handler = Handler {
            info: client_info(),
            tools_changed: tools_changed.clone(),
        };
        let connected = tokio::select! {
            connected = connect(&server.config, handler) => connected,
            () = shutdown.cancelled() => return,
        };
        match connected {
            Ok((running, stderr)) => match list_tools(running.peer()).await {
                Ok(tools) => {
                    attempt = 0;
                    publish(&server, &hub, Some(running.peer().clone()), tools);
                    if let Some(first) = first.take() {
                        let _ = first.send(());
                    }
                    let ended = follow(&server, &hub, running, &tools_changed, &shutdown).await;
                    match ended {
                        Ended::Shutdown => return,
                        Ended::Closed(why) => {
                            let tail = stderr.tail_after_exit().await;
                            server.set_error(with_tail(why, &tail));
                            rebuild(&hub);
                        }
                    }
                }
                Err(error) => {
                    server.set_error(format!(
                        "MCP server `{}` could not list its tools: {error}",
                        server.name()
                    ));
                    let _ = running.cancel().await;
                    rebuild(&hub);
                }
            },
            Err(error) => {
                server.set_error(error);
                rebuild(&hub);
            }
        }
        if let Some(first) = first.take() {
            let _ = first.send(());
        }
        let delay = server.config.backoff.delay(attempt);
        attempt = attempt.saturating_add(1);
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = shutdown.cancelled() => return,
        }
    }
}

enum Ended {
    Shutdown,
    Closed(String),
}

/// Serve one connection: refresh the listing on every change notification, until the connection ends.
async fn follow(
    server: &Arc<Server>,
    hub: &Weak<dyn Listings>,
    running: Running,
    tools_changed: &Notify,
    shutdown: &CancellationToken,
) -> Ended {
    let peer = running.peer().clone();
    let stop = running.cancellation_token();
    let waiting = running.waiting();
    tokio::pin!(waiting);
    loop {
        tokio::select! {
            quit = &mut waiting => {
                let why = match quit {
                    Ok(reason) => format!("MCP server `{}` closed the connection ({reason:?})", server.name()),
                    Err(e) => format!("MCP server `{}` connection task failed: {e}", server.name()),
                };
                return Ended::Closed(why);
            }
            () = tools_changed.notified() => match list_tools(&peer).await {
                Ok(tools) => publish(server, hub, Some(peer.clone()), tools),
                Err(error) => tracing::warn!(
                    mcp.server = %server.name(), "re-listing tools after a change failed: {error}"
                ),
            },
            () = shutdown.cancelled() => {
                stop.cancel();
                let _ = waiting.await;
                return Ended::Shutdown;
            }
        }
    }
}

async fn list_tools(peer: &Peer<RoleClient>) -> Result<Vec<rmcp::model::Tool>, rmcp::ServiceError> {
    peer.list_all_tools().await
}

fn publish(
    server: &Server,
    hub: &Weak<dyn Listings>,
    peer: Option<Peer<RoleClient>>,
    tools: Vec<rmcp::model::Tool>,
) {
    server.store_listing(peer, tools);
    tracing::debug!(mcp.server = %server.name(), "tools listed");
    rebuild(hub);
}

fn rebuild(hub: &Weak<dyn Listings>) {
    if let Some(hub) = hub.upgrade() {
        hub.rebuild();
    }
}

fn with_tail(message: String, tail: &[String]) -> String {
    if tail.is_empty() {
        message
    } else {
        format!("{message}; stderr:\n{}", tail.join("\n"))
    }
}

/// The last lines a child wrote to stderr.
#[derive(Default)]
struct StderrTail {
    lines: Arc<Mutex<VecDeque<String>>>,
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl StderrTail {
    fn follow(name: String, stderr: Option<tokio::process::ChildStderr>) -> Self {
        let lines = Arc::new(Mutex::new(VecDeque::new()));
        let reader = stderr.map(|stderr| {
            let lines = lines.clone();
            tokio::spawn(async move {
                let mut reader = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = reader.next_line().await {
                    tracing::debug!(mcp.server = %name, "stderr: {line}");
                    let mut lines = lines.lock().unwrap_or_else(|e| e.into_inner());
                    if lines.len() == STDERR_TAIL_LINES {
                        lines.pop_front();
                    }
                    lines.push_back(line);
                }
            })
        });
        StderrTail { lines, reader }
    }

    /// The tail once the child's stderr has ended (or [`STDERR_DRAIN`] has passed).
    async fn tail_after_exit(self) -> Vec<String> {
        if let Some(reader) = self.reader {
            let _ = tokio::time::timeout(STDERR_DRAIN, reader).await;
        }
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        lines.iter().cloned().collect()
    }
}

async fn connect(
    config: &McpServerConfig,
    handler: Handler,
) -> Result<(Running, StderrTail), String> {
    match &config.transport {
        McpTransport::Stdio(stdio) => connect_stdio(&config.name, stdio, handler).await,
        McpTransport::Http(http) => connect_http(&config.name, http, handler)
            .await
            .map(|running| (running, StderrTail::default())),
    }
}

async fn connect_stdio(
    name: &str,
    stdio: &StdioConfig,
    handler: Handler,
) -> Result<(Running, StderrTail), String> {
    let mut command = tokio::process::Command::new(&stdio.command);
    command
        .args(&stdio.args)
        .envs(&stdio.env)
        .kill_on_drop(true);
    if let Some(dir) = &stdio.cwd {
        command.current_dir(dir);
    }
    let (process, stderr) = TokioChildProcess::builder(command)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!(
                "MCP server `{name}` failed to start: could not run {:?}: {e}",
                stdio.command
            )
        })?;
    let tail = StderrTail::follow(name.to_owned(), stderr);
    match rmcp::serve_client(handler, process).await {
        Ok(running) => Ok((running, tail)),
        Err(e) => {
            let lines = tail.tail_after_exit().await;
            Err(with_tail(
                format!("MCP server `{name}` failed to start: {e}"),
                &lines,
            ))
        }
    }
}

async fn connect_http(name: &str, http: &HttpConfig, handler: Handler) -> Result<Running, String> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(http.url.as_str());
    // rmcp's default retries a broken SSE stream for ever, doubling from 1 s: the call of a server that went
    // away mid-call waited for ever, or until a tool timeout (`tests/http.rs`,
    // `a_server_that_goes_away_mid_call_…`). A few quick retries ride out a blip; after them the call fails
    // ("Transport closed"), and once the server is back the next call re-opens a session (rmcp's recovery of an
    // expired session).
    let mut retry = ExponentialBackoff::default();
    retry.max_times = Some(SSE_RETRIES);
    retry.base_duration = Duration::from_millis(200);
    retry.max_delay = Some(Duration::from_secs(2));
    config.retry_config = Arc::new(retry);
    if let Some(var) = &http.bearer_token_env {
        match std::env::var(var) {
            Ok(token) if !token.is_empty() => config = config.auth_header(token),
            _ => {
                return Err(format!(
                    "MCP server `{name}`: the bearer token variable {var} is not set"
                ))
            }
        }
    }
    let transport = StreamableHttpClientTransport::<reqwest::Client>::from_config(config);
    rmcp::serve_client(handler, transport)
        .await
        .map_err(|e| format!("MCP server `{name}` at {} failed to start: {e}", http.url))
}
