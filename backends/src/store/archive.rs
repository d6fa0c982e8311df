//! Sealing a finished task (issue 14): what its stages left on the store — results,
//! transcripts, progress events — gathered into one compressed record, so that what the task
//! keeps for its retention costs its information once rather than a key, a JSON frame and a
//! compression window per stage and attempt.

use crate::BoxFuture;

use super::StoreError;

/// What [`TaskArchive::seal`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sealing {
    /// The task's records are now one.
    Sealed,
    /// Something of the task was written while it was being read; nothing changed. Sealing
    /// again later gathers it too.
    Changed,
    /// The store keeps nothing it could gather (the memory store, or a task with no records).
    Nothing,
}

/// Gathers a finished task's records. Afterwards every read answers exactly as before (a stage's
/// result, a redelivered stage's claim, the transcripts, the events after any position), and a
/// record written later (a late event, a stale attempt's transcript) is kept and read beside
/// the sealed ones. Sealing is only a saving: a task never sealed reads the same.
pub trait TaskArchive: Send + Sync + std::fmt::Debug {
    fn seal<'a>(
        &'a self,
        task_id: &'a str,
        stage_ids: &'a [String],
    ) -> BoxFuture<'a, Result<Sealing, StoreError>>;
}
