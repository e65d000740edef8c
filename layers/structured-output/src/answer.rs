//! [`AnswerSchema`]: the schema an answer must match, compiled once, and the check of one answer.

use std::sync::Arc;

use schemars::JsonSchema;
use serde_json::Value;
use tower_chat::output_schema::cached;
use tower_chat::{ChatError, ErrorKind, ResponseFormat};
use tower_chat_function_invocation::schema::Schema;

/// The cache slot of compiled answer schemas (beside the provider rewrites of the same schema).
const COMPILED: u8 = 100;

/// The schema an answer must match: its name, the schema as written (what answers are validated against, not
/// a provider's rewrite of it) and its compiled validator.
///
/// ```
/// use serde_json::json;
/// use tower_chat_structured_output::AnswerSchema;
///
/// let schema = AnswerSchema::new("city", json!({"type": "object", "properties": {"name": {"type": "string"}},
///                                               "required": ["name"]}))?;
/// assert_eq!(schema.check(r#"{"name": "Oslo"}"#).unwrap(), json!({"name": "Oslo"}));
/// assert_eq!(schema.check(r#"{"name": 7}"#).unwrap_err(), ["/name: expected string, found integer 7"]);
/// assert_eq!(schema.check("Oslo").unwrap_err(), ["not JSON: expected value at line 1 column 1"]);
/// # Ok::<(), tower_chat::ChatError>(())
/// ```
#[derive(Clone, Debug)]
pub struct AnswerSchema {
    name: String,
    schema: Value,
    compiled: Arc<Result<Schema, String>>,
}

impl AnswerSchema {
    /// A schema named `name` (providers show the name to the model). Compiled once per distinct schema in the
    /// process; a schema that does not compile is an [`ErrorKind::InvalidRequest`].
    pub fn new(name: impl Into<String>, schema: Value) -> Result<Self, ChatError> {
        let compiled = cached(&schema, COMPILED, || {
            Schema::compile(&schema).map_err(|e| e.to_string())
        });
        if let Err(reason) = &*compiled {
            return Err(ChatError::new(
                ErrorKind::InvalidRequest,
                format!("the answer schema is not usable: {reason}"),
            ));
        }
        Ok(AnswerSchema {
            name: name.into(),
            schema,
            compiled,
        })
    }

    /// The schema `schemars` derives for `T`, named after the type.
    pub fn of<T: JsonSchema>() -> Result<Self, ChatError> {
        let name: String = T::schema_name()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        AnswerSchema::new(name, schemars::schema_for!(T).to_value())
    }

    /// The schema of a request's `response_format`, if it asks for one.
    pub fn from_format(format: &ResponseFormat) -> Result<Option<Self>, ChatError> {
        match format {
            ResponseFormat::JsonSchema { name, schema, .. } => {
                AnswerSchema::new(name.clone(), schema.clone()).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// The schema's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The schema as written.
    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// The `response_format` asking for it, strictly (each leaf rewrites it for its provider).
    pub fn response_format(&self) -> ResponseFormat {
        ResponseFormat::JsonSchema {
            name: self.name.clone(),
            schema: self.schema.clone(),
            strict: Some(true),
        }
    }

    /// `text` parsed and validated: the value, or what is wrong with it (one line per violation).
    pub fn check(&self, text: &str) -> Result<Value, Vec<String>> {
        let value = parse(text)?;
        let compiled = self.compiled.as_ref().as_ref().expect("checked in new");
        match compiled.validate(&value) {
            Ok(()) => Ok(value),
            Err(violations) => Err(violations.iter().map(ToString::to_string).collect()),
        }
    }
}

/// `text` as JSON, tolerating a Markdown code fence around it (models add one even when told not to).
pub(crate) fn parse(text: &str) -> Result<Value, Vec<String>> {
    let trimmed = text.trim();
    let unfenced = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|rest| rest.strip_suffix("```"))
        .unwrap_or(trimmed);
    serde_json::from_str(unfenced).map_err(|e| vec![format!("not JSON: {e}")])
}
