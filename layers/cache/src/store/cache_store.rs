//! The [`CacheStore`] trait every store implements, and the error a store answers with.

use std::fmt;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::answer::CachedAnswer;
use crate::key::CacheKey;

/// A place to keep answers by key, each for its own time to live.
pub trait CacheStore: fmt::Debug + Send + Sync + 'static {
    /// The answer stored under `key`, if one is there and alive.
    fn get(&self, key: CacheKey) -> BoxFuture<'_, Result<Option<CachedAnswer>, CacheStoreError>>;

    /// Keep `answer` under `key` for `ttl` (replacing what was there).
    fn put(
        &self,
        key: CacheKey,
        answer: CachedAnswer,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<(), CacheStoreError>>;
}

/// A store that could not answer.
#[derive(Debug)]
pub struct CacheStoreError {
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl CacheStoreError {
    /// An error with a message.
    pub fn new(message: impl Into<String>) -> Self {
        CacheStoreError {
            message: message.into(),
            source: None,
        }
    }

    /// An error with a message and its cause.
    pub fn with_source(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        CacheStoreError {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }
}

impl fmt::Display for CacheStoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(source) = &self.source {
            write!(f, ": {source}")?;
        }
        Ok(())
    }
}

impl std::error::Error for CacheStoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
