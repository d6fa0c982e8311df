//! The response cache (SPEC X3): the accepted answer of a stage kept under a key of everything
//! that decided it — stage, protocol, prompt text (and so the prompt's version), provider, model,
//! inputs, repository commit, tools — so identical work in any later task is answered without
//! paying the provider again. The key is the worker's business (`verdict_worker::cache::key`);
//! this is only where answers are kept.

use serde::{Deserialize, Serialize};

use crate::BoxFuture;

/// A cache failure; the executor then simply calls the provider.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("response cache: {0}")]
pub struct CacheError(pub String);

/// One stage's accepted answer, as the stage outcome carried it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedAnswer {
    /// The canonical parsed value the protocol accepted.
    pub value: serde_json::Value,
    /// The model that answered.
    pub model: String,
    /// Whether a repair round produced it.
    pub repaired: bool,
    /// AI calls that produced an answer to parse.
    pub attempts: u32,
    /// What the answer cost when it was paid for.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// When it was paid for.
    pub stored_unix_ms: u64,
}

/// Keeps accepted stage answers per cache key.
pub trait ResponseCache: Send + Sync + std::fmt::Debug {
    fn get_answer<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<CachedAnswer>, CacheError>>;
    /// Stores `answer` under `key` unless one is there already (the first answer paid for stays).
    fn put_answer<'a>(
        &'a self,
        key: &'a str,
        answer: &'a CachedAnswer,
    ) -> BoxFuture<'a, Result<(), CacheError>>;
}
