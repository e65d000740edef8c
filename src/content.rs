//! Message content beyond text: a sequence of [`Part`]s (text, image, audio, file, provider-specific).
//!
//! [`Content`] holding one part keeps it inline, so a text-only message is one `String` allocation, as before
//! parts existed; serde writes such a content as a plain JSON string, so stored conversations and their
//! content hashes do not change for text.
//!
//! Binary data ([`Blob`]) is held as [`bytes::Bytes`] and shared between clones; its base64 form, which every
//! provider's JSON needs, is computed at most once per blob and shared too, so a tool loop's later rounds do not
//! re-encode an image they resend.
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
use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use bytes::Bytes;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;

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

/// Binary data with its media type; clones share the bytes and their base64 form.
#[derive(Clone)]
pub struct Blob {
    bytes: Bytes,
    media_type: Arc<str>,
    base64: Arc<OnceLock<String>>,
}

impl Blob {
    /// Bytes of the given media type.
    pub fn new(bytes: impl Into<Bytes>, media_type: impl Into<String>) -> Self {
        Blob {
            bytes: bytes.into(),
            media_type: Arc::from(media_type.into()),
            base64: Arc::default(),
        }
    }

    /// Decode base64 text (standard alphabet, padded or not), keeping the text as the blob's base64 form when
    /// it is already canonical, so it is not encoded again.
    pub fn from_base64(text: &str, media_type: impl Into<String>) -> Result<Self, InvalidMedia> {
        let bytes = decode_base64(text)?;
        let blob = Blob::new(bytes, media_type);
        if text.len() == base64::encoded_len(blob.len(), true).unwrap_or(0) {
            let _ = blob.base64.set(text.to_owned());
        }
        Ok(blob)
    }

    /// Decode a `data:<media type>;base64,<data>` URL.
    pub fn from_data_url(url: &str) -> Result<Self, InvalidMedia> {
        let data = DataUrl::parse(url)?;
        Blob::from_base64(data.base64, data.media_type)
    }

    /// As [`from_data_url`](Self::from_data_url), taking the URL: when its base64 is canonical, the URL's own
    /// buffer becomes the blob's base64 form (its `data:` prefix cut off in place), so a request's media is not
    /// held twice as base64 (once in the parsed request, once beside the bytes).
    pub fn from_data_url_string(url: String) -> Result<Self, InvalidMedia> {
        let data = DataUrl::parse(&url)?;
        let prefix = url.len() - data.base64.len();
        let bytes = decode_base64(data.base64)?;
        let blob = Blob::new(bytes, data.media_type);
        if data.base64.len() == base64::encoded_len(blob.len(), true).unwrap_or(0) {
            let mut text = url;
            text.drain(..prefix);
            let _ = blob.base64.set(text);
        }
        Ok(blob)
    }

    /// As [`from_base64`](Self::from_base64), taking the text: canonical text becomes the blob's base64 form as
    /// it is, without a copy.
    pub fn from_base64_string(
        text: String,
        media_type: impl Into<String>,
    ) -> Result<Self, InvalidMedia> {
        let blob = Blob::new(decode_base64(&text)?, media_type);
        if text.len() == base64::encoded_len(blob.len(), true).unwrap_or(0) {
            let _ = blob.base64.set(text);
        }
        Ok(blob)
    }

    /// The bytes as a `data:` URL for an upstream's JSON, written there straight from the shared base64 form:
    /// no `String` of the whole URL is made (see [`MediaUrl`]).
    pub fn data_url(&self) -> MediaUrl<'_> {
        MediaUrl::Data(self)
    }

    /// The bytes.
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The media type.
    pub fn media_type(&self) -> &str {
        &self.media_type
    }

    /// The number of bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The bytes in standard base64, encoded on first use and shared by every clone.
    pub fn base64(&self) -> &str {
        self.base64
            .get_or_init(|| base64::engine::general_purpose::STANDARD.encode(&self.bytes))
    }

    /// A `data:` URL of the bytes.
    pub fn to_data_url(&self) -> String {
        let base64 = self.base64();
        let mut url = String::with_capacity(base64.len() + self.media_type.len() + 13);
        url.push_str("data:");
        url.push_str(&self.media_type);
        url.push_str(";base64,");
        url.push_str(base64);
        url
    }
}

/// Standard base64, padded or not.
fn decode_base64(text: &str) -> Result<Vec<u8>, InvalidMedia> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(text))
        .map_err(|error| InvalidMedia(format!("invalid base64 data: {error}")))
}

/// A media URL as an upstream's JSON carries it: a URL as it is, or a blob as a `data:` URL. Serialised (or
/// displayed) piece by piece, the blob's base64 straight from its shared form: a multi-megabyte image costs no
/// `String` of its URL on top of the request body it is written into.
#[derive(Clone, Copy, Debug)]
pub enum MediaUrl<'a> {
    /// A URL, as it is.
    Url(&'a str),
    /// A blob, as `data:<media type>;base64,<data>`.
    Data(&'a Blob),
}

impl fmt::Display for MediaUrl<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MediaUrl::Url(url) => f.write_str(url),
            MediaUrl::Data(blob) => {
                f.write_str("data:")?;
                f.write_str(blob.media_type())?;
                f.write_str(";base64,")?;
                f.write_str(blob.base64())
            }
        }
    }
}

impl Serialize for MediaUrl<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            MediaUrl::Url(url) => serializer.serialize_str(url),
            MediaUrl::Data(_) => serializer.collect_str(self),
        }
    }
}

impl PartialEq for Blob {
    fn eq(&self, other: &Self) -> bool {
        self.media_type == other.media_type && self.bytes == other.bytes
    }
}

impl fmt::Debug for Blob {
    /// The media type and size only: bytes never reach logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Blob({}, {} bytes)", self.media_type, self.bytes.len())
    }
}

impl Serialize for Blob {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("media_type", self.media_type())?;
        map.serialize_entry("data", self.base64())?;
        map.end()
    }
}

impl<'de> Deserialize<'de> for Blob {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire<'a> {
            media_type: String,
            #[serde(borrow)]
            data: Cow<'a, str>,
        }
        let wire = Wire::deserialize(deserializer)?;
        Blob::from_base64(&wire.data, wire.media_type).map_err(de::Error::custom)
    }
}

/// Media that could not be read: bad base64, a malformed `data:` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidMedia(pub String);

impl fmt::Display for InvalidMedia {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidMedia {}

/// The pieces of a base64 `data:` URL, borrowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataUrl<'a> {
    /// The media type (`image/png`).
    pub media_type: &'a str,
    /// The base64 text after the comma.
    pub base64: &'a str,
}

impl<'a> DataUrl<'a> {
    /// Split `data:<media type>[;params];base64,<data>`; other URLs and non-base64 data URLs are refused.
    pub fn parse(url: &'a str) -> Result<Self, InvalidMedia> {
        let rest = url
            .strip_prefix("data:")
            .ok_or_else(|| InvalidMedia("not a data: URL".into()))?;
        let (header, base64) = rest
            .split_once(',')
            .ok_or_else(|| InvalidMedia("a data: URL without a comma".into()))?;
        let media_type = header
            .strip_suffix(";base64")
            .ok_or_else(|| InvalidMedia("only base64 data: URLs are supported".into()))?;
        let media_type = media_type.split(';').next().unwrap_or_default();
        if media_type.is_empty() || !media_type.contains('/') {
            return Err(InvalidMedia(format!(
                "a data: URL needs a media type, got {media_type:?}"
            )));
        }
        Ok(DataUrl { media_type, base64 })
    }
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
    fn a_taken_data_url_becomes_the_blobs_base64_and_is_written_back_without_a_url_string() {
        let url = "data:image/png;base64,iVBORw==".to_owned();
        let start = url.as_ptr();
        let blob = Blob::from_data_url_string(url).unwrap();
        assert_eq!(blob.bytes().as_ref(), [0x89, b'P', b'N', b'G']);
        assert_eq!(blob.base64(), "iVBORw==");
        assert_eq!(
            blob.base64().as_ptr(),
            start,
            "the URL's own buffer, not a copy"
        );
        assert_eq!(
            serde_json::to_string(&blob.data_url()).unwrap(),
            r#""data:image/png;base64,iVBORw==""#
        );
        assert_eq!(blob.data_url().to_string(), blob.to_data_url());
        // Unpadded text decodes too; the base64 form is then made canonical on first use.
        let blob = Blob::from_base64_string("iVBORw".to_owned(), "image/png").unwrap();
        assert_eq!(blob.base64(), "iVBORw==");
        assert!(Blob::from_data_url_string("data:image/png;base64,***".into()).is_err());
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
    fn a_blob_shares_its_base64_between_clones_and_keeps_canonical_input() {
        let blob = Blob::from_base64("aGVsbG8=", "text/plain").unwrap();
        assert_eq!(blob.bytes().as_ref(), b"hello");
        let clone = blob.clone();
        assert!(std::ptr::eq(blob.base64(), clone.base64()));
        assert_eq!(clone.to_data_url(), "data:text/plain;base64,aGVsbG8=");
        assert!(format!("{blob:?}").contains("5 bytes"));
    }

    #[test]
    fn data_urls_are_split_and_bad_ones_refused() {
        let blob = Blob::from_data_url("data:image/png;base64,iVBORw==").unwrap();
        assert_eq!(blob.media_type(), "image/png");
        assert_eq!(blob.len(), 4);
        assert!(Blob::from_data_url("https://example.com/a.png").is_err());
        assert!(Blob::from_data_url("data:image/png,rawtext").is_err());
        assert!(Blob::from_data_url("data:;base64,AAAA").is_err());
        assert!(Blob::from_data_url("data:image/png;base64,@@@").is_err());
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
