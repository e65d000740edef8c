//! Gateway keys (`--api-keys-file`): clients send `Authorization: Bearer <key>`, or `x-api-key: <key>` (what
//! Anthropic's clients send).

use std::io;
use std::path::Path;

use http::HeaderMap;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tower_chat::CallerIdentity;

use crate::error::ApiError;

/// The keys clients may use, each with a stable caller identity that records and approvals are bound to.
///
/// A line is either `name:key` (the identity is `name`: it stays with the name when the key is rotated, which
/// the operator chose by keeping the name) or a bare `key` (the identity is `key-` followed by 24 hex digits of
/// the key's SHA-256: it moves with the key, never with its line, so a new key on an old line inherits nothing).
/// Only digests of the keys are kept; a presented key is hashed and compared with every digest in constant time,
/// so neither a matching prefix nor the key's length shows in the timing.
#[derive(Clone)]
pub struct ApiKeys {
    keys: Vec<([u8; 32], CallerIdentity)>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKeys")
            .field("keys", &self.keys.len())
            .finish()
    }
}

/// The longest name of a `name:key` line.
const MAX_NAME: usize = 64;

impl ApiKeys {
    /// Read a file of keys, one per line; blank lines and lines starting with `#` are skipped.
    pub fn load(path: &Path) -> io::Result<Self> {
        let text = std::fs::read_to_string(path)?;
        let keys = Self::parse(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        if keys.keys.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the API keys file lists no key",
            ));
        }
        Ok(keys)
    }

    /// Keys from text, one per line (`name:key` or a bare `key`). A malformed name, a duplicate name or a
    /// duplicate key is an error naming the line (never the key).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut keys: Vec<([u8; 32], CallerIdentity)> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let n = n + 1;
            let (digest, caller) = match line.split_once(':') {
                Some((name, key)) => {
                    let (name, key) = (name.trim(), key.trim());
                    if name.is_empty()
                        || name.len() > MAX_NAME
                        || !name
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                        || name.starts_with("key-")
                    {
                        return Err(format!(
                            "line {n}: a name must be 1 to {MAX_NAME} characters of A-Z a-z 0-9 - _ . \
                             and not start with `key-`"
                        ));
                    }
                    if key.is_empty() {
                        return Err(format!("line {n}: the key after `{name}:` is empty"));
                    }
                    (digest(key), CallerIdentity::new(name))
                }
                None => {
                    let digest = digest(line);
                    let hex: String = digest[..12].iter().map(|b| format!("{b:02x}")).collect();
                    (digest, CallerIdentity::new(format!("key-{hex}")))
                }
            };
            if keys.iter().any(|(d, _)| *d == digest) {
                return Err(format!("line {n}: this key is listed twice"));
            }
            if keys.iter().any(|(_, c)| *c == caller) {
                return Err(format!(
                    "line {n}: the name `{}` is listed twice",
                    caller.as_str()
                ));
            }
            keys.push((digest, caller));
        }
        Ok(ApiKeys { keys })
    }

    /// The caller a request's `Authorization: Bearer` header (or, without one, its `x-api-key` header)
    /// identifies, or 401.
    pub fn check(&self, headers: &HeaderMap) -> Result<CallerIdentity, ApiError> {
        self.find(presented_key(headers)?)
    }

    /// The names of the `name:key` lines (the identities a managed key may not take).
    pub(crate) fn names(&self) -> std::collections::HashSet<String> {
        self.keys
            .iter()
            .map(|(_, caller)| caller.as_str().to_owned())
            .collect()
    }

    /// Whether a key is in both sets (operator keys must differ from every client key).
    pub(crate) fn shares_a_key_with(&self, other: &ApiKeys) -> bool {
        self.keys
            .iter()
            .any(|(mine, _)| other.keys.iter().any(|(theirs, _)| mine == theirs))
    }

    fn find(&self, token: &str) -> Result<CallerIdentity, ApiError> {
        self.identify(token)
            .ok_or_else(|| ApiError::unauthorized("invalid API key"))
    }

    /// The caller `token` belongs to. Every digest is compared, without stopping at a match.
    pub(crate) fn identify(&self, token: &str) -> Option<CallerIdentity> {
        self.identify_key(token).map(|(caller, _)| caller)
    }

    /// The caller `token` belongs to, and the key's [`fingerprint`](Self::fingerprints) (what a console session
    /// is bound to).
    pub(crate) fn identify_key(&self, token: &str) -> Option<(CallerIdentity, String)> {
        let presented = digest(token);
        let mut found = None;
        for (digest, caller) in &self.keys {
            if bool::from(digest.ct_eq(&presented)) {
                found = Some((caller.clone(), fingerprint(digest)));
            }
        }
        found
    }

    /// The fingerprints of the keys: what a record may keep to say which key did something (a console session
    /// ends when its key leaves the file), derived from the key's digest under a label of its own, so neither
    /// the key nor its plain SHA-256 is stored.
    pub(crate) fn fingerprints(&self) -> Vec<String> {
        self.keys
            .iter()
            .map(|(digest, _)| fingerprint(digest))
            .collect()
    }

    /// Whether `fingerprint` is one of these keys' (a rotated or removed key's is not).
    pub(crate) fn holds_fingerprint(&self, fingerprint: &str) -> bool {
        self.fingerprints()
            .iter()
            .any(|mine| bool::from(mine.as_bytes().ct_eq(fingerprint.as_bytes())))
    }
}

/// The key a request presents: its `Authorization: Bearer` header's, or, without one, its `x-api-key`
/// header's; 401 when it has neither or one is malformed.
pub(crate) fn presented_key(headers: &HeaderMap) -> Result<&str, ApiError> {
    let Some(value) = headers.get(http::header::AUTHORIZATION) else {
        return match headers.get("x-api-key").map(|v| v.to_str()) {
            Some(Ok(key)) => Ok(key.trim()),
            Some(Err(_)) => Err(ApiError::unauthorized("malformed x-api-key header")),
            None => Err(ApiError::unauthorized(
                "missing API key: send `Authorization: Bearer <key>` or `x-api-key: <key>`",
            )),
        };
    };
    value
        .to_str()
        .ok()
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim)
        .ok_or_else(|| {
            ApiError::unauthorized("malformed Authorization header: expected `Bearer <key>`")
        })
}

pub(crate) fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// A key's fingerprint: 32 hex digits of the SHA-256 of a label and the key's digest.
fn fingerprint(digest: &[u8; 32]) -> String {
    let bound = Sha256::new()
        .chain_update(b"tower-chat key fingerprint\0")
        .chain_update(digest)
        .finalize();
    bound[..16].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::AUTHORIZATION, value.parse().unwrap());
        headers
    }

    #[test]
    fn a_key_is_fingerprinted_without_its_plain_digest_and_a_new_key_on_the_name_differs() {
        let before = ApiKeys::parse("carol:sk-old-key\ndave:sk-dave").unwrap();
        let after = ApiKeys::parse("carol:sk-new-key\ndave:sk-dave").unwrap();
        let (caller, old) = before.identify_key("sk-old-key").unwrap();
        assert_eq!(caller.as_str(), "carol");
        assert_eq!(old.len(), 32);
        let plain: String = digest("sk-old-key")
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert!(!plain.contains(&old), "not the key's plain SHA-256");
        assert!(before.holds_fingerprint(&old));
        assert!(!after.holds_fingerprint(&old), "rotated");
        let (_, dave) = before.identify_key("sk-dave").unwrap();
        assert!(after.holds_fingerprint(&dave));
    }

    #[test]
    fn keys_are_checked_and_named_by_name_or_digest() {
        let keys = ApiKeys::parse("# comment\nsk-one\n\n  alice : sk-two  \n").unwrap();
        let one = keys.check(&headers("Bearer sk-one")).unwrap();
        assert!(
            one.as_str().starts_with("key-") && one.as_str().len() == 4 + 24,
            "{one:?}"
        );
        assert!(!one.as_str().contains("sk-one"));
        assert_eq!(
            keys.check(&headers("Bearer sk-two")).unwrap().as_str(),
            "alice"
        );
        for bad in [
            "Bearer sk-three",
            "sk-one",
            "Bearer sk-on",
            "Bearer sk-one1",
            "Bearer ",
        ] {
            assert_eq!(keys.check(&headers(bad)).unwrap_err().status, 401, "{bad}");
        }
        assert_eq!(keys.check(&HeaderMap::new()).unwrap_err().status, 401);
        let mut anthropic_style = HeaderMap::new();
        anthropic_style.insert("x-api-key", "sk-two".parse().unwrap());
        assert_eq!(keys.check(&anthropic_style).unwrap().as_str(), "alice");
        anthropic_style.insert("x-api-key", "sk-wrong".parse().unwrap());
        assert_eq!(keys.check(&anthropic_style).unwrap_err().status, 401);
        assert!(format!("{keys:?}").contains('2') && !format!("{keys:?}").contains("sk-"));
    }

    /// A key rotation: line 4's key replaced. The new key gets a new identity; the other keys keep
    /// theirs although lines moved around them.
    #[test]
    fn identities_do_not_follow_lines() {
        let before = ApiKeys::parse("sk-a\nsk-b\n\nsk-old\nbob:sk-bob-1\n").unwrap();
        let after = ApiKeys::parse("# rotated\nsk-b\nsk-new\nsk-a\n\nbob:sk-bob-2\n").unwrap();
        let id = |keys: &ApiKeys, key: &str| keys.identify(key).map(|c| c.as_str().to_owned());
        let old = id(&before, "sk-old").unwrap();
        let new = id(&after, "sk-new").unwrap();
        assert_ne!(old, new);
        assert!(![id(&before, "sk-a"), id(&before, "sk-b")].contains(&Some(new)));
        assert_eq!(id(&before, "sk-a"), id(&after, "sk-a"));
        assert_eq!(id(&before, "sk-b"), id(&after, "sk-b"));
        assert_eq!(id(&after, "sk-old"), None);
        assert_eq!(id(&before, "sk-bob-1").as_deref(), Some("bob"));
        assert_eq!(id(&after, "sk-bob-2").as_deref(), Some("bob"));
        assert_eq!(id(&after, "sk-bob-1"), None);
    }

    /// Every key of the right length that differs anywhere is refused, including keys differing in two
    /// places (an accumulator that could cancel differences would let some through), and no key of another
    /// length matches, whatever its prefix.
    #[test]
    fn near_misses_never_match() {
        let key = "sk-0123456789abcdef0123456789abcdef";
        let keys = ApiKeys::parse(key).unwrap();
        assert!(keys.identify(key).is_some());
        let bytes = key.as_bytes();
        for i in 0..bytes.len() {
            for j in i..bytes.len() {
                for (x, y) in [(1u8, 1u8), (2, 2), (1, 3)] {
                    let mut wrong = bytes.to_vec();
                    wrong[i] ^= x;
                    if j != i {
                        wrong[j] ^= y;
                    }
                    let wrong = String::from_utf8(wrong).unwrap();
                    assert!(keys.identify(&wrong).is_none(), "{wrong}");
                }
            }
        }
        for len in 0..bytes.len() + 8 {
            let mut other = key.repeat(2);
            other.truncate(len);
            if len != bytes.len() {
                assert!(keys.identify(&other).is_none(), "{other}");
            }
        }
    }

    /// Boundaries `cargo mutants` probes: a name of exactly the maximum length is fine, one more is not; a
    /// comment line is never a key.
    #[test]
    fn names_are_limited_and_comments_are_not_keys() {
        let longest = format!("{}:sk-a", "n".repeat(MAX_NAME));
        assert!(ApiKeys::parse(&longest).is_ok());
        let too_long = format!("{}:sk-a", "n".repeat(MAX_NAME + 1));
        assert!(ApiKeys::parse(&too_long).is_err());
        let keys = ApiKeys::parse("# sk-commented\nsk-real\n").unwrap();
        assert_eq!(keys.keys.len(), 1);
        assert!(keys.identify("# sk-commented").is_none());
        assert!(keys.identify("sk-real").is_some());
    }

    #[test]
    fn bad_files_are_refused_by_line_without_the_key() {
        for (text, line) in [
            ("sk-a\nsk-a\n", "line 2"),
            ("a:sk-a\na:sk-b\n", "line 2"),
            ("bad name:sk-x\n", "line 1"),
            ("key-1:sk-x\n", "line 1"),
            ("\nalice:\n", "line 2"),
        ] {
            let error = ApiKeys::parse(text).err().unwrap_or_default();
            assert!(error.contains(line), "{text:?}: {error}");
            assert!(!error.contains("sk-"), "{error}");
        }
    }
}
