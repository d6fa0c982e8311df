//! The response journal on Redis (SPEC E7): provider responses kept for as long as a redelivery
//! can happen, so a redelivered stage does not pay for the same answer twice. One hash per stage
//! (`journal:{task}:{stage}`, a field per call), so recording the stage's result deletes them all
//! in the same script.

use super::{RedisStore, Replay, decode, encode_packed, millis};
use crate::BoxFuture;
use crate::store::{CallKey, JournalError, ResponseJournal};
use verdict_proto::chat::ChatResponse;

impl RedisStore {
    pub(super) fn journal_key(&self, task_id: &str, stage_id: &str) -> String {
        self.stage_key("journal", task_id, stage_id)
    }

    async fn get_response(&self, call: &CallKey) -> Result<Option<ChatResponse>, JournalError> {
        let key = self.journal_key(&call.task_id, &call.stage_id);
        let stored: Option<Vec<u8>> = self
            .query(
                "get journal entry",
                &key,
                Replay::Safe,
                redis::cmd("HGET").arg(&key).arg(&call.call),
            )
            .await
            .map_err(|e| JournalError(e.to_string()))?;
        stored
            .map(|bytes| decode(&key, &bytes))
            .transpose()
            .map_err(|e| JournalError(e.to_string()))
    }

    async fn put_response(
        &self,
        call: &CallKey,
        response: &ChatResponse,
    ) -> Result<(), JournalError> {
        let key = self.journal_key(&call.task_id, &call.stage_id);
        let json = encode_packed(&key, response).map_err(|e| JournalError(e.to_string()))?;
        // The hash's TTL is renewed by every call's answer: it outlives the stage's last call
        // by the journal's retention, as one key per call did.
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("HSET")
            .arg(&key)
            .arg(&call.call)
            .arg(json)
            .ignore()
            .cmd("PEXPIRE")
            .arg(&key)
            .arg(millis(self.inner.config.journal_ttl))
            .ignore();
        self.query_pipeline::<()>("put journal entry", &key, Replay::Safe, &pipe)
            .await
            .map_err(|e| JournalError(e.to_string()))
    }
}

impl ResponseJournal for RedisStore {
    fn get<'a>(
        &'a self,
        key: &'a CallKey,
    ) -> BoxFuture<'a, Result<Option<ChatResponse>, JournalError>> {
        Box::pin(self.get_response(key))
    }

    fn put<'a>(
        &'a self,
        key: &'a CallKey,
        response: &'a ChatResponse,
    ) -> BoxFuture<'a, Result<(), JournalError>> {
        Box::pin(self.put_response(key, response))
    }
}
