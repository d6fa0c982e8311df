//! Identical work answered once (SPEC X3): the key under which a stage's accepted answer is kept
//! in the pool's [`verdict_backends::store::ResponseCache`], and the rules for what may be kept.
//!
//! The key is a hash of everything that decides the answer: the stage and its protocol, the
//! provider and model, the opening prompt as sent (so any change to the prompt's text — its
//! version — makes a new key), the repository and commit the tools read, the tools offered, the
//! repair and validation settings and the changed files grounding checks against. The attempt's
//! random boundary token is replaced by a placeholder first: two tasks asking the same question
//! draw different tokens. Nothing of the task (its id, deadline, attempt) is in the key, which is
//! the point: a second scan of the same commit, a re-run of the same review, is answered from
//! the cache.

use serde::Serialize;
use sha2::{Digest, Sha256};
use verdict_proto::chat::Message;
use verdict_proto::wire::StageRequest;

/// Bumped when what a cached answer means changes (grounding, canonical form), so answers
/// stored by an older worker are never served by a newer one.
pub const SCHEME: u32 = 1;

#[derive(Serialize)]
struct Identity<'a> {
    scheme: u32,
    stage: &'a str,
    protocol: &'a str,
    provider: &'a str,
    model: &'a str,
    request: Decisive<'a>,
    prompt: &'a [Message],
}

/// The fields of a stage request that decide its answer.
#[derive(Serialize)]
struct Decisive<'a> {
    language: &'a verdict_proto::Language,
    repository: &'a Option<verdict_proto::wire::RepositoryRef>,
    tools: &'a [verdict_proto::wire::Tool],
    repair: &'a verdict_proto::wire::RepairPolicy,
    validate: &'a verdict_proto::ValidateOptions,
    changed_files: &'a Option<Vec<String>>,
}

/// The cache key of `request` sent to `provider`/`model` with the opening `prompt`, whose
/// boundary token is `boundary`: `stage/protocol/sha256`.
pub fn key(
    request: &StageRequest,
    provider: &str,
    model: &str,
    prompt: &[Message],
    boundary: &str,
) -> String {
    let normalised: Vec<Message> = prompt
        .iter()
        .map(|m| Message {
            content: if boundary.is_empty() {
                m.content.clone()
            } else {
                m.content.replace(boundary, "\u{ab}boundary\u{bb}")
            },
            ..m.clone()
        })
        .collect();
    let identity = Identity {
        scheme: SCHEME,
        stage: request.stage.as_str(),
        protocol: request.protocol.as_str(),
        provider,
        model,
        request: Decisive {
            language: &request.language,
            repository: &request.repository,
            tools: &request.tools,
            repair: &request.repair,
            validate: &request.validate,
            changed_files: &request.changed_files,
        },
        prompt: &normalised,
    };
    // serde_json of our own types cannot fail; an empty body would only make keys collide for
    // requests that cannot be encoded, and there are none.
    let body = serde_json::to_vec(&identity).unwrap_or_default();
    let hex: String = Sha256::digest(&body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!(
        "{}/{}/{hex}",
        request.stage.as_str(),
        request.protocol.as_str()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_proto::repair::RepairMode;
    use verdict_proto::wire::{
        Priority, RepairPolicy, RepositoryRef, StageKind, Tool, WIRE_VERSION,
    };
    use verdict_proto::{Language, ValidateOptions};

    fn request() -> StageRequest {
        StageRequest {
            version: WIRE_VERSION,
            task_id: "t".into(),
            stage_id: "scan".into(),
            stage: StageKind::Scan,
            protocol: StageKind::Scan.default_protocol(),
            required: true,
            attempt: 1,
            priority: Priority::Bulk,
            deadline_unix_ms: 1_000,
            language: Language::En,
            repository: Some(RepositoryRef {
                url: "https://example.test/o/r.git".into(),
                commit: "a".repeat(40),
                base: None,
            }),
            inputs: vec![],
            tools: Tool::READ_ONLY.to_vec(),
            provider: None,
            model: None,
            repair: RepairPolicy {
                mode: RepairMode::Conversation,
                max_attempts: 3,
            },
            structured_output: None,
            validate: ValidateOptions::default(),
            changed_files: None,
        }
    }

    fn prompt(boundary: &str, text: &str) -> Vec<Message> {
        vec![
            Message::system(format!("policy; evidence fenced by {boundary}")),
            Message::user(format!("<{boundary}>{text}</{boundary}>")),
        ]
    }

    #[test]
    fn the_same_work_in_another_task_has_the_same_key() {
        let a = request();
        let mut b = request();
        b.task_id = "another-task".into();
        b.stage_id = "scan-2".into();
        b.attempt = 3;
        b.deadline_unix_ms += 60_000;
        assert_eq!(
            key(
                &a,
                "p",
                "m",
                &prompt("B0UNDARYaaaaaaaaaaaa", "x"),
                "B0UNDARYaaaaaaaaaaaa"
            ),
            key(
                &b,
                "p",
                "m",
                &prompt("B0UNDARYbbbbbbbbbbbb", "x"),
                "B0UNDARYbbbbbbbbbbbb"
            ),
            "task, stage id, attempt, deadline and boundary token are not the work"
        );
    }

    #[test]
    fn anything_that_decides_the_answer_changes_the_key() {
        let base = request();
        let p = prompt("B0UNDARYaaaaaaaaaaaa", "x");
        let k = |r: &StageRequest, provider: &str, model: &str, prompt: &[Message]| {
            key(r, provider, model, prompt, "B0UNDARYaaaaaaaaaaaa")
        };
        let reference = k(&base, "p", "m", &p);
        assert!(reference.starts_with("scan/"), "{reference}");
        assert_ne!(reference, k(&base, "q", "m", &p), "provider");
        assert_ne!(reference, k(&base, "p", "n", &p), "model");
        assert_ne!(
            reference,
            k(&base, "p", "m", &prompt("B0UNDARYaaaaaaaaaaaa", "y")),
            "the prompt (its text, its version, the inputs in it)"
        );
        let mut other = base.clone();
        if let Some(repo) = other.repository.as_mut() {
            repo.commit = "f".repeat(40);
        }
        assert_ne!(
            reference,
            k(&other, "p", "m", &p),
            "the commit the tools read"
        );
        let mut other = base.clone();
        other.tools.clear();
        assert_ne!(reference, k(&other, "p", "m", &p), "the tools offered");
        let mut other = base.clone();
        other.changed_files = Some(vec!["src/a.rs".into()]);
        assert_ne!(reference, k(&other, "p", "m", &p), "the changed files");
    }
}
