//! Azure's content filter results as a typed error detail: which categories (hate, sexual, violence, self_harm,
//! jailbreak, protected material, custom blocklists, …) filtered a prompt or a completion, with their severity.

use std::fmt;

use serde_json::Value;

use crate::error::{ChatError, ErrorKind};

/// Where the filter stopped the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterStage {
    /// The prompt was refused (HTTP 400, `error.code == "content_filter"`): nothing was generated.
    Prompt,
    /// The completion was cut (`finish_reason: "content_filter"`): what streamed before it was delivered.
    Completion,
}

/// One category of Azure's content filter result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterCategory {
    /// The category as Azure names it (`hate`, `sexual`, `violence`, `self_harm`, `jailbreak`,
    /// `protected_material_text`, `custom_blocklists`, …).
    pub name: String,
    /// Whether this category filtered the content.
    pub filtered: bool,
    /// The severity (`safe`, `low`, `medium`, `high`) of the harm categories.
    pub severity: Option<String>,
    /// Whether it was detected, for the detection categories (jailbreak, protected material, profanity).
    pub detected: Option<bool>,
}

/// The typed detail of an error caused by Azure's content filter: the source of the [`ChatError`] (of kind
/// [`ErrorKind::InvalidRequest`]: the same content is refused again). Find it with [`ContentFiltered::of`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContentFiltered {
    /// Prompt or completion.
    pub stage: FilterStage,
    /// Every category Azure reported, filtered or not, in its order.
    pub categories: Vec<FilterCategory>,
}

impl ContentFiltered {
    /// The content filter detail of `error`, if the content filter caused it.
    pub fn of(error: &ChatError) -> Option<&ContentFiltered> {
        std::error::Error::source(error)?.downcast_ref()
    }

    /// The categories that filtered the content.
    pub fn filtered(&self) -> impl Iterator<Item = &FilterCategory> {
        self.categories.iter().filter(|c| c.filtered)
    }

    /// Reads a `content_filter_result(s)` object: every member that has a boolean `filtered`.
    pub(crate) fn from_results(stage: FilterStage, results: &Value) -> Self {
        let categories = results
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(name, value)| {
                let filtered = value.get("filtered")?.as_bool()?;
                Some(FilterCategory {
                    name: name.clone(),
                    filtered,
                    severity: value
                        .get("severity")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    detected: value.get("detected").and_then(Value::as_bool),
                })
            })
            .collect();
        ContentFiltered { stage, categories }
    }

    /// The prompt filter's detail of an error body: `{"error": {"code": "content_filter", "innererror":
    /// {"content_filter_result": {…}}}}`.
    pub(crate) fn from_error_body(body: &[u8]) -> Option<Self> {
        let value: Value = serde_json::from_slice(body).ok()?;
        let error = value.get("error")?;
        if error.get("code").and_then(Value::as_str) != Some("content_filter") {
            return None;
        }
        let results = error
            .get("innererror")
            .and_then(|inner| inner.get("content_filter_result"))
            .unwrap_or(&Value::Null);
        Some(ContentFiltered::from_results(FilterStage::Prompt, results))
    }

    /// The error a filtered completion ends with.
    pub(crate) fn into_error(self) -> ChatError {
        let names: Vec<&str> = self.filtered().map(|c| c.name.as_str()).collect();
        let message = if names.is_empty() {
            "Azure's content filter cut the completion".to_owned()
        } else {
            format!(
                "Azure's content filter cut the completion ({})",
                names.join(", ")
            )
        };
        ChatError::new(ErrorKind::InvalidRequest, message).with_source(self)
    }
}

impl fmt::Display for ContentFiltered {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stage = match self.stage {
            FilterStage::Prompt => "prompt",
            FilterStage::Completion => "completion",
        };
        write!(f, "{stage} filtered by")?;
        let mut any = false;
        for category in self.filtered() {
            write!(f, " {}", category.name)?;
            if let Some(severity) = &category.severity {
                write!(f, " ({severity})")?;
            }
            any = true;
        }
        if !any {
            f.write_str(" an unnamed category")?;
        }
        Ok(())
    }
}

impl std::error::Error for ContentFiltered {}
