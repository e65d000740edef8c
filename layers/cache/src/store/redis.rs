//! [`RedisCacheStore`]: answers in Redis, shared by every replica that points at the same server.
//!
//! An entry is one string key (`prefix` + the key's hex digest) holding the answer's JSON compressed with LZ4
//! (block format, its length in front), written with `SET … PX ttl` so Redis expires it. Each operation is one
//! round trip bounded by the store's timeout.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::AsyncCommands;

use crate::answer::CachedAnswer;
use crate::key::CacheKey;
use crate::store::{CacheStore, CacheStoreError};

/// Answers in Redis, for several replicas sharing one cache. Cloning is cheap (one multiplexed connection,
/// reconnected on failure).
#[derive(Clone)]
pub struct RedisCacheStore {
    connection: ConnectionManager,
    prefix: Arc<str>,
    timeout: Duration,
}

impl fmt::Debug for RedisCacheStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCacheStore")
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Options for a [`RedisCacheStore`].
#[derive(Clone, Debug)]
pub struct RedisCacheStoreBuilder {
    url: String,
    prefix: String,
    timeout: Duration,
}

impl RedisCacheStoreBuilder {
    /// The prefix of every key (default `tower-chat:cache:`).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// How long connecting or one operation may take before it counts as a failure (default 200 ms; the layer
    /// bounds each store call by its own timeout too).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Build the store. It connects on first use (and reconnects after failures), so an unreachable server
    /// makes misses, not a startup error.
    ///
    /// # Errors
    /// The URL is not a Redis URL.
    ///
    /// # Panics
    /// Outside a Tokio runtime.
    pub fn build(self) -> Result<RedisCacheStore, CacheStoreError> {
        let client = redis::Client::open(self.url.as_str()).map_err(|e| {
            CacheStoreError::with_source(format!("bad Redis URL {:?}", self.url), e)
        })?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            .set_number_of_retries(1);
        let connection = ConnectionManager::new_lazy_with_config(client, config)
            .map_err(|e| CacheStoreError::with_source("cannot set up the Redis connection", e))?;
        Ok(RedisCacheStore {
            connection,
            prefix: Arc::from(self.prefix),
            timeout: self.timeout,
        })
    }
}

impl RedisCacheStore {
    /// Options for a store at `url` (`redis://host:port/db`).
    pub fn builder(url: impl Into<String>) -> RedisCacheStoreBuilder {
        RedisCacheStoreBuilder {
            url: url.into(),
            prefix: "tower-chat:cache:".to_owned(),
            timeout: Duration::from_millis(200),
        }
    }

    /// A store at `url` with default options.
    ///
    /// # Errors
    /// The URL is not a Redis URL.
    pub fn new(url: impl Into<String>) -> Result<RedisCacheStore, CacheStoreError> {
        RedisCacheStore::builder(url).build()
    }

    /// The Redis key of `key`.
    pub fn redis_key(&self, key: &CacheKey) -> String {
        format!("{}{key}", self.prefix)
    }
}

/// Run one Redis operation within `timeout`, as a store error if it fails or takes too long.
async fn timed<T>(
    what: &'static str,
    timeout: Duration,
    operation: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> Result<T, CacheStoreError> {
    match tokio::time::timeout(timeout, operation).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(CacheStoreError::with_source(
            format!("Redis {what} failed"),
            error,
        )),
        Err(_) => Err(CacheStoreError::new(format!(
            "Redis {what} timed out after {timeout:?}"
        ))),
    }
}

impl CacheStore for RedisCacheStore {
    fn get(&self, key: CacheKey) -> BoxFuture<'_, Result<Option<CachedAnswer>, CacheStoreError>> {
        Box::pin(async move {
            let mut connection = self.connection.clone();
            let redis_key = self.redis_key(&key);
            let bytes: Option<Vec<u8>> =
                timed("GET", self.timeout, connection.get(&redis_key)).await?;
            let Some(bytes) = bytes else { return Ok(None) };
            // An entry that does not decompress or parse (another version wrote it, it was damaged) is a miss.
            let answer = lz4_flex::block::decompress_size_prepended(&bytes)
                .ok()
                .and_then(|json| CachedAnswer::from_json(&json));
            if answer.is_none() {
                tracing::warn!(key = %redis_key, "unreadable response cache entry ignored");
            }
            Ok(answer)
        })
    }

    fn put(
        &self,
        key: CacheKey,
        answer: CachedAnswer,
        ttl: Duration,
    ) -> BoxFuture<'_, Result<(), CacheStoreError>> {
        Box::pin(async move {
            let mut connection = self.connection.clone();
            let bytes = lz4_flex::block::compress_prepend_size(&answer.to_json());
            let millis = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
            let options =
                redis::SetOptions::default().with_expiration(redis::SetExpiry::PX(millis));
            timed(
                "SET",
                self.timeout,
                connection.set_options::<_, _, ()>(self.redis_key(&key), bytes, options),
            )
            .await
        })
    }
}
