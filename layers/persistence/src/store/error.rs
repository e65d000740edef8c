//! [`StoreError`]: a store that failed, and decoding a stored JSON column.

use std::fmt;

use tower_chat::{ChatError, ErrorKind};

/// A store failed: the database could not be reached, refused a statement, or returned data that does not decode.
/// [`StoreError::kind`] tells a failure from a question this store was not set up to answer.
#[derive(Debug)]
pub struct StoreError {
    kind: StoreErrorKind,
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

/// What kind of [`StoreError`] it is, for a caller that answers each differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store failed: unreachable, a statement refused, data that does not decode.
    Failed,
    /// A search of the call log's words asked of a store that keeps no search index (a
    /// [`crate::SqliteStore`] opened without [`crate::SqliteStoreBuilder::search_index`]). Nothing failed: the
    /// same query without words lists the calls.
    NoSearchIndex,
}

impl StoreError {
    /// An error with a message.
    pub fn new(message: impl Into<String>) -> Self {
        StoreError {
            kind: StoreErrorKind::Failed,
            message: message.into(),
            source: None,
        }
    }

    /// An error of `kind` with a message.
    pub(crate) fn of_kind(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        StoreError {
            kind,
            ..StoreError::new(message)
        }
    }

    /// An error with a message and its cause.
    pub fn with_source(
        message: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        StoreError {
            kind: StoreErrorKind::Failed,
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// What kind of error it is.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
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
