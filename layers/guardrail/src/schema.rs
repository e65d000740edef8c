//! A JSON Schema for structured answers (feature `schema`), validated by the tool loop's own validator
//! ([`tower_chat_function_invocation::schema::Schema`]): an answer that is not JSON, or does not match, is a
//! finding per violation (its instance path, `/city`; never the value).
//!
//! As a whole-text check it holds a streamed answer back until the answer is complete: a structured answer is
//! read by a program, which needs all of it anyway.

use std::sync::Arc;

use serde_json::Value;
use tower_chat::{ChatError, ErrorKind, GuardrailStage};
use tower_chat_function_invocation::schema::Schema;

use crate::check::{Check, CheckFuture, Finding, TextCheck};

/// A compiled schema as a [`TextCheck`].
#[derive(Clone, Debug)]
pub struct JsonSchemaCheck {
    schema: Arc<Schema>,
}

impl TextCheck for JsonSchemaCheck {
    fn check(&self, text: String, _stage: GuardrailStage) -> CheckFuture {
        let findings = match serde_json::from_str::<Value>(&text) {
            Err(_) => vec![Finding::whole("not_json")],
            Ok(value) => match self.schema.validate(&value) {
                Ok(()) => Vec::new(),
                Err(violations) => violations
                    .iter()
                    .map(|v| Finding::whole(format!("schema:{}", v.instance_path())))
                    .collect(),
            },
        };
        Box::pin(std::future::ready(Ok(findings)))
    }
}

impl Check {
    /// Answers must be JSON matching `schema` (`json_schema`, on the output only); refused when the schema does
    /// not compile.
    pub fn json_schema(schema: &Value) -> Result<Self, ChatError> {
        let schema = Schema::compile(schema).map_err(|e| {
            ChatError::new(
                ErrorKind::InvalidRequest,
                format!("guardrail check `json_schema`: {e}"),
            )
            .with_source(e)
        })?;
        Ok(Check::custom(
            "json_schema",
            JsonSchemaCheck {
                schema: Arc::new(schema),
            },
        )
        .on(&[GuardrailStage::Output]))
    }
}
