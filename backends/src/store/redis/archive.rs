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
    /// The archive stored at `key`; none stored reads as an empty one (a task not sealed).
    pub(super) fn read(key: &str, stored: Option<&[u8]>) -> Result<Archive, StoreError> {
        stored.map_or_else(|| Ok(Archive::default()), |bytes| decode(key, bytes))
    }

    pub(super) fn result(&self, stage_id: &str) -> Option<&StageResult> {
        self.results.iter().find(|r| r.stage_id == stage_id)
    }

    /// The archived events after stream position `after` (all when `None`).
    pub(super) fn events_after(&self, after: Option<&str>) -> Vec<StoredEvent> {
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
        self.tagged_key("archive", task_id, None)
    }

    /// The task's archive (empty if it was not sealed).
    pub(super) async fn archive_of(&self, task_id: &str) -> Result<Archive, StoreError> {
        let key = self.archive_key(task_id);
        let stored: Option<Vec<u8>> = self
            .query(
                "get archive",
                &key,
                Replay::Safe,
                redis::cmd("GET").arg(&key),
            )
            .await?;
        Archive::read(&key, stored.as_deref())
    }

    async fn seal_task(&self, task_id: &str, stage_ids: &[String]) -> Result<Sealing, StoreError> {
        match self.gather(task_id, stage_ids).await? {
            Some(gathered) => self.commit(&gathered).await,
            None => Ok(Sealing::Nothing),
        }
    }

    /// Reads what sealing task `task_id` would gather, and the new archive; `None` when there
    /// is nothing, sealed or not.
    async fn gather(
        &self,
        task_id: &str,
        stage_ids: &[String],
    ) -> Result<Option<Gathered>, StoreError> {
        let archive_key = self.archive_key(task_id);
        let index = self.transcripts_index(task_id);
        let events_key = self.events_key(task_id);
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
        let mut archive = Archive::read(&archive_key, existing.as_deref())?;
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
        if gathered.is_empty() && event_count == 0 && existing.is_none() {
            return Ok(None);
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
        Ok(Some(Gathered {
            archive_key,
            index,
            events_key,
            keys: gathered,
            packed,
            ttl,
            index_len: members.len(),
            event_count,
            last_event,
            existing_len: existing.as_ref().map_or(0, Vec::len),
        }))
    }

    /// Writes the archive and deletes what was gathered, unless any of it changed since.
    async fn commit(&self, g: &Gathered) -> Result<Sealing, StoreError> {
        if g.keys.is_empty() && g.event_count == 0 {
            return Ok(Sealing::Sealed); // sealed before, and nothing written since
        }
        let sealed: i64 = self
            .run("seal task", &g.archive_key, Replay::Safe, |mut conn| {
                let mut invocation = SEAL.key(&g.archive_key);
                invocation.key(&g.index).key(&g.events_key);
                for key in &g.keys {
                    invocation.key(key);
                }
                invocation
                    .arg(&g.packed)
                    .arg(g.ttl)
                    .arg(g.index_len)
                    .arg(g.event_count)
                    .arg(&g.last_event)
                    .arg(g.existing_len);
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

/// What [`RedisStore::gather`] read, with the archive to write: [`SEAL`]'s keys and arguments.
struct Gathered {
    archive_key: String,
    index: String,
    events_key: String,
    /// The result and transcript keys read, to delete.
    keys: Vec<String>,
    packed: Vec<u8>,
    ttl: u64,
    index_len: usize,
    event_count: usize,
    last_event: String,
    existing_len: usize,
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

    use crate::store::{EventLog, event};
    use verdict_proto::wire::EventType;

    /// A store on the shared Redis under a prefix of its own; its keys purged by the caller.
    async fn store() -> RedisStore {
        let mut config = super::super::RedisConfig::new("redis://127.0.0.1:6379/");
        config.prefix = format!("test:{:016x}:", rand::random::<u64>());
        RedisStore::connect(config).await.unwrap()
    }

    /// Nothing is lost to sealing: what is written between reading a task and committing its
    /// archive makes the commit change nothing, and the next seal gathers it.
    #[tokio::test]
    async fn a_write_while_sealing_leaves_the_task_as_it_was() {
        let store = store().await;
        let first = event("t", None, 1, EventType::TaskStarted, "one");
        store.append(&first).await.unwrap();
        let gathered = store.gather("t", &[]).await.unwrap().unwrap();
        let late = event("t", None, 2, EventType::TaskFinished, "two");
        store.append(&late).await.unwrap();
        assert_eq!(store.commit(&gathered).await.unwrap(), Sealing::Changed);
        let read = |store: &RedisStore| {
            let store = store.clone();
            async move {
                store
                    .read("t", None, std::time::Duration::ZERO)
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|e| e.event.message)
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(read(&store).await, ["one", "two"], "nothing deleted");
        assert_eq!(store.seal("t", &[]).await.unwrap(), Sealing::Sealed);
        assert_eq!(read(&store).await, ["one", "two"], "both sealed");
        store.purge().await.unwrap();
    }

    #[test]
    fn stream_positions_order_as_redis_orders_them() {
        assert!(stream_position("1700-2") > stream_position("1700-1"));
        assert!(stream_position("1701-0") > stream_position("1700-99"));
        assert_eq!(stream_position("1700"), Some((1700, 0)));
        assert_eq!(stream_position("x-1"), None);
    }
}
