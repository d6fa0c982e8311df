//! The response journal on Redis (SPEC E7): provider responses kept per call key for as long as
//! a redelivery can happen, so a redelivered stage does not pay for the same answer twice.

use super::{RedisStore, Replay, decode, encode, millis};
use crate::BoxFuture;
use crate::store::{JournalError, ResponseJournal};
use verdict_proto::chat::ChatResponse;

impl RedisStore {
    async fn get_response(&self, key: &str) -> Result<Option<ChatResponse>, JournalError> {
        let key = self.key("journal", key);
        let stored: Option<Vec<u8>> = self
            .query(
                "get journal entry",
                &key,
                Replay::Safe,
                redis::cmd("GET").arg(&key),
            )
            .await
            .map_err(|e| JournalError(e.to_string()))?;
        stored
            .map(|bytes| decode(&key, &bytes))
            .transpose()
            .map_err(|e| JournalError(e.to_string()))
    }

    async fn put_response(&self, key: &str, response: &ChatResponse) -> Result<(), JournalError> {
        let key = self.key("journal", key);
        let json = encode(&key, response).map_err(|e| JournalError(e.to_string()))?;
        let () = self
            .query(
                "put journal entry",
                &key,
                Replay::Safe,
                redis::cmd("SET")
                    .arg(&key)
                    .arg(json)
                    .arg("PX")
                    .arg(millis(self.inner.config.journal_ttl)),
            )
            .await
            .map_err(|e| JournalError(e.to_string()))?;
        Ok(())
    }
}

impl ResponseJournal for RedisStore {
    fn get<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<ChatResponse>, JournalError>> {
        Box::pin(self.get_response(key))
    }

    fn put<'a>(
        &'a self,
        key: &'a str,
        response: &'a ChatResponse,
    ) -> BoxFuture<'a, Result<(), JournalError>> {
        Box::pin(self.put_response(key, response))
    }
}
