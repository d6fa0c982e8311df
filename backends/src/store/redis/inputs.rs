//! Content-addressed stage inputs on Redis: large inputs (diffs) are stored once under their
//! SHA-256 with a TTL and fetched by every stage that references them.

use super::{RedisStore, Replay, millis};
use crate::BoxFuture;
use crate::store::{InputError, InputStore, content_hash};

impl RedisStore {
    async fn get_input(&self, sha256: &str) -> Result<Option<Vec<u8>>, InputError> {
        let key = self.key("input", sha256);
        self.query("get input", &key, Replay::Safe, redis::cmd("GET").arg(&key))
            .await
            .map_err(|e| InputError::Unavailable(e.to_string()))
    }

    async fn put_input(&self, bytes: &[u8]) -> Result<String, InputError> {
        let sha256 = content_hash(bytes);
        let key = self.key("input", &sha256);
        // Storing the same content again only renews its TTL: a new task referencing it keeps
        // it alive for the full retention period.
        let () = self
            .query(
                "put input",
                &key,
                Replay::Safe,
                redis::cmd("SET")
                    .arg(&key)
                    .arg(bytes)
                    .arg("PX")
                    .arg(millis(self.inner.config.input_ttl)),
            )
            .await
            .map_err(|e| InputError::Unavailable(e.to_string()))?;
        Ok(sha256)
    }
}

impl InputStore for RedisStore {
    fn get<'a>(&'a self, sha256: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, InputError>> {
        Box::pin(self.get_input(sha256))
    }

    fn put<'a>(&'a self, bytes: &'a [u8]) -> BoxFuture<'a, Result<String, InputError>> {
        Box::pin(self.put_input(bytes))
    }
}
