//! A task's progress stream as the scheduler writes and reads it: the pipeline's event drafts
//! stamped with the task and the time, appended; the stream read back for the document and for
//! followers.

use std::sync::Arc;
use std::time::Duration;

use verdict_backends::clock::Clock;
use verdict_backends::store::{EventLog, StoreError, StoredEvent};
use verdict_proto::wire::{ProgressEvent, WIRE_VERSION};

use super::{SchedulerDeps, unavailable};
use crate::service::ServiceError;
use verdict_policy::pipeline::Draft;

/// How long a transition's events are offered again to a store out of memory: about as long as
/// an operator's first response to the alert, while the result that brought them waits.
const FULL_PATIENCE: Duration = Duration::from_secs(60);

/// The progress streams; cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Progress {
    events: Arc<dyn EventLog>,
    clock: Arc<dyn Clock>,
}

impl Progress {
    pub(super) fn new(deps: &SchedulerDeps) -> Progress {
        Progress {
            events: deps.events.clone(),
            clock: deps.clock.clone(),
        }
    }

    /// Appends `drafts` in order, all stamped with the current time. A failure is logged, not
    /// returned: events follow a stored change, and a lost event never undoes it (decision 32).
    /// A store out of memory is waited out for up to [`FULL_PATIENCE`] first.
    pub(super) async fn append(&self, task_id: &str, drafts: &[Draft]) {
        let now = self.clock.now_unix_ms();
        let events: Vec<ProgressEvent> = drafts
            .iter()
            .map(|draft| ProgressEvent {
                version: WIRE_VERSION,
                task_id: task_id.to_owned(),
                at_unix_ms: now,
                kind: draft.kind,
                channel: None,
                stage_id: draft.stage_id.clone(),
                message: draft.message.clone(),
                data: draft.data.clone(),
            })
            .collect();
        // One round trip for the transition's events (decision 172). A store out of memory
        // refused them whole and took nothing, so they are offered again while it is full (the
        // change they follow is stored: without them a finished task would have no
        // `task-finished` event); any other failure may have written them, and is not resent.
        let give_up = tokio::time::Instant::now() + FULL_PATIENCE;
        let mut wait = Duration::from_millis(250);
        loop {
            match self.events.append_all(&events).await {
                Ok(_) => return,
                Err(StoreError::Full(_)) if tokio::time::Instant::now() + wait < give_up => {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(5));
                }
                Err(e) => {
                    tracing::warn!(error = %e, task = %task_id, events = events.len(), "progress events not recorded");
                    return;
                }
            }
        }
    }

    /// Every event of the task so far.
    pub(super) async fn all(&self, task_id: &str) -> Result<Vec<ProgressEvent>, ServiceError> {
        let mut events = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let batch = self
                .after(task_id, after.as_deref(), Duration::ZERO)
                .await?;
            if batch.is_empty() {
                break;
            }
            after = batch.last().map(|e| e.id.clone());
            events.extend(batch.into_iter().map(|e| e.event));
        }
        Ok(events)
    }

    /// Events after position `after`, waiting up to `wait` when there are none yet.
    pub(super) async fn after(
        &self,
        task_id: &str,
        after: Option<&str>,
        wait: Duration,
    ) -> Result<Vec<StoredEvent>, ServiceError> {
        self.events
            .read(task_id, after, wait)
            .await
            .map_err(unavailable)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::atomic::{AtomicUsize, Ordering};

    use verdict_backends::BoxFuture;
    use verdict_backends::clock::SystemClock;
    use verdict_backends::store::EventSink;
    use verdict_backends::store::memory::MemoryStore;
    use verdict_proto::wire::EventType;

    use super::*;

    /// A stream whose next `full` appends are refused as a store out of memory.
    #[derive(Debug)]
    struct FullFor {
        store: MemoryStore,
        full: AtomicUsize,
    }

    impl EventSink for FullFor {
        fn emit(&self, event: ProgressEvent) -> BoxFuture<'_, ()> {
            self.store.emit(event)
        }
    }

    impl EventLog for FullFor {
        fn append<'a>(
            &'a self,
            event: &'a ProgressEvent,
        ) -> BoxFuture<'a, Result<String, StoreError>> {
            self.store.append(event)
        }

        fn append_all<'a>(
            &'a self,
            events: &'a [ProgressEvent],
        ) -> BoxFuture<'a, Result<Vec<String>, StoreError>> {
            let refused = self
                .full
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if refused {
                return Box::pin(async { Err(StoreError::Full("at maxmemory".into())) });
            }
            self.store.append_all(events)
        }

        fn read<'a>(
            &'a self,
            task_id: &'a str,
            after: Option<&'a str>,
            wait: Duration,
        ) -> BoxFuture<'a, Result<Vec<StoredEvent>, StoreError>> {
            self.store.read(task_id, after, wait)
        }
    }

    fn draft(kind: EventType) -> Draft {
        Draft {
            kind,
            stage_id: None,
            message: "done".into(),
            data: serde_json::Value::Null,
        }
    }

    /// A transition's events refused by a store out of memory are offered again until it has
    /// room: a finished task keeps its `task-finished` event.
    #[tokio::test(start_paused = true)]
    async fn events_a_full_store_refused_are_appended_once_it_has_room() {
        let log = Arc::new(FullFor {
            store: MemoryStore::new(),
            full: AtomicUsize::new(3),
        });
        let progress = Progress {
            events: log.clone(),
            clock: Arc::new(SystemClock),
        };
        progress
            .append("t1", &[draft(EventType::TaskFinished)])
            .await;
        let events = progress.all("t1").await.unwrap();
        assert_eq!(events.len(), 1, "appended once, after three refusals");
        assert_eq!(events[0].kind, EventType::TaskFinished);
    }
}
