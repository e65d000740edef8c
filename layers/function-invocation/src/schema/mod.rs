//! The tool-argument validator: a JSON Schema compiled once per tool into a tree of checks.
//!
//! It covers the vocabulary tool schemas use (what `schemars` derives, what MCP servers and hand-written tools
//! send), in drafts 7 and 2020-12, and refuses the rest when a schema is compiled, so that compiling a schema
//! costs tens of thousands of instructions and the crate builds without a regex engine with Unicode tables, a
//! big-number library or an IDNA/URL stack (see [why not `jsonschema`](#why-not-the-jsonschema-crate)).
//!
//! ```
//! use serde_json::json;
//! use tower_chat_function_invocation::schema::Schema;
//!
//! let schema = Schema::compile(&json!({
//!     "type": "object",
//!     "properties": {
//!         "city": {"type": "string", "minLength": 1},
//!         "days": {"type": "integer", "minimum": 1, "maximum": 14},
//!     },
//!     "required": ["city"],
//!     "additionalProperties": false,
//! }))?;
//! assert!(schema.is_valid(&json!({"city": "Oslo", "days": 3})));
//!
//! let violations = schema.validate(&json!({"city": 7, "days": 30, "unit": "C"})).unwrap_err();
//! let lines: Vec<String> = violations.iter().map(ToString::to_string).collect();
//! assert_eq!(lines, [
//!     "/city: expected string, found integer 7",
//!     "/days: expected a number <= 14, found 30",
//!     "/: property \"unit\" is not allowed",
//! ]);
//!
//! // A malformed schema fails when it is compiled, naming the keyword and where it is.
//! let error = Schema::compile(&json!({"properties": {"n": {"minimum": "3"}}})).unwrap_err();
//! assert_eq!(error.to_string(), "`minimum` at #/properties/n: expected a number, found string \"3\"");
//! # Ok::<(), tower_chat_function_invocation::schema::SchemaError>(())
//! ```
//!
//! ## What is checked
//! - Any value: `type` (a name or an array of names; `integer` is a number without a fractional part, so `1.0`
//!   is one), `enum`, `const` (JSON equality, numbers compared by value: `1` equals `1.0`), `allOf`, `anyOf`,
//!   `oneOf`, `not`, `if`/`then`/`else`, `$ref`.
//! - Objects: `properties`, `required`, `additionalProperties` (boolean or schema), `patternProperties`,
//!   `propertyNames`, `minProperties`/`maxProperties`, `dependentRequired`/`dependentSchemas` (2020-12) and
//!   `dependencies` (draft 7, accepted in every draft), `unevaluatedProperties` (2020-12; where it can be
//!   decided when compiling, see below).
//! - Arrays: `items` (a schema; or, draft-7 style, an array of schemas with `additionalItems`), `prefixItems`
//!   (2020-12), `contains` (with `minContains`/`maxContains` in 2020-12), `minItems`/`maxItems`, `uniqueItems`,
//!   `unevaluatedItems` (as `unevaluatedProperties`).
//! - Strings: `minLength`/`maxLength` in Unicode code points, `pattern` (unanchored search, as the spec says).
//! - Numbers: `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (a number; or draft 4's boolean
//!   beside `minimum`/`maximum`), `multipleOf`. Integers are compared exactly, not through `f64`.
//!
//! ## Drafts
//! A root `$schema` naming draft 4, 6 or 7 selects draft 7's reading: a `$ref` replaces the keywords beside it,
//! and `prefixItems`, `dependentRequired`, `dependentSchemas`, `minContains`, `maxContains` are unknown
//! keywords. Anything else (including no `$schema`, as MCP specifies) reads as 2020-12, where `$ref` applies
//! alongside its siblings.
//!
//! ## References
//! `$ref` resolves within the schema itself: `#`, JSON pointers (`#/$defs/Name`, `#/definitions/Name`,
//! `#/properties/a`, with `~0`/`~1` and `%`-escapes), and anchors (`$anchor`, `$dynamicAnchor`, or draft 7's
//! `"$id": "#name"`). A reference to the root's own `$id` is local too. Recursion through properties or items is
//! fine (a tree of comments); a cycle that never descends into the instance (`{"$ref": "#"}` at the root) is
//! rejected when the schema is compiled. The document is read as one schema resource, whose dynamic scope is
//! itself, so `$dynamicRef`/`$recursiveRef` resolve exactly like `$ref` there.
//!
//! ## Annotations
//! - `format` is an annotation, as the 2020-12 default says: `{"format": "email"}` accepts any string. Tools
//!   that need a checked format validate it in their body (and can answer with
//!   [`ToolError::invalid_arguments`](crate::ToolError::invalid_arguments)).
//! - Unknown keywords are annotations and ignored (`title`, `description`, `default`, `examples`,
//!   `contentMediaType`, vendor extensions, …), as the specification says.
//!
//! ## Not implemented: compile errors, never ignored
//! A schema that needs something this validator does not do fails to compile with a [`SchemaError`] naming the
//! keyword, so it can never accept more than it says:
//! - `unevaluatedProperties` / `unevaluatedItems` beside an in-place applicator (`allOf`, `anyOf`, `oneOf`,
//!   `if`, `$ref`, `$dynamicRef`, `dependentSchemas`; for items also `contains`): what those evaluated is only
//!   known while validating, and it is not tracked. Without one they work (they are then `additionalProperties`,
//!   or `items` after `prefixItems`), and `true` or `{}` is accepted anywhere.
//! - a `$ref` to another document (remote, or relative to an `$id`), and any reference inside an embedded
//!   schema resource (a subschema with an `$id` of its own): base URI changes and dynamic scopes across
//!   resources are not implemented; an anchor declared twice in the document;
//! - a `pattern` `regex-lite` does not accept: look-around, backreferences, `\p{..}` Unicode classes.
//!
//! One difference is not caught: a `$schema` naming a custom meta-schema is read as 2020-12 with every
//! vocabulary (meta-schemas are not fetched, so their `$vocabulary` is unknown).
//!
//! ## Conformance
//! `tests/json_schema_test_suite.rs` runs the official JSON-Schema-Test-Suite (every required keyword file of
//! drafts 7 and 2020-12, vendored in `tests/data/`). Draft 7: 878 of 927 cases pass, 49 are refused at compile
//! (references to other documents or inside embedded resources). 2020-12: 1,070 of 1,299 pass, 228 are refused
//! (118 for `unevaluated*` beside applicators, 105 for references, 5 for `\p{..}` patterns), 1 is wrong (the
//! custom meta-schema above). Each of those is listed with its reason in `tests/data/known_failures.txt`, and
//! the test fails when the list is not exactly what happens.
//!
//! ## Why not the `jsonschema` crate
//! The crate stands on its own validator because `jsonschema` still costs more than the limits this project set
//! for switching to it (a compile ≤ 1 M instructions, the quickstart ≤ 12 MiB RSS and ≤ 90 s first build).
//! Measured 2026-12-02 against `jsonschema` 0.61.2 with default features off (no HTTP or file resolving), by
//! `benches/schema_cost.rs` and the quickstart on a version of this crate validating through it:
//! - Compiling: the first schema in a process costs 4.4–4.6 M instructions (the quickstart's `get_weather`, the
//!   gateway's three tools, a schemars-derived struct with an enum and optional fields), 4.3 M of it spent once
//!   building the 2020-12 meta-schema validator every schema is checked against (the public API cannot skip it;
//!   the build-time meta-validators of its `macros` feature need `jsonschema-macros` 0.61, not published);
//!   later ones 39–251 k. This validator: 19–141 k, first or later.
//! - The quickstart's peak RSS: 10.0 MiB with `jsonschema` compiling its tools (within the limit); 6.3 MiB here.
//! - The quickstart's first build: 395 s of CPU for 128 crates (`regex` with Unicode tables, `fancy-regex`,
//!   `fraction` with `num-bigint`, `referencing`, `fluent-uri`, `uuid-simd`, …), against 208 s for today's 89
//!   on the same loaded machine: ~1.9×, which from the idle figure (58.9 s, 113 s of CPU) is ~110 s, over 90 s.
//!
//! Validating costs the same in both (a valid call 1.1–8.5 k instructions). The differential test
//! (`tests/schema_differential.rs`) keeps the two in agreement on the vocabulary implemented here.

//! ## Limits
//! Before anything is compiled, a schema is measured against [`SchemaLimits`] (the defaults with
//! [`Schema::compile`], yours with [`Schema::compile_with`]): how deep it nests and how many values it holds,
//! as written and with its `$ref`s followed. A schema over a limit is a [`SchemaError`] whose
//! [`limit`](SchemaError::limit) says which, so a 52 KB chain of 1,500 `$ref`s or 2 KB of `allOf` levels that
//! expand 2^27 times costs a linear scan, not a stack or a minute of CPU. Compiling then recurses only as deep as
//! the schema nests as written (`$ref` targets are compiled from a queue), and validating remembers the result
//! of each subschema shared by in-place applicators per value, so it stays linear in the schema's size.
//!
//! ```
//! use serde_json::json;
//! use tower_chat::schema_limits::{SchemaLimit, SchemaLimits};
//! use tower_chat_function_invocation::schema::Schema;
//!
//! let deep = json!({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/c"}, "c": {}},
//!                   "$ref": "#/$defs/a"});
//! let limits = SchemaLimits { max_depth: 3, ..SchemaLimits::default() };
//! let error = Schema::compile_with(&deep, &limits).unwrap_err();
//! assert_eq!(error.limit().map(|l| l.limit()), Some(SchemaLimit::Depth));
//! assert!(Schema::compile(&deep).is_ok());
//! ```

//! ## Errors
//! A malformed or unsupported schema is a [`SchemaError`] from [`Schema::compile`]: a keyword of the wrong type,
//! a regular expression `regex-lite` does not accept, a `$ref` that points nowhere, to another document, or
//! around in a cycle, or one of the cases above. Each names the keyword and the JSON pointer of the schema that
//! holds it. [`CompiledTool::new`](crate::CompiledTool::new) wraps it in an `InvalidRequest` error whose source
//! it is.
//!
//! A value that does not match is a list of [`Violation`]s, each with the instance path (a JSON pointer, `/`
//! for the whole value) and a message for a reader (a model fixing its call): `/city: expected string, found
//! integer 7`. Values in messages are cut at 60 characters.

mod compile;
mod document;
mod error;
mod validate;
mod value;
mod violation;

use serde_json::Value;
pub use tower_chat::schema_limits::{SchemaLimitError, SchemaLimits};

pub use self::error::SchemaError;
pub use self::violation::Violation;

use self::compile::Tree;
use self::validate::Walk;

/// A compiled JSON Schema. Cheap to share behind an `Arc`; validation allocates nothing when the value is
/// valid, unless in-place applicators share a subschema (whose results are then remembered per value).
#[derive(Debug)]
pub struct Schema {
    tree: Tree,
}

impl Schema {
    /// Compile a schema document (an object or a boolean) within the default [`SchemaLimits`].
    pub fn compile(schema: &Value) -> Result<Schema, SchemaError> {
        Schema::compile_with(schema, &SchemaLimits::DEFAULT)
    }

    /// Compile a schema document within `limits`: a schema over them is refused before any keyword is read.
    pub fn compile_with(schema: &Value, limits: &SchemaLimits) -> Result<Schema, SchemaError> {
        limits.check(schema).map_err(|limit| SchemaError {
            keyword: String::new(),
            pointer: "#".to_owned(),
            reason: limit.to_string(),
            limit: Some(limit),
        })?;
        compile::compile(schema).map(|tree| Schema { tree })
    }

    /// Whether `instance` is valid (stops at the first violation).
    pub fn is_valid(&self, instance: &Value) -> bool {
        self.tree
            .check(self.tree.root, instance, &mut Walk::quiet())
    }

    /// Every violation of `instance`, in schema order, or `Ok` when there is none.
    pub fn validate(&self, instance: &Value) -> Result<(), Vec<Violation>> {
        if self.is_valid(instance) {
            return Ok(());
        }
        let mut walk = Walk::collecting();
        self.tree.check(self.tree.root, instance, &mut walk);
        Err(walk.into_violations())
    }
}

#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod tests;
