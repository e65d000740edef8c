//! Gateway keys (`--api-keys-file`): clients send `Authorization: Bearer <key>`, or `x-api-key: <key>` (what
//! Anthropic's clients send).

use std::io;
use std::path::Path;

use http::HeaderMap;
use tower_chat::CallerIdentity;

use crate::error::ApiError;

/// The keys clients may use. Each key's caller identity is `key-{line}`, so records and approvals are bound to a
/// key without storing the key itself.
#[derive(Clone)]
pub struct ApiKeys {
    keys: Vec<(String, CallerIdentity)>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKeys")
            .field("keys", &self.keys.len())
            .finish()
    }
}

impl ApiKeys {
    /// Read a file of keys, one per line; blank lines and lines starting with `#` are skipped.
    pub fn load(path: &Path) -> io::Result<Self> {
        let text = std::fs::read_to_string(path)?;
        let keys = Self::parse(&text);
        if keys.keys.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the API keys file lists no key",
            ));
        }
        Ok(keys)
    }

    /// Keys from text, one per line.
    pub fn parse(text: &str) -> Self {
        let keys = text
            .lines()
            .enumerate()
            .map(|(i, line)| (i + 1, line.trim()))
            .filter(|(_, line)| !line.is_empty() && !line.starts_with('#'))
            .map(|(n, key)| (key.to_owned(), CallerIdentity::new(format!("key-{n}"))))
            .collect();
        ApiKeys { keys }
    }

    /// The caller a request's `Authorization: Bearer` header (or, without one, its `x-api-key` header)
    /// identifies, or 401.
    pub fn check(&self, headers: &HeaderMap) -> Result<CallerIdentity, ApiError> {
        let Some(value) = headers.get(http::header::AUTHORIZATION) else {
            return match headers.get("x-api-key").map(|v| v.to_str()) {
                Some(Ok(key)) => self.find(key.trim()),
                Some(Err(_)) => Err(ApiError::unauthorized("malformed x-api-key header")),
                None => Err(ApiError::unauthorized(
                    "missing API key: send `Authorization: Bearer <key>` or `x-api-key: <key>`",
                )),
            };
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .ok_or_else(|| {
                ApiError::unauthorized("malformed Authorization header: expected `Bearer <key>`")
            })?;
        self.find(token)
    }

    fn find(&self, token: &str) -> Result<CallerIdentity, ApiError> {
        // Compare against every key without stopping early, so timing does not reveal a matching prefix.
        let mut found = None;
        for (key, caller) in &self.keys {
            if constant_time_eq(key.as_bytes(), token.as_bytes()) {
                found = Some(caller.clone());
            }
        }
        found.ok_or_else(|| ApiError::unauthorized("invalid API key"))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
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
    fn keys_are_checked_and_named_by_line() {
        let keys = ApiKeys::parse("# comment\nsk-one\n\n  sk-two  \n");
        assert_eq!(
            keys.check(&headers("Bearer sk-one")).unwrap().as_str(),
            "key-2"
        );
        assert_eq!(
            keys.check(&headers("Bearer sk-two")).unwrap().as_str(),
            "key-4"
        );
        assert_eq!(
            keys.check(&headers("Bearer sk-three")).unwrap_err().status,
            401
        );
        assert_eq!(keys.check(&headers("sk-one")).unwrap_err().status, 401);
        assert_eq!(keys.check(&HeaderMap::new()).unwrap_err().status, 401);
        let mut anthropic_style = HeaderMap::new();
        anthropic_style.insert("x-api-key", "sk-two".parse().unwrap());
        assert_eq!(keys.check(&anthropic_style).unwrap().as_str(), "key-4");
        anthropic_style.insert("x-api-key", "sk-wrong".parse().unwrap());
        assert_eq!(keys.check(&anthropic_style).unwrap_err().status, 401);
        assert!(format!("{keys:?}").contains('2') && !format!("{keys:?}").contains("sk-"));
    }
}
