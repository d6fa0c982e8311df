//! Per-attempt transcripts on Redis (SPEC O4): one key per attempt with the retention TTL, and a
//! per-task index so they can be read back without scanning the keyspace.

use super::{RedisStore, Replay, decode, encode, millis};
use crate::BoxFuture;
use crate::store::StoreError;
use crate::store::{TranscriptError, TranscriptStore};
use verdict_proto::transcript::Transcript;

impl RedisStore {
    async fn put_transcript(&self, transcript: Transcript) -> Result<(), StoreError> {
        let key = self.key(
            "transcript",
            &format!(
                "{}:{}:{}",
                transcript.task_id, transcript.stage_id, transcript.attempt
            ),
        );
        let index = self.key("transcripts", &transcript.task_id);
        let json = encode(&key, &transcript)?;
        let ttl = millis(self.inner.config.transcript_ttl);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("SET")
            .arg(&key)
            .arg(json)
            .arg("PX")
            .arg(ttl)
            .ignore()
            .cmd("SADD")
            .arg(&index)
            .arg(&key)
            .ignore()
            .cmd("PEXPIRE")
            .arg(&index)
            .arg(ttl)
            .ignore();
        self.query_pipeline("put transcript", &key, Replay::Safe, &pipe)
            .await
    }

    /// The stored transcripts of a task, oldest attempt first; expired ones are simply absent.
    pub async fn transcripts_of(&self, task_id: &str) -> Result<Vec<Transcript>, StoreError> {
        let index = self.key("transcripts", task_id);
        let keys: Vec<String> = self
            .query(
                "list transcripts",
                &index,
                Replay::Safe,
                redis::cmd("SMEMBERS").arg(&index),
            )
            .await?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let stored: Vec<Option<Vec<u8>>> = self
            .query(
                "get transcripts",
                &index,
                Replay::Safe,
                redis::cmd("MGET").arg(&keys),
            )
            .await?;
        let mut transcripts = keys
            .iter()
            .zip(stored)
            .filter_map(|(key, bytes)| bytes.map(|b| decode::<Transcript>(key, &b)))
            .collect::<Result<Vec<_>, _>>()?;
        transcripts.sort_by(crate::store::reading_order);
        Ok(transcripts)
    }
}

impl TranscriptStore for RedisStore {
    fn put(&self, transcript: Transcript) -> BoxFuture<'_, Result<(), TranscriptError>> {
        Box::pin(async move {
            self.put_transcript(transcript)
                .await
                .map_err(|e| TranscriptError(e.to_string()))
        })
    }
}
