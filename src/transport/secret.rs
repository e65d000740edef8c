//! API keys: never shown by `Debug`, redacted from provider messages, sent as sensitive header values.

use std::fmt;

use http::HeaderValue;

use crate::error::{ChatError, ErrorKind};

/// A secret (an API key). Its `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a secret.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself, for building a header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Replace every occurrence of the secret in `text` (providers sometimes echo keys in error messages).
    pub(crate) fn redact(&self, text: String) -> String {
        if self.0.len() >= 4 && text.contains(&self.0) {
            text.replace(&self.0, "[redacted]")
        } else {
            text
        }
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

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
