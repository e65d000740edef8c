//! The content blocks of a Messages request body, shared by the user-turn and assistant-turn encoders.

use serde::Serialize;
use serde_json::Value;

use crate::content::CacheHint;

/// The `input` of a `tool_use` block whose arguments are empty.
pub(super) static EMPTY_INPUT: std::sync::OnceLock<Value> = std::sync::OnceLock::new();

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Block<'a> {
    Text {
        text: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl<'a>>,
    },
    Image {
        source: Source<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl<'a>>,
    },
    Document {
        source: Source<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        title: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        cache_control: Option<CacheControl<'a>>,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: &'a Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: ToolResultContent<'a>,
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        is_error: bool,
    },
    /// A block an Anthropic-format client sent that no layer understands, as it came.
    #[serde(untagged)]
    Raw(&'a Value),
}

#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum ToolResultContent<'a> {
    Text(&'a str),
    Blocks(Vec<Block<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Source<'a> {
    Base64 {
        media_type: &'a str,
        data: &'a str,
    },
    Url {
        url: &'a str,
    },
    Text {
        media_type: &'static str,
        data: &'a str,
    },
    File {
        file_id: &'a str,
    },
}

#[derive(Serialize)]
pub(super) struct CacheControl<'a> {
    r#type: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    ttl: Option<&'a str>,
}

pub(super) fn cache_control(hint: Option<&CacheHint>) -> Option<CacheControl<'_>> {
    hint.map(|hint| CacheControl {
        r#type: "ephemeral",
        ttl: hint.ttl.as_deref(),
    })
}
