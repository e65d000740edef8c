//! [`SchemaError`]: a schema that cannot be compiled.

use std::fmt;

use tower_chat::schema_limits::SchemaLimitError;

/// A schema that cannot be compiled: which keyword, where, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaError {
    pub(super) keyword: String,
    pub(super) pointer: String,
    pub(super) reason: String,
    pub(super) limit: Option<SchemaLimitError>,
}

impl SchemaError {
    /// The limit the schema is over, when it was refused for its size rather than for a keyword.
    pub fn limit(&self) -> Option<&SchemaLimitError> {
        self.limit.as_ref()
    }

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
