//! At-least-once delivery without paying twice (SPEC E7): the key under which a provider response
//! is journaled ([`verdict_backends::store::ResponseJournal`]) and looked up before the provider is
//! called again.
//!
//! Responses are keyed by the stage and a hash of the exact request, so a redelivered stage that
//! replays the same conversation reuses every answer it already paid for, and one whose
//! conversation diverged (the deadline passed meanwhile) pays only for the new calls.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use sha2::{Digest, Sha256};
use verdict_backends::BoxFuture;
use verdict_backends::store::{CallKey, JournalError, ResponseJournal};
use verdict_proto::chat::ChatResponse;

use crate::provider::ChatRequest;

/// The key of one call: its stage and `provider/sha256(request)`. The attempt's random boundary
/// tokens (P7) are replaced by a placeholder before hashing: a redelivery draws new tokens, yet it
/// asks the same question and must find the answer already paid for.
pub fn call_key(
    task_id: &str,
    stage_id: &str,
    provider: &str,
    request: &ChatRequest,
    boundary_tokens: &[&str],
) -> CallKey {
    // serde_json of our own types cannot fail; an empty body would only weaken reuse.
    let mut body = serde_json::to_string(request).unwrap_or_default();
    for token in boundary_tokens.iter().filter(|t| !t.is_empty()) {
        body = body.replace(token, "\u{ab}boundary\u{bb}");
    }
    let mut h = Sha256::new();
    h.update(body.as_bytes());
    let digest = h.finalize();
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    CallKey {
        task_id: task_id.to_owned(),
        stage_id: stage_id.to_owned(),
        call: format!("{provider}/{hex}"),
    }
}

/// The shared journal, backed by the process's memory: every response is also kept here (the
/// last `capacity` ones), so a stage this process runs again — after the shared journal (Redis)
/// could not be written or read — still answers from what was paid for. A response written only
/// here is written to the shared journal again when it is next read, once that answers.
#[derive(Debug)]
pub struct LocalFallback {
    shared: Arc<dyn ResponseJournal>,
    local: Mutex<Local>,
}

#[derive(Debug, Default)]
struct Local {
    responses: HashMap<CallKey, ChatResponse>,
    order: VecDeque<CallKey>,
    capacity: usize,
}

impl LocalFallback {
    pub fn new(shared: Arc<dyn ResponseJournal>, capacity: usize) -> LocalFallback {
        LocalFallback {
            shared,
            local: Mutex::new(Local {
                capacity: capacity.max(1),
                ..Local::default()
            }),
        }
    }

    fn remember(&self, key: &CallKey, response: &ChatResponse) {
        let mut local = self.local.lock().unwrap_or_else(PoisonError::into_inner);
        if local
            .responses
            .insert(key.clone(), response.clone())
            .is_none()
        {
            local.order.push_back(key.clone());
        }
        while local.order.len() > local.capacity {
            if let Some(oldest) = local.order.pop_front() {
                local.responses.remove(&oldest);
            }
        }
    }

    fn recall(&self, key: &CallKey) -> Option<ChatResponse> {
        let local = self.local.lock().unwrap_or_else(PoisonError::into_inner);
        local.responses.get(key).cloned()
    }
}

impl ResponseJournal for LocalFallback {
    fn get<'a>(
        &'a self,
        key: &'a CallKey,
    ) -> BoxFuture<'a, Result<Option<ChatResponse>, JournalError>> {
        Box::pin(async move {
            if let Some(response) = self.recall(key) {
                // Best effort: the shared journal may have missed it while it was down.
                if let Err(e) = self.shared.put(key, &response).await {
                    tracing::debug!(error = %e, "journal entry kept in memory only");
                }
                return Ok(Some(response));
            }
            self.shared.get(key).await
        })
    }

    fn put<'a>(
        &'a self,
        key: &'a CallKey,
        response: &'a ChatResponse,
    ) -> BoxFuture<'a, Result<(), JournalError>> {
        Box::pin(async move {
            self.remember(key, response);
            self.shared.put(key, response).await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::{Message, ToolChoice};

    /// A shared journal that is down.
    #[derive(Debug)]
    struct Down;

    impl ResponseJournal for Down {
        fn get<'a>(
            &'a self,
            _: &'a CallKey,
        ) -> BoxFuture<'a, Result<Option<ChatResponse>, JournalError>> {
            Box::pin(async { Err(JournalError("connection refused".into())) })
        }
        fn put<'a>(
            &'a self,
            _: &'a CallKey,
            _: &'a ChatResponse,
        ) -> BoxFuture<'a, Result<(), JournalError>> {
            Box::pin(async { Err(JournalError("connection refused".into())) })
        }
    }

    fn response(text: &str) -> ChatResponse {
        ChatResponse {
            content: text.to_owned(),
            tool_calls: Vec::new(),
            finish: verdict_proto::chat::FinishReason::Stop,
            usage: Default::default(),
            raw: String::new(),
        }
    }

    fn key(call: &str) -> CallKey {
        CallKey {
            task_id: "t".into(),
            stage_id: "s".into(),
            call: call.into(),
        }
    }

    #[tokio::test]
    async fn responses_paid_for_while_the_shared_journal_is_down_are_answered_from_memory() {
        let journal = LocalFallback::new(Arc::new(Down), 2);
        assert!(
            journal.put(&key("a"), &response("A")).await.is_err(),
            "the shared write failed"
        );
        assert_eq!(journal.get(&key("a")).await.unwrap(), Some(response("A")));
        journal.put(&key("b"), &response("B")).await.ok();
        journal.put(&key("c"), &response("C")).await.ok();
        assert!(
            journal.get(&key("a")).await.is_err(),
            "the oldest left memory; the shared journal is asked"
        );
        assert_eq!(journal.get(&key("c")).await.unwrap(), Some(response("C")));
        let shared = Arc::new(verdict_backends::store::memory::MemoryStore::new());
        let journal = LocalFallback::new(shared.clone(), 8);
        journal.put(&key("k"), &response("K")).await.unwrap();
        assert_eq!(
            shared.get(&key("k")).await.unwrap(),
            Some(response("K")),
            "written through"
        );
    }

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
            constraint: None,
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
