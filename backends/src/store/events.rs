//! Progress events a stage emits while it runs (repair rounds, the soft deadline, retries), behind
//! a small trait: the task's Redis stream in production, [`super::memory::MemoryStore`] in tests
//! and `verdict dev`.

use verdict_proto::wire::{EventType, ProgressEvent, WIRE_VERSION};

use crate::BoxFuture;

/// Where progress events go. Emitting is best effort: a sink that cannot record an event logs
/// it and carries on, because a lost progress line must not fail a review.
pub trait EventSink: Send + Sync + std::fmt::Debug {
    fn emit(&self, event: ProgressEvent) -> BoxFuture<'_, ()>;
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
