//! A task's progress stream as the scheduler writes and reads it: the pipeline's event drafts
//! stamped with the task and the time, appended; the stream read back for the document and for
//! followers.

use std::sync::Arc;
use std::time::Duration;

use verdict_backends::clock::Clock;
use verdict_backends::store::{EventLog, StoredEvent};
use verdict_proto::wire::{ProgressEvent, WIRE_VERSION};

use super::{SchedulerDeps, unavailable};
use crate::pipeline::Draft;
use crate::service::ServiceError;

/// The progress streams; cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Progress {
    events: Arc<dyn EventLog>,
    clock: Arc<dyn Clock>,
}

impl Progress {
    pub fn new(deps: &SchedulerDeps) -> Progress {
        Progress {
            events: deps.events.clone(),
            clock: deps.clock.clone(),
        }
    }

    /// Appends `drafts` in order, all stamped with the current time. A failure is logged, not
    /// returned: events follow a stored change, and a lost event never undoes it (decision 32).
    pub async fn append(&self, task_id: &str, drafts: &[Draft]) {
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
        // One round trip for the transition's events (decision 172).
        if let Err(e) = self.events.append_all(&events).await {
            tracing::warn!(error = %e, task = %task_id, events = events.len(), "progress events not recorded");
        }
    }

    /// Every event of the task so far.
    pub async fn all(&self, task_id: &str) -> Result<Vec<ProgressEvent>, ServiceError> {
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
    pub async fn after(
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
