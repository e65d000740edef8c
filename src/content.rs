//! Message content beyond text: a sequence of [`Part`]s (text, image, audio, file, provider-specific).
//!
//! [`Content`] holding one part keeps it inline, so a text-only message is one `String` allocation, as before
//! parts existed; serde writes such a content as a plain JSON string, so stored conversations and their
//! content hashes do not change for text.
//!
//! Binary data ([`Blob`]) is held in the form it came in and shared between clones: media from a client's
//! JSON stay base64 (checked, never decoded unless a reader needs the bytes), bytes given in code are encoded at
//! most once, so a tool loop's later rounds do not re-encode an image they resend.
//!
//! ```
//! use tower_chat::{CacheHint, Content, Message, Part, TextPart};
//!
//! let question = Message::user(vec![
//!     Part::text("What does this chart show?"),
//!     Part::image(vec![0x89, b'P', b'N', b'G'], "image/png"),
//!     Part::file(b"%PDF-1.7".to_vec(), "application/pdf", Some("report.pdf".into())),
//! ]);
//! let Message::User { content } = &question else { unreachable!() };
//! assert_eq!(content.parts().len(), 3);
//! assert_eq!(content.media_bytes(), 4 + 8);
//!
//! // A prompt-cache breakpoint (Anthropic `cache_control`) after a long system prompt.
//! let system = Message::system(Content::from_parts(vec![Part::Text(TextPart {
//!     text: "You are a careful analyst.".into(),
//!     cache: Some(CacheHint { ttl: Some("1h".into()) }),
//! })]));
//! // Text-only content stays a JSON string; parts are an array.
//! assert_eq!(serde_json::to_value(Message::user("hi")).unwrap()["content"], "hi");
//! assert!(serde_json::to_value(&system).unwrap()["content"].is_array());
//! ```

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod blob;

pub use blob::{Blob, DataUrl, InvalidMedia, MediaUrl};

/// The content of a system, user or tool message: one or more [`Part`]s.
#[derive(Clone, PartialEq)]
pub struct Content(Repr);

#[derive(Clone, PartialEq)]
enum Repr {
    One(Part),
    Many(Vec<Part>),
}

impl Content {
    /// Text only, as one part.
    pub fn text(text: impl Into<String>) -> Self {
        Content(Repr::One(Part::text(text)))
    }

    /// Content of these parts, in order.
    pub fn from_parts(mut parts: Vec<Part>) -> Self {
        if parts.len() == 1 {
            return Content(Repr::One(parts.pop().expect("one part")));
        }
        Content(Repr::Many(parts))
    }

    /// The parts, in order (one text part for text-only content).
    pub fn parts(&self) -> &[Part] {
        match &self.0 {
            Repr::One(part) => std::slice::from_ref(part),
            Repr::Many(parts) => parts,
        }
    }

    /// The parts, to change in place.
    pub fn parts_mut(&mut self) -> &mut [Part] {
        match &mut self.0 {
            Repr::One(part) => std::slice::from_mut(part),
            Repr::Many(parts) => parts,
        }
    }

    /// The parts, taken.
    pub fn into_parts(self) -> Vec<Part> {
        match self.0 {
            Repr::One(part) => vec![part],
            Repr::Many(parts) => parts,
        }
    }

    /// Add a part at the end.
    pub fn push(&mut self, part: Part) {
        match &mut self.0 {
            Repr::Many(parts) => parts.push(part),
            Repr::One(_) => {
                let Repr::One(first) = std::mem::replace(&mut self.0, Repr::Many(Vec::new()))
                else {
                    unreachable!("matched One above")
                };
                self.0 = Repr::Many(vec![first, part]);
            }
        }
    }

    /// The text when the content is exactly one text part (the common case), borrowed.
    pub fn as_text(&self) -> Option<&str> {
        match &self.0 {
            Repr::One(Part::Text(text)) => Some(&text.text),
            _ => None,
        }
    }

    /// Whether every part is text.
    pub fn is_text_only(&self) -> bool {
        self.parts()
            .iter()
            .all(|part| matches!(part, Part::Text(_)))
    }

    /// The text parts joined by newlines (borrowed when there is one); other parts are left out.
    pub fn joined_text(&self) -> Cow<'_, str> {
        if let Some(text) = self.as_text() {
            return Cow::Borrowed(text);
        }
        let mut joined = String::new();
        for part in self.parts() {
            if let Part::Text(text) = part {
                if !joined.is_empty() {
                    joined.push('\n');
                }
                joined.push_str(&text.text);
            }
        }
        Cow::Owned(joined)
    }

    /// Whether there is nothing: no part, or one empty text.
    pub fn is_empty(&self) -> bool {
        match &self.0 {
            Repr::One(Part::Text(text)) => text.text.is_empty(),
            Repr::One(_) => false,
            Repr::Many(parts) => parts.is_empty(),
        }
    }

    /// The size of the content: UTF-8 bytes of text and URLs, plus the bytes of media and provider parts' JSON
    /// text (what a size limit or a size record counts).
    pub fn size(&self) -> usize {
        self.parts()
            .iter()
            .map(|part| match part {
                Part::Text(text) => text.text.len(),
                Part::Image(image) => image.source.size(),
                Part::File(file) => file.source.size(),
                Part::Audio(audio) => audio.data.len(),
                Part::Provider(raw) => raw.value.to_string().len(),
            })
            .sum()
    }

    /// Bytes of binary data the parts hold (images, audio, files), not counting URLs and text.
    pub fn media_bytes(&self) -> usize {
        self.parts().iter().map(Part::media_bytes).sum()
    }
}

impl Default for Content {
    fn default() -> Self {
        Content::text(String::new())
    }
}

impl From<String> for Content {
    fn from(text: String) -> Self {
        Content::text(text)
    }
}

impl From<&String> for Content {
    fn from(text: &String) -> Self {
        Content::text(text.as_str())
    }
}

impl From<Box<str>> for Content {
    fn from(text: Box<str>) -> Self {
        Content::text(String::from(text))
    }
}

impl From<Part> for Content {
    fn from(part: Part) -> Self {
        Content(Repr::One(part))
    }
}

impl From<&str> for Content {
    fn from(text: &str) -> Self {
        Content::text(text)
    }
}

impl From<Vec<Part>> for Content {
    fn from(parts: Vec<Part>) -> Self {
        Content::from_parts(parts)
    }
}

impl PartialEq<str> for Content {
    fn eq(&self, other: &str) -> bool {
        self.as_text() == Some(other)
    }
}

impl PartialEq<&str> for Content {
    fn eq(&self, other: &&str) -> bool {
        self.as_text() == Some(*other)
    }
}

impl fmt::Debug for Content {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.as_text() {
            Some(text) => fmt::Debug::fmt(text, f),
            None => f.debug_list().entries(self.parts()).finish(),
        }
    }
}

/// The text parts, joined by newlines (media parts are left out).
impl fmt::Display for Content {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.joined_text())
    }
}

impl Serialize for Content {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Repr::One(Part::Text(TextPart { text, cache: None })) => serializer.serialize_str(text),
            _ => {
                let parts = self.parts();
                let mut seq = serializer.serialize_seq(Some(parts.len()))?;
                for part in parts {
                    seq.serialize_element(part)?;
                }
                seq.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ContentVisitor;
        impl<'de> Visitor<'de> for ContentVisitor {
            type Value = Content;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an array of content parts")
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Content, E> {
                Ok(Content::text(text))
            }
            fn visit_string<E: de::Error>(self, text: String) -> Result<Content, E> {
                Ok(Content::text(text))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content, A::Error> {
                let mut parts = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
                while let Some(part) = seq.next_element()? {
                    parts.push(part);
                }
                Ok(Content::from_parts(parts))
            }
        }
        deserializer.deserialize_any(ContentVisitor)
    }
}

/// One part of a message's content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Part {
    /// Text.
    Text(TextPart),
    /// An image, by URL or as bytes.
    Image(Box<ImagePart>),
    /// Audio as bytes.
    Audio(Box<AudioPart>),
    /// A document or other file: bytes, a URL or a provider's file id.
    File(Box<FilePart>),
    /// Something an inbound format carried that no layer understands, kept for the provider it came from.
    Provider(Box<ProviderPart>),
}

impl Part {
    /// The binary data the part holds itself: an image's, audio's or file's bytes (`None` for a URL, a file id
    /// or a part without media).
    pub fn blob(&self) -> Option<&Blob> {
        let source = match self {
            Part::Image(image) => &image.source,
            Part::File(file) => &file.source,
            Part::Audio(audio) => return Some(&audio.data),
            _ => return None,
        };
        match source {
            MediaSource::Data(blob) => Some(blob),
            _ => None,
        }
    }

    /// As [`blob`](Self::blob), to change it in place.
    pub fn blob_mut(&mut self) -> Option<&mut Blob> {
        let source = match self {
            Part::Image(image) => &mut image.source,
            Part::File(file) => &mut file.source,
            Part::Audio(audio) => return Some(&mut audio.data),
            _ => return None,
        };
        match source {
            MediaSource::Data(blob) => Some(blob),
            _ => None,
        }
    }

    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Part::Text(TextPart {
            text: text.into(),
            cache: None,
        })
    }

    /// An image part from a URL (an `https:` URL or a `data:` URL, passed to the provider as it is).
    pub fn image_url(url: impl Into<String>) -> Self {
        Part::from(ImagePart {
            source: MediaSource::Url { url: url.into() },
            detail: None,
            cache: None,
        })
    }

    /// An image part from its bytes and media type (`image/png`, `image/jpeg`, `image/gif`, `image/webp`).
    pub fn image(data: impl Into<Bytes>, media_type: impl Into<String>) -> Self {
        Part::from(ImagePart {
            source: MediaSource::Data(Blob::new(data, media_type)),
            detail: None,
            cache: None,
        })
    }

    /// An audio part from its bytes and media type (`audio/wav`, `audio/mpeg`).
    pub fn audio(data: impl Into<Bytes>, media_type: impl Into<String>) -> Self {
        Part::from(AudioPart {
            data: Blob::new(data, media_type),
        })
    }

    /// A document from its bytes and media type (`application/pdf`, `text/plain`), with an optional file name.
    pub fn file(
        data: impl Into<Bytes>,
        media_type: impl Into<String>,
        name: Option<String>,
    ) -> Self {
        Part::from(FilePart {
            source: MediaSource::Data(Blob::new(data, media_type)),
            media_type: None,
            name,
            cache: None,
        })
    }

    /// The part's kind, as errors and logs name it (`text`, `image`, `audio`, `file`, `provider`).
    pub fn kind(&self) -> &'static str {
        match self {
            Part::Text(_) => "text",
            Part::Image(_) => "image",
            Part::Audio(_) => "audio",
            Part::File(_) => "file",
            Part::Provider(_) => "provider",
        }
    }

    /// Bytes of binary data held (0 for text, URLs, file ids and provider parts).
    pub fn media_bytes(&self) -> usize {
        match self {
            Part::Image(image) => image.source.media_bytes(),
            Part::Audio(audio) => audio.data.len(),
            Part::File(file) => file.source.media_bytes(),
            Part::Text(_) | Part::Provider(_) => 0,
        }
    }

    /// The part's media type, where known.
    pub fn media_type(&self) -> Option<&str> {
        match self {
            Part::Text(_) => Some("text/plain"),
            Part::Image(image) => image.source.media_type(),
            Part::Audio(audio) => Some(audio.data.media_type()),
            Part::File(file) => file.media_type(),
            Part::Provider(_) => None,
        }
    }

    /// Where the part's cache hint goes, for parts that can carry one (text, image, file).
    pub fn cache_slot(&mut self) -> Option<&mut Option<CacheHint>> {
        match self {
            Part::Text(part) => Some(&mut part.cache),
            Part::Image(part) => Some(&mut part.cache),
            Part::File(part) => Some(&mut part.cache),
            Part::Audio(_) | Part::Provider(_) => None,
        }
    }

    /// The cache hint set on the part, for parts that can carry one.
    pub fn cache(&self) -> Option<&CacheHint> {
        match self {
            Part::Text(part) => part.cache.as_ref(),
            Part::Image(part) => part.cache.as_ref(),
            Part::File(part) => part.cache.as_ref(),
            Part::Audio(_) | Part::Provider(_) => None,
        }
    }
}

macro_rules! part_from {
    ($($variant:ident($part:ty)),* $(,)?) => {$(
        impl From<$part> for Part {
            fn from(part: $part) -> Self {
                Part::$variant(part.into())
            }
        }
    )*};
}

// Media parts are boxed so that a text part, the common case, keeps `Part` (and every message) small: a history
// is cloned for each round of the tool loop. `Part::from(ImagePart { .. })` hides the box.
part_from!(
    Text(TextPart),
    Image(ImagePart),
    Audio(AudioPart),
    File(FilePart),
    Provider(ProviderPart),
);

/// A text part.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TextPart {
    /// The text.
    pub text: String,
    /// A prompt-cache breakpoint after this part (Anthropic `cache_control`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheHint>,
}

/// An image part.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImagePart {
    /// Where the image is.
    pub source: MediaSource,
    /// OpenAI's `detail` (how many tiles the model sees).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<ImageDetail>,
    /// A prompt-cache breakpoint after this part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheHint>,
}

/// OpenAI's image `detail`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageDetail {
    /// The provider decides.
    Auto,
    /// One low-resolution tile.
    Low,
    /// Full resolution, tiled.
    High,
    /// The image as sent, not downscaled (Responses API). Formats without it get `high`.
    Original,
}

impl ImageDetail {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageDetail::Auto => "auto",
            ImageDetail::Low => "low",
            ImageDetail::High => "high",
            ImageDetail::Original => "original",
        }
    }
}

/// An audio part.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AudioPart {
    /// The audio bytes and their media type.
    pub data: Blob,
}

impl AudioPart {
    /// The format name OpenAI's `input_audio` takes (`wav`, `mp3`, ...), from the media type.
    pub fn format(&self) -> &str {
        let media_type = self.data.media_type();
        let subtype = media_type.rsplit('/').next().unwrap_or(media_type);
        match subtype {
            "mpeg" | "mp3" => "mp3",
            "wav" | "x-wav" | "wave" => "wav",
            other => other,
        }
    }
}

/// A document or other file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FilePart {
    /// Where the file is.
    pub source: MediaSource,
    /// The media type when the source does not carry one (a URL or a file id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The file's name, where the client gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A prompt-cache breakpoint after this part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CacheHint>,
}

impl FilePart {
    /// The file's media type: the bytes' own, else the one given beside a URL or file id.
    pub fn media_type(&self) -> Option<&str> {
        self.source.media_type().or(self.media_type.as_deref())
    }
}

/// Where an image or file is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MediaSource {
    /// A URL the provider fetches (an `https:` URL or a `data:` URL). The gateway never fetches it.
    Url {
        /// The URL.
        url: String,
    },
    /// The bytes.
    Data(Blob),
    /// A file uploaded to the provider beforehand, by its id.
    FileId {
        /// The provider's file id.
        id: String,
    },
}

impl MediaSource {
    /// The media type of the bytes, or of a `data:` URL.
    pub fn media_type(&self) -> Option<&str> {
        match self {
            MediaSource::Data(blob) => Some(blob.media_type()),
            MediaSource::Url { url } => DataUrl::parse(url).ok().map(|data| data.media_type),
            MediaSource::FileId { .. } => None,
        }
    }

    /// Bytes of binary data held (0 for a URL or a file id).
    pub fn media_bytes(&self) -> usize {
        match self {
            MediaSource::Data(blob) => blob.len(),
            MediaSource::Url { .. } | MediaSource::FileId { .. } => 0,
        }
    }

    /// The size a size limit counts: the bytes, or the URL's or file id's UTF-8 length.
    pub fn size(&self) -> usize {
        match self {
            MediaSource::Url { url } => url.len(),
            MediaSource::Data(blob) => blob.len(),
            MediaSource::FileId { id } => id.len(),
        }
    }
}

/// A prompt-cache breakpoint (Anthropic's `cache_control: {"type": "ephemeral", "ttl": ...}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheHint {
    /// How long the cached prefix lives (`5m`, `1h`); the provider's default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
}

/// A part kept for the provider it came from: the provider's name and the part's JSON as it was sent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProviderPart {
    /// The provider family whose wire format the JSON is in (`openai`, `anthropic`).
    pub provider: String,
    /// The part's JSON, unchanged.
    pub value: Value,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_part_is_no_larger_than_a_text_part_and_its_tag() {
        // Media parts are boxed: every history clone and move pays for the largest variant.
        eprintln!(
            "Part {} TextPart {} Content {} Message {}",
            std::mem::size_of::<Part>(),
            std::mem::size_of::<TextPart>(),
            std::mem::size_of::<Content>(),
            std::mem::size_of::<crate::Message>()
        );
        assert!(std::mem::size_of::<Part>() <= std::mem::size_of::<TextPart>() + 8);
        assert!(std::mem::size_of::<Content>() <= std::mem::size_of::<Part>() + 8);
    }

    #[test]
    fn text_content_is_one_part_and_serializes_as_a_string() {
        let content = Content::text("hi");
        assert_eq!(content.parts().len(), 1);
        assert_eq!(content.as_text(), Some("hi"));
        assert_eq!(serde_json::to_value(&content).unwrap(), json!("hi"));
        let back: Content = serde_json::from_value(json!("hi")).unwrap();
        assert_eq!(back, content);
    }

    #[test]
    fn parts_round_trip_through_serde_with_their_bytes() {
        let mut content = Content::text("what is this?");
        content.push(Part::image(vec![0x89, b'P', b'N', b'G'], "image/png"));
        content.push(Part::file(
            b"%PDF-1.4".to_vec(),
            "application/pdf",
            Some("a.pdf".into()),
        ));
        content.push(Part::audio(vec![1, 2, 3], "audio/wav"));
        content.push(Part::image_url("https://example.com/cat.jpg"));
        let value = serde_json::to_value(&content).unwrap();
        assert_eq!(value[1]["type"], "image");
        assert_eq!(value[1]["source"]["data"]["data"], "iVBORw==");
        let back: Content = serde_json::from_value(value).unwrap();
        assert_eq!(back, content);
        assert_eq!(content.media_bytes(), 4 + 8 + 3);
        assert_eq!(content.joined_text(), "what is this?");
        assert!(!content.is_text_only());
    }

    #[test]
    fn a_cache_hint_on_text_keeps_the_part_form() {
        let content = Content::from_parts(vec![Part::Text(TextPart {
            text: "long system prompt".into(),
            cache: Some(CacheHint {
                ttl: Some("1h".into()),
            }),
        })]);
        let value = serde_json::to_value(&content).unwrap();
        assert_eq!(
            value,
            json!([{"type": "text", "text": "long system prompt", "cache": {"ttl": "1h"}}])
        );
        assert_eq!(serde_json::from_value::<Content>(value).unwrap(), content);
    }

    #[test]
    fn audio_formats_follow_the_media_type() {
        let format = |media: &str| {
            AudioPart {
                data: Blob::new(Vec::<u8>::new(), media),
            }
            .format()
            .to_owned()
        };
        assert_eq!(format("audio/mpeg"), "mp3");
        assert_eq!(format("audio/wav"), "wav");
        assert_eq!(format("audio/flac"), "flac");
    }
}
