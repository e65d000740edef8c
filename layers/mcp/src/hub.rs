//! [`McpTools`]: the servers together, and the tool set they offer under collision-free names.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::watch;
use tower_chat::{CancellationToken, ChatError, ErrorKind};
use tower_chat_function_invocation::{CompiledTool, ToolSet};

use crate::config::McpServerConfig;
use crate::rejected::RejectedTool;
use crate::running::StopOnDrop;
use crate::server::{supervise, Listings, McpServerStatus, Server};
use crate::tool::McpTool;

/// The longest tool name providers accept.
const MAX_NAME: usize = 64;
/// How long [`McpTools::start`] waits for the servers' first connection attempts by default.
const DEFAULT_START_WAIT: Duration = Duration::from_secs(30);

/// The tools of a set of MCP servers, kept current: listed when each server connects, listed again on
/// `notifications/tools/list_changed`, kept (and answered with an error result) while a server reconnects.
///
/// Put it in a stack with [`McpLayer`](crate::McpLayer). Cheap to clone (shared). The servers stop (child
/// processes are killed) when the last clone is dropped and no request still holds one of their tools, or at
/// [`shutdown`](Self::shutdown).
///
/// ## Names
/// A tool is offered under its own name, unless another server offers a tool of the same name, or the name is
/// [reserved](Self::reserve_names) (a local tool's): then it is offered as `{server}__{tool}` (two underscores).
/// Characters providers refuse (anything but `a-z A-Z 0-9 _ -`) become `_`; a name longer than 64 characters is
/// cut to 55 and ends in `_` and 8 hex digits of its hash. Should two tools still end up with one name, the
/// later (servers in configuration order, tools in listing order) gets `_2`, `_3`, ….
/// A tool's name at its server is in its [`hints`](tower_chat_function_invocation::CompiledTool::hints)
/// (`source`, `source_name`).
#[derive(Clone)]
pub struct McpTools {
    inner: Arc<HubInner>,
}

pub(crate) struct HubInner {
    servers: Vec<Arc<Server>>,
    reserved: RwLock<HashSet<String>>,
    snapshot: RwLock<Arc<Snapshot>>,
    /// Serializes rebuilds, so a slow one cannot overwrite a newer one.
    rebuilding: Mutex<()>,
    version: watch::Sender<u64>,
    shutdown: CancellationToken,
    /// Shared with every tool the hub makes; see [`StopOnDrop`].
    running: Arc<StopOnDrop>,
    /// How many schemas the hub has compiled: each listing's once (see `rebuild`).
    compilations: AtomicUsize,
}

/// The tools offered now, and per tool where it comes from.
#[derive(Default)]
pub(crate) struct Snapshot {
    pub(crate) tools: ToolSet,
    /// Exposed name → (server, name at the server).
    pub(crate) origin: HashMap<String, (String, String)>,
    /// (listing id, exposed name) per compiled tool, to reuse compilations across rebuilds.
    compiled: HashMap<(u64, String), CompiledTool>,
    /// Tools of the current listings that could not be compiled, in server and listing order.
    pub(crate) rejected: Vec<RejectedTool>,
    /// The same by (listing id, exposed name), so a rebuild neither compiles nor reports them again.
    rejected_by_key: HashMap<(u64, String), RejectedTool>,
}

impl McpTools {
    /// Start every server and wait (up to 30 s) until each has connected and listed its tools or failed its
    /// first attempt. A server that failed is reported in [`status`](Self::status) (with its stderr tail) and
    /// logged, and keeps being retried with its backoff; the others work meanwhile.
    ///
    /// Fails only on a configuration error: a server name that is empty, longer than 32 characters, not made of
    /// `a-z A-Z 0-9 _ -`, or used twice. Needs a Tokio runtime.
    pub async fn start(
        servers: impl IntoIterator<Item = McpServerConfig>,
    ) -> Result<Self, ChatError> {
        McpTools::start_with_wait(servers, DEFAULT_START_WAIT).await
    }

    /// [`start`](Self::start), waiting at most `wait` for the first attempts.
    pub async fn start_with_wait(
        servers: impl IntoIterator<Item = McpServerConfig>,
        wait: Duration,
    ) -> Result<Self, ChatError> {
        let configs: Vec<McpServerConfig> = servers.into_iter().collect();
        let mut names = HashSet::new();
        for config in &configs {
            let name = &config.name;
            let valid = !name.is_empty()
                && name.len() <= 32
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if !valid {
                return Err(ChatError::new(
                    ErrorKind::InvalidRequest,
                    format!("invalid MCP server name {name:?}: use 1-32 characters of a-z, A-Z, 0-9, _ and -"),
                ));
            }
            if !names.insert(name.clone()) {
                return Err(ChatError::new(
                    ErrorKind::InvalidRequest,
                    format!("MCP server name {name:?} is used twice"),
                ));
            }
        }
        let inner = HubInner::new(configs.into_iter().map(Server::new).collect());
        let mut firsts = Vec::new();
        for server in &inner.servers {
            let (tx, rx) = tokio::sync::oneshot::channel();
            tokio::spawn(supervise(
                server.clone(),
                Arc::<HubInner>::downgrade(&inner),
                inner.shutdown.clone(),
                tx,
            ));
            firsts.push(rx);
        }
        let _ = tokio::time::timeout(wait, futures_util::future::join_all(firsts)).await;
        Ok(McpTools { inner })
    }

    /// Names the MCP tools must not take (e.g. the names of the loop's own tools): a server's tool of such a
    /// name is offered prefixed instead.
    pub fn reserve_names<I, S>(&self, names: I) -> &Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.inner
            .reserved
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .extend(names.into_iter().map(Into::into));
        self.inner.rebuild();
        self
    }

    /// The tools offered now.
    pub fn tools(&self) -> ToolSet {
        self.inner.snapshot().tools.clone()
    }

    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.inner.snapshot()
    }

    /// Where the tool offered now as `name` comes from: its server's name and its name at that server (`None`
    /// when no MCP tool is offered under `name`). Unlike [`tools`](Self::tools), copies no tool set.
    pub fn origin(&self, name: &str) -> Option<(String, String)> {
        self.inner.snapshot().origin.get(name).cloned()
    }

    /// The tools the servers list now that are not offered, each with the typed error that kept it out (its
    /// schema does not compile, e.g. a keyword the validator does not implement). Each is also logged with
    /// `tracing::warn!` when its listing arrives.
    pub fn rejected_tools(&self) -> Vec<RejectedTool> {
        self.inner.snapshot().rejected.clone()
    }

    /// Every server's state, in configuration order.
    pub fn status(&self) -> Vec<McpServerStatus> {
        self.inner.servers.iter().map(|s| s.status()).collect()
    }

    /// A counter that grows whenever the offered tools or a server's state change: wait on it (e.g.
    /// `receiver.wait_for(..)`) instead of polling.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.version.subscribe()
    }

    /// Stop every server now, even for requests still running (also done when the last clone and the last
    /// request holding one of the tools are dropped).
    pub fn shutdown(&self) {
        self.inner.shutdown.cancel();
    }
}

impl fmt::Debug for McpTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpTools")
            .field("servers", &self.status())
            .field("tools", &self.inner.snapshot().tools)
            .finish()
    }
}

impl HubInner {
    fn new(servers: Vec<Arc<Server>>) -> Arc<Self> {
        let shutdown = CancellationToken::new();
        Arc::new(HubInner {
            servers,
            reserved: RwLock::default(),
            snapshot: RwLock::default(),
            rebuilding: Mutex::new(()),
            version: watch::Sender::new(0),
            running: Arc::new(StopOnDrop(shutdown.clone())),
            shutdown,
            compilations: AtomicUsize::new(0),
        })
    }

    fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Recompute the offered tools from every server's latest listing. Tools whose listing and name did not
    /// change keep their compiled validator.
    pub(crate) fn rebuild(&self) {
        let _one_at_a_time = self.rebuilding.lock().unwrap_or_else(|e| e.into_inner());
        let previous = self.snapshot();
        let reserved = self
            .reserved
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let listings: Vec<_> = self
            .servers
            .iter()
            .filter_map(|s| s.listing().map(|l| (s, l)))
            .collect();
        let mut count: HashMap<&str, usize> = HashMap::new();
        for (_, listing) in &listings {
            for tool in &listing.tools {
                *count.entry(tool.name.as_ref()).or_default() += 1;
            }
        }
        let mut next = Snapshot::default();
        let mut taken: HashSet<String> = HashSet::new();
        for (server, listing) in &listings {
            for tool in &listing.tools {
                let own = tool.name.as_ref();
                let collides = count.get(own).copied().unwrap_or(0) > 1 || reserved.contains(own);
                let base = if collides {
                    provider_name(&format!("{}__{own}", server.name()))
                } else {
                    provider_name(own)
                };
                let mut exposed = base.clone();
                let mut n = 2;
                while taken.contains(&exposed) || reserved.contains(&exposed) {
                    exposed = provider_name(&format!("{base}_{n}"));
                    n += 1;
                }
                taken.insert(exposed.clone());
                let key = (listing.id, exposed.clone());
                if let Some(rejected) = previous.rejected_by_key.get(&key) {
                    next.rejected.push(rejected.clone());
                    next.rejected_by_key.insert(key, rejected.clone());
                    continue;
                }
                let compiled = match previous.compiled.get(&key) {
                    Some(compiled) => compiled.clone(),
                    None => match self.compile(McpTool::new(
                        (*server).clone(),
                        self.running.clone(),
                        tool,
                        exposed.clone(),
                    )) {
                        Ok(compiled) => compiled,
                        Err(error) => {
                            tracing::warn!(
                                mcp.server = %server.name(),
                                mcp.tool = %own,
                                error = %error,
                                "MCP tool `{own}` is not offered: {error}"
                            );
                            let rejected = RejectedTool::new(server.name(), own, error);
                            next.rejected.push(rejected.clone());
                            next.rejected_by_key.insert(key, rejected);
                            continue;
                        }
                    },
                };
                next.origin
                    .insert(exposed.clone(), (server.name().to_owned(), own.to_owned()));
                next.tools.insert(compiled.clone());
                next.compiled.insert(key, compiled);
            }
        }
        *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(next);
        self.version.send_modify(|v| *v += 1);
    }
}

impl Listings for HubInner {
    fn rebuild(&self) {
        HubInner::rebuild(self);
    }
}

impl HubInner {
    fn compile(&self, tool: McpTool) -> Result<CompiledTool, ChatError> {
        self.compilations.fetch_add(1, Ordering::Relaxed);
        CompiledTool::new(tool)
    }
}

/// A name providers accept: `a-z A-Z 0-9 _ -`, at most 64 characters.
fn provider_name(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() <= MAX_NAME && !clean.is_empty() {
        return clean;
    }
    // FNV-1a: stable across runs and platforms, unlike the std hasher.
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{}_{:08x}", &clean[..clean.len().min(55)], hash as u32)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use serde_json::json;

    use super::{provider_name, HubInner};
    use crate::config::McpServerConfig;
    use crate::server::Server;

    fn tools(names: &[&str]) -> Vec<rmcp::model::Tool> {
        let schema = json!({"type": "object", "properties": {"x": {"type": "string"}}});
        let schema = Arc::new(schema.as_object().unwrap().clone());
        names
            .iter()
            .map(|name| rmcp::model::Tool::new(name.to_string(), "", schema.clone()))
            .collect()
    }

    #[test]
    fn each_listing_is_compiled_once() {
        let server = Server::new(McpServerConfig::stdio("s", "unused"));
        server.store_listing(None, tools(&["a", "b"]));
        let hub = HubInner::new(vec![server.clone()]);
        let compilations = || hub.compilations.load(Ordering::Relaxed);
        hub.rebuild();
        assert_eq!(compilations(), 2);
        assert_eq!(hub.snapshot().tools.len(), 2);
        // A rebuild for another reason (another server's change, a reserved name) reuses the validators...
        hub.rebuild();
        assert_eq!(compilations(), 2);
        // ... except for a tool whose exposed name changes.
        hub.reserved.write().unwrap().insert("a".to_owned());
        hub.rebuild();
        assert_eq!(compilations(), 3);
        assert!(hub.snapshot().tools.get("s__a").is_some());
        // A new listing (after `notifications/tools/list_changed`) is compiled again, once.
        server.store_listing(None, tools(&["a", "b", "c"]));
        hub.rebuild();
        hub.rebuild();
        assert_eq!(compilations(), 6);
    }

    #[test]
    fn a_rejected_tool_is_compiled_and_reported_once_per_listing() {
        let server = Server::new(McpServerConfig::stdio("s", "unused"));
        let mut listed = tools(&["good"]);
        let remote = json!({"$ref": "https://example.com/schema.json"});
        listed.push(rmcp::model::Tool::new(
            "remote",
            "",
            Arc::new(remote.as_object().unwrap().clone()),
        ));
        server.store_listing(None, listed);
        let hub = HubInner::new(vec![server]);
        let compilations = || hub.compilations.load(Ordering::Relaxed);
        hub.rebuild();
        hub.rebuild();
        assert_eq!(compilations(), 2);
        let snapshot = hub.snapshot();
        assert!(snapshot.tools.get("good").is_some());
        assert!(snapshot.tools.get("remote").is_none());
        assert_eq!(snapshot.rejected.len(), 1);
        assert_eq!(snapshot.rejected[0].tool(), "remote");
        assert_eq!(
            snapshot.rejected[0].schema_error().unwrap().keyword(),
            "$ref"
        );
    }

    #[test]
    fn provider_names() {
        assert_eq!(provider_name("read_file"), "read_file");
        assert_eq!(provider_name("fs.read/file"), "fs_read_file");
        let long = "x".repeat(80);
        let cut = provider_name(&long);
        assert_eq!(cut.len(), 64);
        assert!(cut.starts_with(&"x".repeat(55)));
        assert_ne!(provider_name(&"x".repeat(81)), cut);
        assert_eq!(
            provider_name(""),
            format!("_{:08x}", 0xcbf2_9ce4_8422_2325u64 as u32)
        );
    }
}
