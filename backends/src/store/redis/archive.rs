//! Sealed tasks on Redis (issue 14): a finished task's stage results, transcripts and progress
//! events gathered into one packed record, `archive:{task}`, and their own keys deleted in the
//! same script. Compressed together they shrink several times more than one by one: every
//! transcript of a task repeats the tools offered, the field names and the answers its results
//! hold. The readers of results, claims, transcripts and events look in the archive too, so a
//! sealed task reads exactly as before; what is written after sealing (a late event, a stale
//! attempt's transcript) goes to the usual keys and is read beside it.

use std::sync::LazyLock;

use redis::Script;
use redis::streams::StreamRangeReply;
use serde::{Deserialize, Serialize};
use verdict_proto::wire::StageResult;

use super::packed;
use super::transcripts::Stored;
use super::{RedisStore, Replay, decode, encode, millis};
use crate::BoxFuture;
use crate::store::{Sealing, StoreError, StoredEvent, TaskArchive};

/// What `archive:{task}` holds.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct Archive {
    #[serde(default)]
    pub results: Vec<StageResult>,
    /// As the transcript keys held them: long texts as references to the shared texts.
    #[serde(default)]
    pub transcripts: Vec<Stored>,
    /// In stream order, each with its stream position.
    #[serde(default)]
    pub events: Vec<ArchivedEvent>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ArchivedEvent {
    pub id: String,
    pub event: verdict_proto::wire::ProgressEvent,
}

impl Archive {
    pub fn result(&self, stage_id: &str) -> Option<&StageResult> {
        self.results.iter().find(|r| r.stage_id == stage_id)
    }

    /// The archived events after stream position `after` (all when `None`).
    pub fn events_after(&self, after: Option<&str>) -> Vec<StoredEvent> {
        let after = after.and_then(stream_position);
        self.events
            .iter()
            .filter(|e| match (after, stream_position(&e.id)) {
                (Some(after), Some(at)) => at > after,
                _ => true,
            })
            .map(|e| StoredEvent {
                id: e.id.clone(),
                event: e.event.clone(),
            })
            .collect()
    }
}

/// A stream id `<ms>-<seq>` (or `<ms>`) as a pair that orders as Redis orders them.
pub(super) fn stream_position(id: &str) -> Option<(u64, u64)> {
    match id.split_once('-') {
        Some((ms, seq)) => Some((ms.parse().ok()?, seq.parse().ok()?)),
        None => Some((id.parse().ok()?, 0)),
    }
}

/// The level the archive is packed at: once per task, so a little more CPU than for the
/// per-stage records buys a few per cent (level 6: 5 % smaller than 3 at twice its time, which
/// is still a few milliseconds for a task's records).
const ARCHIVE_LEVEL: i32 = 6;

/// KEYS: archive, transcripts index, events stream, then every result and transcript key read.
/// ARGV: the archive's new value, its TTL (ms), the index's size, the stream's length and last
/// position, and the archive's length (0: none) as read. Writes the archive and deletes what it
/// gathered, unless any of them changed since it was read (then 0, and nothing changes).
static SEAL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('SCARD', KEYS[2]) ~= tonumber(ARGV[3]) then return 0 end
if redis.call('XLEN', KEYS[3]) ~= tonumber(ARGV[4]) then return 0 end
local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)
local last_id = ''
if last[1] then last_id = last[1][1] end
if last_id ~= ARGV[5] then return 0 end
if redis.call('STRLEN', KEYS[1]) ~= tonumber(ARGV[6]) then return 0 end
for i = 4, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('DEL', unpack(KEYS, 2))
return 1
",
    )
});

impl RedisStore {
    pub(super) fn archive_key(&self, task_id: &str) -> String {
        self.key("archive", task_id)
    }

    /// The task's archive, if it was sealed.
    pub(super) async fn archive_of(&self, task_id: &str) -> Result<Option<Archive>, StoreError> {
        let key = self.archive_key(task_id);
        let stored: Option<Vec<u8>> = self
            .query(
                "get archive",
                &key,
                Replay::Safe,
                redis::cmd("GET").arg(&key),
            )
            .await?;
        stored.map(|bytes| decode(&key, &bytes)).transpose()
    }

    async fn seal_task(&self, task_id: &str, stage_ids: &[String]) -> Result<Sealing, StoreError> {
        let archive_key = self.archive_key(task_id);
        let index = self.key("transcripts", task_id);
        let events_key = self.key("events", task_id);
        let mut read = redis::pipe();
        read.cmd("SMEMBERS")
            .arg(&index)
            .cmd("XRANGE")
            .arg(&events_key)
            .arg("-")
            .arg("+")
            .cmd("GET")
            .arg(&archive_key);
        let (members, events, existing): (Vec<String>, StreamRangeReply, Option<Vec<u8>>) = self
            .query_pipeline("read a task to seal", &archive_key, Replay::Safe, &read)
            .await?;
        let mut archive: Archive = match &existing {
            Some(bytes) => decode(&archive_key, bytes)?,
            None => Archive::default(),
        };
        let result_keys: Vec<String> = stage_ids
            .iter()
            .map(|stage| self.stage_key("result", task_id, stage))
            .collect();
        let keys: Vec<String> = result_keys.iter().chain(&members).cloned().collect();
        let values: Vec<Option<Vec<u8>>> = if keys.is_empty() {
            Vec::new()
        } else {
            self.query(
                "read a task to seal",
                &archive_key,
                Replay::Safe,
                redis::cmd("MGET").arg(&keys),
            )
            .await?
        };
        let mut gathered = Vec::new();
        for (i, (key, value)) in keys.iter().zip(values).enumerate() {
            let Some(bytes) = value else { continue };
            if i < result_keys.len() {
                let result: StageResult = decode(key, &bytes)?;
                archive.results.retain(|r| r.stage_id != result.stage_id);
                archive.results.push(result);
            } else {
                let stored = super::transcripts::decompress(key, &bytes)?;
                archive
                    .transcripts
                    .retain(|t| !crate::store::same_attempt(&t.transcript, &stored.transcript));
                archive.transcripts.push(stored);
            }
            gathered.push(key.clone());
        }
        let last_event = events.ids.last().map(|e| e.id.clone()).unwrap_or_default();
        let event_count = events.ids.len();
        archive.events.extend(
            super::events::decode_entries(&events_key, events.ids)?
                .into_iter()
                .map(|e| ArchivedEvent {
                    id: e.id,
                    event: e.event,
                }),
        );
        if gathered.is_empty() && event_count == 0 {
            return Ok(if existing.is_some() {
                Sealing::Sealed
            } else {
                Sealing::Nothing
            });
        }
        let json = encode(&archive_key, &archive)?;
        let packed = packed::pack_at(&archive_key, json.as_bytes(), ARCHIVE_LEVEL)?;
        let config = &self.inner.config;
        // The archive holds every kind, so it lives as long as the longest-kept of them.
        let ttl = millis(
            config
                .result_ttl
                .max(config.transcript_ttl)
                .max(config.event_ttl),
        );
        let existing_len = existing.as_ref().map_or(0, Vec::len);
        let sealed: i64 = self
            .run("seal task", &archive_key, Replay::Safe, |mut conn| {
                let mut invocation = SEAL.key(&archive_key);
                invocation.key(&index).key(&events_key);
                for key in &gathered {
                    invocation.key(key);
                }
                invocation
                    .arg(&packed)
                    .arg(ttl)
                    .arg(members.len())
                    .arg(event_count)
                    .arg(&last_event)
                    .arg(existing_len);
                async move { invocation.invoke_async(&mut conn).await }
            })
            .await?;
        Ok(if sealed == 1 {
            Sealing::Sealed
        } else {
            Sealing::Changed
        })
    }
}

impl TaskArchive for RedisStore {
    fn seal<'a>(
        &'a self,
        task_id: &'a str,
        stage_ids: &'a [String],
    ) -> BoxFuture<'a, Result<Sealing, StoreError>> {
        Box::pin(self.seal_task(task_id, stage_ids))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_positions_order_as_redis_orders_them() {
        assert!(stream_position("1700-2") > stream_position("1700-1"));
        assert!(stream_position("1701-0") > stream_position("1700-99"));
        assert_eq!(stream_position("1700"), Some((1700, 0)));
        assert_eq!(stream_position("x-1"), None);
    }
}
