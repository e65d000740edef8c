//! Which MCP tool calls need approval ([`ServerPolicy`]), and which servers and tools a request may use
//! ([`McpAllowList`]).

use std::collections::BTreeMap;
use std::fmt;

use tower_chat::{ChatError, ErrorKind};
use tower_chat_function_invocation::ToolHints;

/// When a tool's calls need a human decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Approval {
    /// Never (the default).
    #[default]
    Never,
    /// For every call.
    Always,
    /// Unless the tool says it is read-only (`readOnlyHint: true`).
    UnlessReadOnly,
    /// When the tool may be destructive: it is not read-only and does not say `destructiveHint: false` (MCP's
    /// default for a tool that says nothing is "destructive").
    IfDestructive,
}

impl Approval {
    /// Whether a tool with these hints needs approval under this rule.
    pub fn requires(&self, hints: &ToolHints) -> bool {
        let read_only = hints.read_only == Some(true);
        match self {
            Approval::Never => false,
            Approval::Always => true,
            Approval::UnlessReadOnly => !read_only,
            Approval::IfDestructive => !read_only && hints.destructive != Some(false),
        }
    }

    /// Parse `never`, `always`, `unless_read_only` or `if_destructive`.
    pub fn parse(text: &str) -> Result<Self, ChatError> {
        match text {
            "never" => Ok(Approval::Never),
            "always" => Ok(Approval::Always),
            "unless_read_only" => Ok(Approval::UnlessReadOnly),
            "if_destructive" => Ok(Approval::IfDestructive),
            other => Err(ChatError::new(
                ErrorKind::InvalidRequest,
                format!(
                    "unknown approval rule {other:?}: use never, always, unless_read_only or if_destructive"
                ),
            )),
        }
    }
}

/// The approval policy of one server: a rule for its tools, and rules for named tools (by the server's own tool
/// name) that override it.
///
/// The outcome becomes the MCP tool's [`requires_approval`](tower_chat_function_invocation::Tool::requires_approval)
/// flag, so the tool loop pauses such calls with an approval request even without an approval layer, and no
/// request can switch it off. An [`ApprovalLayer`](https://docs.rs/tower-chat-approval) policy sees the tool's MCP
/// annotations through [`CompiledTool::hints`](tower_chat_function_invocation::CompiledTool::hints) and may
/// tighten further.
///
/// ```
/// use tower_chat_mcp::{Approval, ServerPolicy};
///
/// // Every tool of this server needs approval, except the two named ones.
/// let policy = ServerPolicy::new(Approval::Always)
///     .tool("search", Approval::Never)
///     .tool("read_file", Approval::Never);
/// # let _ = policy;
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServerPolicy {
    default: Approval,
    tools: BTreeMap<String, Approval>,
}

impl ServerPolicy {
    /// A policy applying `default` to every tool.
    pub fn new(default: Approval) -> Self {
        ServerPolicy {
            default,
            tools: BTreeMap::new(),
        }
    }

    /// A rule for one tool (its name at the server, without prefix).
    pub fn tool(mut self, name: impl Into<String>, approval: Approval) -> Self {
        self.tools.insert(name.into(), approval);
        self
    }

    /// The rule for a tool.
    pub fn rule(&self, tool: &str) -> Approval {
        self.tools.get(tool).copied().unwrap_or(self.default)
    }

    /// Whether calls of this tool need approval.
    pub fn requires_approval(&self, tool: &str, hints: &ToolHints) -> bool {
        self.rule(tool).requires(hints)
    }
}

/// Which MCP servers and tools one request may use — put it in the request's extensions (the gateway does, per
/// API key). Tools outside it are not offered to the model, and a call of one is answered as a call of an unknown
/// tool: the server never sees it. Without an allow-list in the extensions every server's tools are offered.
///
/// Entries: `server` or `server/*` (every tool of a server), `server/tool` (one tool, by its name at the server).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct McpAllowList {
    entries: BTreeMap<String, Option<Vec<String>>>,
}

impl McpAllowList {
    /// Nothing allowed.
    pub fn new() -> Self {
        McpAllowList::default()
    }

    /// Parse entries (`server`, `server/*`, `server/tool`).
    pub fn parse<I, S>(entries: I) -> Result<Self, ChatError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut list = McpAllowList::new();
        for entry in entries {
            let entry = entry.as_ref();
            match entry.split_once('/') {
                None if !entry.is_empty() => list = list.server(entry),
                Some((server, "*")) if !server.is_empty() => list = list.server(server),
                Some((server, tool)) if !server.is_empty() && !tool.is_empty() && !tool.contains('/') => {
                    list = list.tool(server, tool)
                }
                _ => {
                    return Err(ChatError::new(
                        ErrorKind::InvalidRequest,
                        format!("invalid MCP allow-list entry {entry:?}: use `server`, `server/*` or `server/tool`"),
                    ))
                }
            }
        }
        Ok(list)
    }

    /// Allow every tool of a server.
    pub fn server(mut self, server: impl Into<String>) -> Self {
        self.entries.insert(server.into(), None);
        self
    }

    /// Allow one tool of a server.
    pub fn tool(mut self, server: impl Into<String>, tool: impl Into<String>) -> Self {
        let tools = self
            .entries
            .entry(server.into())
            .or_insert_with(|| Some(Vec::new()));
        if let Some(tools) = tools {
            tools.push(tool.into());
        }
        self
    }

    /// Whether this tool of this server is allowed.
    pub fn allows(&self, server: &str, tool: &str) -> bool {
        match self.entries.get(server) {
            Some(None) => true,
            Some(Some(tools)) => tools.iter().any(|t| t == tool),
            None => false,
        }
    }
}

impl fmt::Debug for McpAllowList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut list = f.debug_list();
        for (server, tools) in &self.entries {
            match tools {
                None => list.entry(&format_args!("{server}/*")),
                Some(tools) => {
                    for tool in tools {
                        list.entry(&format_args!("{server}/{tool}"));
                    }
                    &mut list
                }
            };
        }
        list.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hints(read_only: Option<bool>, destructive: Option<bool>) -> ToolHints {
        ToolHints {
            read_only,
            destructive,
            ..ToolHints::default()
        }
    }

    #[test]
    fn rules_read_the_annotations() {
        assert!(!Approval::Never.requires(&hints(None, None)));
        assert!(Approval::Always.requires(&hints(Some(true), Some(false))));
        assert!(!Approval::UnlessReadOnly.requires(&hints(Some(true), None)));
        assert!(Approval::UnlessReadOnly.requires(&hints(None, Some(false))));
        // MCP's default for a tool that says nothing is "destructive".
        assert!(Approval::IfDestructive.requires(&hints(None, None)));
        assert!(!Approval::IfDestructive.requires(&hints(None, Some(false))));
        assert!(!Approval::IfDestructive.requires(&hints(Some(true), Some(true))));
    }

    #[test]
    fn tool_rules_override_the_server_rule() {
        let policy = ServerPolicy::new(Approval::Always).tool("search", Approval::Never);
        assert!(!policy.requires_approval("search", &ToolHints::default()));
        assert!(policy.requires_approval("delete", &ToolHints::default()));
    }

    #[test]
    fn allow_list_entries() {
        let list = McpAllowList::parse(["files/read", "files/list", "web", "git/*"]).unwrap();
        assert!(list.allows("files", "read"));
        assert!(!list.allows("files", "delete"));
        assert!(list.allows("web", "anything"));
        assert!(list.allows("git", "log"));
        assert!(!list.allows("other", "read"));
        for bad in ["", "/x", "a/", "a/b/c"] {
            let err = McpAllowList::parse([bad]).unwrap_err();
            assert_eq!(err.kind(), &ErrorKind::InvalidRequest, "{bad}");
        }
        assert_eq!(
            Approval::parse("sometimes").unwrap_err().kind(),
            &ErrorKind::InvalidRequest
        );
    }
}
