//! At-least-once delivery without paying twice (SPEC E7): the key under which a provider response
//! is journaled ([`verdict_backends::store::ResponseJournal`]) and looked up before the provider is
//! called again.
//!
//! Responses are keyed by the stage and a hash of the exact request, so a redelivered stage that
//! replays the same conversation reuses every answer it already paid for, and one whose
//! conversation diverged (the deadline passed meanwhile) pays only for the new calls.

use sha2::{Digest, Sha256};

use crate::provider::ChatRequest;

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
