//! The response journal (SPEC E7): provider responses kept per call for as long as a redelivery
//! can happen, so a redelivered stage does not pay twice for an answer. Which request a call is
//! (`verdict_worker::journal::call_key`) is the worker's business; this is only where answers are
//! kept, grouped by stage so that recording the stage's result drops them all at once.

use verdict_proto::chat::ChatResponse;

use crate::BoxFuture;

/// A journal failure; the executor then simply calls the provider.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("response journal: {0}")]
pub struct JournalError(pub String);

/// One provider call of one stage: the stage it belongs to, and which call of it (the provider
/// and a hash of the request).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallKey {
    pub task_id: String,
    pub stage_id: String,
    /// The call within the stage, for example `provider/sha256`.
    pub call: String,
}

/// Remembers provider responses per call for as long as a redelivery can happen. Once the
/// stage's result is recorded no delivery calls its provider again, so
/// [`crate::store::ResultStore::record`] drops the stage's entries.
pub trait ResponseJournal: Send + Sync + std::fmt::Debug {
    fn get<'a>(
        &'a self,
        key: &'a CallKey,
    ) -> BoxFuture<'a, Result<Option<ChatResponse>, JournalError>>;
    fn put<'a>(
        &'a self,
        key: &'a CallKey,
        response: &'a ChatResponse,
    ) -> BoxFuture<'a, Result<(), JournalError>>;
}
