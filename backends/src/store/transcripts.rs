//! Where transcripts are kept for their retention period (SPEC O4): Redis with a TTL in
//! production, memory in tests and `verdict dev`.

use verdict_proto::transcript::Transcript;

use crate::BoxFuture;

/// A failure to store a transcript; the stage result does not depend on it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("store transcript: {0}")]
pub struct TranscriptError(pub String);

/// Where transcripts are kept for their retention period.
pub trait TranscriptStore: Send + Sync + std::fmt::Debug {
    /// Stores a transcript that has already been redacted: one per task, stage and attempt, a
    /// later one for the same attempt (a redelivery) replacing the earlier.
    fn put(&self, transcript: Transcript) -> BoxFuture<'_, Result<(), TranscriptError>>;

    /// A task's stored transcripts in reading order (by start, then stage, then attempt);
    /// expired ones are absent, an unknown task has none.
    fn of_task<'a>(
        &'a self,
        task_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Transcript>, TranscriptError>>;
}

/// The order a task's transcripts are read back in, on every store: by start, then stage, then
/// attempt.
pub(crate) fn reading_order(a: &Transcript, b: &Transcript) -> std::cmp::Ordering {
    (a.started_unix_ms, &a.stage_id, a.attempt).cmp(&(b.started_unix_ms, &b.stage_id, b.attempt))
}

/// Whether two transcripts are of the same attempt (and so the later replaces the earlier).
pub(crate) fn same_attempt(a: &Transcript, b: &Transcript) -> bool {
    (&a.task_id, &a.stage_id, a.attempt) == (&b.task_id, &b.stage_id, b.attempt)
}
