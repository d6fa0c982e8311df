//! The response journal (SPEC E7): provider responses kept per call key for as long as a
//! redelivery can happen, so a redelivered stage does not pay twice for an answer. The key is the
//! worker's business (`verdict_worker::journal::call_key`); this is only where answers are kept.

use verdict_proto::chat::ChatResponse;

use crate::BoxFuture;

/// A journal failure; the executor then simply calls the provider.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("response journal: {0}")]
pub struct JournalError(pub String);

/// Remembers provider responses per call key for as long as a redelivery can happen.
pub trait ResponseJournal: Send + Sync + std::fmt::Debug {
    fn get<'a>(&'a self, key: &'a str)
    -> BoxFuture<'a, Result<Option<ChatResponse>, JournalError>>;
    fn put<'a>(
        &'a self,
        key: &'a str,
        response: &'a ChatResponse,
    ) -> BoxFuture<'a, Result<(), JournalError>>;
}
