//! Stage inputs: small ones travel inline in the message, large ones (diffs) are stored once by
//! content hash and fetched here.

use sha2::{Digest, Sha256};
use verdict_proto::wire::{InputContent, InputRef};

use crate::BoxFuture;

/// The hex SHA-256 of `bytes`: the key of a stored input.
pub fn content_hash(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Why an input could not be fetched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error(
        "input `{name}` (sha256 {sha256}) is not in the input store; it may have expired — resubmit the task"
    )]
    Missing { name: String, sha256: String },
    #[error(
        "input `{name}` does not match its sha256 {sha256}; the store is corrupt or the message was altered"
    )]
    Corrupt { name: String, sha256: String },
    #[error("input `{name}` is not UTF-8 text")]
    NotText { name: String },
    #[error("input store unavailable: {0}")]
    Unavailable(String),
}

impl InputError {
    /// Store outages are transient; a missing or corrupt input will not appear by retrying.
    pub fn is_retryable(&self) -> bool {
        matches!(self, InputError::Unavailable(_))
    }
}

/// Content-addressed storage for large inputs.
pub trait InputStore: Send + Sync + std::fmt::Debug {
    fn get<'a>(&'a self, sha256: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, InputError>>;
    fn put<'a>(&'a self, bytes: &'a [u8]) -> BoxFuture<'a, Result<String, InputError>>;
}

/// An input with its text, ready for the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedInput {
    pub name: String,
    pub text: String,
}

/// Fetches and verifies every input of a stage, in order.
pub async fn resolve(
    store: &dyn InputStore,
    inputs: &[InputRef],
) -> Result<Vec<ResolvedInput>, InputError> {
    let mut out = Vec::with_capacity(inputs.len());
    for input in inputs {
        let text = match &input.content {
            InputContent::Inline { text } => text.clone(),
            InputContent::Stored { sha256, .. } => {
                let bytes = store
                    .get(sha256)
                    .await?
                    .ok_or_else(|| InputError::Missing {
                        name: input.name.clone(),
                        sha256: sha256.clone(),
                    })?;
                if content_hash(&bytes) != *sha256 {
                    return Err(InputError::Corrupt {
                        name: input.name.clone(),
                        sha256: sha256.clone(),
                    });
                }
                String::from_utf8(bytes).map_err(|_| InputError::NotText {
                    name: input.name.clone(),
                })?
            }
        };
        out.push(ResolvedInput {
            name: input.name.clone(),
            text,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stored_inputs_are_fetched_and_verified() {
        let store = crate::store::memory::MemoryStore::new();
        let hash = store.put(b"diff --git a b").await.unwrap();
        let inputs = vec![
            InputRef {
                name: "title".into(),
                content: InputContent::Inline { text: "T".into() },
            },
            InputRef {
                name: "diff".into(),
                content: InputContent::Stored {
                    sha256: hash.clone(),
                    bytes: 14,
                },
            },
        ];
        let r = resolve(&store, &inputs).await.unwrap();
        assert_eq!(r[1].text, "diff --git a b");

        let missing = vec![InputRef {
            name: "diff".into(),
            content: InputContent::Stored {
                sha256: "00".repeat(32),
                bytes: 1,
            },
        }];
        let e = resolve(&store, &missing).await.unwrap_err();
        assert!(matches!(e, InputError::Missing { .. }));
        assert!(!e.is_retryable());
    }
}
