//! [`McpLayer`]: offers the MCP tools on every request, to the tool loop inside it.

use std::fmt;
use std::task::{Context, Poll};

use tower_chat::ChatRequest;
use tower_chat_function_invocation::{RequestTools, ToolSet};
use tower_layer::Layer;
use tower_service::Service;

use crate::hub::McpTools;
use crate::policy::McpAllowList;

/// Offers the current MCP tools to a [`FunctionInvocationLayer`](tower_chat_function_invocation::FunctionInvocationLayer)
/// placed inside it, on every request, through the request's [`RequestTools`].
///
/// MCP tools thus take exactly the path of any other tool: argument validation against the server's schema,
/// the loop's timeout, concurrency limit, cancellation, error results, `execute_tool` spans, approvals and
/// persistence of the results.
///
/// - A request with an [`McpAllowList`] in its extensions is offered only the tools it allows.
/// - Tools the request brings in its own `RequestTools` win over MCP tools of the same name, except that one
///   requiring approval is never replaced by one that does not.
#[derive(Clone)]
pub struct McpLayer {
    tools: McpTools,
}

impl McpLayer {
    /// A layer offering these servers' tools.
    pub fn new(tools: McpTools) -> Self {
        McpLayer { tools }
    }
}

impl fmt::Debug for McpLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("McpLayer")
            .field("tools", &self.tools)
            .finish()
    }
}

impl<S> Layer<S> for McpLayer {
    type Service = Mcp<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Mcp {
            inner,
            tools: self.tools.clone(),
        }
    }
}

/// The service of [`McpLayer`].
#[derive(Clone)]
pub struct Mcp<S> {
    inner: S,
    tools: McpTools,
}

impl<S> Mcp<S> {
    tower_chat::define_inner_service_accessors!();
}

impl<S: fmt::Debug> fmt::Debug for Mcp<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mcp")
            .field("inner", &self.inner)
            .field("tools", &self.tools)
            .finish()
    }
}

impl<S> Service<ChatRequest> for Mcp<S>
where
    S: Service<ChatRequest>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: ChatRequest) -> Self::Future {
        offer(&self.tools, &mut request);
        self.inner.call(request)
    }
}

/// Put the MCP tools this request may use into its `RequestTools`.
fn offer(tools: &McpTools, request: &mut ChatRequest) {
    let snapshot = tools.snapshot();
    if snapshot.tools.is_empty() {
        return;
    }
    let own = request
        .extensions
        .remove::<RequestTools>()
        .unwrap_or_default();
    let mut combined = match request.extensions.get::<McpAllowList>() {
        None => snapshot.tools.clone(),
        Some(allow) => snapshot
            .tools
            .iter()
            .filter(|tool| {
                snapshot
                    .origin
                    .get(tool.name())
                    .is_some_and(|(server, name)| allow.allows(server, name))
            })
            .cloned()
            .collect::<ToolSet>(),
    };
    for tool in own.tools.iter() {
        let guarded = combined
            .get(tool.name())
            .is_some_and(|existing| existing.requires_approval() && !tool.requires_approval());
        if !guarded {
            combined.insert(tool.clone());
        }
    }
    request.extensions.insert(RequestTools {
        tools: combined,
        registered: own.registered,
    });
}
