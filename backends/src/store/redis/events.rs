//! Progress streams on Redis (SPEC O3): one stream per task, appended with `XADD … MAXLEN ~`,
//! replayed with `XRANGE` and followed with `XREAD BLOCK` on a connection of its own.

use std::time::Duration;

use redis::Value;
use redis::streams::{StreamId, StreamRangeReply, StreamReadReply};
use verdict_proto::wire::ProgressEvent;

use super::archive::Archive;
use super::{Failure, RedisStore, Replay, decode, encode, millis};
use crate::BoxFuture;
use crate::store::EventSink;
use crate::store::{EventLog, StoreError, StoredEvent};

/// The stream field that holds the event's JSON.
const FIELD: &str = "event";

impl RedisStore {
    async fn append_event(&self, event: &ProgressEvent) -> Result<String, StoreError> {
        let key = self.events_key(&event.task_id);
        self.append_events(std::slice::from_ref(event))
            .await?
            .pop()
            .ok_or_else(|| StoreError::Corrupt {
                key,
                reason: "the stream gave no position for the event appended".to_owned(),
            })
    }

    /// The stream of task `task_id`'s progress events.
    pub(super) fn events_key(&self, task_id: &str) -> String {
        self.tagged_key("events", task_id, None)
    }

    /// Each task's events in one transaction (the XADDs in order, then its expiry renewed
    /// once); the positions in the order of `events`. Tasks are apart: their streams may live
    /// on different cluster nodes.
    async fn append_events(&self, events: &[ProgressEvent]) -> Result<Vec<String>, StoreError> {
        let mut tasks: Vec<&str> = Vec::new();
        for event in events {
            if !tasks.contains(&event.task_id.as_str()) {
                tasks.push(&event.task_id);
            }
        }
        let mut positions: Vec<(usize, String)> = Vec::with_capacity(events.len());
        for task in tasks {
            let key = self.events_key(task);
            let mut pipe = redis::pipe();
            pipe.atomic();
            let mut indices = Vec::new();
            for (i, event) in events.iter().enumerate().filter(|(_, e)| e.task_id == task) {
                let json = encode(&key, event)?;
                pipe.cmd("XADD")
                    .arg(&key)
                    .arg("MAXLEN")
                    .arg("~")
                    .arg(self.inner.config.event_stream_maxlen)
                    .arg("*")
                    .arg(FIELD)
                    .arg(&json);
                indices.push(i);
            }
            pipe.cmd("PEXPIRE")
                .arg(&key)
                .arg(millis(self.inner.config.event_ttl))
                .ignore();
            // A replayed XADD would duplicate the events: resend only what never left.
            let ids: Vec<String> = self
                .query_pipeline("append events", &key, Replay::IfUnsent, &pipe)
                .await?;
            positions.extend(indices.into_iter().zip(ids));
        }
        positions.sort_by_key(|(i, _)| *i);
        Ok(positions.into_iter().map(|(_, id)| id).collect())
    }

    async fn read_events(
        &self,
        task_id: &str,
        after: Option<&str>,
        wait: Duration,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let key = self.events_key(task_id);
        if let Some(after) = after {
            check_stream_id(&key, after)?;
        }
        let start = after.map_or_else(|| "-".to_owned(), |id| format!("({id}"));
        // A sealed task's events are in its archive; later ones in the stream after them.
        let archive_key = self.archive_key(task_id);
        let mut pipe = redis::pipe();
        pipe.cmd("XRANGE")
            .arg(&key)
            .arg(&start)
            .arg("+")
            .cmd("GET")
            .arg(&archive_key);
        let (range, archived): (StreamRangeReply, Option<Vec<u8>>) = self
            .query_pipeline("read events", &key, Replay::Safe, &pipe)
            .await?;
        let mut events = Archive::read(&archive_key, archived.as_deref())?.events_after(after);
        events.extend(decode_entries(&key, range.ids)?);
        if !events.is_empty() || wait.is_zero() {
            return Ok(events);
        }
        // Nothing yet: block from the same position, so an event appended between the XRANGE
        // and the XREAD is returned at once rather than missed.
        let from = after.unwrap_or("0-0");
        let waited = match self.wait_for_events(&key, from, wait, true).await {
            Err(WaitError::StaleConnection) => self.wait_for_events(&key, from, wait, false).await,
            other => other,
        };
        let ids = match waited {
            Ok(ids) => ids,
            Err(WaitError::StaleConnection) => {
                return Err(StoreError::Unavailable(format!(
                    "follow events `{key}`: connection lost"
                )));
            }
            Err(WaitError::Store(e)) => return Err(e),
        };
        decode_entries(&key, ids)
    }

    /// One `XREAD BLOCK` on a dedicated connection. With `reuse`, an idle pooled connection may
    /// be taken; if that one turns out dead, [`WaitError::StaleConnection`] asks for a fresh one.
    async fn wait_for_events(
        &self,
        key: &str,
        from: &str,
        wait: Duration,
        reuse: bool,
    ) -> Result<Vec<StreamId>, WaitError> {
        let (mut conn, pooled) = if reuse {
            self.blocking_connection().await?
        } else {
            self.fresh_blocking_connection().await?
        };
        let block_ms = millis(wait);
        let mut cmd = redis::cmd("XREAD");
        cmd.arg("BLOCK")
            .arg(block_ms)
            .arg("STREAMS")
            .arg(key)
            .arg(from);
        let bound = wait + self.inner.config.command_timeout;
        let reply: Result<redis::RedisResult<Option<StreamReadReply>>, _> =
            tokio::time::timeout(bound, cmd.query_async(&mut conn)).await;
        match reply {
            Ok(Ok(read)) => {
                self.return_blocking_connection(conn);
                Ok(read
                    .map(|r| r.keys.into_iter().flat_map(|k| k.ids).collect())
                    .unwrap_or_default())
            }
            Ok(Err(e)) if pooled && super::is_transient(&e) => Err(WaitError::StaleConnection),
            Ok(Err(e)) => Err(WaitError::Store(self.store_error(
                "follow events",
                key,
                &Failure::Redis(e),
            ))),
            Err(_) => Err(WaitError::Store(self.store_error(
                "follow events",
                key,
                &Failure::TimedOut(bound),
            ))),
        }
    }

    async fn fresh_blocking_connection(&self) -> Result<(super::Conn, bool), StoreError> {
        // Pooled connections predate the failure that made us ask; drop them all.
        self.inner
            .blocking
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
        self.blocking_connection().await
    }
}

enum WaitError {
    StaleConnection,
    Store(StoreError),
}

impl From<StoreError> for WaitError {
    fn from(e: StoreError) -> Self {
        WaitError::Store(e)
    }
}

/// Stream ids are `<ms>-<seq>` (or `<ms>`); anything else would be a Redis syntax error later.
fn check_stream_id(key: &str, id: &str) -> Result<(), StoreError> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let valid = match id.split_once('-') {
        Some((ms, seq)) => digits(ms) && digits(seq),
        None => digits(id),
    };
    if valid {
        Ok(())
    } else {
        Err(StoreError::Corrupt {
            key: key.to_owned(),
            reason: format!("`{id}` is not a position in this stream (expected <ms>-<seq>)"),
        })
    }
}

pub(super) fn decode_entries(
    key: &str,
    entries: Vec<StreamId>,
) -> Result<Vec<StoredEvent>, StoreError> {
    entries
        .into_iter()
        .map(|entry| {
            let at = format!("{key}#{}", entry.id);
            let event = match entry.map.get(FIELD) {
                Some(Value::BulkString(bytes)) => decode(&at, bytes)?,
                _ => {
                    return Err(StoreError::Corrupt {
                        key: at,
                        reason: format!("the entry has no `{FIELD}` field"),
                    });
                }
            };
            Ok(StoredEvent {
                id: entry.id,
                event,
            })
        })
        .collect()
}

impl EventLog for RedisStore {
    fn append<'a>(&'a self, event: &'a ProgressEvent) -> BoxFuture<'a, Result<String, StoreError>> {
        Box::pin(self.append_event(event))
    }

    fn append_all<'a>(
        &'a self,
        events: &'a [ProgressEvent],
    ) -> BoxFuture<'a, Result<Vec<String>, StoreError>> {
        Box::pin(self.append_events(events))
    }

    fn read<'a>(
        &'a self,
        task_id: &'a str,
        after: Option<&'a str>,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>, StoreError>> {
        Box::pin(self.read_events(task_id, after, wait))
    }
}

impl EventSink for RedisStore {
    fn emit(&self, event: ProgressEvent) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Err(e) = self.append_event(&event).await {
                tracing::warn!(
                    task_id = %event.task_id,
                    kind = ?event.kind,
                    error = %e,
                    "progress event not recorded"
                );
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_stream_ids_are_accepted_as_positions() {
        for ok in ["0", "0-0", "1700000000000-12"] {
            assert_eq!(check_stream_id("k", ok), Ok(()), "{ok}");
        }
        for bad in ["", "-", "1-", "-1", "abc", "1-2-3", "+", "$"] {
            assert!(check_stream_id("k", bad).is_err(), "{bad}");
        }
    }
}
