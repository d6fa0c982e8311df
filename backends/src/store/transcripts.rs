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
    /// Stores a transcript that has already been redacted.
    fn put(&self, transcript: Transcript) -> BoxFuture<'_, Result<(), TranscriptError>>;
}
