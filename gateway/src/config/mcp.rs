//! `[[mcp]]`: the MCP servers whose tools the tool loop offers (see `stack::mcp` for the whole reference).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

/// One `[[mcp]]` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerEntry {
    /// The server's name.
    pub name: String,
    /// The program to start (stdio); exactly one of `command` and `url`.
    #[serde(default)]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment variables of the child.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The child's working directory.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The streamable HTTP endpoint.
    #[serde(default)]
    pub url: Option<String>,
    /// The environment variable holding the bearer token (HTTP).
    #[serde(default)]
    pub bearer_token_env: Option<String>,
    /// The approval rule for every tool of the server.
    #[serde(default)]
    pub policy: Option<String>,
    /// Approval rules per tool (by the server's tool name).
    #[serde(default)]
    pub tool_policy: BTreeMap<String, String>,
    /// A time limit per call, in milliseconds.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Caller identities allowed every tool of this server.
    #[serde(default)]
    pub keys: Option<Vec<String>>,
    /// Caller identities allowed some tools of this server.
    #[serde(default)]
    pub key_tools: BTreeMap<String, Vec<String>>,
}
