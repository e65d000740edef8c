//! Bounds on a JSON Schema, checked before anything works on it.
//!
//! A schema is small text that can stand for an enormous amount of work: a chain of 1,500 `$ref`s (52 KB)
//! recurses 1,500 deep in anything that follows references; levels of `allOf` each holding two `$ref`s to the
//! level below (2 KB, 27 levels) expand to 2^27 subschemas; four references per level, ten levels deep (the
//! "billion laughs" of JSON Schema) inline to a gigabyte. [`SchemaLimits::check`] measures a schema in one pass
//! over its text and one over its references, in time and memory linear in the schema's size, without
//! recursion, and refuses it with a [`SchemaLimitError`] naming the limit before the validator compiles it or a
//! provider's rewrite inlines it. The validator (`tower-chat-function-invocation`), the rewrites for OpenAI strict
//! mode, Anthropic and Gemini ([`output_schema`](crate::output_schema), [`gemini`](crate::gemini)) and the
//! gateway's request checks all read the same [`SchemaLimits`].
//!
//! What is measured, with each `$ref` (or `$dynamicRef`, `$recursiveRef`) replaced by the schema it points at:
//! how deep the schema nests, how many `$ref`s are followed and how many JSON values it expands to. A reference
//! back into a schema it is inside of (recursion, as in a tree of comments) is followed once: validating a
//! recursive schema descends into the value as it goes, and inlining one is refused by the rewrites anyway.
//!
//! ```
//! use serde_json::json;
//! use tower_chat::schema_limits::{SchemaLimit, SchemaLimits};
//!
//! let limits = SchemaLimits::default();
//! let size = limits.check(&json!({"type": "object", "properties": {"at": {"$ref": "#/$defs/point"}},
//!                                 "$defs": {"point": {"type": "array", "items": {"type": "number"}}}}))?;
//! // The root, `properties`, `at`, `point` (the `$ref` followed), `items`, its `"number"`: 6 levels.
//! assert_eq!((size.ref_expansions, size.depth), (1, 6));
//!
//! // Five levels of `allOf: [$ref, $ref]` to the level below expand 2^5 times.
//! let tight = SchemaLimits { max_expanded_nodes: 100, ..SchemaLimits::default() };
//! let mut defs = serde_json::Map::new();
//! defs.insert("l0".into(), json!({"type": "string"}));
//! for level in 1..=5 {
//!     let below = json!({"$ref": format!("#/$defs/l{}", level - 1)});
//!     defs.insert(format!("l{level}"), json!({"allOf": [below, below]}));
//! }
//! let error = tight.check(&json!({"$defs": defs, "$ref": "#/$defs/l5"})).unwrap_err();
//! assert_eq!(error.limit(), SchemaLimit::ExpandedNodes);
//! assert!(error.to_string().ends_with("the limit is 100 (max_expanded_nodes)"));
//! # Ok::<(), tower_chat::schema_limits::SchemaLimitError>(())
//! ```

use std::collections::HashMap;
use std::fmt;

use serde_json::Value;

use crate::{ChatError, ErrorKind};

/// How large a schema may be, before and after its `$ref`s are followed. [`Default`] is generous for every
/// schema seen in use (the tool schemas of Claude Code and Codex, `schemars` and Pydantic output, MCP servers'
/// tools) and small enough that validating against or inlining the largest accepted schema is linear work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SchemaLimits {
    /// How deep the schema nests, counting each `$ref` followed as one level (default 64). The deepest real
    /// schemas nest ~20; the validator and the rewrites recurse this deep.
    pub max_depth: usize,
    /// JSON values in the schema as written: objects, arrays, strings, numbers… (default 20,000; OpenAI strict
    /// mode takes at most 5,000 properties).
    pub max_nodes: usize,
    /// `$ref`s followed when every reference is expanded (default 10,000).
    pub max_ref_expansions: usize,
    /// JSON values of the schema with every `$ref` replaced by its target: what inlining it (Gemini) produces
    /// (default 100,000, a few MB of JSON).
    pub max_expanded_nodes: usize,
}

impl SchemaLimits {
    /// The defaults, as a constant.
    pub const DEFAULT: SchemaLimits = SchemaLimits {
        max_depth: 64,
        max_nodes: 20_000,
        max_ref_expansions: 10_000,
        max_expanded_nodes: 100_000,
    };
}

impl Default for SchemaLimits {
    fn default() -> Self {
        SchemaLimits::DEFAULT
    }
}

/// What [`SchemaLimits::check`] measured: the expanded figures are lower bounds when the schema is recursive
/// (each cycle followed once).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchemaSize {
    /// Nesting depth with each `$ref` followed counting as one level (a scalar schema is 1).
    pub depth: u64,
    /// JSON values as written.
    pub nodes: u64,
    /// `$ref`s followed when expanded.
    pub ref_expansions: u64,
    /// JSON values when expanded.
    pub expanded_nodes: u64,
}

/// Which of the [`SchemaLimits`] a schema broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SchemaLimit {
    /// [`SchemaLimits::max_depth`].
    Depth,
    /// [`SchemaLimits::max_nodes`].
    Nodes,
    /// [`SchemaLimits::max_ref_expansions`].
    RefExpansions,
    /// [`SchemaLimits::max_expanded_nodes`].
    ExpandedNodes,
}

impl SchemaLimit {
    /// The field of [`SchemaLimits`] that sets this limit (`max_depth`, …).
    pub fn field(self) -> &'static str {
        match self {
            SchemaLimit::Depth => "max_depth",
            SchemaLimit::Nodes => "max_nodes",
            SchemaLimit::RefExpansions => "max_ref_expansions",
            SchemaLimit::ExpandedNodes => "max_expanded_nodes",
        }
    }
}

/// A schema over one of the [`SchemaLimits`]: which, what was found (at least), and the limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaLimitError {
    limit: SchemaLimit,
    found: u64,
    allowed: usize,
}

impl SchemaLimitError {
    /// A schema found at `found` for `limit`, whose value is `allowed` (for the rewrites' own budgets).
    pub fn new(limit: SchemaLimit, found: u64, allowed: usize) -> Self {
        SchemaLimitError {
            limit,
            found,
            allowed,
        }
    }

    /// The limit broken.
    pub fn limit(&self) -> SchemaLimit {
        self.limit
    }

    /// What the schema measured (at least this much: measuring stops once a limit is passed).
    pub fn found(&self) -> u64 {
        self.found
    }

    /// The limit's value.
    pub fn allowed(&self) -> usize {
        self.allowed
    }
}

impl fmt::Display for SchemaLimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let found = self.found;
        match self.limit {
            SchemaLimit::Depth => write!(
                f,
                "the schema nests at least {found} levels deep (each `$ref` followed counts as a level)"
            )?,
            SchemaLimit::Nodes => write!(f, "the schema holds at least {found} JSON values")?,
            SchemaLimit::RefExpansions => {
                write!(f, "expanding the schema follows at least {found} `$ref`s")?
            }
            SchemaLimit::ExpandedNodes => write!(
                f,
                "the schema expands to at least {found} JSON values with each `$ref` replaced by its target"
            )?,
        }
        write!(
            f,
            "; the limit is {} ({})",
            self.allowed,
            self.limit.field()
        )
    }
}

impl std::error::Error for SchemaLimitError {}

impl From<SchemaLimitError> for ChatError {
    /// An [`ErrorKind::InvalidRequest`] refused before sending, with the limit error as its source.
    fn from(error: SchemaLimitError) -> Self {
        ChatError::new(ErrorKind::InvalidRequest, error.to_string())
            .with_source(error)
            .refused_before_sending()
    }
}

/// Keywords whose values are data, not schemas: a `$ref` or an anchor inside them is not one.
const DATA_KEYWORDS: [&str; 4] = ["enum", "const", "default", "examples"];

/// Keywords holding schemas that apply only where a `$ref` names them.
const DEFINITIONS: [&str; 2] = ["$defs", "definitions"];

/// Reference keywords, followed alike.
const REFERENCES: [&str; 3] = ["$ref", "$dynamicRef", "$recursiveRef"];

/// Keywords declaring a name a reference may use instead of a pointer.
const ANCHORS: [&str; 3] = ["$anchor", "$dynamicAnchor", "$id"];

impl SchemaLimits {
    /// Measure `schema` and refuse it when it breaks a limit: first the schema as written (depth and values,
    /// stopping at the first value past a limit), then with its references followed.
    pub fn check(&self, schema: &Value) -> Result<SchemaSize, SchemaLimitError> {
        let outline = Outline::read(schema, self)?;
        let size = outline.expand();
        if size.expanded_nodes > self.max_expanded_nodes as u64 {
            return Err(SchemaLimitError::new(
                SchemaLimit::ExpandedNodes,
                size.expanded_nodes,
                self.max_expanded_nodes,
            ));
        }
        if size.ref_expansions > self.max_ref_expansions as u64 {
            return Err(SchemaLimitError::new(
                SchemaLimit::RefExpansions,
                size.ref_expansions,
                self.max_ref_expansions,
            ));
        }
        if size.depth > self.max_depth as u64 {
            return Err(SchemaLimitError::new(
                SchemaLimit::Depth,
                size.depth,
                self.max_depth,
            ));
        }
        Ok(size)
    }
}

/// The schema as a graph: every JSON value a node numbered so that each node's children are consecutive, plus
/// an edge from each reference to the value it points at.
struct Outline {
    /// Per node: its first child and how many of its children its expansion includes (all but `$defs` and
    /// `definitions`, which come last).
    children: Vec<(u32, u32)>,
    /// (referring node, target), sorted by the referring node.
    references: Vec<(u32, u32)>,
    /// The deepest nesting as written.
    depth: u64,
}

/// Note a reference (`$ref`, `$dynamicRef`, `$recursiveRef`) or a declared anchor (`$anchor`, `$dynamicAnchor`,
/// `$id`) of the schema numbered `node`; an anchor declared twice names its first schema.
fn note_keyword<'a>(
    key: &str,
    value: &'a Value,
    node: u32,
    refs: &mut Vec<(u32, &'a str)>,
    anchors: &mut HashMap<&'a str, u32>,
) {
    let Some(text) = value.as_str() else {
        return;
    };
    if REFERENCES.contains(&key) {
        refs.push((node, text));
    } else if ANCHORS.contains(&key) {
        anchors
            .entry(text.strip_prefix('#').unwrap_or(text))
            .or_insert(node);
    }
}

impl Outline {
    /// Number the values of `root` breadth-first (no recursion), refusing it once it nests or holds more than
    /// `limits` allow, and resolve its local references.
    fn read(root: &Value, limits: &SchemaLimits) -> Result<Outline, SchemaLimitError> {
        // Room for a typical tool or answer schema, so the vectors do not grow value by value.
        let room = 64.min(limits.max_nodes);
        let mut values: Vec<&Value> = Vec::with_capacity(room);
        values.push(root);
        let mut children = Vec::with_capacity(room);
        // Per node: its depth (the root is 1) and whether it lies inside data (`enum`, `const`, …).
        let mut place: Vec<(u32, bool)> = Vec::with_capacity(room);
        place.push((1, false));
        let mut refs: Vec<(u32, &str)> = Vec::new();
        let mut anchors: HashMap<&str, u32> = HashMap::new();
        let mut depth = 1;
        let mut next = 0;
        while let Some(&value) = values.get(next) {
            let (level, in_data) = place[next];
            depth = depth.max(u64::from(level));
            if level as usize > limits.max_depth {
                return Err(SchemaLimitError::new(
                    SchemaLimit::Depth,
                    u64::from(level),
                    limits.max_depth,
                ));
            }
            let first = values.len() as u32;
            // The end of the children a schema's expansion includes.
            let mut expanded = u32::MAX;
            match value {
                Value::Object(map) => {
                    // One pass over the keys: the reference and anchor keywords all start with `$`, and a
                    // lookup per keyword would hash each of them for every object.
                    let mut has_definitions = false;
                    for (key, child) in map {
                        if !in_data {
                            if DEFINITIONS.contains(&key.as_str()) {
                                has_definitions = true;
                                continue;
                            }
                            if key.starts_with('$') {
                                note_keyword(key, child, next as u32, &mut refs, &mut anchors);
                            }
                        }
                        values.push(child);
                        place.push((level + 1, in_data || DATA_KEYWORDS.contains(&key.as_str())));
                    }
                    // Definitions last: they are counted as written but expanded only where referred to.
                    if has_definitions {
                        expanded = values.len() as u32;
                        for (_, child) in map
                            .iter()
                            .filter(|(key, _)| DEFINITIONS.contains(&key.as_str()))
                        {
                            values.push(child);
                            place.push((level + 1, false));
                        }
                    }
                }
                Value::Array(items) => {
                    for item in items {
                        values.push(item);
                        place.push((level + 1, in_data));
                    }
                }
                _ => {}
            }
            if values.len() > limits.max_nodes {
                return Err(SchemaLimitError::new(
                    SchemaLimit::Nodes,
                    values.len() as u64,
                    limits.max_nodes,
                ));
            }
            let end = values.len() as u32;
            children.push((first, expanded.min(end) - first));
            next += 1;
        }
        let mut references = Vec::with_capacity(refs.len());
        if !refs.is_empty() {
            let root_id = root
                .get("$id")
                .and_then(Value::as_str)
                .map(|id| id.trim_end_matches('#'));
            // Addresses identify the values a JSON pointer lands on.
            let mut by_address: Vec<(usize, u32)> = values
                .iter()
                .enumerate()
                .map(|(i, v)| (std::ptr::from_ref(*v) as usize, i as u32))
                .collect();
            by_address.sort_unstable();
            for (holder, text) in refs {
                let fragment = match text.split_once('#') {
                    Some(("", fragment)) => fragment,
                    Some((document, fragment)) if Some(document) == root_id => fragment,
                    None if Some(text) == root_id => "",
                    // Another document: nothing here to expand (the validator and the rewrites refuse it).
                    _ => continue,
                };
                let Some(fragment) = percent_decode(fragment) else {
                    continue;
                };
                let target = if fragment.is_empty() || fragment.starts_with('/') {
                    root.pointer(&fragment).and_then(|target| {
                        let address = std::ptr::from_ref(target) as usize;
                        by_address
                            .binary_search_by_key(&address, |(a, _)| *a)
                            .ok()
                            .map(|at| by_address[at].1)
                    })
                } else {
                    anchors.get(fragment.as_str()).copied()
                };
                if let Some(target) = target {
                    references.push((holder, target));
                }
            }
        }
        Ok(Outline {
            children,
            references,
            depth,
        })
    }

    /// The schema's size with its references followed: one depth-first pass with an explicit stack, each node's
    /// expansion computed once and reused wherever it is referred to (so a DAG costs its size, not its
    /// expansion), a reference back to a node being expanded (recursion) followed once. Definitions count where
    /// they are referred to, as inlining places them; one never referred to expands to nothing.
    fn expand(&self) -> SchemaSize {
        let nodes = self.children.len();
        if self.references.is_empty() {
            return SchemaSize {
                depth: self.depth,
                nodes: nodes as u64,
                ref_expansions: 0,
                expanded_nodes: nodes as u64,
            };
        }
        const NEW: u8 = 0;
        const OPEN: u8 = 1;
        const DONE: u8 = 2;
        let mut state = vec![NEW; nodes];
        // Per node: (expanded values, references followed, depth).
        let mut size = vec![(0u64, 0u64, 0u64); nodes];
        let targets = |node: u32| {
            let start = self.references.partition_point(|(h, _)| *h < node);
            let end = self.references.partition_point(|(h, _)| *h <= node);
            &self.references[start..end]
        };
        // (node, next edge, entered through a reference).
        let mut stack: Vec<(u32, u32, bool)> = vec![(0, 0, false)];
        state[0] = OPEN;
        size[0] = (1, 0, 1);
        while let Some(&mut (node, ref mut edge, _)) = stack.last_mut() {
            let (first, count) = self.children[node as usize];
            let refs = targets(node);
            let next = if *edge < count {
                Some((first + *edge, false))
            } else {
                refs.get((*edge - count) as usize).map(|(_, t)| (*t, true))
            };
            *edge += 1;
            match next {
                Some((target, via_ref)) => match state[target as usize] {
                    NEW => {
                        state[target as usize] = OPEN;
                        size[target as usize] = (1, 0, 1);
                        stack.push((target, 0, via_ref));
                    }
                    DONE => {
                        let child = size[target as usize];
                        add(&mut size[node as usize], child, via_ref);
                    }
                    // Recursion: the reference is followed once, its target's expansion is already counted.
                    _ => {
                        if via_ref {
                            size[node as usize].1 = size[node as usize].1.saturating_add(1);
                        }
                    }
                },
                None => {
                    state[node as usize] = DONE;
                    let (done, _, via_ref) = stack.pop().expect("the loop's own frame");
                    if let Some(&(parent, _, _)) = stack.last() {
                        let child = size[done as usize];
                        add(&mut size[parent as usize], child, via_ref);
                    }
                }
            }
        }
        let most = |pick: fn(&(u64, u64, u64)) -> u64| size.iter().map(pick).max().unwrap_or(0);
        SchemaSize {
            depth: most(|s| s.2).max(self.depth),
            nodes: nodes as u64,
            ref_expansions: most(|s| s.1),
            expanded_nodes: most(|s| s.0),
        }
    }
}

/// Add a finished child's (or reference target's) expansion to its parent's.
fn add(parent: &mut (u64, u64, u64), child: (u64, u64, u64), via_ref: bool) {
    parent.0 = parent.0.saturating_add(child.0);
    parent.1 = parent
        .1
        .saturating_add(child.1)
        .saturating_add(u64::from(via_ref));
    parent.2 = parent.2.max(child.2.saturating_add(1));
}

/// Undo `%XX` escapes of a URI fragment (`#/$defs/a%20b`); `None` when an escape is malformed.
pub fn percent_decode(text: &str) -> Option<String> {
    if !text.contains('%') {
        return Some(text.to_owned());
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests;
