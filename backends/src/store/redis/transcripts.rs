//! Per-attempt transcripts on Redis (SPEC O4): one key per attempt with the retention TTL, and a
//! per-task index so they can be read back without scanning the keyspace. A transcript is stored
//! as a zstd frame of its JSON (a third of the bytes: most of a transcript is prompt text);
//! one written before compression, plain JSON, still reads.

use std::io::Read;

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
        let stored = compress(&key, json.as_bytes())?;
        let ttl = millis(self.inner.config.transcript_ttl);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("SET")
            .arg(&key)
            .arg(stored)
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
            .filter_map(|(key, bytes)| bytes.map(|b| decompress(key, &b)))
            .collect::<Result<Vec<_>, _>>()?;
        transcripts.sort_by(crate::store::reading_order);
        Ok(transcripts)
    }
}

/// zstd's own level default: within a few per cent of level 19's size on transcripts, at a
/// fraction of its CPU.
const LEVEL: i32 = 3;

/// The largest transcript read back, decompressed. A stored transcript is bounded by the
/// broker's message size many times over; a frame that expands past this is corrupt.
const MAX_TRANSCRIPT_BYTES: u64 = 256 * 1024 * 1024;

/// The first bytes of every zstd frame; JSON never starts with them.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

fn compress(key: &str, json: &[u8]) -> Result<Vec<u8>, StoreError> {
    zstd::bulk::compress(json, LEVEL).map_err(|e| StoreError::Corrupt {
        key: key.to_owned(),
        reason: format!("cannot compress: {e}"),
    })
}

/// A stored transcript: a zstd frame of JSON, or (written before compression) JSON.
fn decompress(key: &str, stored: &[u8]) -> Result<Transcript, StoreError> {
    if !stored.starts_with(&ZSTD_MAGIC) {
        return decode(key, stored);
    }
    let corrupt = |reason: String| StoreError::Corrupt {
        key: key.to_owned(),
        reason,
    };
    let decoder = zstd::stream::read::Decoder::new(stored)
        .map_err(|e| corrupt(format!("not a zstd frame: {e}")))?;
    let mut json = Vec::new();
    decoder
        .take(MAX_TRANSCRIPT_BYTES + 1)
        .read_to_end(&mut json)
        .map_err(|e| corrupt(format!("cannot decompress: {e}")))?;
    if json.len() as u64 > MAX_TRANSCRIPT_BYTES {
        return Err(corrupt(format!(
            "decompresses to more than {MAX_TRANSCRIPT_BYTES} bytes"
        )));
    }
    decode(key, &json)
}

impl TranscriptStore for RedisStore {
    fn put(&self, transcript: Transcript) -> BoxFuture<'_, Result<(), TranscriptError>> {
        Box::pin(async move {
            self.put_transcript(transcript)
                .await
                .map_err(|e| TranscriptError(e.to_string()))
        })
    }

    fn of_task<'a>(
        &'a self,
        task_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Transcript>, TranscriptError>> {
        Box::pin(async move {
            self.transcripts_of(task_id)
                .await
                .map_err(|e| TranscriptError(e.to_string()))
        })
    }
}
