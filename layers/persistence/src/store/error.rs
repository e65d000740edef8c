//! [`StoreError`]: a store that failed, and decoding a stored JSON column.

use std::fmt;

use tower_chat::{ChatError, ErrorKind};

/// A store failed: the database could not be reached, refused a statement, or returned data that does not decode.
#[derive(Debug)]
pub struct StoreError {
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl StoreError {
    /// An error with a message.
    pub fn new(message: impl Into<String>) -> Self {
        StoreError {
            message: message.into(),
            source: None,
        }
    }

    /// An error with a message and its cause.
    pub fn with_source(
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        StoreError {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl From<StoreError> for ChatError {
    fn from(error: StoreError) -> Self {
        ChatError::new(ErrorKind::Store, error.to_string()).with_source(error)
    }
}

/// Decode a stored JSON column.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn decode_json<T: serde::de::DeserializeOwned>(
    column: &str,
    text: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text)
        .map_err(|e| StoreError::with_source(format!("stored {column} does not decode"), e))
}
