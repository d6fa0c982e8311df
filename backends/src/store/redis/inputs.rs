//! Content-addressed stage inputs on Redis: large inputs (diffs) are stored once under their
//! SHA-256 (of the content, not of the packed form) with a TTL, packed, and fetched by every
//! stage that references them.

use super::packed::{pack, unpack};
use super::{RedisStore, Replay, millis};
use crate::BoxFuture;
use crate::store::{InputError, InputStore, content_hash};

impl RedisStore {
    async fn get_input(&self, sha256: &str) -> Result<Option<Vec<u8>>, InputError> {
        let key = self.key("input", sha256);
        let stored: Option<Vec<u8>> = self
            .query("get input", &key, Replay::Safe, redis::cmd("GET").arg(&key))
            .await
            .map_err(|e| InputError::Unavailable(e.to_string()))?;
        // A frame that does not unpack is handed on as stored: it does not match its hash, so
        // the caller reports it corrupt, naming the input (not an outage to retry).
        Ok(stored.map(|bytes| match unpack(&key, &bytes) {
            Ok(content) => content.into_owned(),
            Err(_) => bytes,
        }))
    }

    async fn put_input(&self, bytes: &[u8]) -> Result<String, InputError> {
        let sha256 = content_hash(bytes);
        let key = self.key("input", &sha256);
        let packed = pack(&key, bytes).map_err(|e| InputError::Unavailable(e.to_string()))?;
        // Storing the same content again only renews its TTL: a new task referencing it keeps
        // it alive for the full retention period.
        let () = self
            .query(
                "put input",
                &key,
                Replay::Safe,
                redis::cmd("SET")
                    .arg(&key)
                    .arg(&packed)
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
