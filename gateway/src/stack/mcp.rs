//! `[[mcp]]` in the configuration file: MCP servers whose tools the gateway's tool loop offers, their approval
//! policies, and which API keys may use which of their tools.
//!
//! ```toml
//! [[mcp]]
//! name = "files"                      # 1-32 of a-z A-Z 0-9 _ -; the prefix of its tools on a name collision
//! command = "mcp-server-files"        # a child process speaking MCP on stdio ...
//! args = ["--root", "/srv/data"]
//! env = { LOG_LEVEL = "warn" }
//! policy = "if_destructive"           # never (default) | always | unless_read_only | if_destructive
//! tool_policy = { read_file = "never", wipe = "always" }
//! timeout_ms = 30000                  # per call; default: the loop's
//! keys = ["alice"]                    # callers (`name` of a `name:key` line of --api-keys-file) allowed every tool
//! key_tools = { bob = ["read_file"] }  # callers allowed some tools
//!
//! [[mcp]]
//! name = "search"
//! url = "https://mcp.example.com/mcp" # ... or a streamable HTTP endpoint
//! bearer_token_env = "SEARCH_MCP_TOKEN"
//! ```
//!
//! A server with neither `keys` nor `key_tools` is open to every caller; otherwise a caller not listed gets none
//! of its tools (they are not offered, and a call of one is answered as a call of an unknown tool).
//! MCP tools never take the name of a gateway tool (`read_file`, `write_file`, …): such a tool is offered as
//! `{server}__{tool}`. A request that declares a client tool under the name of an MCP tool its caller is offered
//! is refused (`400 tool_name_reserved`, naming the tool): the loop would run the MCP tool and hand the same call
//! to the client too. The name of a tool the caller is not offered stays free for its own tools.

use std::sync::Arc;
use std::time::Duration;

pub use crate::config::mcp::McpServerEntry;
use tower::ServiceBuilder;
use tower_chat::{CallerIdentity, ChatRequest};
use tower_chat_mcp::{Approval, McpAllowList, McpLayer, McpServerConfig, McpTools, ServerPolicy};

impl McpServerEntry {
    /// The server configuration this entry describes, or why it cannot be used.
    pub fn server_config(&self) -> Result<McpServerConfig, String> {
        let at = |message: String| format!("[[mcp]] `{}`: {message}", self.name);
        let mut config = match (&self.command, &self.url) {
            (Some(command), None) => {
                if self.bearer_token_env.is_some() {
                    return Err(at("`bearer_token_env` is for `url` servers".into()));
                }
                let mut config = McpServerConfig::stdio(&self.name, command).args(&self.args);
                for (key, value) in &self.env {
                    config = config.env(key, value);
                }
                if let Some(cwd) = &self.cwd {
                    config = config.cwd(cwd);
                }
                config
            }
            (None, Some(url)) => {
                if !self.args.is_empty() || !self.env.is_empty() || self.cwd.is_some() {
                    return Err(at(
                        "`args`, `env` and `cwd` are for `command` servers".into()
                    ));
                }
                let mut config = McpServerConfig::http(&self.name, url);
                if let Some(var) = &self.bearer_token_env {
                    config = config.bearer_token_env(var);
                }
                config
            }
            _ => return Err(at("set exactly one of `command` and `url`".into())),
        };
        let rule = |text: &str| Approval::parse(text).map_err(|e| at(e.message().to_owned()));
        let mut policy = ServerPolicy::new(match &self.policy {
            Some(text) => rule(text)?,
            None => Approval::Never,
        });
        for (tool, text) in &self.tool_policy {
            policy = policy.tool(tool, rule(text)?);
        }
        config = config.policy(policy);
        if let Some(ms) = self.timeout_ms {
            config = config.timeout(Duration::from_millis(ms));
        }
        Ok(config)
    }

    /// What a caller may use of this server, added to `list`.
    fn allow(&self, caller: Option<&CallerIdentity>, list: McpAllowList) -> McpAllowList {
        if self.keys.is_none() && self.key_tools.is_empty() {
            return list.server(&self.name);
        }
        let Some(caller) = caller else { return list };
        if self.keys.iter().flatten().any(|k| k == caller.as_str()) {
            return list.server(&self.name);
        }
        match self.key_tools.get(caller.as_str()) {
            Some(tools) => tools
                .iter()
                .fold(list, |list, tool| list.tool(&self.name, tool)),
            None => list,
        }
    }
}

/// The started MCP servers and who may use them.
#[derive(Clone, Debug)]
pub struct GatewayMcp {
    tools: McpTools,
    entries: Arc<[McpServerEntry]>,
}

impl GatewayMcp {
    /// Start the servers of `entries` (`None` when there are none). A server that fails to start is logged with
    /// its stderr tail and retried in the background; the gateway starts anyway. `reserved`: the gateway's own
    /// tool names.
    pub async fn start(
        entries: &[McpServerEntry],
        reserved: &[&str],
    ) -> Result<Option<Self>, String> {
        if entries.is_empty() {
            return Ok(None);
        }
        let configs = entries
            .iter()
            .map(McpServerEntry::server_config)
            .collect::<Result<Vec<_>, _>>()?;
        let tools = McpTools::start(configs)
            .await
            .map_err(|e| format!("[[mcp]]: {}", e.message()))?;
        tools.reserve_names(reserved.iter().copied());
        for status in tools.status() {
            match &status.last_error {
                Some(error) if !status.connected => tracing::warn!("{error}"),
                _ => {
                    tracing::info!(mcp.server = %status.name, tools = status.tools, "MCP server connected")
                }
            }
        }
        Ok(Some(GatewayMcp {
            tools,
            entries: entries.into(),
        }))
    }

    /// The MCP tools.
    pub fn tools(&self) -> &McpTools {
        &self.tools
    }

    /// What a caller may use.
    pub fn allow_list(&self, caller: Option<&CallerIdentity>) -> McpAllowList {
        self.entries
            .iter()
            .fold(McpAllowList::new(), |list, entry| entry.allow(caller, list))
    }

    /// The server of the MCP tool `caller` is offered under `name`, when there is one: a client tool of that name
    /// would be run here by the loop and handed to the client as well, so the gateway refuses it.
    pub(crate) fn offered(&self, caller: Option<&CallerIdentity>, name: &str) -> Option<String> {
        let (server, own) = self.tools.origin(name)?;
        self.allow_list(caller)
            .allows(&server, &own)
            .then_some(server)
    }

    /// Offer the MCP tools to the tool loop `service`, limited per caller. No box: the stack's one box holds it.
    pub(crate) fn wrap<S>(
        &self,
        service: S,
    ) -> impl tower::Service<ChatRequest, Response = S::Response, Error = S::Error, Future = S::Future>
           + Clone
           + Send
           + Sync
           + 'static
    where
        S: tower::Service<ChatRequest> + Clone + Send + Sync + 'static,
    {
        let access = self.clone();
        ServiceBuilder::new()
            .map_request(move |mut request: ChatRequest| {
                let allowed = access.allow_list(request.caller());
                request.extensions.insert(allowed);
                request
            })
            .layer(McpLayer::new(self.tools.clone()))
            .service(service)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::file::ConfigFile;

    const FILE: &str = r#"
[[mcp]]
name = "files"
command = "mcp-server-files"
args = ["--root", "/srv"]
env = { LOG = "1" }
policy = "if_destructive"
tool_policy = { read = "never" }
timeout_ms = 1500
keys = ["key-1"]
key_tools = { key-2 = ["read"] }

[[mcp]]
name = "search"
url = "http://127.0.0.1:9/mcp"
bearer_token_env = "SEARCH_TOKEN"
"#;

    #[test]
    fn entries_parse_and_describe_servers() {
        let file = ConfigFile::parse(FILE, "g.toml").unwrap();
        assert_eq!(file.mcp.len(), 2);
        let files = file.mcp[0].server_config().unwrap();
        assert_eq!(files.name(), "files");
        assert!(
            matches!(files.transport(), tower_chat_mcp::McpTransport::Stdio(s) if s.args == ["--root", "/srv"])
        );
        let search = file.mcp[1].server_config().unwrap();
        assert!(
            matches!(search.transport(), tower_chat_mcp::McpTransport::Http(h) if h.bearer_token_env.as_deref() == Some("SEARCH_TOKEN"))
        );
    }

    #[test]
    fn bad_entries_are_refused_with_a_reason() {
        let err = ConfigFile::parse(
            "[[mcp]]\nname = \"x\"\ncommand = \"a\"\nnope = 1\n",
            "g.toml",
        )
        .unwrap_err();
        assert_eq!(err.line(), Some(4), "{err}");
        let both = McpServerEntry {
            name: "x".into(),
            command: Some("a".into()),
            url: Some("http://h".into()),
            ..Default::default()
        };
        assert!(both.server_config().unwrap_err().contains("exactly one of"));
        let rule = McpServerEntry {
            name: "x".into(),
            command: Some("a".into()),
            policy: Some("sometimes".into()),
            ..Default::default()
        };
        assert!(rule
            .server_config()
            .unwrap_err()
            .contains("unknown approval rule"));
    }

    #[test]
    fn allow_lists_per_key() {
        let file = ConfigFile::parse(FILE, "g.toml").unwrap();
        let allow = |caller: Option<&str>| {
            let caller = caller.map(CallerIdentity::new);
            file.mcp.iter().fold(McpAllowList::new(), |list, entry| {
                entry.allow(caller.as_ref(), list)
            })
        };
        let one = allow(Some("key-1"));
        assert!(one.allows("files", "delete") && one.allows("search", "q"));
        let two = allow(Some("key-2"));
        assert!(
            two.allows("files", "read")
                && !two.allows("files", "delete")
                && two.allows("search", "q")
        );
        let three = allow(Some("key-3"));
        assert!(!three.allows("files", "read") && three.allows("search", "q"));
        let anonymous = allow(None);
        assert!(!anonymous.allows("files", "read") && anonymous.allows("search", "q"));
    }
}
