//! Stored media in the console: how a message's parts appear on the timeline, and the route that serves a
//! part's bytes.
//!
//! Images (PNG, JPEG, GIF and WebP only; never SVG, which is a document that can carry script) up to
//! [`INLINE_IMAGE_BYTES`] are shown as thumbnails: an `<img>` whose source is `/console/media?call=…&message=…&part=…`,
//! capped in size by the stylesheet. Larger images, audio and documents are shown by kind, media type, size and
//! name (escaped like every value of the page), with a link that downloads them.
//!
//! The route reads the part through the call record that holds it
//! ([`tower_chat_persistence::Store::call_message`]: that message's bytes only),
//! behind the same session check as the timeline that links to it: there is no way to ask for bytes by their
//! hash. Raster images are served inline with their media type; anything else is an attachment (a browser
//! saves it instead of rendering it). Every answer carries `nosniff` and a policy that allows nothing to run
//! (`default-src 'none'; sandbox`), so even bytes that claim to be an image cannot become a page.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use tower_chat::{Content, Message, Part};
use tower_chat_persistence::CallId;

use maud::{html, Markup};

use super::extract::PageQuery;
use super::format::url_encode;
use super::highlight::marked;
use super::layout::error_page;
use super::state::ConsoleState;

/// Images larger than this are linked, not shown inline: a timeline of many large images would weigh hundreds
/// of megabytes.
pub(crate) const INLINE_IMAGE_BYTES: usize = 5 * 1024 * 1024;

/// The policy of a media answer: nothing loads, nothing runs, and a document opened anyway is sandboxed.
const MEDIA_POLICY: &str = "default-src 'none'; sandbox";

/// The image types a browser renders as pixels only.
fn is_raster_image(media_type: &str) -> bool {
    let essence = media_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    matches!(
        essence.as_str(),
        "image/png" | "image/jpeg" | "image/gif" | "image/webp"
    )
}

/// Where a message is: the call whose history holds it, and its index in that history (request, then response).
#[derive(Clone, Copy, Debug)]
pub(crate) struct MessageAt<'a> {
    pub(crate) call: &'a str,
    pub(crate) index: usize,
}

impl MessageAt<'_> {
    /// The message's element id on the timeline: `m-<call id>-<index>`.
    pub(crate) fn anchor(&self) -> String {
        format!("m-{}-{}", self.call, self.index)
    }
}

fn file_name(part: &Part) -> Option<&str> {
    match part {
        Part::File(file) => file.name.as_deref(),
        _ => None,
    }
}

/// Text parts as text; images as thumbnails; other media by kind, media type, size and name.
pub(crate) fn content_parts(content: &Content, at: MessageAt<'_>, marks: &[String]) -> Markup {
    if let Some(text) = content.as_text() {
        return html! { pre class="content" { (marked(text, marks)) } };
    }
    html! {
        @for (index, part) in content.parts().iter().enumerate() {
            @if let Part::Text(text) = part {
                pre class="content" { (marked(&text.text, marks)) }
            } @else {
                (media_part(part, index, at))
            }
        }
    }
}

/// One binary part: a thumbnail and a link when its bytes are stored, its label alone when they are not.
fn media_part(part: &Part, index: usize, at: MessageAt<'_>) -> Markup {
    let mut label = format!(
        "{} ({}",
        part.kind(),
        part.media_type().unwrap_or("unknown type")
    );
    if part.media_bytes() > 0 {
        label.push_str(&format!(", {} bytes", part.media_bytes()));
    }
    if let Some(name) = file_name(part) {
        label.push_str(&format!(", {name}"));
    }
    label.push(')');
    let Some(blob) = part.blob().filter(|b| !b.is_empty()) else {
        return html! { p class="media" data-kind=(part.kind()) { (label) } };
    };
    let href = format!(
        "/console/media?call={}&message={}&part={index}",
        url_encode(at.call),
        at.index
    );
    let inline = is_raster_image(blob.media_type()) && blob.len() <= INLINE_IMAGE_BYTES;
    html! {
        p class="media" data-kind=(part.kind()) {
            @if inline {
                img class="thumbnail" src=(href) alt=(label) loading="lazy";
                " "
            }
            a class="media-link" href=(href) { (label) }
        }
    }
}

/// The content of a message that can hold media.
fn content_of(message: &Message) -> Option<&Content> {
    match message {
        Message::System { content } | Message::User { content } => Some(content),
        Message::Tool(tool) => Some(&tool.content),
        Message::Assistant(_) => None,
    }
}

/// A file name safe in a `Content-Disposition` header: ASCII letters, digits, `.`, `-` and `_` only.
fn safe_file_name(name: Option<&str>) -> String {
    let cleaned: String = name
        .unwrap_or("")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .collect();
    let cleaned = cleaned.trim_start_matches('.');
    if cleaned.is_empty() {
        "attachment".to_owned()
    } else {
        cleaned.chars().take(100).collect()
    }
}

/// Which part of which message of which recorded call.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct MediaParams {
    call: Option<String>,
    message: Option<usize>,
    part: Option<usize>,
}

fn not_found() -> Response {
    error_page(StatusCode::NOT_FOUND, "No such media.")
}

/// `GET /console/media?call=…&message=…&part=…`: the bytes of one part of one recorded call's history.
pub(crate) async fn media(
    State(state): State<ConsoleState>,
    PageQuery(params): PageQuery<MediaParams>,
) -> Response {
    let (Some(call), Some(message), Some(part)) = (params.call, params.message, params.part) else {
        return error_page(
            StatusCode::BAD_REQUEST,
            "Which media? (?call=…&message=…&part=…)",
        );
    };
    let Some(records) = &state.records else {
        return error_page(StatusCode::NOT_FOUND, "This gateway keeps no call records.");
    };
    // Only this message's blobs are read, not the whole history's.
    let message = match records.call_message(&CallId::new(call), message).await {
        Ok(Some(message)) => message,
        Ok(None) => return not_found(),
        Err(e) => {
            return error_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("Reading the store failed: {e}"),
            )
        }
    };
    let Some(part) = content_of(&message).and_then(|c| c.parts().get(part)) else {
        return not_found();
    };
    let Some(blob) = part.blob() else {
        return not_found();
    };
    let inline = is_raster_image(blob.media_type());
    let content_type = HeaderValue::from_str(blob.media_type())
        .ok()
        .filter(|_| inline || !blob.media_type().is_empty())
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    let disposition = if inline {
        HeaderValue::from_static("inline")
    } else {
        HeaderValue::from_str(&format!(
            "attachment; filename=\"{}\"",
            safe_file_name(file_name(part))
        ))
        .unwrap_or(HeaderValue::from_static("attachment"))
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_DISPOSITION, disposition),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
            (
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static(MEDIA_POLICY),
            ),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("private, no-store"),
            ),
        ],
        blob.bytes().clone(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_raster_images_are_inline() {
        for inline in [
            "image/png",
            "image/jpeg",
            "IMAGE/PNG",
            "image/webp; q=1",
            "image/gif",
        ] {
            assert!(is_raster_image(inline), "{inline}");
        }
        for attachment in [
            "image/svg+xml",
            "text/html",
            "application/pdf",
            "image/",
            "",
        ] {
            assert!(!is_raster_image(attachment), "{attachment}");
        }
    }

    #[test]
    fn file_names_in_headers_keep_only_safe_characters() {
        assert_eq!(safe_file_name(Some("report.pdf")), "report.pdf");
        assert_eq!(
            safe_file_name(Some("a\"; filename=x.html\r\n<script>")),
            "afilenamex.htmlscript"
        );
        assert_eq!(safe_file_name(Some("../..")), "attachment");
        assert_eq!(safe_file_name(None), "attachment");
    }
}
