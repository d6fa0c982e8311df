//! At-least-once delivery without paying twice (SPEC E7): a provider response already received
//! for an attempt is looked up here before the provider is called again.
//!
//! Responses are keyed by the stage and a hash of the exact request, so a redelivered stage that
//! replays the same conversation reuses every answer it already paid for, and one whose
//! conversation diverged (the deadline passed meanwhile) pays only for the new calls.

use std::collections::HashMap;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use crate::BoxFuture;
use crate::provider::{ChatRequest, ChatResponse};

/// The key of one call: `task/stage/provider/sha256(request)`. The attempt's random boundary
/// tokens (P7) are replaced by a placeholder before hashing: a redelivery draws new tokens, yet it
/// asks the same question and must find the answer already paid for.
pub fn call_key(
    task_id: &str,
    stage_id: &str,
    provider: &str,
    request: &ChatRequest,
    boundary_tokens: &[&str],
) -> String {
    // serde_json of our own types cannot fail; an empty body would only weaken reuse.
    let mut body = serde_json::to_string(request).unwrap_or_default();
    for token in boundary_tokens.iter().filter(|t| !t.is_empty()) {
        body = body.replace(token, "\u{ab}boundary\u{bb}");
    }
    let mut h = Sha256::new();
    h.update(body.as_bytes());
    let digest = h.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{task_id}/{stage_id}/{provider}/{hex}")
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{Message, ToolChoice};

    fn request(token: &str) -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            messages: vec![Message::user(format!(
                "<<<UNTRUSTED diff {token}>>>\nx\n<<<END UNTRUSTED {token}>>>"
            ))],
            tools: vec![],
            tool_choice: ToolChoice::None,
            temperature: None,
            max_tokens: None,
        }
    }

    #[test]
    fn keys_ignore_boundary_tokens_but_not_content() {
        let a = call_key(
            "t",
            "s",
            "p",
            &request("AAAAAAAAAAAAAAAAAAAAAAAA"),
            &["AAAAAAAAAAAAAAAAAAAAAAAA"],
        );
        let b = call_key(
            "t",
            "s",
            "p",
            &request("BBBBBBBBBBBBBBBBBBBBBBBB"),
            &["BBBBBBBBBBBBBBBBBBBBBBBB"],
        );
        assert_eq!(a, b);
        let mut other = request("AAAAAAAAAAAAAAAAAAAAAAAA");
        other.model = "n".into();
        assert_ne!(
            a,
            call_key("t", "s", "p", &other, &["AAAAAAAAAAAAAAAAAAAAAAAA"])
        );
    }
}

/// In-memory journal (tests, `verdict dev`).
#[derive(Debug, Default)]
pub struct MemoryJournal {
    entries: Mutex<HashMap<String, ChatResponse>>,
}

impl MemoryJournal {
    pub fn len(&self) -> usize {
        self.entries.lock().map(|e| e.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl ResponseJournal for MemoryJournal {
    fn get<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<ChatResponse>, JournalError>> {
        let found = self
            .entries
            .lock()
            .map_err(|_| JournalError("lock poisoned".into()))
            .map(|e| e.get(key).cloned());
        Box::pin(async move { found })
    }

    fn put<'a>(
        &'a self,
        key: &'a str,
        response: &'a ChatResponse,
    ) -> BoxFuture<'a, Result<(), JournalError>> {
        let stored = self
            .entries
            .lock()
            .map_err(|_| JournalError("lock poisoned".into()))
            .map(|mut e| {
                e.insert(key.to_owned(), response.clone());
            });
        Box::pin(async move { stored })
    }
}
