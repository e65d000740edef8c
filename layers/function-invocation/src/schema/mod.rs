//! The tool-argument validator: a JSON Schema compiled once per tool into a tree of checks.
//!
//! It covers the vocabulary tool schemas use (what `schemars` derives, what MCP servers and hand-written tools
//! send), in drafts 7 and 2020-12, and nothing else, so that compiling a schema costs a few thousand
//! instructions and the crate builds without a regex engine with Unicode tables, a big-number library or an
//! IDNA/URL stack.
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
//!   `dependencies` (draft 7, accepted in every draft).
//! - Arrays: `items` (a schema; or, draft-7 style, an array of schemas with `additionalItems`), `prefixItems`
//!   (2020-12), `contains` (with `minContains`/`maxContains` in 2020-12), `minItems`/`maxItems`, `uniqueItems`.
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
//! `#/properties/a`, with `~0`/`~1` and `%`-escapes), and anchors (`$anchor`, or draft 7's `"$id": "#name"`).
//! A reference to the root's own `$id` is local too. Recursion through properties or items is fine (a tree of
//! comments); a cycle that never descends into the instance (`{"$ref": "#"}` at the root) is rejected when the
//! schema is compiled. `$dynamicRef`/`$recursiveRef` resolve like `$ref` (no dynamic scopes).
//!
//! ## Annotations and what is not asserted
//! - `format` is an annotation, as the 2020-12 default says: `{"format": "email"}` accepts any string. Tools
//!   that need a checked format validate it in their body (and can answer with
//!   [`ToolError::invalid_arguments`](crate::ToolError::invalid_arguments)).
//! - Unknown keywords are annotations and ignored (`title`, `description`, `default`, `examples`,
//!   `contentMediaType`, vendor extensions, …). So are `unevaluatedProperties` and `unevaluatedItems`, which
//!   this validator does not implement: a schema relying on them accepts more than it says.
//!
//! ## Errors
//! A malformed schema is a [`SchemaError`] from [`Schema::compile`]: a keyword of the wrong type, a regular
//! expression `regex-lite` does not accept (look-around and backreferences are not supported), a `$ref` that
//! points nowhere, to another document, or around in a cycle. Each names the keyword and the JSON pointer of
//! the schema that holds it.
//!
//! A value that does not match is a list of [`Violation`]s, each with the instance path (a JSON pointer, `/`
//! for the whole value) and a message for a reader (a model fixing its call): `/city: expected string, found
//! integer 7`. Values in messages are cut at 60 characters.

mod compile;
mod document;
mod validate;
mod value;

use std::fmt;

use serde_json::Value;

use self::compile::Tree;
use self::validate::Walk;

/// A compiled JSON Schema. Cheap to share behind an `Arc`; validation allocates nothing when the value is
/// valid.
#[derive(Debug)]
pub struct Schema {
    tree: Tree,
}

impl Schema {
    /// Compile a schema document (an object or a boolean).
    pub fn compile(schema: &Value) -> Result<Schema, SchemaError> {
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

/// A schema that cannot be compiled: which keyword, where, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaError {
    keyword: String,
    pointer: String,
    reason: String,
}

impl SchemaError {
    /// The offending keyword (`minimum`, `$ref`, …); empty when the schema itself has the wrong type.
    pub fn keyword(&self) -> &str {
        &self.keyword
    }

    /// Where the schema holding the keyword is, as a URI fragment JSON pointer (`#/properties/city`).
    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    /// What is wrong.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.keyword.is_empty() {
            write!(f, "{}: {}", self.pointer, self.reason)
        } else {
            write!(f, "`{}` at {}: {}", self.keyword, self.pointer, self.reason)
        }
    }
}

impl std::error::Error for SchemaError {}

/// One way a value fails its schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    instance_path: String,
    message: String,
}

impl Violation {
    /// Where in the value, as a JSON pointer (`/items/0/city`; empty for the value itself).
    pub fn instance_path(&self) -> &str {
        &self.instance_path
    }

    /// What is wrong there.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Violation {
    /// `/city: expected string, found integer 7` (`/` for the value itself).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.instance_path.is_empty() {
            "/"
        } else {
            &self.instance_path
        };
        write!(f, "{at}: {}", self.message)
    }
}

#[cfg(test)]
mod tests;
