//! The response cache on Redis (SPEC X3): accepted stage answers kept for `response_cache_ttl`
//! under their cache key, shared by every worker of the pool.

use super::{RedisStore, Replay, decode, encode_packed, millis};
use crate::BoxFuture;
use crate::store::{CacheError, CachedAnswer, ResponseCache};

impl RedisStore {
    async fn get_cached(&self, key: &str) -> Result<Option<CachedAnswer>, CacheError> {
        let key = self.key("cache", key);
        let stored: Option<Vec<u8>> = self
            .query(
                "get cached answer",
                &key,
                Replay::Safe,
                redis::cmd("GET").arg(&key),
            )
            .await
            .map_err(|e| CacheError(e.to_string()))?;
        stored
            .map(|bytes| decode(&key, &bytes))
            .transpose()
            .map_err(|e| CacheError(e.to_string()))
    }

    async fn put_cached(&self, key: &str, answer: &CachedAnswer) -> Result<(), CacheError> {
        let key = self.key("cache", key);
        let json = encode_packed(&key, answer).map_err(|e| CacheError(e.to_string()))?;
        // NX: the first answer paid for stays; a replay of the same SET is harmless.
        let _: Option<String> = self
            .query(
                "put cached answer",
                &key,
                Replay::Safe,
                redis::cmd("SET")
                    .arg(&key)
                    .arg(json)
                    .arg("NX")
                    .arg("PX")
                    .arg(millis(self.inner.config.response_cache_ttl)),
            )
            .await
            .map_err(|e| CacheError(e.to_string()))?;
        Ok(())
    }
}

impl ResponseCache for RedisStore {
    fn get_answer<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<CachedAnswer>, CacheError>> {
        Box::pin(self.get_cached(key))
    }

    fn put_answer<'a>(
        &'a self,
        key: &'a str,
        answer: &'a CachedAnswer,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        Box::pin(self.put_cached(key, answer))
    }
}
