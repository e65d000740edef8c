//! API keys: never shown by `Debug`, redacted from provider messages, sent as sensitive header values.

use std::fmt;
use std::ops::Range;

use http::HeaderValue;

use crate::error::{ChatError, ErrorKind};

/// A secret (an API key). Its `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

/// What every form of the secret is replaced by.
const REDACTED: &str = "[redacted]";

/// The shortest secret whose masked, base64 and percent-encoded forms are redacted too: a shorter one would match
/// ordinary text (its exact occurrences are still redacted from four characters on).
const MIN_FORMS_LEN: usize = 8;

/// The fewest characters of the secret's start a masked form must show to be recognised (`sk-` …).
const MIN_MASKED_PREFIX: usize = 3;

/// What providers and proxies put between a key's start and its last four characters when they mask it.
const MASKS: [&str; 6] = ["*", ".", "x", "X", "…", "•"];

impl Secret {
    /// Wrap a secret.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself, for building a header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Replace every form of the secret in `text` (providers echo keys in error messages, masked or encoded):
    /// - the secret itself;
    /// - a masked form: a start of the secret (at least three characters), a run of mask characters (`*`, `.`,
    ///   `x`, `X`, `…`, `•`), then its last four characters (`sk-canar****3456`, `sk-can...3456`);
    /// - base64, standard and URL-safe alphabets, at each of the three alignments, so that the secret is found
    ///   inside any encoded text that contains it (`Bearer <key>`, `user:<key>` of basic authentication), with or
    ///   without padding;
    /// - percent-encoding of any of its characters.
    pub(crate) fn redact(&self, text: String) -> String {
        let key = self.0.as_str();
        if key.len() < 4 {
            return text;
        }
        let mut spans: Vec<Range<usize>> = text
            .match_indices(key)
            .map(|(at, _)| at..at + key.len())
            .collect();
        if key.len() >= MIN_FORMS_LEN {
            masked_spans(&text, key, &mut spans);
            for needle in base64_needles(key.as_bytes()) {
                spans.extend(
                    text.match_indices(needle.as_str())
                        .map(|(at, _)| at..at + needle.len()),
                );
            }
            if text.contains('%') {
                percent_spans(&text, key.as_bytes(), &mut spans);
            }
        }
        if spans.is_empty() {
            return text;
        }
        spans.sort_by_key(|s| s.start);
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for span in spans {
            if span.end <= at {
                continue;
            }
            if span.start >= at {
                out.push_str(&text[at..span.start]);
                out.push_str(REDACTED);
            }
            at = span.end;
        }
        out.push_str(&text[at..]);
        out
    }

    /// A sensitive header value (hyper's HPACK never indexes it; `Debug` of the header map hides it).
    pub(crate) fn header_value(&self, prefix: &str) -> Result<HeaderValue, ChatError> {
        let mut value = HeaderValue::try_from(format!("{prefix}{}", self.0)).map_err(|_| {
            ChatError::new(
                ErrorKind::InvalidRequest,
                "the API key contains characters not allowed in an HTTP header",
            )
        })?;
        value.set_sensitive(true);
        Ok(value)
    }
}

/// Masked forms: every occurrence of the last four characters preceded by a run of mask characters, itself
/// preceded by the longest start of the key that ends there.
fn masked_spans(text: &str, key: &str, spans: &mut Vec<Range<usize>>) {
    let tail_at = key.len() - 4;
    if !key.is_char_boundary(tail_at) {
        return;
    }
    let tail = &key[tail_at..];
    for (at, _) in text.match_indices(tail) {
        let mut start = at;
        let mut masks = 0;
        while let Some(mask) = MASKS.iter().find(|m| text[..start].ends_with(*m)) {
            start -= mask.len();
            masks += 1;
        }
        if masks == 0 {
            continue;
        }
        let before = &text[..start];
        let prefix = (MIN_MASKED_PREFIX..tail_at)
            .rev()
            .filter(|&k| key.is_char_boundary(k))
            .find(|&k| before.ends_with(&key[..k]));
        if let Some(k) = prefix {
            spans.push(start - k..at + 4);
        }
    }
}

/// The base64 text that encodes the key wherever it lies in the encoded bytes: for each of the three alignments
/// of its first byte within a 3-byte group, the characters that depend on the key's bits alone (those that also
/// carry bits of the bytes around it differ from text to text), in the standard and the URL-safe alphabet.
/// Padding never falls among them, so padded and unpadded encodings both contain them.
fn base64_needles(key: &[u8]) -> Vec<String> {
    const STANDARD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut needles = Vec::with_capacity(6);
    for (align, skip) in [(0usize, 0usize), (1, 2), (2, 3)] {
        let mut bytes = vec![0u8; align];
        bytes.extend_from_slice(key);
        let whole = bytes.len() * 8 / 6;
        let sextet = |i: usize| -> u8 {
            let bit = i * 6;
            let (byte, shift) = (bit / 8, bit % 8);
            let pair = u16::from(bytes[byte]) << 8 | u16::from(*bytes.get(byte + 1).unwrap_or(&0));
            ((pair >> (10 - shift)) & 0x3f) as u8
        };
        let standard: String = (skip..whole)
            .map(|i| STANDARD[usize::from(sextet(i))] as char)
            .collect();
        let url_safe = standard.replace('+', "-").replace('/', "_");
        if url_safe != standard {
            needles.push(url_safe);
        }
        needles.push(standard);
    }
    needles
}

/// Percent-encoded forms: the text decoded (`%XX`, either case), each decoded byte remembering the characters it
/// came from, and every occurrence of the key in it mapped back to the text.
fn percent_spans(text: &str, key: &[u8], spans: &mut Vec<Range<usize>>) {
    let raw = text.as_bytes();
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut decoded = Vec::with_capacity(raw.len());
    let mut origin = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let escaped = (raw[i] == b'%')
            .then(|| Some(hex(*raw.get(i + 1)?)? << 4 | hex(*raw.get(i + 2)?)?))
            .flatten();
        match escaped {
            Some(byte) => {
                decoded.push(byte);
                origin.push(i..i + 3);
                i += 3;
            }
            None => {
                decoded.push(raw[i]);
                origin.push(i..i + 1);
                i += 1;
            }
        }
    }
    if decoded.len() == raw.len() {
        return;
    }
    let mut from = 0;
    while let Some(found) = decoded[from..]
        .windows(key.len())
        .position(|w| w == key)
        .map(|p| p + from)
    {
        let span = origin[found].start..origin[found + key.len() - 1].end;
        if text.is_char_boundary(span.start) && text.is_char_boundary(span.end) {
            spans.push(span);
        }
        from = found + 1;
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "sk-canary-0123456789abcdef3456";

    fn redacted(text: &str) -> String {
        Secret::new(KEY).redact(text.to_owned())
    }

    /// Base64 with the standard or URL-safe alphabet, padded or not (the test's own encoder: a second opinion).
    fn base64(bytes: &[u8], url_safe: bool, pad: bool) -> String {
        let alphabet: &[u8] = if url_safe {
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        } else {
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
        };
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk.len();
            let word = u32::from(chunk[0]) << 16
                | u32::from(*chunk.get(1).unwrap_or(&0)) << 8
                | u32::from(*chunk.get(2).unwrap_or(&0));
            for i in 0..=n {
                out.push(alphabet[(word >> (18 - 6 * i) & 0x3f) as usize] as char);
            }
            if pad {
                out.extend(std::iter::repeat_n('=', 3 - n));
            }
        }
        out
    }

    #[test]
    fn secrets_are_hidden_from_debug_and_redacted_from_messages() {
        let secret = Secret::new("sk-test-123456");
        assert_eq!(format!("{secret:?}"), "Secret([redacted])");
        assert_eq!(
            secret.redact("Incorrect API key provided: sk-test-123456.".into()),
            "Incorrect API key provided: [redacted]."
        );
        assert!(secret.header_value("Bearer ").unwrap().is_sensitive());
    }

    #[test]
    fn masked_forms_are_redacted() {
        for masked in [
            "sk-canar****3456",
            "sk-can...3456",
            "sk-canary-01xxxxxxxxxx3456",
            "sk-ca…3456",
            "sk-c•••••3456",
            "sk-***3456",
        ] {
            let text = format!("Incorrect API key provided: {masked}. See the docs.");
            assert_eq!(
                redacted(&text),
                "Incorrect API key provided: [redacted]. See the docs.",
                "{masked}"
            );
        }
        // Neither the start of another key, nor the last four alone, nor a start without a mask.
        for kept in [
            "sk-other****3456",
            "order 3456",
            "sk-canary3456",
            "ab...3456",
        ] {
            assert_eq!(redacted(kept), kept);
        }
    }

    #[test]
    fn base64_forms_are_redacted_at_every_alignment_in_both_alphabets() {
        for before in ["", "a", "ab", "Bearer ", "user:", "x-api-key: "] {
            for after in ["", "!", "?>", "\n"] {
                let plain = format!("{before}{KEY}{after}");
                for url_safe in [false, true] {
                    for pad in [false, true] {
                        let encoded = base64(plain.as_bytes(), url_safe, pad);
                        let text = format!("bad credentials {encoded} rejected");
                        let out = redacted(&text);
                        assert!(
                            out.contains("[redacted]"),
                            "{plain:?} {url_safe} {pad}: {out}"
                        );
                        // What is left of the encoding is the bytes around the key (and at most one character
                        // with a few of its bits each side).
                        let rest = out
                            .replace("bad credentials ", "")
                            .replace(" rejected", "")
                            .replace("[redacted]", "");
                        let around = (before.len() + after.len()).div_ceil(3) * 4 + 2 + 4;
                        assert!(rest.len() <= around, "{plain:?}: {out}");
                    }
                }
            }
        }
    }

    #[test]
    fn percent_encoded_forms_are_redacted() {
        let every: String = KEY.bytes().map(|b| format!("%{b:02X}")).collect();
        let some = KEY.replace('-', "%2d");
        for encoded in [every, some] {
            let text = format!("GET /v1?key={encoded}&x=1 refused");
            assert_eq!(redacted(&text), "GET /v1?key=[redacted]&x=1 refused");
        }
        assert_eq!(redacted("100% sure, %zz"), "100% sure, %zz");
    }

    #[test]
    fn short_secrets_are_redacted_only_where_they_appear_whole() {
        let secret = Secret::new("abcdef");
        assert_eq!(
            secret.redact("k abcdef, ab..cdef".into()),
            "k [redacted], ab..cdef"
        );
        assert_eq!(Secret::new("abc").redact("abc".into()), "abc");
    }
}
