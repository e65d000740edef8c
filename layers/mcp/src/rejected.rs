//! [`RejectedTool`]: a tool a server lists that cannot be offered, and why.

use std::fmt;
use std::sync::Arc;

use tower_chat::ChatError;
use tower_chat_function_invocation::schema::SchemaError;

/// A tool a server lists that is not offered to the model, because the tool loop cannot take it: its input
/// schema does not compile (a malformed keyword, a remote `$ref`, a keyword the validator does not implement
/// such as `unevaluatedProperties` beside `allOf`), or its name is unusable.
///
/// [`McpTools::rejected_tools`](crate::McpTools::rejected_tools) lists them for the current listings; each is
/// also logged once per listing with `tracing::warn!` (fields `mcp.server`, `mcp.tool`, `error`). Cheap to clone.
#[derive(Clone, Debug)]
pub struct RejectedTool {
    server: String,
    tool: String,
    error: Arc<ChatError>,
}

impl RejectedTool {
    pub(crate) fn new(server: &str, tool: &str, error: ChatError) -> Self {
        RejectedTool {
            server: server.to_owned(),
            tool: tool.to_owned(),
            error: Arc::new(error),
        }
    }

    /// The server listing the tool.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The tool's name at its server.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// Why it is not offered: the [`ErrorKind::InvalidRequest`](tower_chat::ErrorKind::InvalidRequest) error
    /// compiling the tool gave.
    pub fn error(&self) -> &ChatError {
        &self.error
    }

    /// The schema error (keyword, where, why) when the input schema is what failed.
    pub fn schema_error(&self) -> Option<&SchemaError> {
        std::error::Error::source(self.error.as_ref())?.downcast_ref()
    }
}

impl fmt::Display for RejectedTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "MCP tool `{}` of server `{}` is not offered: {}",
            self.tool, self.server, self.error
        )
    }
}

impl std::error::Error for RejectedTool {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.error.as_ref())
    }
}
