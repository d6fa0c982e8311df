//! Progress events a stage emits while it runs (repair rounds, the soft deadline, retries), behind
//! a small trait: the scheduler's Redis stream in production, a vector in tests and `verdict dev`.

use std::sync::Mutex;

use verdict_proto::wire::{EventType, ProgressEvent, WIRE_VERSION};

use crate::BoxFuture;

/// Where progress events go. Emitting is best effort: a sink that cannot record an event logs
/// it and carries on, because a lost progress line must not fail a review.
pub trait EventSink: Send + Sync + std::fmt::Debug {
    fn emit(&self, event: ProgressEvent) -> BoxFuture<'_, ()>;
}

/// Keeps every event in memory, in order.
#[derive(Debug, Default)]
pub struct MemoryEventSink {
    events: Mutex<Vec<ProgressEvent>>,
}

impl MemoryEventSink {
    pub fn events(&self) -> Vec<ProgressEvent> {
        self.events
            .lock()
            .map(|e| e.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone())
    }

    /// Events of one type, in order.
    pub fn of_type(&self, kind: EventType) -> Vec<ProgressEvent> {
        self.events()
            .into_iter()
            .filter(|e| e.kind == kind)
            .collect()
    }
}

impl EventSink for MemoryEventSink {
    fn emit(&self, event: ProgressEvent) -> BoxFuture<'_, ()> {
        match self.events.lock() {
            Ok(mut events) => events.push(event),
            Err(poisoned) => poisoned.into_inner().push(event),
        }
        Box::pin(async {})
    }
}

/// Builds an event of the current wire version.
pub fn event(
    task_id: &str,
    stage_id: Option<&str>,
    at_unix_ms: u64,
    kind: EventType,
    message: impl Into<String>,
) -> ProgressEvent {
    ProgressEvent {
        version: WIRE_VERSION,
        task_id: task_id.to_owned(),
        at_unix_ms,
        kind,
        channel: None,
        stage_id: stage_id.map(str::to_owned),
        message: message.into(),
        data: serde_json::Value::Null,
    }
}
