//! Compiling a schema document into a tree of checks: every keyword is read and type-checked once, regexes are
//! built once, and `$ref`s become links to other nodes (which is how recursive schemas stay finite).

use std::collections::HashMap;

use regex_lite::Regex;
use serde_json::{Map, Number, Value};

use super::document::{percent_decode, push_segment, resolve_pointer, Document};
use super::value::compare_numbers;
use super::SchemaError;

/// Property names (`required`, `dependentRequired`'s lists).
pub(crate) type Names = Box<[Box<str>]>;

/// Index of a node in [`Tree::nodes`].
pub(crate) type NodeId = usize;

/// The compiled schema: nodes in an arena so that `$ref` cycles are plain indices.
#[derive(Debug)]
pub(crate) struct Tree {
    pub(crate) nodes: Vec<Node>,
    pub(crate) root: NodeId,
    /// Per node: whether two or more in-place applicators (`$ref`, `allOf`, …) lead to it, so that one value
    /// can meet it more than once (levels of `allOf: [{$ref}, {$ref}]`); its results are remembered per value
    /// while validating, which keeps a DAG of references linear instead of exponential.
    pub(crate) shared: Vec<bool>,
}

/// One (sub)schema.
#[derive(Debug)]
pub(crate) enum Node {
    /// `true` or `{}`: every value.
    Any,
    /// `false`: no value.
    Nothing,
    /// The keywords that assert something, each a check.
    Checks(Box<[Check]>),
    /// A slot reserved for a `$ref` target that is being compiled (never seen after compilation).
    Pending,
}

/// A set of JSON types, one bit each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Types(u8);

impl Types {
    pub(crate) const NULL: u8 = 1;
    pub(crate) const BOOLEAN: u8 = 2;
    pub(crate) const INTEGER: u8 = 4;
    pub(crate) const NUMBER: u8 = 8;
    pub(crate) const STRING: u8 = 16;
    pub(crate) const ARRAY: u8 = 32;
    pub(crate) const OBJECT: u8 = 64;
    const NAMES: [(&'static str, u8); 7] = [
        ("null", Self::NULL),
        ("boolean", Self::BOOLEAN),
        ("integer", Self::INTEGER),
        ("number", Self::NUMBER),
        ("string", Self::STRING),
        ("array", Self::ARRAY),
        ("object", Self::OBJECT),
    ];

    pub(crate) fn contains(self, bit: u8) -> bool {
        self.0 & bit != 0
    }

    /// The names in the set, for messages (`string or null`: null last, as schemas usually write it).
    pub(crate) fn names(self) -> impl Iterator<Item = &'static str> {
        Self::NAMES[1..]
            .iter()
            .copied()
            .chain([Self::NAMES[0]])
            .filter(move |(_, bit)| self.contains(*bit))
            .map(|(name, _)| name)
    }
}

/// Which way a numeric bound points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bound {
    /// `minimum`: value ≥ limit.
    Minimum,
    /// `exclusiveMinimum`: value > limit.
    ExclusiveMinimum,
    /// `maximum`: value ≤ limit.
    Maximum,
    /// `exclusiveMaximum`: value < limit.
    ExclusiveMaximum,
}

/// A compiled `pattern` or `patternProperties` key: the regex and its source for messages.
#[derive(Debug)]
pub(crate) struct Pattern {
    pub(crate) regex: Regex,
    pub(crate) source: Box<str>,
}

/// One asserting keyword (or group of keywords that must be read together).
#[derive(Debug)]
pub(crate) enum Check {
    Type(Types),
    Enum(Box<[Value]>),
    Const(Value),
    /// A `$ref` (or `$dynamicRef` to a local pointer): the target node applies here.
    Ref(NodeId),
    AllOf(Box<[NodeId]>),
    AnyOf(Box<[NodeId]>),
    OneOf(Box<[NodeId]>),
    Not(NodeId),
    IfThenElse {
        condition: NodeId,
        then: Option<NodeId>,
        otherwise: Option<NodeId>,
    },
    // Objects.
    /// `properties`, `patternProperties` and `additionalProperties`, which only make sense together.
    Properties {
        /// Sorted by name, for binary search.
        named: Box<[(Box<str>, NodeId)]>,
        patterns: Box<[(Pattern, NodeId)]>,
        additional: Option<NodeId>,
    },
    Required(Names),
    PropertyNames(NodeId),
    MinProperties(u64),
    MaxProperties(u64),
    /// `dependentRequired` and the array form of `dependencies`.
    DependentRequired(Box<[(Box<str>, Names)]>),
    /// `dependentSchemas` and the schema form of `dependencies`.
    DependentSchemas(Box<[(Box<str>, NodeId)]>),
    // Arrays.
    /// `prefixItems` / `items` / `additionalItems`: `prefix[i]` applies to item `i`, `rest` to the items after.
    Items {
        prefix: Box<[NodeId]>,
        rest: Option<NodeId>,
    },
    Contains {
        schema: NodeId,
        min: u64,
        max: Option<u64>,
    },
    MinItems(u64),
    MaxItems(u64),
    UniqueItems,
    // Strings.
    MinLength(u64),
    MaxLength(u64),
    Pattern(Pattern),
    // Numbers.
    Bound(Bound, Number),
    MultipleOf(Number),
}

/// Which drafts' reading of the version-dependent keywords applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    /// Drafts 4, 6 and 7: `$ref` overrides its siblings, `items` may be an array with `additionalItems`,
    /// `dependencies`, no `prefixItems`/`dependentRequired`/`dependentSchemas`/`minContains`.
    Draft7,
    /// 2019-09 and 2020-12 (the default when `$schema` is absent, as MCP says).
    Modern,
}

fn dialect_of(root: &Value) -> Dialect {
    match root.get("$schema").and_then(Value::as_str) {
        Some(uri)
            if ["draft-04", "draft-06", "draft-07"]
                .iter()
                .any(|d| uri.contains(d)) =>
        {
            Dialect::Draft7
        }
        _ => Dialect::Modern,
    }
}

/// Compile `root` into a [`Tree`] (its size already checked against the limits, so that the recursion here,
/// one level per level of nesting as written, is bounded).
pub(crate) fn compile(root: &Value) -> Result<Tree, SchemaError> {
    let dialect = dialect_of(root);
    let mut compiler = Compiler {
        root,
        dialect,
        root_id: root
            .get("$id")
            .and_then(Value::as_str)
            .map(|id| id.trim_end_matches('#')),
        document: Document::scan(root, dialect == Dialect::Draft7),
        targets: HashMap::new(),
        nodes: Vec::new(),
        in_place: Vec::new(),
        queued: Vec::new(),
    };
    let root_node = compiler.reserve(String::new());
    compiler.fill(root_node, root, &mut String::new())?;
    compiler.drain(0)?;
    compiler.reject_cycles()?;
    let mut applied = vec![0u8; compiler.nodes.len()];
    for &target in compiler.in_place.iter().flatten() {
        applied[target] = applied[target].saturating_add(1);
    }
    Ok(Tree {
        nodes: compiler.nodes,
        root: root_node,
        shared: applied.into_iter().map(|n| n > 1).collect(),
    })
}

struct Compiler<'s> {
    root: &'s Value,
    dialect: Dialect,
    /// The root's `$id` without a trailing `#`: a `$ref` naming it refers to this document.
    root_id: Option<&'s str>,
    /// The root resource's anchors and the embedded resources.
    document: Document,
    /// JSON pointers already compiled as `$ref` targets → their node.
    targets: HashMap<String, NodeId>,
    nodes: Vec<Node>,
    /// For each node, the nodes that apply to the same instance (no descent into a property or item): a cycle
    /// through these edges would never terminate, so it is a schema error.
    in_place: Vec<Vec<NodeId>>,
    /// `$ref` targets reserved but not compiled yet: compiled by [`compile`]'s loop rather than where they are
    /// referred to, so that a chain of references does not recurse once per link.
    queued: Vec<(NodeId, &'s Value, String)>,
}

/// The pointer as the error shows it: `#` plus the pointer.
fn at(pointer: &str) -> String {
    format!("#{pointer}")
}

fn error(pointer: &str, keyword: &str, reason: impl Into<String>) -> SchemaError {
    SchemaError {
        keyword: keyword.to_owned(),
        pointer: at(pointer),
        reason: reason.into(),
        limit: None,
    }
}

/// What a malformed value is, for "expected X, found Y".
fn kind(value: &Value) -> String {
    super::value::cut(format!("{} {value}", super::value::type_name(value)))
}

impl<'s> Compiler<'s> {
    fn reserve(&mut self, target_pointer: String) -> NodeId {
        let id = self.nodes.len();
        self.nodes.push(Node::Pending);
        self.in_place.push(Vec::new());
        if !target_pointer.is_empty() || id == 0 {
            self.targets.insert(target_pointer, id);
        }
        id
    }

    /// Compile the schema at `pointer` into a new node.
    fn subschema(&mut self, value: &'s Value, pointer: &mut String) -> Result<NodeId, SchemaError> {
        let id = self.nodes.len();
        self.nodes.push(Node::Pending);
        self.in_place.push(Vec::new());
        self.fill(id, value, pointer)?;
        Ok(id)
    }

    /// Compile the schema at `pointer/key` (and, for array keywords, `pointer/key/index`).
    fn child(
        &mut self,
        value: &'s Value,
        pointer: &mut String,
        key: &str,
    ) -> Result<NodeId, SchemaError> {
        let len = pointer.len();
        push_segment(pointer, key);
        let id = self.subschema(value, pointer);
        pointer.truncate(len);
        id
    }

    fn fill(
        &mut self,
        id: NodeId,
        value: &'s Value,
        pointer: &mut String,
    ) -> Result<(), SchemaError> {
        let node = match value {
            Value::Bool(true) => Node::Any,
            Value::Bool(false) => Node::Nothing,
            Value::Object(map) => {
                let checks = self.checks(id, map, pointer)?;
                if checks.is_empty() {
                    Node::Any
                } else {
                    Node::Checks(checks.into_boxed_slice())
                }
            }
            other => {
                return Err(SchemaError {
                    keyword: String::new(),
                    pointer: at(pointer),
                    reason: format!(
                        "a schema must be an object or a boolean, found {}",
                        kind(other)
                    ),
                    limit: None,
                })
            }
        };
        self.nodes[id] = node;
        Ok(())
    }

    fn checks(
        &mut self,
        id: NodeId,
        map: &'s Map<String, Value>,
        pointer: &mut String,
    ) -> Result<Vec<Check>, SchemaError> {
        let mut checks = Vec::new();
        self.definitions(map, pointer)?;
        if let Some(reference) = map.get("$ref") {
            let target = self.reference(reference, pointer, "$ref")?;
            self.in_place[id].push(target);
            checks.push(Check::Ref(target));
            if self.dialect == Dialect::Draft7 {
                // Before 2019-09 a `$ref` replaces every keyword beside it.
                return Ok(checks);
            }
        }
        if let Some(reference) = map.get("$dynamicRef").or_else(|| map.get("$recursiveRef")) {
            // References inside embedded resources are refused (see `document`), so the document is one
            // resource here, whose dynamic scope holds only itself: a dynamic reference resolves like `$ref`.
            let keyword = if map.contains_key("$dynamicRef") {
                "$dynamicRef"
            } else {
                "$recursiveRef"
            };
            let target = self.reference(reference, pointer, keyword)?;
            self.in_place[id].push(target);
            checks.push(Check::Ref(target));
        }
        if let Some(types) = map.get("type") {
            checks.push(Check::Type(parse_types(types, pointer)?));
        }
        if let Some(values) = map.get("enum") {
            let Value::Array(values) = values else {
                return Err(error(
                    pointer,
                    "enum",
                    format!("expected an array, found {}", kind(values)),
                ));
            };
            checks.push(Check::Enum(values.clone().into_boxed_slice()));
        }
        if let Some(value) = map.get("const") {
            checks.push(Check::Const(value.clone()));
        }
        for (keyword, make) in [
            ("allOf", Check::AllOf as fn(Box<[NodeId]>) -> Check),
            ("anyOf", Check::AnyOf),
            ("oneOf", Check::OneOf),
        ] {
            if let Some(list) = map.get(keyword) {
                let ids = self.schema_array(list, pointer, keyword)?;
                self.in_place[id].extend(ids.iter().copied());
                checks.push(make(ids));
            }
        }
        if let Some(schema) = map.get("not") {
            let not = self.child(schema, pointer, "not")?;
            self.in_place[id].push(not);
            checks.push(Check::Not(not));
        }
        if let Some(condition) = map.get("if") {
            let condition = self.child(condition, pointer, "if")?;
            let then = map
                .get("then")
                .map(|s| self.child(s, pointer, "then"))
                .transpose()?;
            let otherwise = map
                .get("else")
                .map(|s| self.child(s, pointer, "else"))
                .transpose()?;
            self.in_place[id].extend([Some(condition), then, otherwise].into_iter().flatten());
            checks.push(Check::IfThenElse {
                condition,
                then,
                otherwise,
            });
        }
        self.object_checks(id, map, pointer, &mut checks)?;
        self.array_checks(map, pointer, &mut checks)?;
        string_checks(map, pointer, &mut checks)?;
        number_checks(map, pointer, &mut checks)?;
        Ok(checks)
    }

    fn object_checks(
        &mut self,
        id: NodeId,
        map: &'s Map<String, Value>,
        pointer: &mut String,
        checks: &mut Vec<Check>,
    ) -> Result<(), SchemaError> {
        let named = match map.get("properties") {
            Some(properties) => self.schema_map(properties, pointer, "properties")?,
            None => Vec::new(),
        };
        let mut patterns = Vec::new();
        if let Some(pattern_properties) = map.get("patternProperties") {
            let Value::Object(entries) = pattern_properties else {
                return Err(error(
                    pointer,
                    "patternProperties",
                    format!("expected an object, found {}", kind(pattern_properties)),
                ));
            };
            let len = pointer.len();
            push_segment(pointer, "patternProperties");
            for (source, schema) in entries {
                let pattern = compile_pattern(source, pointer, "patternProperties")?;
                let node = self.child(schema, pointer, source)?;
                patterns.push((pattern, node));
            }
            pointer.truncate(len);
        }
        let additional = map
            .get("additionalProperties")
            .map(|schema| self.child(schema, pointer, "additionalProperties"))
            .transpose()?;
        let unevaluated = self.unevaluated(map, pointer, "unevaluatedProperties")?;
        // Beside `additionalProperties` every property is evaluated, so `unevaluatedProperties` has nothing left.
        let additional = additional.or(unevaluated);
        if !named.is_empty() || !patterns.is_empty() || additional.is_some() {
            let mut named = named;
            named.sort_by(|a, b| a.0.cmp(&b.0));
            checks.push(Check::Properties {
                named: named.into_boxed_slice(),
                patterns: patterns.into_boxed_slice(),
                additional,
            });
        }
        if let Some(required) = map.get("required") {
            checks.push(Check::Required(string_array(
                required, pointer, "required",
            )?));
        }
        if let Some(names) = map.get("propertyNames") {
            checks.push(Check::PropertyNames(self.child(
                names,
                pointer,
                "propertyNames",
            )?));
        }
        if let Some(n) = count(map, pointer, "minProperties")? {
            checks.push(Check::MinProperties(n));
        }
        if let Some(n) = count(map, pointer, "maxProperties")? {
            checks.push(Check::MaxProperties(n));
        }
        let mut dependent_required = Vec::new();
        let mut dependent_schemas = Vec::new();
        if let Some(dependencies) = map.get("dependencies") {
            // Draft 7's keyword, kept in every dialect: schemas in the wild still use it.
            let entries = object(dependencies, pointer, "dependencies")?;
            let len = pointer.len();
            push_segment(pointer, "dependencies");
            for (name, dependency) in entries {
                if dependency.is_array() {
                    let names = string_array(dependency, pointer, name)?;
                    dependent_required.push((Box::from(name.as_str()), names));
                } else {
                    let node = self.child(dependency, pointer, name)?;
                    dependent_schemas.push((Box::from(name.as_str()), node));
                }
            }
            pointer.truncate(len);
        }
        if self.dialect == Dialect::Modern {
            if let Some(dependencies) = map.get("dependentRequired") {
                let entries = object(dependencies, pointer, "dependentRequired")?;
                let len = pointer.len();
                push_segment(pointer, "dependentRequired");
                for (name, names) in entries {
                    let names = string_array(names, pointer, name)?;
                    dependent_required.push((Box::from(name.as_str()), names));
                }
                pointer.truncate(len);
            }
            if let Some(dependencies) = map.get("dependentSchemas") {
                for (name, node) in self.schema_map(dependencies, pointer, "dependentSchemas")? {
                    dependent_schemas.push((name, node));
                }
            }
        }
        if !dependent_required.is_empty() {
            checks.push(Check::DependentRequired(
                dependent_required.into_boxed_slice(),
            ));
        }
        if !dependent_schemas.is_empty() {
            self.in_place[id].extend(dependent_schemas.iter().map(|(_, node)| *node));
            checks.push(Check::DependentSchemas(
                dependent_schemas.into_boxed_slice(),
            ));
        }
        Ok(())
    }

    fn array_checks(
        &mut self,
        map: &'s Map<String, Value>,
        pointer: &mut String,
        checks: &mut Vec<Check>,
    ) -> Result<(), SchemaError> {
        let mut prefix: Vec<NodeId> = Vec::new();
        let mut rest = None;
        match map.get("items") {
            // The array form (drafts up to 2019-09, accepted everywhere): a schema per position, then
            // `additionalItems` for the items after.
            Some(items @ Value::Array(_)) => {
                prefix = self.schema_array(items, pointer, "items")?.into_vec();
                rest = map
                    .get("additionalItems")
                    .map(|schema| self.child(schema, pointer, "additionalItems"))
                    .transpose()?;
            }
            Some(items) => {
                if self.dialect == Dialect::Modern {
                    if let Some(prefix_items) = map.get("prefixItems") {
                        prefix = self
                            .schema_array(prefix_items, pointer, "prefixItems")?
                            .into_vec();
                    }
                }
                rest = Some(self.child(items, pointer, "items")?);
            }
            None => {
                if self.dialect == Dialect::Modern {
                    if let Some(prefix_items) = map.get("prefixItems") {
                        prefix = self
                            .schema_array(prefix_items, pointer, "prefixItems")?
                            .into_vec();
                    }
                }
            }
        }
        let unevaluated = self.unevaluated(map, pointer, "unevaluatedItems")?;
        // Beside a schema for the items after the prefix every item is evaluated.
        let rest = rest.or(unevaluated);
        if !prefix.is_empty() || rest.is_some() {
            checks.push(Check::Items {
                prefix: prefix.into_boxed_slice(),
                rest,
            });
        }
        if let Some(contains) = map.get("contains") {
            let schema = self.child(contains, pointer, "contains")?;
            let (mut min, mut max) = (1, None);
            if self.dialect == Dialect::Modern {
                if let Some(n) = count(map, pointer, "minContains")? {
                    min = n;
                }
                max = count(map, pointer, "maxContains")?;
            }
            checks.push(Check::Contains { schema, min, max });
        }
        if let Some(n) = count(map, pointer, "minItems")? {
            checks.push(Check::MinItems(n));
        }
        if let Some(n) = count(map, pointer, "maxItems")? {
            checks.push(Check::MaxItems(n));
        }
        if let Some(unique) = map.get("uniqueItems") {
            match unique {
                Value::Bool(true) => checks.push(Check::UniqueItems),
                Value::Bool(false) => {}
                other => {
                    return Err(error(
                        pointer,
                        "uniqueItems",
                        format!("expected a boolean, found {}", kind(other)),
                    ))
                }
            }
        }
        Ok(())
    }

    /// `unevaluatedProperties` / `unevaluatedItems` (2019-09 on; unknown keywords in draft 7): the schema for the
    /// properties or items no other keyword evaluated. Which those are depends on what the in-place applicators
    /// beside it evaluated for this instance, which this validator does not track; without such an applicator
    /// the set is known when compiling (what `properties`/`patternProperties`, or `prefixItems`/`items`, leave)
    /// and the keyword is the same as `additionalProperties`, or `items` after the prefix. So it is compiled
    /// there, ignored when it is `true` or `{}` (it asserts nothing), and refused anywhere else, so a schema
    /// never silently accepts more than it says.
    fn unevaluated(
        &mut self,
        map: &'s Map<String, Value>,
        pointer: &mut String,
        keyword: &str,
    ) -> Result<Option<NodeId>, SchemaError> {
        if self.dialect == Dialect::Draft7 {
            return Ok(None);
        }
        let Some(schema) = map.get(keyword) else {
            return Ok(None);
        };
        let node = self.child(schema, pointer, keyword)?;
        if matches!(self.nodes[node], Node::Any) {
            return Ok(None);
        }
        const IN_PLACE: [&str; 9] = [
            "allOf",
            "anyOf",
            "oneOf",
            "if",
            "$ref",
            "$dynamicRef",
            "$recursiveRef",
            "dependentSchemas",
            "dependencies",
        ];
        let items_only = if keyword == "unevaluatedItems" {
            &["contains"][..]
        } else {
            &[]
        };
        if let Some(beside) = IN_PLACE
            .iter()
            .chain(items_only)
            .find(|k| map.contains_key(**k))
        {
            let what = if keyword == "unevaluatedItems" {
                "items"
            } else {
                "properties"
            };
            return Err(error(
                pointer,
                keyword,
                format!(
                    "not supported beside `{beside}`: which {what} that evaluates is only known while \
                     validating, and this validator does not track it"
                ),
            ));
        }
        Ok(Some(node))
    }

    /// `[schema, …]` under `pointer/keyword`.
    fn schema_array(
        &mut self,
        list: &'s Value,
        pointer: &mut String,
        keyword: &str,
    ) -> Result<Box<[NodeId]>, SchemaError> {
        let Value::Array(items) = list else {
            return Err(error(
                pointer,
                keyword,
                format!("expected an array of schemas, found {}", kind(list)),
            ));
        };
        if items.is_empty() && matches!(keyword, "allOf" | "anyOf" | "oneOf") {
            return Err(error(
                pointer,
                keyword,
                "expected at least one schema, found an empty array",
            ));
        }
        let len = pointer.len();
        push_segment(pointer, keyword);
        let mut ids = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            ids.push(self.child(item, pointer, &index.to_string())?);
        }
        pointer.truncate(len);
        Ok(ids.into_boxed_slice())
    }

    /// `{name: schema, …}` under `pointer/keyword`.
    fn schema_map(
        &mut self,
        value: &'s Value,
        pointer: &mut String,
        keyword: &str,
    ) -> Result<Vec<(Box<str>, NodeId)>, SchemaError> {
        let entries = object(value, pointer, keyword)?;
        let len = pointer.len();
        push_segment(pointer, keyword);
        let mut named = Vec::with_capacity(entries.len());
        for (name, schema) in entries {
            named.push((Box::from(name.as_str()), self.child(schema, pointer, name)?));
        }
        pointer.truncate(len);
        Ok(named)
    }

    /// Resolve a local reference to the node of its target, compiling the target the first time.
    fn reference(
        &mut self,
        reference: &'s Value,
        pointer: &str,
        keyword: &str,
    ) -> Result<NodeId, SchemaError> {
        let Some(text) = reference.as_str() else {
            return Err(error(
                pointer,
                keyword,
                format!("expected a string, found {}", kind(reference)),
            ));
        };
        if let Some((at_pointer, id)) = self.document.resource_around(pointer) {
            return Err(error(
                pointer,
                keyword,
                format!(
                    "`{text}` is inside the schema resource `{id}` (the `$id` at {}): references are resolved \
                     against the root's base URI only, so one inside another resource is not supported",
                    at(at_pointer)
                ),
            ));
        }
        let fragment = match text.split_once('#') {
            Some(("", fragment)) => fragment,
            Some((document, fragment)) if Some(document) == self.root_id => fragment,
            None if Some(text) == self.root_id => "",
            _ => {
                return Err(error(
                    pointer,
                    keyword,
                    format!("`{text}` is not a local reference (only `#...` within this schema is resolved)"),
                ))
            }
        };
        let fragment = percent_decode(fragment).ok_or_else(|| {
            error(
                pointer,
                keyword,
                format!("`{text}` has a malformed %-escape"),
            )
        })?;
        let target_pointer = if fragment.is_empty() || fragment.starts_with('/') {
            fragment
        } else {
            match self.document.anchor(&fragment) {
                Ok(Some(declared)) => declared.to_owned(),
                Ok(None) => {
                    return Err(error(
                        pointer,
                        keyword,
                        format!("`{text}`: no schema declares the anchor `{fragment}`"),
                    ))
                }
                Err(declared) => {
                    let places: Vec<String> = declared.iter().map(|p| at(p)).collect();
                    return Err(error(
                        pointer,
                        keyword,
                        format!(
                            "`{text}`: the anchor `{fragment}` is declared more than once ({})",
                            places.join(", ")
                        ),
                    ));
                }
            }
        };
        self.target(target_pointer)?.ok_or_else(|| {
            error(
                pointer,
                keyword,
                format!("`{text}` does not point at anything in this schema"),
            )
        })
    }

    /// The node of the schema at `target_pointer` (compiled the first time it is asked for), or `None` when
    /// nothing is there.
    fn target(&mut self, target_pointer: String) -> Result<Option<NodeId>, SchemaError> {
        if let Some(&id) = self.targets.get(&target_pointer) {
            return Ok(Some(id));
        }
        let Some(target) = resolve_pointer(self.root, &target_pointer) else {
            return Ok(None);
        };
        let id = self.reserve(target_pointer.clone());
        self.queued.push((id, target, target_pointer));
        Ok(Some(id))
    }

    /// Compile the `$ref` targets queued after the first `from`, and the targets they queue, in a loop.
    fn drain(&mut self, from: usize) -> Result<(), SchemaError> {
        while self.queued.len() > from {
            let Some((id, target, mut pointer)) = self.queued.pop() else {
                break;
            };
            self.fill(id, target, &mut pointer)?;
        }
        Ok(())
    }

    /// Compile every schema under `$defs` and `definitions`, referenced or not, so that a malformed one is an
    /// error now rather than never (and before the keywords beside them, so errors come in document order);
    /// `$ref`s to them reuse these nodes. Only what they queue is compiled here, so this recurses where `$defs`
    /// nest, and through `$ref`s only as deep as the schema limits allow.
    fn definitions(
        &mut self,
        map: &'s Map<String, Value>,
        pointer: &str,
    ) -> Result<(), SchemaError> {
        if !map.contains_key("$defs") && !map.contains_key("definitions") {
            return Ok(());
        }
        let queued_before = self.queued.len();
        for keyword in ["$defs", "definitions"] {
            let Some(definitions) = map.get(keyword) else {
                continue;
            };
            for name in object(definitions, pointer, keyword)?.keys() {
                let mut target_pointer = pointer.to_owned();
                push_segment(&mut target_pointer, keyword);
                push_segment(&mut target_pointer, name);
                self.target(target_pointer)?;
            }
        }
        self.drain(queued_before)
    }

    /// A cycle of in-place applicators (`$ref` → `$ref` → …, `allOf: [{$ref: "#"}]` at the root) would recurse
    /// forever on any value: reject it. Recursion through `properties`/`items` is fine and common.
    fn reject_cycles(&self) -> Result<(), SchemaError> {
        const NEW: u8 = 0;
        const OPEN: u8 = 1;
        const DONE: u8 = 2;
        let mut state = vec![NEW; self.nodes.len()];
        for start in 0..self.nodes.len() {
            if state[start] != NEW {
                continue;
            }
            // Iterative DFS: (node, next edge index).
            let mut stack = vec![(start, 0usize)];
            state[start] = OPEN;
            while let Some(&mut (node, ref mut edge)) = stack.last_mut() {
                if let Some(&next) = self.in_place[node].get(*edge) {
                    *edge += 1;
                    match state[next] {
                        NEW => {
                            state[next] = OPEN;
                            stack.push((next, 0));
                        }
                        OPEN => {
                            let pointer = self
                                .targets
                                .iter()
                                .find(|(_, &id)| id == next)
                                .map(|(p, _)| p.as_str())
                                .unwrap_or("");
                            return Err(error(
                                pointer,
                                "$ref",
                                "the schema refers to itself without descending into a property or item, \
                                 so validation would never end",
                            ));
                        }
                        _ => {}
                    }
                } else {
                    state[node] = DONE;
                    stack.pop();
                }
            }
        }
        Ok(())
    }
}

fn object<'s>(
    value: &'s Value,
    pointer: &str,
    keyword: &str,
) -> Result<&'s Map<String, Value>, SchemaError> {
    value.as_object().ok_or_else(|| {
        error(
            pointer,
            keyword,
            format!("expected an object, found {}", kind(value)),
        )
    })
}

fn parse_types(value: &Value, pointer: &str) -> Result<Types, SchemaError> {
    let one = |name: &Value| -> Result<u8, SchemaError> {
        let bit = name.as_str().and_then(|name| {
            Types::NAMES
                .iter()
                .find(|(known, _)| *known == name)
                .map(|(_, bit)| *bit)
        });
        bit.ok_or_else(|| {
            error(
                pointer,
                "type",
                format!(
                    "expected one of \"null\", \"boolean\", \"integer\", \"number\", \"string\", \"array\", \
                     \"object\" (or an array of them), found {}",
                    kind(name)
                ),
            )
        })
    };
    match value {
        Value::Array(names) => names
            .iter()
            .try_fold(0u8, |set, name| Ok(set | one(name)?))
            .map(Types),
        name => one(name).map(Types),
    }
}

fn string_array(
    value: &Value,
    pointer: &str,
    keyword: &str,
) -> Result<Box<[Box<str>]>, SchemaError> {
    let fail = || {
        error(
            pointer,
            keyword,
            format!("expected an array of strings, found {}", kind(value)),
        )
    };
    let Value::Array(items) = value else {
        return Err(fail());
    };
    items
        .iter()
        .map(|item| item.as_str().map(Box::from).ok_or_else(fail))
        .collect()
}

/// A non-negative integer keyword (`minLength`, `maxItems`, …); `2.0` counts as 2.
fn count(
    map: &Map<String, Value>,
    pointer: &str,
    keyword: &str,
) -> Result<Option<u64>, SchemaError> {
    let Some(value) = map.get(keyword) else {
        return Ok(None);
    };
    let n = match value {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| *f >= 0.0 && f.fract() == 0.0)
                .map(|f| {
                    if f >= u64::MAX as f64 {
                        u64::MAX
                    } else {
                        f as u64
                    }
                })
        }),
        _ => None,
    };
    n.map(Some).ok_or_else(|| {
        error(
            pointer,
            keyword,
            format!("expected a non-negative integer, found {}", kind(value)),
        )
    })
}

fn compile_pattern(source: &str, pointer: &str, keyword: &str) -> Result<Pattern, SchemaError> {
    match Regex::new(source) {
        Ok(regex) => Ok(Pattern {
            regex,
            source: Box::from(source),
        }),
        Err(e) => Err(error(
            pointer,
            keyword,
            format!("`{source}` is not a supported regular expression: {e}"),
        )),
    }
}

fn string_checks(
    map: &Map<String, Value>,
    pointer: &str,
    checks: &mut Vec<Check>,
) -> Result<(), SchemaError> {
    if let Some(n) = count(map, pointer, "minLength")? {
        checks.push(Check::MinLength(n));
    }
    if let Some(n) = count(map, pointer, "maxLength")? {
        checks.push(Check::MaxLength(n));
    }
    if let Some(pattern) = map.get("pattern") {
        let Some(source) = pattern.as_str() else {
            return Err(error(
                pointer,
                "pattern",
                format!("expected a string, found {}", kind(pattern)),
            ));
        };
        checks.push(Check::Pattern(compile_pattern(source, pointer, "pattern")?));
    }
    // `format` is an annotation (the 2020-12 default): it is not asserted.
    Ok(())
}

fn number_checks(
    map: &Map<String, Value>,
    pointer: &str,
    checks: &mut Vec<Check>,
) -> Result<(), SchemaError> {
    let number = |keyword: &str| -> Result<Option<&Number>, SchemaError> {
        match map.get(keyword) {
            None => Ok(None),
            Some(Value::Number(n)) => Ok(Some(n)),
            Some(other) => Err(error(
                pointer,
                keyword,
                format!("expected a number, found {}", kind(other)),
            )),
        }
    };
    // Draft 4: `exclusiveMinimum: true` makes `minimum` exclusive; later drafts: a number of its own.
    let exclusive = |keyword: &str| -> Result<(bool, Option<&Number>), SchemaError> {
        match map.get(keyword) {
            Some(Value::Bool(flag)) => Ok((*flag, None)),
            _ => Ok((false, number(keyword)?)),
        }
    };
    let (min_exclusive, exclusive_min) = exclusive("exclusiveMinimum")?;
    let (max_exclusive, exclusive_max) = exclusive("exclusiveMaximum")?;
    if let Some(limit) = number("minimum")? {
        let bound = if min_exclusive {
            Bound::ExclusiveMinimum
        } else {
            Bound::Minimum
        };
        checks.push(Check::Bound(bound, limit.clone()));
    }
    if let Some(limit) = exclusive_min {
        checks.push(Check::Bound(Bound::ExclusiveMinimum, limit.clone()));
    }
    if let Some(limit) = number("maximum")? {
        let bound = if max_exclusive {
            Bound::ExclusiveMaximum
        } else {
            Bound::Maximum
        };
        checks.push(Check::Bound(bound, limit.clone()));
    }
    if let Some(limit) = exclusive_max {
        checks.push(Check::Bound(Bound::ExclusiveMaximum, limit.clone()));
    }
    if let Some(divisor) = number("multipleOf")? {
        let zero = Number::from(0);
        if compare_numbers(divisor, &zero).is_le() {
            return Err(error(
                pointer,
                "multipleOf",
                format!("expected a number greater than 0, found {divisor}"),
            ));
        }
        checks.push(Check::MultipleOf(divisor.clone()));
    }
    Ok(())
}
