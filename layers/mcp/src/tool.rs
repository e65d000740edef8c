//! An MCP server's tool as a tool of the loop, and how a `tools/call` result becomes the tool's result.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, ResourceContents};
use serde_json::Value;
use tower_chat::{AudioPart, Blob, FilePart, ImagePart, MediaSource, Part, ToolSpec};
use tower_chat_function_invocation::{Tool, ToolContext, ToolError, ToolHints, ToolOutput};

use crate::running::StopOnDrop;
use crate::server::Server;

/// One tool of one server, under the name the model sees.
pub(crate) struct McpTool {
    pub(crate) server: Arc<Server>,
    pub(crate) remote_name: String,
    pub(crate) spec: ToolSpec,
    pub(crate) hints: ToolHints,
    pub(crate) requires_approval: bool,
    pub(crate) timeout: Option<Duration>,
    /// Keeps the servers up while a request holds this tool, after the hub may be gone; tells a call after
    /// [`McpTools::shutdown`](crate::McpTools::shutdown) not to start.
    running: Arc<StopOnDrop>,
}

impl McpTool {
    pub(crate) fn new(
        server: Arc<Server>,
        running: Arc<StopOnDrop>,
        tool: &rmcp::model::Tool,
        exposed: String,
    ) -> Self {
        let remote_name = tool.name.to_string();
        let annotations = tool.annotations.as_ref();
        let hints = ToolHints {
            read_only: annotations.and_then(|a| a.read_only_hint),
            destructive: annotations.and_then(|a| a.destructive_hint),
            idempotent: annotations.and_then(|a| a.idempotent_hint),
            open_world: annotations.and_then(|a| a.open_world_hint),
            source: Some(server.name().to_owned()),
            source_name: Some(remote_name.clone()),
        };
        let requires_approval = server.config.policy.requires_approval(&remote_name, &hints);
        let spec = ToolSpec::new(
            exposed,
            tool.description.as_deref().unwrap_or_default(),
            Value::Object((*tool.input_schema).clone()),
        );
        McpTool {
            timeout: server.config.timeout,
            server,
            remote_name,
            spec,
            hints,
            requires_approval,
            running,
        }
    }
}

impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        self.spec.clone()
    }

    fn requires_approval(&self) -> bool {
        self.requires_approval
    }

    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    fn hints(&self) -> ToolHints {
        self.hints.clone()
    }

    fn call(
        &self,
        arguments: Value,
        _context: ToolContext,
    ) -> BoxFuture<'static, Result<ToolOutput, ToolError>> {
        let server = self.server.clone();
        let remote = self.remote_name.clone();
        // The connections close a moment after a shutdown (their tasks see it asynchronously): a call in that
        // window must not reach the server.
        let shut_down = self.running.is_stopped();
        Box::pin(async move {
            if shut_down {
                return Err(ToolError::new(format!(
                    "MCP server `{}` was shut down",
                    server.name()
                )));
            }
            let arguments = match arguments {
                Value::Object(map) => map,
                Value::Null => serde_json::Map::new(),
                other => {
                    return Err(ToolError::invalid_arguments(format!(
                        "MCP tools take a JSON object, got {other}"
                    )))
                }
            };
            let peer = server.peer().map_err(ToolError::new)?;
            // Dropping this future (timeout, dropped stream, cancelled request) makes rmcp send
            // `notifications/cancelled` for the request and stop waiting.
            let result = peer
                .call_tool(CallToolRequestParams::new(remote).with_arguments(arguments))
                .await
                .map_err(|e| {
                    ToolError::new(format!(
                        "MCP server `{}` failed the call: {e}",
                        server.name()
                    ))
                    .with_source(e)
                })?;
            tool_result(result)
        })
    }
}

/// Map a `tools/call` result to the loop's result.
///
/// - Text blocks are text parts (a result of text only is one text, its blocks joined with newlines).
/// - `structuredContent` is appended as compact JSON, unless a text block already holds the same JSON value (the
///   spec asks servers to mirror it in a text block for older clients); alone, it is the whole result.
/// - Image and audio blocks are image and audio parts (their base64 decoded once); an embedded resource is its
///   text, or its bytes as an image or file part by its MIME type; a resource link is a line naming its URI.
///   Base64 that does not decode is an error result naming the block.
/// - `isError: true` makes it an error result with the text.
pub(crate) fn tool_result(result: CallToolResult) -> Result<ToolOutput, ToolError> {
    let mut parts: Vec<Part> = Vec::with_capacity(result.content.len() + 1);
    let blob = |data: &str, mime: &str, what: &str| {
        Blob::from_base64(data, mime).map_err(|e| {
            ToolError::new(format!(
                "the MCP tool returned {what} that is not base64: {e}"
            ))
        })
    };
    for block in &result.content {
        let part = match block {
            ContentBlock::Text(text) => Part::text(text.text.clone()),
            ContentBlock::Image(image) => Part::from(ImagePart {
                source: MediaSource::Data(blob(&image.data, &image.mime_type, "an image")?),
                detail: None,
                cache: None,
            }),
            ContentBlock::Audio(audio) => Part::from(AudioPart {
                data: blob(&audio.data, &audio.mime_type, "audio")?,
            }),
            ContentBlock::Resource(resource) => match &resource.resource {
                ResourceContents::TextResourceContents { text, .. } => Part::text(text.clone()),
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob: data,
                    ..
                } => {
                    let mime = mime_type.as_deref().unwrap_or("application/octet-stream");
                    let data = blob(data, mime, "a resource")?;
                    if mime.starts_with("image/") {
                        Part::from(ImagePart {
                            source: MediaSource::Data(data),
                            detail: None,
                            cache: None,
                        })
                    } else {
                        Part::from(FilePart {
                            source: MediaSource::Data(data),
                            media_type: None,
                            name: Some(uri.clone()),
                            cache: None,
                        })
                    }
                }
                _ => Part::text("[resource]"),
            },
            ContentBlock::ResourceLink(link) => {
                Part::text(format!("[resource link: {}]", link.uri))
            }
            _ => Part::text("[unsupported content]"),
        };
        parts.push(part);
    }
    if let Some(structured) = &result.structured_content {
        let mirrored = result.content.iter().any(|block| {
            block
                .as_text()
                .and_then(|t| serde_json::from_str::<Value>(&t.text).ok())
                .is_some_and(|v| &v == structured)
        });
        if !mirrored {
            parts.push(Part::text(structured.to_string()));
        }
    }
    // Text only (the usual case): one text, as the loop and every provider take it most simply.
    if parts.iter().all(|part| matches!(part, Part::Text(_))) {
        let text = ToolOutput::from_parts(parts).joined_text().into_owned();
        return if result.is_error == Some(true) {
            Err(ToolError::new(if text.is_empty() {
                "the MCP tool reported an error".to_owned()
            } else {
                text
            }))
        } else {
            Ok(ToolOutput::from(text))
        };
    }
    if result.is_error == Some(true) {
        let text = ToolOutput::from_parts(parts).joined_text().into_owned();
        return Err(ToolError::new(if text.is_empty() {
            "the MCP tool reported an error".to_owned()
        } else {
            text
        }));
    }
    Ok(ToolOutput::from_parts(parts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_structured_and_error_results() {
        let text = CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
        assert_eq!(tool_result(text).unwrap(), "a\nb");

        let structured = CallToolResult::structured(json!({"sum": 3}));
        assert_eq!(tool_result(structured).unwrap(), r#"{"sum":3}"#);

        let mut both = CallToolResult::success(vec![ContentBlock::text("the sum is 3")]);
        both.structured_content = Some(json!({"sum": 3}));
        assert_eq!(tool_result(both).unwrap(), "the sum is 3\n{\"sum\":3}");

        let error = CallToolResult::error(vec![ContentBlock::text("no such file")]);
        let error = tool_result(error).unwrap_err();
        assert_eq!(error.message(), "no such file");
        assert!(!error.is_invalid_arguments());
    }

    #[test]
    fn images_audio_and_resources_are_parts() {
        let result = CallToolResult::success(vec![
            ContentBlock::text("a chart and its data"),
            ContentBlock::image("aGVsbG8=", "image/png"),
            ContentBlock::audio("AAEC", "audio/wav"),
            ContentBlock::resource(ResourceContents::BlobResourceContents {
                uri: "file:///report.pdf".into(),
                mime_type: Some("application/pdf".into()),
                blob: "JVBERg==".into(),
                meta: None,
            }),
            ContentBlock::embedded_text("file:///notes.txt", "the notes"),
        ]);
        let output = tool_result(result).unwrap();
        let parts = output.parts();
        assert_eq!(parts.len(), 5);
        assert_eq!(parts[1].media_type(), Some("image/png"));
        assert_eq!(parts[1].media_bytes(), 5);
        assert_eq!(parts[2].media_type(), Some("audio/wav"));
        assert!(
            matches!(&parts[3], Part::File(file) if file.name.as_deref() == Some("file:///report.pdf"))
        );
        assert_eq!(parts[3].media_type(), Some("application/pdf"));
        assert_eq!(output.joined_text(), "a chart and its data\nthe notes");

        let broken = CallToolResult::success(vec![ContentBlock::image("not base64!", "image/png")]);
        let error = tool_result(broken).unwrap_err();
        assert!(error.message().contains("an image"), "{}", error.message());
    }
}
