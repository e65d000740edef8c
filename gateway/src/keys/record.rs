//! What a managed key and a team are: the stored rows, their public JSON (never a secret), the secrets
//! themselves, and the checks on names, patterns and limits.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::config::limits::LimitsEntry;
use crate::error::ApiError;
use crate::stack::upstreams::routes::glob;

/// What every generated secret starts with, so a leaked one is recognised (by a secret scanner, by a reader).
pub(crate) const SECRET_PREFIX: &str = "tcg_";
/// The longest name (as in the keys file).
pub(crate) const MAX_NAME: usize = 64;
/// The most model or route patterns on one key.
const MAX_PATTERNS: usize = 100;
/// The longest pattern.
const MAX_PATTERN: usize = 200;
/// The largest metadata object, as JSON.
const MAX_METADATA: usize = 16 * 1024;

/// Which table a row lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `tower_chat_keys`.
    Key,
    /// `tower_chat_teams`.
    Team,
}

impl Kind {
    /// The word the audit log and the errors use.
    pub(crate) fn noun(self) -> &'static str {
        match self {
            Kind::Key => "key",
            Kind::Team => "team",
        }
    }
}

/// A stored row of either table: the columns the database indexes, and the rest as one JSON document.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Row {
    pub(crate) id: String,
    pub(crate) name: String,
    /// A key's secret's SHA-256 in hex (a team: empty).
    pub(crate) digest: String,
    /// The secret before the last rotation, valid until `KeyDoc::previous_valid_until` (a team: `None`).
    pub(crate) previous_digest: Option<String>,
    pub(crate) doc: String,
}

/// A key's stored document: everything but its id, name and digests.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct KeyDoc {
    /// The owner team's id.
    pub(crate) team: Option<String>,
    /// Unix seconds after which the key is refused.
    pub(crate) expires_at: Option<i64>,
    /// Models the key may call (names, or patterns with `*`); empty: every model.
    pub(crate) models: Vec<String>,
    /// Routes the key may use (paths, or patterns with `*`); empty: every client route.
    pub(crate) routes: Vec<String>,
    pub(crate) limits: LimitsEntry,
    pub(crate) metadata: Map<String, Value>,
    /// The secret's first characters, to tell keys apart in a list.
    pub(crate) hint: String,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
    pub(crate) revoked_at: Option<i64>,
    /// Unix milliseconds until which the secret before the last rotation is still accepted.
    pub(crate) previous_valid_until: Option<i64>,
}

/// A team's stored document.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct TeamDoc {
    pub(crate) limits: LimitsEntry,
    pub(crate) metadata: Map<String, Value>,
    pub(crate) created_at: i64,
    pub(crate) updated_at: i64,
}

impl Row {
    /// The key document (a store holding a document it cannot read is corrupt: an error naming the row).
    pub(crate) fn key_doc(&self) -> Result<KeyDoc, String> {
        serde_json::from_str(&self.doc)
            .map_err(|e| format!("key {}: unreadable document: {e}", self.id))
    }

    /// The team document.
    pub(crate) fn team_doc(&self) -> Result<TeamDoc, String> {
        serde_json::from_str(&self.doc)
            .map_err(|e| format!("team {}: unreadable document: {e}", self.id))
    }

    /// The row as the API, the console and the audit log show it: never a digest.
    pub(crate) fn public(&self, kind: Kind, now_ms: i64) -> Value {
        match kind {
            Kind::Key => match self.key_doc() {
                Ok(doc) => json!({
                    "object": "key",
                    "id": self.id,
                    "name": self.name,
                    "status": doc.status(now_ms),
                    "team": doc.team,
                    "expires_at": doc.expires_at,
                    "models": doc.models,
                    "routes": doc.routes,
                    "limits": doc.limits,
                    "metadata": doc.metadata,
                    "key_hint": doc.hint,
                    "created_at": doc.created_at,
                    "updated_at": doc.updated_at,
                    "revoked_at": doc.revoked_at,
                    "previous_key_valid_until": doc
                        .previous_valid_until
                        .filter(|until| *until > now_ms && self.previous_digest.is_some())
                        .map(|ms| ms / 1000),
                }),
                Err(e) => json!({"object": "key", "id": self.id, "name": self.name, "error": e}),
            },
            Kind::Team => match self.team_doc() {
                Ok(doc) => json!({
                    "object": "team",
                    "id": self.id,
                    "name": self.name,
                    "limits": doc.limits,
                    "metadata": doc.metadata,
                    "created_at": doc.created_at,
                    "updated_at": doc.updated_at,
                }),
                Err(e) => json!({"object": "team", "id": self.id, "name": self.name, "error": e}),
            },
        }
    }
}

impl KeyDoc {
    /// `active`, `revoked` or `expired`.
    pub(crate) fn status(&self, now_ms: i64) -> &'static str {
        if self.revoked_at.is_some() {
            "revoked"
        } else if self
            .expires_at
            .is_some_and(|at| at.saturating_mul(1000) <= now_ms)
        {
            "expired"
        } else {
            "active"
        }
    }
}

/// A new secret: [`SECRET_PREFIX`] and 64 hex digits of 32 bytes from the operating system's RNG.
pub(crate) fn new_secret() -> Result<String, ApiError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| {
        ApiError::new(
            http::StatusCode::INTERNAL_SERVER_ERROR,
            "api_error",
            "no_randomness",
            format!("the operating system's random number generator failed: {e}"),
        )
    })?;
    Ok(format!("{SECRET_PREFIX}{}", hex(&bytes)))
}

/// A secret's SHA-256, in hex: what the store keeps.
pub(crate) fn secret_digest(secret: &str) -> String {
    hex(&Sha256::digest(secret.as_bytes()))
}

/// The part of a secret a list shows: the prefix and four more characters.
pub(crate) fn hint(secret: &str) -> String {
    format!("{}…", &secret[..SECRET_PREFIX.len() + 4])
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `name` is allowed by `patterns` (empty: everything). A pattern is a literal, or holds `*`s that
/// match any run of characters (`gpt-4o*`, `*-mini`, `/v1/*`).
pub(crate) fn allowed(patterns: &[String], name: &str) -> bool {
    patterns.is_empty() || patterns.iter().any(|p| glob(p, name))
}

/// A 400 naming the field.
pub(crate) fn invalid(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::invalid_request(code, message.into())
}

/// The rules of a name: those of a `name:key` line of the keys file (the caller identity it becomes).
pub(crate) fn check_name(name: &str) -> Result<(), ApiError> {
    if name.is_empty()
        || name.len() > MAX_NAME
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        || name.starts_with("key-")
    {
        return Err(invalid(
            "invalid_name",
            format!(
                "`name` must be 1 to {MAX_NAME} characters of A-Z a-z 0-9 - _ . and not start with `key-`"
            ),
        ));
    }
    Ok(())
}

/// The rules of a list of model or route patterns.
pub(crate) fn check_patterns(field: &str, patterns: &[String]) -> Result<(), ApiError> {
    if patterns.len() > MAX_PATTERNS
        || patterns
            .iter()
            .any(|p| p.is_empty() || p.len() > MAX_PATTERN)
    {
        return Err(invalid(
            "invalid_patterns",
            format!(
                "`{field}` takes at most {MAX_PATTERNS} names or patterns of 1 to {MAX_PATTERN} characters"
            ),
        ));
    }
    Ok(())
}

/// The rules of limits: budgets are dollar amounts ≥ 0.
pub(crate) fn check_limits(limits: &LimitsEntry) -> Result<(), ApiError> {
    for usd in [limits.cost_per_day_usd, limits.cost_per_month_usd]
        .into_iter()
        .flatten()
    {
        if !usd.is_finite() || usd < 0.0 {
            return Err(invalid(
                "invalid_limits",
                "a budget in `limits` must be a dollar amount ≥ 0",
            ));
        }
    }
    Ok(())
}

/// The rules of metadata: a JSON object of at most [`MAX_METADATA`] bytes.
pub(crate) fn check_metadata(metadata: &Map<String, Value>) -> Result<(), ApiError> {
    let size = serde_json::to_vec(metadata).map_or(usize::MAX, |v| v.len());
    if size > MAX_METADATA {
        return Err(invalid(
            "invalid_metadata",
            format!("`metadata` is larger than {MAX_METADATA} bytes"),
        ));
    }
    Ok(())
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A 403 in the gateway's error shape.
pub(crate) fn forbidden(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::new(
        http::StatusCode::FORBIDDEN,
        "permission_error",
        code,
        message.into(),
    )
}

/// A 409.
pub(crate) fn conflict(code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError {
        status: http::StatusCode::CONFLICT,
        ..ApiError::invalid_request(code, message.into())
    }
}

/// A 500 for a store that failed.
pub(crate) fn internal(message: impl Into<String>) -> ApiError {
    ApiError::new(
        http::StatusCode::INTERNAL_SERVER_ERROR,
        "api_error",
        "store_failed",
        message.into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_literals_and_stars() {
        let p = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(allowed(&[], "anything"));
        assert!(allowed(&p(&["gpt-4o"]), "gpt-4o"));
        assert!(!allowed(&p(&["gpt-4o"]), "gpt-4o-mini"));
        assert!(allowed(&p(&["gpt-4o*"]), "gpt-4o-mini"));
        assert!(allowed(&p(&["*-mini"]), "gpt-4o-mini"));
        assert!(!allowed(&p(&["*-mini"]), "gpt-4o"));
        assert!(allowed(
            &p(&["claude-*-latest"]),
            "claude-3-5-sonnet-latest"
        ));
        assert!(!allowed(&p(&["a*a"]), "a"), "the two ends may not overlap");
        assert!(allowed(&p(&["a*a"]), "aa"));
        assert!(allowed(&p(&["/v1/*"]), "/v1/messages"));
        assert!(!allowed(&p(&["/v1/chat/*", "x"]), "/v1/messages"));
        assert!(allowed(&p(&["*"]), ""));
    }

    #[test]
    fn secrets_are_prefixed_random_and_hinted_without_their_body() {
        let a = new_secret().unwrap();
        let b = new_secret().unwrap();
        assert!(
            a.starts_with(SECRET_PREFIX) && a.len() == SECRET_PREFIX.len() + 64,
            "{a}"
        );
        assert_ne!(a, b);
        assert_eq!(secret_digest(&a).len(), 64);
        assert_ne!(secret_digest(&a), secret_digest(&b));
        assert_eq!(hint(&a).chars().count(), SECRET_PREFIX.len() + 5);
    }

    #[test]
    fn names_patterns_limits_and_metadata_are_checked() {
        assert!(check_name("team-a.bot_1").is_ok());
        for bad in ["", "key-x", "a b", &"n".repeat(MAX_NAME + 1)] {
            assert_eq!(check_name(bad).unwrap_err().code, "invalid_name", "{bad}");
        }
        assert!(check_patterns("models", &["".into()]).is_err());
        let negative = LimitsEntry {
            cost_per_day_usd: Some(-1.0),
            ..LimitsEntry::default()
        };
        assert!(check_limits(&negative).is_err());
        let mut big = Map::new();
        big.insert("x".into(), Value::String("y".repeat(MAX_METADATA)));
        assert!(check_metadata(&big).is_err());
    }

    #[test]
    fn status_follows_revocation_and_expiry() {
        let doc = KeyDoc {
            expires_at: Some(10),
            ..KeyDoc::default()
        };
        assert_eq!(doc.status(9_999), "active");
        assert_eq!(doc.status(10_000), "expired");
        let revoked = KeyDoc {
            revoked_at: Some(1),
            ..doc
        };
        assert_eq!(revoked.status(0), "revoked");
    }
}
