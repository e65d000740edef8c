//! Content parts as the inbound formats carry them, read into [`tower_chat::Part`]s.
//!
//! Base64 media (`data:` URLs, Anthropic `base64` sources, `input_audio` data) is checked here (a malformed one
//! is a 400) and kept as the base64 text it came in, moved, not copied: an upstream gets that text back, and the
//! bytes are decoded only where something needs them (a plain-text document, the store's copy). URLs are passed on
//! to the upstream as they are: the gateway never fetches them.

use serde::Deserialize;
use serde_json::Value;
use tower_chat::{
    AudioPart, Blob, CacheHint, Content, FilePart, ImageDetail, ImagePart, MediaSource, Part,
    ProviderPart, TextPart,
};

use crate::error::ApiError;
use crate::format::schema;

/// A `data:` URL or an `https:` URL as a media source: a data URL's base64 is checked and kept.
fn url_source(url: String, at: &str) -> Result<MediaSource, ApiError> {
    if url.starts_with("data:") {
        let blob = Blob::from_data_url_string(url).map_err(|e| schema(format!("{at}: {e}")))?;
        return Ok(MediaSource::Data(blob));
    }
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err(schema(format!(
            "{at}: a media URL must be an http(s) URL or a base64 data: URL"
        )));
    }
    Ok(MediaSource::Url { url })
}

/// The text is taken: canonical base64 becomes the blob's base64 form without a copy.
fn base64_blob(data: String, media_type: String, at: &str) -> Result<Blob, ApiError> {
    Blob::from_base64_string(data, media_type).map_err(|e| schema(format!("{at}: {e}")))
}

/// OpenAI's `input_audio` (`data` in base64, `format` `wav` or `mp3`), in Chat Completions and Responses alike.
fn input_audio_part(data: String, format: &str, at: &str) -> Result<Part, ApiError> {
    let media_type = match format {
        "mp3" => "audio/mpeg".to_owned(),
        other => format!("audio/{other}"),
    };
    Ok(Part::from(AudioPart {
        data: base64_blob(data, media_type, at)?,
    }))
}

// ---- OpenAI Chat Completions ----

/// A Chat Completions content part (`text`, `image_url`, `input_audio`, `file`); other types are kept as
/// provider parts for an OpenAI upstream.
pub(crate) fn chat_completions_part(value: Value, at: &str) -> Result<Part, ApiError> {
    #[derive(Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Wire {
        Text { text: String },
        ImageUrl { image_url: ImageUrl },
        InputAudio { input_audio: InputAudio },
        File { file: File },
    }
    #[derive(Deserialize)]
    struct ImageUrl {
        url: String,
        #[serde(default)]
        detail: Option<ImageDetail>,
    }
    #[derive(Deserialize)]
    struct InputAudio {
        data: String,
        format: String,
    }
    #[derive(Deserialize)]
    struct File {
        #[serde(default)]
        file_data: Option<String>,
        #[serde(default)]
        file_id: Option<String>,
        #[serde(default)]
        filename: Option<String>,
    }
    let known = matches!(
        value.get("type").and_then(Value::as_str),
        Some("text" | "image_url" | "input_audio" | "file")
    );
    if !known {
        return Ok(Part::from(ProviderPart {
            provider: "openai".into(),
            value,
        }));
    }
    let wire: Wire = serde_json::from_value(value).map_err(|e| schema(format!("{at}: {e}")))?;
    Ok(match wire {
        Wire::Text { text } => Part::text(text),
        Wire::ImageUrl { image_url } => Part::from(ImagePart {
            source: url_source(image_url.url, at)?,
            detail: image_url.detail,
            cache: None,
        }),
        Wire::InputAudio { input_audio } => {
            input_audio_part(input_audio.data, &input_audio.format, at)?
        }
        Wire::File { file } => {
            let source = match (file.file_data, file.file_id) {
                (Some(data), None) => url_source(data, at)?,
                (None, Some(id)) => MediaSource::FileId { id },
                _ => {
                    return Err(schema(format!(
                        "{at}: a file part needs exactly one of `file_data` and `file_id`"
                    )))
                }
            };
            if matches!(source, MediaSource::Url { .. }) {
                return Err(schema(format!(
                    "{at}: `file_data` must be a base64 data: URL"
                )));
            }
            Part::from(FilePart {
                source,
                media_type: None,
                name: file.filename,
                cache: None,
            })
        }
    })
}

/// A Chat Completions `content`: a string, or an array of parts (text parts only are one text, joined as
/// OpenAI reads them).
pub(crate) fn chat_completions_content(value: Value, at: &str) -> Result<Content, ApiError> {
    match value {
        Value::String(text) => Ok(Content::text(text)),
        Value::Array(items) => {
            let parts: Vec<Part> = items
                .into_iter()
                .enumerate()
                .map(|(j, part)| chat_completions_part(part, &format!("{at}.content[{j}]")))
                .collect::<Result<_, _>>()?;
            Ok(joined_if_text(parts, ""))
        }
        _ => Err(schema(format!(
            "{at}.content: must be a string or a list of content parts"
        ))),
    }
}

/// Parts that are all plain text (no cache hints) as one text joined by `separator`; other parts as they are.
pub(crate) fn joined_if_text(parts: Vec<Part>, separator: &str) -> Content {
    let plain = parts
        .iter()
        .all(|part| matches!(part, Part::Text(TextPart { cache: None, .. })));
    if !plain || parts.len() < 2 {
        return Content::from_parts(parts);
    }
    let mut text = String::new();
    for (i, part) in parts.into_iter().enumerate() {
        if let Part::Text(part) = part {
            if i > 0 {
                text.push_str(separator);
            }
            text.push_str(&part.text);
        }
    }
    Content::text(text)
}

// ---- Anthropic Messages ----

/// An Anthropic `cache_control`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InCacheControl {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    ttl: Option<String>,
}

impl InCacheControl {
    pub(crate) fn hint(self, at: &str) -> Result<CacheHint, ApiError> {
        if self.kind != "ephemeral" {
            return Err(schema(format!(
                "{at}: `cache_control.type` must be `ephemeral`"
            )));
        }
        Ok(CacheHint { ttl: self.ttl })
    }
}

pub(crate) fn cache_hint(
    control: Option<InCacheControl>,
    at: &str,
) -> Result<Option<CacheHint>, ApiError> {
    control.map(|control| control.hint(at)).transpose()
}

/// An Anthropic `image` or `document` source.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum InSource {
    Base64 { media_type: String, data: String },
    Url { url: String },
    Text { media_type: String, data: String },
    File { file_id: String },
}

impl InSource {
    fn into_source(self, at: &str) -> Result<MediaSource, ApiError> {
        Ok(match self {
            InSource::Base64 { media_type, data } => {
                MediaSource::Data(base64_blob(data, media_type, at)?)
            }
            InSource::Url { url } => MediaSource::Url { url },
            InSource::Text { media_type, data } => {
                MediaSource::Data(Blob::new(data.into_bytes(), media_type))
            }
            InSource::File { file_id } => MediaSource::FileId { id: file_id },
        })
    }
}

/// An Anthropic `image` block as a part.
pub(crate) fn anthropic_image(
    source: InSource,
    cache_control: Option<InCacheControl>,
    at: &str,
) -> Result<Part, ApiError> {
    if matches!(source, InSource::Text { .. }) {
        return Err(schema(format!("{at}: an image source cannot be `text`")));
    }
    Ok(Part::from(ImagePart {
        source: source.into_source(at)?,
        detail: None,
        cache: cache_hint(cache_control, at)?,
    }))
}

/// An Anthropic `document` block as a part.
pub(crate) fn anthropic_document(
    source: InSource,
    title: Option<String>,
    cache_control: Option<InCacheControl>,
    at: &str,
) -> Result<Part, ApiError> {
    let media_type = match &source {
        InSource::Url { .. } => Some("application/pdf".to_owned()),
        _ => None,
    };
    Ok(Part::from(FilePart {
        source: source.into_source(at)?,
        media_type,
        name: title,
        cache: cache_hint(cache_control, at)?,
    }))
}

/// An Anthropic `text` block as a part.
pub(crate) fn anthropic_text(
    text: String,
    cache_control: Option<InCacheControl>,
    at: &str,
) -> Result<Part, ApiError> {
    Ok(Part::Text(TextPart {
        text,
        cache: cache_hint(cache_control, at)?,
    }))
}

// ---- OpenAI Responses ----

/// A Responses `prompt_cache_breakpoint`: the end of a reusable prefix, as Anthropic's `cache_control` marks it.
/// Its `ttl` (`30m`, `12h`) has no Anthropic equivalent, so the provider's default applies.
#[derive(Debug, Deserialize)]
struct InBreakpoint {
    mode: String,
}

fn breakpoint_hint(
    breakpoint: Option<InBreakpoint>,
    at: &str,
) -> Result<Option<CacheHint>, ApiError> {
    match breakpoint {
        None => Ok(None),
        Some(InBreakpoint { mode }) if mode == "explicit" => Ok(Some(CacheHint::default())),
        Some(_) => Err(schema(format!(
            "{at}: `prompt_cache_breakpoint.mode` must be `explicit`"
        ))),
    }
}

/// An image `detail`; `original` (full resolution, no downscaling) is the Responses API's.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
enum InDetail {
    Auto,
    Low,
    High,
    Original,
}

impl From<InDetail> for ImageDetail {
    fn from(detail: InDetail) -> Self {
        match detail {
            InDetail::Auto => ImageDetail::Auto,
            InDetail::Low => ImageDetail::Low,
            InDetail::High => ImageDetail::High,
            InDetail::Original => ImageDetail::Original,
        }
    }
}

/// The content part types a Responses message or `function_call_output` may carry.
const RESPONSES_PART_TYPES: &str = "input_text, input_image, input_file, input_audio";

/// A Responses content part: `input_text` (and the `output_text` / `refusal` text of an assistant item),
/// `input_image` (`image_url` as an http(s) or data: URL, or `file_id`; `detail`), `input_file` (`file_data` as
/// a data: URL or plain base64 with a `filename`, `file_url`, or `file_id`) and `input_audio`. Other types are
/// refused by name.
pub(crate) fn responses_part(value: Value, at: &str) -> Result<Part, ApiError> {
    #[derive(Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Wire {
        #[serde(alias = "text")]
        InputText {
            text: String,
            #[serde(default)]
            prompt_cache_breakpoint: Option<InBreakpoint>,
        },
        OutputText {
            text: String,
        },
        Refusal {
            refusal: String,
        },
        InputImage {
            #[serde(default)]
            image_url: Option<String>,
            #[serde(default)]
            file_id: Option<String>,
            #[serde(default)]
            detail: Option<InDetail>,
            #[serde(default)]
            prompt_cache_breakpoint: Option<InBreakpoint>,
        },
        InputFile {
            #[serde(default)]
            file_data: Option<String>,
            #[serde(default)]
            file_url: Option<String>,
            #[serde(default)]
            file_id: Option<String>,
            #[serde(default)]
            filename: Option<String>,
            #[serde(default)]
            prompt_cache_breakpoint: Option<InBreakpoint>,
        },
        InputAudio {
            input_audio: InputAudio,
        },
    }
    #[derive(Deserialize)]
    struct InputAudio {
        data: String,
        format: String,
    }
    match value.get("type").and_then(Value::as_str) {
        Some(
            "input_text" | "text" | "output_text" | "refusal" | "input_image" | "input_file"
            | "input_audio",
        ) => {}
        Some(other) => {
            return Err(schema(format!(
                "{at}: content parts of type `{other}` are not supported ({RESPONSES_PART_TYPES})"
            )))
        }
        None => return Err(schema(format!("{at}: `type` is required"))),
    }
    let wire: Wire = serde_json::from_value(value).map_err(|e| schema(format!("{at}: {e}")))?;
    Ok(match wire {
        Wire::InputText {
            text,
            prompt_cache_breakpoint,
        } => Part::from(TextPart {
            text,
            cache: breakpoint_hint(prompt_cache_breakpoint, at)?,
        }),
        Wire::OutputText { text } | Wire::Refusal { refusal: text } => Part::text(text),
        Wire::InputImage {
            image_url,
            file_id,
            detail,
            prompt_cache_breakpoint,
        } => {
            let source = match (image_url, file_id) {
                (Some(url), None) => url_source(url, at)?,
                (None, Some(id)) => MediaSource::FileId { id },
                _ => {
                    return Err(schema(format!(
                        "{at}: an `input_image` needs exactly one of `image_url` and `file_id`"
                    )))
                }
            };
            Part::from(ImagePart {
                source,
                detail: detail.map(ImageDetail::from),
                cache: breakpoint_hint(prompt_cache_breakpoint, at)?,
            })
        }
        Wire::InputFile {
            file_data,
            file_url,
            file_id,
            filename,
            prompt_cache_breakpoint,
        } => {
            let named_type = filename.as_deref().and_then(media_type_of_name);
            let (source, media_type) = match (file_data, file_url, file_id) {
                (Some(data), None, None) if data.starts_with("data:") => {
                    (url_source(data, at)?, None)
                }
                (Some(data), None, None) => {
                    let media_type = named_type.ok_or_else(|| {
                        schema(format!(
                            "{at}: `file_data` in plain base64 needs a `filename` whose extension names its \
                             type (.pdf, .txt, ...), or a data: URL"
                        ))
                    })?;
                    let blob = base64_blob(data, media_type.to_owned(), at)?;
                    (MediaSource::Data(blob), None)
                }
                (None, Some(url), None) => {
                    if !(url.starts_with("https://") || url.starts_with("http://")) {
                        return Err(schema(format!(
                            "{at}: `file_url` must be an http(s) URL"
                        )));
                    }
                    let media_type = named_type.or_else(|| media_type_of_name(&url));
                    (MediaSource::Url { url }, media_type.map(str::to_owned))
                }
                (None, None, Some(id)) => (MediaSource::FileId { id }, named_type.map(str::to_owned)),
                _ => {
                    return Err(schema(format!(
                        "{at}: an `input_file` needs exactly one of `file_data`, `file_url` and `file_id`"
                    )))
                }
            };
            Part::from(FilePart {
                source,
                media_type,
                name: filename,
                cache: breakpoint_hint(prompt_cache_breakpoint, at)?,
            })
        }
        Wire::InputAudio { input_audio } => {
            input_audio_part(input_audio.data, &input_audio.format, at)?
        }
    })
}

/// The media type a file name's (or URL path's) extension stands for, for the document types the upstreams
/// read.
fn media_type_of_name(name: &str) -> Option<&'static str> {
    let path = name.split(['?', '#']).next().unwrap_or(name);
    let extension = path.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match extension.as_str() {
        "pdf" => "application/pdf",
        "txt" => "text/plain",
        "md" => "text/markdown",
        "csv" => "text/csv",
        "json" => "application/json",
        "html" | "htm" => "text/html",
        _ => return None,
    })
}

/// A Responses message `content` or `function_call_output.output`: a string, or an array of parts (text parts
/// only are one text, joined as OpenAI reads them).
pub(crate) fn responses_content(value: Value, at: &str) -> Result<Content, ApiError> {
    match value {
        Value::String(text) => Ok(Content::text(text)),
        Value::Array(items) => {
            let parts: Vec<Part> = items
                .into_iter()
                .enumerate()
                .map(|(k, part)| responses_part(part, &format!("{at}[{k}]")))
                .collect::<Result<_, _>>()?;
            Ok(joined_if_text(parts, ""))
        }
        _ => Err(schema(format!(
            "{at}: must be a string or a list of content parts"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chat_completions_parts_become_content_parts() {
        let content = chat_completions_content(
            json!([
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw==", "detail": "low"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERg==", "filename": "a.pdf"}},
                {"type": "refusal", "refusal": "no"},
            ]),
            "messages[0]",
        )
        .unwrap();
        let parts = content.parts();
        assert_eq!(parts.len(), 6);
        assert_eq!(parts[1].media_type(), Some("image/png"));
        assert_eq!(parts[1].media_bytes(), 4);
        assert!(
            matches!(&parts[2], Part::Image(image) if matches!(&image.source, MediaSource::Url { url } if url.starts_with("https:")))
        );
        assert_eq!(parts[3].media_type(), Some("audio/wav"));
        assert_eq!(parts[4].media_type(), Some("application/pdf"));
        assert!(matches!(&parts[5], Part::Provider(p) if p.provider == "openai"));
    }

    #[test]
    fn malformed_media_is_refused_with_its_place() {
        let error = chat_completions_content(
            json!([{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}]),
            "messages[2]",
        )
        .unwrap_err();
        assert!(
            error.message.contains("messages[2].content[0]"),
            "{}",
            error.message
        );
        let error = chat_completions_content(
            json!([{"type": "file", "file": {"filename": "a.pdf"}}]),
            "messages[0]",
        )
        .unwrap_err();
        assert!(error.message.contains("file_data"), "{}", error.message);
    }
}
