//! [`Blob`]: binary data held in whichever form it arrived in.
//!
//! Media come in as base64 (every inbound format's JSON) and go out as base64 (every provider's JSON but
//! Bedrock's event stream, whose JSON takes base64 too). A blob made from base64 keeps only the text: it is
//! checked when the blob is made, in pieces decoded into a small stack buffer, so a malformed image is refused
//! before any upstream call without its bytes ever being held, and its decoded length is known from that check.
//! The bytes are decoded on first use of [`Blob::bytes`], once, and shared by every clone; a request whose
//! leaves only write base64 never holds its images twice. A blob made from bytes keeps the bytes and encodes its
//! base64 on first use, shared the same way.

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::{DecodeError, DecodeSliceError, Engine as _};
use bytes::Bytes;
use serde::de::{self, Deserializer};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

/// Base64 characters checked or decoded at a time without a blob's bytes (a multiple of 4).
const PIECE_CHARS: usize = 4096;
/// The bytes of one such piece: the stack buffer they are decoded into.
const PIECE_BYTES: usize = PIECE_CHARS / 4 * 3;

/// Binary data with its media type; clones share the bytes and their base64 form.
#[derive(Clone)]
pub struct Blob {
    media_type: Arc<str>,
    /// The decoded length, known from the start whichever form the blob was made from.
    len: usize,
    forms: Arc<Forms>,
}

/// The two forms of a blob's data: one is set when the blob is made, the other made from it on first use.
#[derive(Default)]
struct Forms {
    bytes: OnceLock<Bytes>,
    /// Canonical standard base64 (padded), so equal bytes have equal text.
    base64: OnceLock<String>,
}

impl Blob {
    /// Bytes of the given media type.
    pub fn new(bytes: impl Into<Bytes>, media_type: impl Into<String>) -> Self {
        let bytes = bytes.into();
        let forms = Forms::default();
        let len = bytes.len();
        let _ = forms.bytes.set(bytes);
        Blob {
            media_type: Arc::from(media_type.into()),
            len,
            forms: Arc::new(forms),
        }
    }

    /// Base64 text (standard alphabet, padded or not), checked now and decoded only when the bytes are asked
    /// for; the text, padded, is the blob's base64 form.
    pub fn from_base64(text: &str, media_type: impl Into<String>) -> Result<Self, InvalidMedia> {
        let len = check_base64(text)?;
        Ok(Blob::checked_base64(text.to_owned(), len, media_type))
    }

    /// Decode a `data:<media type>;base64,<data>` URL.
    pub fn from_data_url(url: &str) -> Result<Self, InvalidMedia> {
        let data = DataUrl::parse(url)?;
        Blob::from_base64(data.base64, data.media_type)
    }

    /// As [`from_data_url`](Self::from_data_url), taking the URL: the URL's own buffer becomes the blob's
    /// base64 form (its `data:` prefix cut off in place), so a request's media is held once, as the base64 it
    /// came in.
    pub fn from_data_url_string(url: String) -> Result<Self, InvalidMedia> {
        let data = DataUrl::parse(&url)?;
        let prefix = url.len() - data.base64.len();
        let media_type = data.media_type.to_owned();
        let len = check_base64(data.base64)?;
        let mut text = url;
        text.drain(..prefix);
        Ok(Blob::checked_base64(text, len, media_type))
    }

    /// As [`from_base64`](Self::from_base64), taking the text: it becomes the blob's base64 form without a
    /// copy.
    pub fn from_base64_string(
        text: String,
        media_type: impl Into<String>,
    ) -> Result<Self, InvalidMedia> {
        let len = check_base64(&text)?;
        Ok(Blob::checked_base64(text, len, media_type))
    }

    /// A blob of base64 text that decodes to `len` bytes.
    fn checked_base64(mut text: String, len: usize, media_type: impl Into<String>) -> Self {
        // Valid unpadded text differs from the canonical form by its padding only.
        let canonical = base64::encoded_len(len, true).unwrap_or(text.len());
        while text.len() < canonical {
            text.push('=');
        }
        let forms = Forms::default();
        let _ = forms.base64.set(text);
        Blob {
            media_type: Arc::from(media_type.into()),
            len,
            forms: Arc::new(forms),
        }
    }

    /// The bytes as a `data:` URL for an upstream's JSON, written there straight from the shared base64 form:
    /// no `String` of the whole URL is made (see [`MediaUrl`]).
    pub fn data_url(&self) -> MediaUrl<'_> {
        MediaUrl::Data(self)
    }

    /// The bytes: for a blob made from base64, decoded on the first call and kept for every clone. Where a
    /// piece at a time will do (a hash, a copy), [`for_each_chunk`](Self::for_each_chunk) or
    /// [`head`](Self::head) read them without holding them all.
    pub fn bytes(&self) -> &Bytes {
        self.forms.bytes.get_or_init(|| {
            let text = self
                .forms
                .base64
                .get()
                .expect("a blob holds one of its forms");
            Bytes::from(
                STANDARD
                    .decode(text)
                    .expect("the base64 form was checked when the blob was made"),
            )
        })
    }

    /// Whether the blob holds its bytes: made from them, or decoded by [`bytes`](Self::bytes) since. A blob
    /// made from base64 and only ever written out as base64 never does.
    pub fn is_decoded(&self) -> bool {
        self.forms.bytes.get().is_some()
    }

    /// The bytes in pieces of a few kilobytes, in order; the pieces are the same whichever form the blob holds
    /// (so a streaming hash of them is too). Decoded into a stack buffer when the blob does not hold its bytes,
    /// which it still does not afterwards.
    pub fn for_each_chunk(&self, mut f: impl FnMut(&[u8])) {
        match (self.forms.bytes.get(), self.forms.base64.get()) {
            (Some(bytes), _) => bytes.chunks(PIECE_BYTES).for_each(f),
            (None, Some(text)) => {
                decode_pieces(text, &mut f)
                    .expect("the base64 form was checked when the blob was made");
            }
            (None, None) => unreachable!("a blob holds one of its forms"),
        }
    }

    /// The first `max` bytes (fewer when the blob is shorter): borrowed when the blob holds its bytes, else
    /// decoded from the start of the base64 alone (a file header, without the whole file).
    pub fn head(&self, max: usize) -> Cow<'_, [u8]> {
        let max = max.min(self.len);
        if let Some(bytes) = self.forms.bytes.get() {
            return Cow::Borrowed(&bytes[..max]);
        }
        let text = self.base64();
        let chars = (max.div_ceil(3) * 4).min(text.len());
        let mut head = STANDARD
            .decode(&text[..chars])
            .expect("whole groups of checked base64 decode");
        head.truncate(max);
        Cow::Owned(head)
    }

    /// The bytes, owned, without the blob keeping them: its own bytes when it holds them, else a copy decoded
    /// for the caller (what a store writes away and then drops).
    pub fn to_bytes(&self) -> Bytes {
        match self.forms.bytes.get() {
            Some(bytes) => bytes.clone(),
            None => Bytes::from(
                STANDARD
                    .decode(self.base64())
                    .expect("the base64 form was checked when the blob was made"),
            ),
        }
    }

    /// The media type.
    pub fn media_type(&self) -> &str {
        &self.media_type
    }

    /// The number of bytes (decoded), known without decoding.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes in standard base64: the text the blob was made from, padded, or encoded on first use and
    /// shared by every clone.
    pub fn base64(&self) -> &str {
        self.forms.base64.get_or_init(|| {
            let bytes = self
                .forms
                .bytes
                .get()
                .expect("a blob holds one of its forms");
            STANDARD.encode(bytes)
        })
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

/// Check standard base64 (padded or not) without holding its bytes; the decoded length.
fn check_base64(text: &str) -> Result<usize, InvalidMedia> {
    decode_pieces(text, &mut |_: &[u8]| {})
}

/// Decode standard base64, padded or not, a piece at a time into a stack buffer, giving each piece's bytes to
/// `f`; the decoded length. Accepts and refuses exactly what decoding the whole text at once does: padding only
/// at the very end, no stray bits in the last symbol.
fn decode_pieces(text: &str, f: &mut impl FnMut(&[u8])) -> Result<usize, InvalidMedia> {
    let mut buffer = [0u8; PIECE_BYTES];
    let mut decoded = 0;
    let mut pieces = text.as_bytes().chunks(PIECE_CHARS).enumerate().peekable();
    while let Some((index, piece)) = pieces.next() {
        let start = index * PIECE_CHARS;
        let result = if pieces.peek().is_some() {
            // A whole piece before the end holds whole groups and no padding. Decoding refuses `=` anywhere but
            // at the end of what it is given, so only the piece's own end needs looking at.
            match piece.last() {
                Some(b'=') => Err(DecodeSliceError::DecodeError(DecodeError::InvalidByte(
                    piece.len() - 1,
                    b'=',
                ))),
                _ => STANDARD.decode_slice(piece, &mut buffer),
            }
        } else {
            STANDARD
                .decode_slice(piece, &mut buffer)
                .or_else(|_| STANDARD_NO_PAD.decode_slice(piece, &mut buffer))
        };
        let n = result.map_err(|error| invalid_base64(error, start, text.len()))?;
        f(&buffer[..n]);
        decoded += n;
    }
    Ok(decoded)
}

/// The error of a piece, its offsets counted from the start of the whole text.
fn invalid_base64(error: DecodeSliceError, start: usize, whole: usize) -> InvalidMedia {
    let error = match error {
        DecodeSliceError::DecodeError(DecodeError::InvalidByte(at, byte)) => {
            DecodeError::InvalidByte(start + at, byte)
        }
        DecodeSliceError::DecodeError(DecodeError::InvalidLastSymbol(at, byte)) => {
            DecodeError::InvalidLastSymbol(start + at, byte)
        }
        DecodeSliceError::DecodeError(DecodeError::InvalidLength(_)) => {
            DecodeError::InvalidLength(whole)
        }
        DecodeSliceError::DecodeError(DecodeError::InvalidPadding)
        | DecodeSliceError::OutputSliceTooSmall => DecodeError::InvalidPadding,
    };
    InvalidMedia(format!("invalid base64 data: {error}"))
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

/// Equal media types and bytes, compared in the forms the two blobs hold: neither is decoded or encoded for
/// it.
impl PartialEq for Blob {
    fn eq(&self, other: &Self) -> bool {
        if self.media_type != other.media_type || self.len != other.len {
            return false;
        }
        if Arc::ptr_eq(&self.forms, &other.forms) {
            return true;
        }
        let (mine, theirs) = (&self.forms, &other.forms);
        if let (Some(a), Some(b)) = (mine.base64.get(), theirs.base64.get()) {
            return a == b;
        }
        let (bytes, text) = match (mine.bytes.get(), theirs.bytes.get()) {
            (Some(a), Some(b)) => return a == b,
            (Some(bytes), None) => (bytes, other),
            (None, Some(bytes)) => (bytes, self),
            (None, None) => unreachable!("a blob without bytes holds its base64"),
        };
        let (mut at, mut same) = (0, true);
        text.for_each_chunk(|piece| {
            same = same && bytes.get(at..at + piece.len()) == Some(piece);
            at += piece.len();
        });
        same
    }
}

impl fmt::Debug for Blob {
    /// The media type and size only: bytes never reach logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Blob({}, {} bytes)", self.media_type, self.len)
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
        let blob = match wire.data {
            Cow::Owned(text) => Blob::from_base64_string(text, wire.media_type),
            Cow::Borrowed(text) => Blob::from_base64(text, wire.media_type),
        };
        blob.map_err(de::Error::custom)
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

    /// Standard base64 of `bytes`, for building inputs.
    fn encode(bytes: &[u8]) -> String {
        STANDARD.encode(bytes)
    }

    /// What decoding the whole text at once accepts (the rule before blobs were checked piece by piece).
    fn whole(text: &str) -> Option<Vec<u8>> {
        STANDARD
            .decode(text)
            .or_else(|_| STANDARD_NO_PAD.decode(text))
            .ok()
    }

    #[test]
    fn a_taken_data_url_becomes_the_blobs_base64_and_is_written_back_without_a_url_string() {
        let url = "data:image/png;base64,iVBORw==".to_owned();
        let start = url.as_ptr();
        let blob = Blob::from_data_url_string(url).unwrap();
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
        assert_eq!(blob.bytes().as_ref(), [0x89, b'P', b'N', b'G']);
        // Unpadded text is checked too, and padded into the canonical form at once.
        let blob = Blob::from_base64_string("iVBORw".to_owned(), "image/png").unwrap();
        assert_eq!(blob.base64(), "iVBORw==");
        assert!(Blob::from_data_url_string("data:image/png;base64,***".into()).is_err());
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
    fn a_base64_blob_holds_no_bytes_until_they_are_asked_for() {
        // Several pieces and a partial last one, so the pieces' seams are crossed.
        let bytes: Vec<u8> = (0..3 * PIECE_BYTES + 1000)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let url = format!("data:image/png;base64,{}", encode(&bytes));
        let blob = Blob::from_data_url_string(url).unwrap();
        let clone = blob.clone();
        assert!(!blob.is_decoded());
        assert_eq!(blob.len(), bytes.len());

        // Everything a leaf, a store or a cache key reads, and the blob still holds its text alone.
        assert_eq!(blob.base64(), encode(&bytes));
        let written = serde_json::to_value(&blob).unwrap();
        assert_eq!(written["data"], encode(&bytes));
        assert_eq!(blob.data_url().to_string().len(), 22 + blob.base64().len());
        let mut streamed = Vec::new();
        let mut pieces = Vec::new();
        blob.for_each_chunk(|piece| {
            pieces.push(piece.len());
            streamed.extend_from_slice(piece);
        });
        assert_eq!(streamed, bytes);
        assert_eq!(blob.head(10).as_ref(), &bytes[..10]);
        assert_eq!(blob.head(usize::MAX).as_ref(), &bytes[..]);
        assert_eq!(blob.to_bytes().as_ref(), &bytes[..]);
        let from_bytes = Blob::new(bytes.clone(), "image/png");
        assert_eq!(blob, from_bytes);
        assert_eq!(from_bytes, blob);
        assert_ne!(blob, Blob::new(vec![0u8; bytes.len()], "image/png"));
        assert!(!blob.is_decoded() && !clone.is_decoded());
        assert!(from_bytes.is_decoded(), "made from its bytes");

        // The same pieces from bytes, so a streaming hash of them does not depend on the form.
        let mut byte_pieces = Vec::new();
        from_bytes.for_each_chunk(|piece| byte_pieces.push(piece.len()));
        assert_eq!(byte_pieces, pieces);

        // Asked for: decoded once, for every clone.
        assert_eq!(clone.bytes().as_ref(), &bytes[..]);
        assert!(blob.is_decoded());
        assert!(std::ptr::eq(blob.bytes().as_ptr(), clone.bytes().as_ptr()));
    }

    #[test]
    fn malformed_base64_is_refused_when_the_blob_is_made_exactly_as_whole_decoding_refuses_it() {
        let mut cases: Vec<String> = vec![
            String::new(),
            "A".into(),
            "AA".into(),
            "AA=".into(),
            "AA==".into(),
            "AB==".into(),
            "AAA=".into(),
            "AAB=".into(),
            "AA==AAAA".into(),
            "A===".into(),
            "====".into(),
            "AAAA\n".into(),
        ];
        for len in [
            PIECE_BYTES - 2,
            PIECE_BYTES - 1,
            PIECE_BYTES,
            PIECE_BYTES + 1,
            2 * PIECE_BYTES + 2,
        ] {
            let good = encode(&vec![0xA5u8; len]);
            cases.push(good.clone());
            cases.push(good.trim_end_matches('=').to_owned());
            for at in [0, PIECE_CHARS - 1, PIECE_CHARS, good.len() - 1] {
                if at >= good.len() {
                    continue;
                }
                for bad in [b'*', b'='] {
                    let mut text = good.clone().into_bytes();
                    text[at] = bad;
                    cases.push(String::from_utf8(text).unwrap());
                }
            }
            // Padding that ends a whole piece before the end of the text.
            let mut early = encode(&vec![1u8; PIECE_BYTES - 1]);
            early.push_str(&good);
            cases.push(early);
            cases.push(format!("{good}A"));
        }
        for text in cases {
            let blob = Blob::from_base64(&text, "image/png");
            match whole(&text) {
                Some(bytes) => {
                    let blob = blob.unwrap_or_else(|e| panic!("{} chars refused: {e}", text.len()));
                    assert_eq!(blob.len(), bytes.len());
                    assert_eq!(blob.bytes().as_ref(), &bytes[..]);
                }
                None => {
                    let error = blob.expect_err("malformed base64 accepted");
                    assert!(error.0.starts_with("invalid base64 data"), "{error}");
                }
            }
        }
    }
}
