//! Tool sets, registries, per-request tools, and how they combine for one request.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use tower_chat::{ChatError, ChatRequest, ErrorKind, Shared, ToolSpec};

use crate::into_tool::IntoTool;
use crate::tool::CompiledTool;

/// Tools by name, in insertion order.
#[derive(Clone, Default)]
pub struct ToolSet {
    tools: Vec<CompiledTool>,
    index: HashMap<String, usize>,
}

impl ToolSet {
    /// An empty set.
    pub fn new() -> Self {
        ToolSet::default()
    }

    /// Add a tool as written (compiled now) or already compiled, replacing one of the same name (see
    /// [`ToolSet::insert`]); fails as [`CompiledTool::new`] does on a bad schema or name.
    pub fn with(mut self, tool: impl IntoTool) -> Result<Self, ChatError> {
        self.insert(tool.into_tool()?);
        Ok(self)
    }

    /// Add a tool; one of the same name is replaced in place and returned.
    pub fn insert(&mut self, tool: CompiledTool) -> Option<CompiledTool> {
        match self.index.get(tool.name()) {
            Some(&i) => Some(std::mem::replace(&mut self.tools[i], tool)),
            None => {
                self.index.insert(tool.name().to_owned(), self.tools.len());
                self.tools.push(tool);
                None
            }
        }
    }

    /// The tool of this name.
    pub fn get(&self, name: &str) -> Option<&CompiledTool> {
        self.index.get(name).map(|&i| &self.tools[i])
    }

    /// The tools, in insertion order.
    pub fn iter(&self) -> impl Iterator<Item = &CompiledTool> {
        self.tools.iter()
    }

    /// How many tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// Add a request-level tool under the guard rule: a tool that requires approval is never replaced by one
    /// that does not (a request cannot remove a guard); otherwise the newcomer replaces the existing tool.
    fn merge(&mut self, tool: CompiledTool) {
        if let Some(existing) = self.get(tool.name()) {
            if existing.requires_approval() && !tool.requires_approval() {
                return;
            }
        }
        self.insert(tool);
    }
}

impl FromIterator<CompiledTool> for ToolSet {
    fn from_iter<I: IntoIterator<Item = CompiledTool>>(iter: I) -> Self {
        let mut set = ToolSet::new();
        for tool in iter {
            set.insert(tool);
        }
        set
    }
}

impl fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.tools.iter().map(CompiledTool::name))
            .finish()
    }
}

/// Finds tools by name (Spring AI's `ToolCallbackResolver`): a request names registered tools in
/// [`RequestTools::registered`] and the layer's resolver supplies them.
pub trait ToolResolver: Send + Sync + 'static {
    /// The tool of this name, if registered.
    fn resolve(&self, name: &str) -> Option<CompiledTool>;
}

impl ToolResolver for ToolSet {
    fn resolve(&self, name: &str) -> Option<CompiledTool> {
        self.get(name).cloned()
    }
}

/// Tools for one request, in [`ChatRequest::extensions`]: executable tools of its own, and names of tools to
/// take from the layer's registry.
///
/// Tools combine in this order — the layer's tools, then registry tools named here, then the tools here — and a
/// later tool of the same name replaces an earlier one, except that a tool requiring approval is never replaced
/// by one that does not. Specs in [`tower_chat::ChatOptions::tools`] without an implementation are client-side
/// tools: their calls are handed back to the caller.
#[derive(Clone, Debug, Default)]
pub struct RequestTools {
    /// Executable tools for this request only.
    pub tools: ToolSet,
    /// Names of registered tools to offer.
    pub registered: Vec<String>,
}

impl RequestTools {
    /// None yet.
    pub fn new() -> Self {
        RequestTools::default()
    }

    /// Add an executable tool, as written (compiled now) or already compiled; fails as [`CompiledTool::new`]
    /// does on a bad schema or name.
    pub fn tool(mut self, tool: impl IntoTool) -> Result<Self, ChatError> {
        self.tools.insert(tool.into_tool()?);
        Ok(self)
    }

    /// Offer a registered tool by name.
    pub fn registered(mut self, name: impl Into<String>) -> Self {
        self.registered.push(name.into());
        self
    }
}

/// The tools of one request after combination.
#[derive(Debug, Default)]
pub(crate) struct Resolved {
    pub(crate) executable: ToolSet,
    /// Names of client-side tools (declared without an implementation).
    pub(crate) client: HashSet<String>,
    /// What the model is offered: executable tools' specs, then client-side specs.
    pub(crate) specs: Shared<Vec<ToolSpec>>,
}

impl Resolved {
    pub(crate) fn from_layer(tools: &ToolSet) -> Self {
        Resolved {
            specs: tools.iter().map(|t| t.spec().clone()).collect(),
            executable: tools.clone(),
            client: HashSet::new(),
        }
    }

    /// Combine the layer's tools with what the request brings. Fails before any model call when the request
    /// names a tool the registry does not have.
    pub(crate) fn for_request(
        layer: &ToolSet,
        registry: Option<&dyn ToolResolver>,
        request: &mut ChatRequest,
    ) -> Result<Self, ChatError> {
        let mut executable = layer.clone();
        if let Some(extra) = request.extensions.remove::<RequestTools>() {
            for name in &extra.registered {
                let tool = registry.and_then(|r| r.resolve(name)).ok_or_else(|| {
                    let why = if registry.is_some() {
                        "is not in the tool registry"
                    } else {
                        "was requested but the layer has no tool registry"
                    };
                    ChatError::new(ErrorKind::InvalidRequest, format!("tool `{name}` {why}"))
                })?;
                executable.merge(tool);
            }
            for tool in extra.tools.iter() {
                executable.merge(tool.clone());
            }
        }
        let declared = std::mem::take(&mut request.options.tools);
        let mut specs: Vec<ToolSpec> = executable.iter().map(|t| t.spec().clone()).collect();
        let mut client = HashSet::new();
        for spec in Shared::into_inner(declared) {
            if executable.get(&spec.name).is_none() && client.insert(spec.name.clone()) {
                // A tool namespace's tools are called by their joined names: the client's too.
                for (joined, ..) in tower_chat::namespaced_tools(std::slice::from_ref(&spec)) {
                    client.insert(joined);
                }
                specs.push(spec);
            }
        }
        Ok(Resolved {
            executable,
            client,
            specs: specs.into(),
        })
    }
}

/// A shared resolver.
pub(crate) type SharedResolver = Arc<dyn ToolResolver>;
