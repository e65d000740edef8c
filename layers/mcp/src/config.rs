//! How to reach one MCP server, and how to restart it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::policy::ServerPolicy;

/// One MCP server: its name (the prefix of its tools on a collision), how to reach it, its approval policy, and
/// its limits.
#[derive(Clone, Debug)]
pub struct McpServerConfig {
    pub(crate) name: String,
    pub(crate) transport: McpTransport,
    pub(crate) policy: ServerPolicy,
    pub(crate) timeout: Option<Duration>,
    pub(crate) backoff: Backoff,
}

impl McpServerConfig {
    /// A server started as a child process speaking MCP over its stdin and stdout. Its stderr is kept (the last
    /// lines are reported when it fails to start) and logged at `debug` level.
    pub fn stdio(name: impl Into<String>, command: impl Into<String>) -> Self {
        McpServerConfig::new(
            name,
            McpTransport::Stdio(StdioConfig {
                command: command.into(),
                args: Vec::new(),
                env: BTreeMap::new(),
                cwd: None,
            }),
        )
    }

    /// A server reached over MCP's streamable HTTP transport at `url`.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        McpServerConfig::new(
            name,
            McpTransport::Http(HttpConfig {
                url: url.into(),
                bearer_token_env: None,
            }),
        )
    }

    fn new(name: impl Into<String>, transport: McpTransport) -> Self {
        McpServerConfig {
            name: name.into(),
            transport,
            policy: ServerPolicy::default(),
            timeout: None,
            backoff: Backoff::default(),
        }
    }

    /// Arguments of the child process (stdio only; ignored for HTTP).
    pub fn args<I, A>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = A>,
        A: Into<String>,
    {
        if let McpTransport::Stdio(stdio) = &mut self.transport {
            stdio.args.extend(args.into_iter().map(Into::into));
        }
        self
    }

    /// An environment variable for the child process (stdio only). The child inherits the parent's environment
    /// otherwise.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let McpTransport::Stdio(stdio) = &mut self.transport {
            stdio.env.insert(key.into(), value.into());
        }
        self
    }

    /// The working directory of the child process (stdio only).
    pub fn cwd(mut self, dir: impl Into<PathBuf>) -> Self {
        if let McpTransport::Stdio(stdio) = &mut self.transport {
            stdio.cwd = Some(dir.into());
        }
        self
    }

    /// Send `Authorization: Bearer <token>` read from this environment variable when connecting (HTTP only).
    /// The variable is read at each (re)connection; an unset or empty variable fails the connection with a
    /// message naming it, never with the token.
    pub fn bearer_token_env(mut self, var: impl Into<String>) -> Self {
        if let McpTransport::Http(http) = &mut self.transport {
            http.bearer_token_env = Some(var.into());
        }
        self
    }

    /// Which calls of this server's tools need approval (default: [`ServerPolicy::default`]).
    pub fn policy(mut self, policy: ServerPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// A time limit for each call of this server's tools, overriding the loop's
    /// [`tool_timeout`](tower_chat_function_invocation::FunctionInvocationLayer::tool_timeout).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// How reconnection attempts are spaced after a crash or a failed start.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How it is reached.
    pub fn transport(&self) -> &McpTransport {
        &self.transport
    }
}

/// How an MCP server is reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum McpTransport {
    /// A child process over stdio.
    Stdio(StdioConfig),
    /// Streamable HTTP.
    Http(HttpConfig),
}

/// A child process speaking MCP on stdio.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StdioConfig {
    /// The program.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// Working directory.
    pub cwd: Option<PathBuf>,
}

/// A streamable HTTP endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpConfig {
    /// The MCP endpoint, e.g. `http://127.0.0.1:8000/mcp`.
    pub url: String,
    /// The environment variable holding the bearer token, if the server wants one.
    pub bearer_token_env: Option<String>,
}

/// Exponential backoff between reconnection attempts: `initial`, doubled after each failed attempt up to `max`;
/// a connection that stays up resets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    /// The first delay.
    pub initial: Duration,
    /// The largest delay.
    pub max: Duration,
}

impl Default for Backoff {
    /// 200 ms doubling to 30 s.
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(30),
        }
    }
}

impl Backoff {
    /// The delay before attempt `attempt` (0 for the first retry).
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_max() {
        let backoff = Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(1),
        };
        let delays: Vec<u64> = (0..5)
            .map(|n| backoff.delay(n).as_millis() as u64)
            .collect();
        assert_eq!(delays, [200, 400, 800, 1000, 1000]);
        assert_eq!(backoff.delay(u32::MAX), Duration::from_secs(1));
    }
}
