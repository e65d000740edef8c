//! Binary parts stored once, by content hash: how a message's images, audio and files leave its JSON for
//! `chat_blobs`, and come back when it is read.
//!
//! A message node's JSON keeps each binary part's shape and media type, but where the bytes' base64 would be
//! (`"data": "…"`) it holds `"blob_sha256": "<64 hex digits>"`, the SHA-256 of the bytes. The bytes themselves are
//! a row of `chat_blobs` (raw `BLOB` / `BYTEA`, not base64), keyed by that hash and written with
//! `ON CONFLICT DO NOTHING` in the transaction of the nodes that refer to it: a conversation that sends the same
//! 5 MB image in fifty different user messages stores it once. The hash is a cryptographic one (not the keyed
//! SipHash of message ids) because it is not keyed per database and the table is shared by every caller: two
//! different contents must never share a row.
//!
//! Reading is the reverse: a message whose JSON refers to blobs gets their bytes from `chat_blobs` and reads
//! back as the part it was ([`tower_chat::Part::image`] with its bytes). There is no way to read a blob by its
//! hash alone: the store reads blobs only for the histories of the records a caller asked for. Messages stored
//! before blobs existed (base64 inside their JSON) read as they always did.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hasher;

use bytes::Bytes;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tower_chat::{Blob, Content, Message, Part};

use crate::store::StoreError;

/// The key that replaces `data` in a stored binary part.
const REFERENCE: &str = "blob_sha256";

/// A blob the database may not have yet.
#[derive(Clone, Debug)]
pub(crate) struct NewBlob {
    /// SHA-256 of the bytes, 64 lowercase hex digits.
    pub(crate) hash: String,
    /// The media type the first message that carried the bytes gave them (each message keeps its own).
    pub(crate) media_type: String,
    pub(crate) bytes: Bytes,
}

/// The hex SHA-256 of `bytes`.
pub(crate) fn hash(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(digest: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(64);
    for b in digest.iter() {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    out
}

/// The content of a message that can hold binary parts (an assistant message holds text only).
fn content_mut(message: &mut Message) -> Option<&mut Content> {
    match message {
        Message::System { content } | Message::User { content } => Some(content),
        Message::Tool(tool) => Some(&mut tool.content),
        Message::Assistant(_) => None,
    }
}

fn content(message: &Message) -> Option<&Content> {
    match message {
        Message::System { content } | Message::User { content } => Some(content),
        Message::Tool(tool) => Some(&tool.content),
        Message::Assistant(_) => None,
    }
}

/// The JSON object of a serialised part's bytes (`{"media_type": …, "data": …}`), by the part's kind.
fn blob_json_mut(part: &mut Value) -> Option<&mut serde_json::Map<String, Value>> {
    let kind = part.get("type")?.as_str()?;
    let blob = match kind {
        "image" | "file" => part.get_mut("source")?.get_mut("data")?,
        "audio" => part.get_mut("data")?,
        _ => return None,
    };
    blob.as_object_mut()
}

/// Whether a message holds bytes that go to `chat_blobs` (an empty blob stays inline: there is nothing to share).
fn has_blobs(message: &Message) -> bool {
    content(message).is_some_and(|c| {
        c.parts()
            .iter()
            .any(|p| p.blob().is_some_and(|b| !b.is_empty()))
    })
}

/// How long a store handle trusts a chain or blob hash it wrote, counted from its commit, and how recently the
/// call of a record must have ended for the handle to remember what the record wrote: retention may delete
/// what no recent call reaches (see `retention.rs`).
pub(crate) const CACHE_TRUST: std::time::Duration = std::time::Duration::from_secs(60 * 60);

/// The blobs this store committed recently, by hash: a message carrying one of them again refers to it without
/// sending its bytes to the database again. Bounded by count, and each trusted for
/// [`CACHE_TRUST`] after its commit (retention may delete a blob no recent call refers to, see
/// `chain.rs`); forgetting only costs a redundant `ON CONFLICT DO NOTHING` insert.
#[derive(Debug, Default)]
pub(crate) struct RecentBlobs {
    order: VecDeque<String>,
    known: HashMap<String, std::time::Instant>,
}

impl RecentBlobs {
    const CAPACITY: usize = 1024;

    pub(crate) fn contains(&self, hash: &str) -> bool {
        self.known
            .get(hash)
            .is_some_and(|at| at.elapsed() < CACHE_TRUST)
    }

    /// Remember a blob committed at `at` (the latest commit counts).
    pub(crate) fn remember(&mut self, hash: String, at: std::time::Instant) {
        if let Some(known) = self.known.get_mut(&hash) {
            *known = at;
            return;
        }
        if self.order.len() >= Self::CAPACITY {
            if let Some(oldest) = self.order.pop_front() {
                self.known.remove(&oldest);
            }
        }
        self.known.insert(hash.clone(), at);
        self.order.push_back(hash);
    }
}

/// Feed a message to `hasher`: its JSON with every blob's canonical base64 fed beside it rather than inside it,
/// so two messages feed the same input exactly when they are equal. What the chain cache keeps instead of the message.
pub(crate) fn digest_message(
    message: &Message,
    hasher: &mut impl Hasher,
) -> Result<(), StoreError> {
    let digest_error = |e| StoreError::with_source("cannot digest a message", e);
    if !has_blobs(message) {
        return serde_json::to_writer(HashWriter(hasher), message).map_err(digest_error);
    }
    // As `encode_message` does: a copy with empty blobs (their bytes are shared, not copied) is serialised.
    let mut hollow = message.clone();
    if let Some(content) = content_mut(&mut hollow) {
        for part in content.parts_mut() {
            let Some(blob) = part.blob_mut().filter(|b| !b.is_empty()) else {
                continue;
            };
            // Canonical base64 stands for the bytes one to one, and is what every leaf sends: a blob read from
            // a client's base64 is hashed as it is, not decoded for it.
            hasher.write(&(blob.len() as u64).to_le_bytes());
            hasher.write(blob.base64().as_bytes());
            *blob = Blob::new(Bytes::new(), blob.media_type());
        }
    }
    serde_json::to_writer(HashWriter(hasher), &hollow).map_err(digest_error)
}

/// An `io::Write` that feeds a hasher.
struct HashWriter<'a, H>(&'a mut H);

impl<H: Hasher> std::io::Write for HashWriter<'_, H> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A message's stored JSON. Its binary parts become references; their bytes are pushed to `blobs` unless
/// `written` says the database has them already (committed earlier, or earlier in this batch).
pub(crate) fn encode_message(
    message: &Message,
    written: impl Fn(&str) -> bool,
    blobs: &mut Vec<NewBlob>,
) -> Result<String, StoreError> {
    let encode_error = |e| StoreError::with_source("cannot encode a message", e);
    if !has_blobs(message) {
        return serde_json::to_string(message).map_err(encode_error);
    }
    // Serialise a copy whose blobs are empty (no base64 of the bytes is ever made), then put each hash where
    // its `data` would be. Parts are serialised in order, so the n-th part of the copy is the n-th of the array.
    let mut hollow = message.clone();
    let mut hashes = Vec::new();
    if let Some(content) = content_mut(&mut hollow) {
        for (index, part) in content.parts_mut().iter_mut().enumerate() {
            let Some(blob) = part.blob_mut().filter(|b| !b.is_empty()) else {
                continue;
            };
            // Decoded once for the store alone (hashed, and written unless the database has it): the message's
            // blob, shared with the request, stays in the form it holds.
            let bytes = blob.to_bytes();
            let hash = hash(&bytes);
            if !written(&hash) && !blobs.iter().any(|b| b.hash == hash) {
                blobs.push(NewBlob {
                    hash: hash.clone(),
                    media_type: blob.media_type().to_owned(),
                    bytes,
                });
            }
            *blob = Blob::new(Bytes::new(), blob.media_type());
            hashes.push((index, hash));
        }
    }
    let mut value = serde_json::to_value(&hollow).map_err(encode_error)?;
    let parts = value
        .get_mut("content")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| StoreError::new("cannot encode a message: its parts are not an array"))?;
    for (index, hash) in hashes {
        let blob = parts
            .get_mut(index)
            .and_then(blob_json_mut)
            .ok_or_else(|| {
                StoreError::new("cannot encode a message: a binary part has no bytes")
            })?;
        blob.remove("data");
        blob.insert(REFERENCE.to_owned(), Value::String(hash));
    }
    serde_json::to_string(&value).map_err(encode_error)
}

/// Whether a stored message's JSON may refer to blobs. A key is the only place the quoted name can appear
/// unescaped, so text that merely mentions it never matches; a false match only costs the slower decoding path.
fn may_refer(json: &str) -> bool {
    json.contains("\"blob_sha256\"")
}

/// The hashes of the blobs the stored messages refer to.
pub(crate) fn references<'a>(
    messages: impl IntoIterator<Item = &'a String>,
) -> Result<HashSet<String>, StoreError> {
    let mut hashes = HashSet::new();
    for json in messages.into_iter().filter(|m| may_refer(m)) {
        let mut value: Value = super::decode_json("message", json)?;
        if let Some(parts) = value.get_mut("content").and_then(Value::as_array_mut) {
            for part in parts {
                if let Some(hash) = blob_json_mut(part)
                    .and_then(|b| b.get(REFERENCE))
                    .and_then(Value::as_str)
                {
                    hashes.insert(hash.to_owned());
                }
            }
        }
    }
    Ok(hashes)
}

/// A stored message, with the bytes of the blobs it refers to put back into its parts.
pub(crate) fn decode_message(
    json: &str,
    blobs: &HashMap<String, Bytes>,
) -> Result<Message, StoreError> {
    if !may_refer(json) {
        return super::decode_json("message", json);
    }
    let mut value: Value = super::decode_json("message", json)?;
    let mut referred = Vec::new();
    if let Some(parts) = value.get_mut("content").and_then(Value::as_array_mut) {
        for (index, part) in parts.iter_mut().enumerate() {
            let Some(blob) = blob_json_mut(part) else {
                continue;
            };
            if let Some(Value::String(hash)) = blob.remove(REFERENCE) {
                blob.insert("data".to_owned(), Value::String(String::new()));
                referred.push((index, hash));
            }
        }
    }
    let mut message: Message = serde_json::from_value(value)
        .map_err(|e| StoreError::with_source("stored message does not decode", e))?;
    if referred.is_empty() {
        return Ok(message);
    }
    let parts = content_mut(&mut message)
        .map(Content::parts_mut)
        .ok_or_else(|| StoreError::new("a stored message refers to blobs but has no parts"))?;
    for (index, hash) in referred {
        let bytes = blobs.get(&hash).ok_or_else(|| {
            StoreError::new(format!(
                "a stored message refers to blob {hash}, which is missing"
            ))
        })?;
        let blob = parts
            .get_mut(index)
            .and_then(Part::blob_mut)
            .ok_or_else(|| StoreError::new("a stored blob reference is not on a binary part"))?;
        *blob = Blob::new(bytes.clone(), blob.media_type());
    }
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_chat::{FilePart, ImageDetail, ImagePart, MediaSource, ProviderPart};

    fn parts() -> Message {
        Message::user(vec![
            Part::text("look"),
            Part::from(ImagePart {
                source: MediaSource::Data(Blob::new(vec![1u8, 2, 3], "image/png")),
                detail: Some(ImageDetail::High),
                cache: None,
            }),
            Part::audio(vec![4u8, 5], "audio/wav"),
            Part::file(b"%PDF".to_vec(), "application/pdf", Some("a.pdf".into())),
            Part::image_url("https://example.com/x.png"),
            Part::from(FilePart {
                source: MediaSource::FileId {
                    id: "file-1".into(),
                },
                media_type: Some("application/pdf".into()),
                name: None,
                cache: None,
            }),
            Part::from(ProviderPart {
                provider: "openai".into(),
                value: serde_json::json!({"type": "x", "data": {"media_type": "a", "data": ""}}),
            }),
            Part::image(Vec::<u8>::new(), "image/gif"),
        ])
    }

    #[test]
    fn binary_parts_leave_the_json_and_come_back() {
        let message = parts();
        let mut blobs = Vec::new();
        let json = encode_message(&message, |_| false, &mut blobs).unwrap();
        assert_eq!(
            blobs.len(),
            3,
            "image, audio and file bytes; the empty image stays inline"
        );
        assert!(!json.contains("AQID"), "no base64 of the image: {json}");
        assert_eq!(json.matches(REFERENCE).count(), 3);
        let stored: HashMap<String, Bytes> = blobs
            .iter()
            .map(|b| (b.hash.clone(), b.bytes.clone()))
            .collect();
        assert_eq!(
            references([&json]).unwrap(),
            stored.keys().cloned().collect::<HashSet<_>>()
        );
        assert_eq!(decode_message(&json, &stored).unwrap(), message);
        // A missing blob is an error, not a silently empty part.
        assert!(decode_message(&json, &HashMap::new()).is_err());
    }

    #[test]
    fn known_and_repeated_blobs_are_not_written_twice() {
        let image = Part::image(vec![9u8; 64], "image/png");
        let message = Message::user(vec![image.clone(), image]);
        let mut blobs = Vec::new();
        encode_message(&message, |_| false, &mut blobs).unwrap();
        assert_eq!(blobs.len(), 1);
        let known = blobs[0].hash.clone();
        let mut again = Vec::new();
        encode_message(&message, |h| h == known, &mut again).unwrap();
        assert!(again.is_empty());
    }

    #[test]
    fn text_and_base64_messages_read_as_before() {
        let text = Message::user("mentions \"blob_sha256\": nothing");
        let mut blobs = Vec::new();
        let json = encode_message(&text, |_| false, &mut blobs).unwrap();
        assert_eq!(json, serde_json::to_string(&text).unwrap());
        assert_eq!(decode_message(&json, &HashMap::new()).unwrap(), text);
        // Written before blobs existed: base64 in the JSON.
        let inline = Message::user(vec![Part::image(vec![1u8, 2, 3], "image/png")]);
        let old = serde_json::to_string(&inline).unwrap();
        assert_eq!(decode_message(&old, &HashMap::new()).unwrap(), inline);
    }

    #[test]
    fn the_hash_is_sha256() {
        assert_eq!(
            hash(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_base64_blob_is_stored_and_digested_without_being_decoded() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 253) as u8).collect();
        let url = format!(
            "data:image/png;base64,{}",
            Blob::new(bytes.clone(), "image/png").base64()
        );
        let blob = Blob::from_data_url_string(url).unwrap();
        let message = Message::user(vec![
            Part::text("look"),
            Part::from(ImagePart {
                source: MediaSource::Data(blob.clone()),
                detail: None,
                cache: None,
            }),
        ]);
        let mut blobs = Vec::new();
        let json = encode_message(&message, |_| false, &mut blobs).unwrap();
        let mut digested = std::hash::DefaultHasher::new();
        digest_message(&message, &mut digested).unwrap();
        assert!(!blob.is_decoded(), "the request's blob is left as base64");
        assert_eq!(
            blobs[0].bytes.as_ref(),
            &bytes[..],
            "the store gets the bytes"
        );
        assert_eq!(blobs[0].hash, hash(&bytes));
        // The same message made from bytes digests and reads back alike.
        let same = Message::user(vec![Part::text("look"), Part::image(bytes, "image/png")]);
        let mut again = std::hash::DefaultHasher::new();
        digest_message(&same, &mut again).unwrap();
        assert_eq!(digested.finish(), again.finish());
        let stored = HashMap::from([(blobs[0].hash.clone(), blobs[0].bytes.clone())]);
        assert_eq!(decode_message(&json, &stored).unwrap(), message);
    }
}
