//! The messages scheduler and workers exchange, each carrying an explicit `version`.
//!
//! A consumer rejects a version it does not understand with a clear error (the message is then
//! dead-lettered with that reason) instead of guessing at its meaning. Within one version, new
//! optional fields may be added; anything else is a new version.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::outcome::StageOutcome;
use crate::repair::RepairMode;
use crate::{Language, ProtocolId, ValidateOptions};

/// The only wire version this build reads and writes.
pub const WIRE_VERSION: u32 = 1;

/// The progress-event channel of repair rounds (SPEC E3).
pub const PROTOCOL_REPAIR_CHANNEL: &str = "review:protocol_repair";

/// The stages a pipeline is made of; also the keys of `[stages.<stage>]` in configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StageKind {
    Triage,
    Summary,
    Reviewer,
    Validator,
    Review,
    IssueAnalysis,
    Scan,
}

impl StageKind {
    pub const ALL: [StageKind; 7] = [
        StageKind::Triage,
        StageKind::Summary,
        StageKind::Reviewer,
        StageKind::Validator,
        StageKind::Review,
        StageKind::IssueAnalysis,
        StageKind::Scan,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StageKind::Triage => "triage",
            StageKind::Summary => "summary",
            StageKind::Reviewer => "reviewer",
            StageKind::Validator => "validator",
            StageKind::Review => "review",
            StageKind::IssueAnalysis => "issue-analysis",
            StageKind::Scan => "scan",
        }
    }

    /// The protocol a stage answers in unless configured otherwise.
    pub fn default_protocol(self) -> ProtocolId {
        match self {
            StageKind::Triage => ProtocolId::Triage,
            StageKind::Summary => ProtocolId::Summary,
            StageKind::Reviewer => ProtocolId::Reviewer,
            StageKind::Validator => ProtocolId::Validator,
            StageKind::Review => ProtocolId::Review,
            StageKind::IssueAnalysis => ProtocolId::IssueAnalysis,
            StageKind::Scan => ProtocolId::Scan,
        }
    }
}

/// Which queue a stage travels on: bulk work (organisation scans) never starves interactive work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    #[default]
    Interactive,
    Bulk,
}

/// A read-only repository tool a stage may be allowed to call (SPEC E1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tool {
    Read,
    Grep,
    Find,
    Ls,
}

impl Tool {
    /// The default allowlist of a stage that may use tools.
    pub const READ_ONLY: [Tool; 4] = [Tool::Read, Tool::Grep, Tool::Find, Tool::Ls];

    pub fn as_str(self) -> &'static str {
        match self {
            Tool::Read => "read",
            Tool::Grep => "grep",
            Tool::Find => "find",
            Tool::Ls => "ls",
        }
    }
}

/// The repository a stage looks at, at one commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepositoryRef {
    /// A git URL or a local path.
    pub url: String,
    /// The commit the snapshot is taken at (the PR head for reviews).
    pub commit: String,
    /// The base commit of a review, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
}

/// The names of the inputs whose content the worker reads for more than the prompt: the
/// pipeline names them, the worker narrows decoding constraints by them.
pub mod input_name {
    /// An input holding a stage's whole unified diff.
    pub const DIFF: &str = "diff";
    /// The prefix of the inputs holding one file's diff each (`diff of src/lib.rs`).
    pub const DIFF_OF_FILE: &str = "diff of ";
    /// The validator's candidate findings, a JSON array of objects with an `id` each.
    pub const CANDIDATES: &str = "candidate findings (validate each id)";
}

/// One named input of a stage: small ones inline, large ones (diffs) stored once by content hash
/// and referenced, never copied into messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputRef {
    pub name: String,
    #[serde(flatten)]
    pub content: InputContent,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "storage", rename_all = "snake_case")]
pub enum InputContent {
    Inline { text: String },
    Stored { sha256: String, bytes: u64 },
}

/// How many repair rounds a stage gets and how they are framed (SPEC E3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairPolicy {
    pub mode: RepairMode,
    pub max_attempts: u8,
}

/// "Run this stage": published by the scheduler, consumed by one worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageRequest {
    pub version: u32,
    pub task_id: String,
    /// Unique within the task, e.g. `reviewer-2`; with `task_id` it is the idempotency key.
    pub stage_id: String,
    pub stage: StageKind,
    pub protocol: ProtocolId,
    /// Whether invalid output of this stage fails the task (S6) or may fall back (S5).
    pub required: bool,
    /// 1 for the first execution; incremented each time the stage is requeued after a
    /// retryable failure, so the retry budget survives worker restarts.
    pub attempt: u32,
    #[serde(default)]
    pub priority: Priority,
    /// The task's soft deadline (SPEC E2), shared by all its stages.
    pub deadline_unix_ms: u64,
    pub language: Language,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<RepositoryRef>,
    #[serde(default)]
    pub inputs: Vec<InputRef>,
    /// The allowlist of tools; empty means no tools.
    #[serde(default)]
    pub tools: Vec<Tool>,
    /// Provider name from configuration; `None` uses the stage's configured default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub repair: RepairPolicy,
    /// Overrides the provider's `structured_output` for this stage (`None`: the provider's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<crate::structured::StructuredOutput>,
    #[serde(default)]
    pub validate: ValidateOptions,
    /// For review stages: every path the change touches at the head commit, so grounding can
    /// tell a finding inside the change from one elsewhere in the repository. `None` for scans
    /// and issue analyses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed_files: Option<Vec<String>>,
}

/// Tokens and calls an attempt spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    pub calls: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// "This stage ended so": published by a worker, recorded by the scheduler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageResult {
    pub version: u32,
    pub task_id: String,
    pub stage_id: String,
    pub stage: StageKind,
    pub attempt: u32,
    pub outcome: StageOutcome,
    #[serde(default)]
    pub usage: Usage,
    pub started_unix_ms: u64,
    pub finished_unix_ms: u64,
    /// The model that gave the final answer (a fallback model when the primary's budget was
    /// spent), when a call was made; metrics about findings are labelled with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The evidence the worker cut to fit the model's context window: what the model was not
    /// shown, so the result's coverage can say so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_cut: Option<EvidenceCut>,
}

/// Evidence cut to fit a model's context window before the first call (decision 180).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceCut {
    /// The window, in tokens, the evidence was fitted to.
    pub context_window: u32,
    /// Every input that was cut, in input order.
    pub inputs: Vec<CutInput>,
}

/// One input shown in part, or not at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CutInput {
    pub name: String,
    pub shown_bytes: u64,
    pub total_bytes: u64,
    /// For a diff: the files none of whose hunks were shown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files_not_shown: Vec<String>,
    /// For a diff: the files shown with some hunks left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files_partly_shown: Vec<String>,
}

/// What a progress event reports (SPEC O3); the `type` field on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EventType {
    TaskQueued,
    TaskStarted,
    StageStarted,
    StageFinished,
    StageRetry,
    ProtocolRepair,
    RepairConsistencyWarning,
    TriageFallback,
    DeadlineReached,
    Degraded,
    Published,
    Failed,
    Cancelled,
    TaskFinished,
}

/// One entry of a task's progress stream, live and replayable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProgressEvent {
    pub version: u32,
    pub task_id: String,
    pub at_unix_ms: u64,
    #[serde(rename = "type")]
    pub kind: EventType,
    /// A finer channel, e.g. [`PROTOCOL_REPAIR_CHANNEL`] for repair rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage_id: Option<String>,
    /// A readable milestone for `verdict tail` and the UI, free of secrets.
    pub message: String,
    /// Structured details (e.g. attempt, max, error, outcome of a repair round).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub data: serde_json::Value,
}

/// A message type that travels between processes.
pub trait WireMessage: Serialize + DeserializeOwned {
    /// Named in errors, so a dead-letter reason says what was expected.
    const NAME: &'static str;
}

impl WireMessage for StageRequest {
    const NAME: &'static str = "stage request";
}
impl WireMessage for StageResult {
    const NAME: &'static str = "stage result";
}
impl WireMessage for ProgressEvent {
    const NAME: &'static str = "progress event";
}

/// Why bytes could not become a message. The text is the dead-letter reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("{name} is {size} bytes, above the {limit}-byte limit")]
    TooLarge {
        name: &'static str,
        size: usize,
        limit: usize,
    },
    #[error("{name} is not a JSON object: {reason}")]
    Malformed { name: &'static str, reason: String },
    #[error(
        "{name} has no integer `version` field; every message must carry version {WIRE_VERSION}"
    )]
    MissingVersion { name: &'static str },
    #[error(
        "{name} has version {found}, but this build understands only version {WIRE_VERSION}; run a verdict release that speaks version {found}, or drain those messages"
    )]
    UnsupportedVersion { name: &'static str, found: u64 },
    #[error("{name} (version {WIRE_VERSION}) is invalid: {reason}")]
    Invalid { name: &'static str, reason: String },
}

/// Serialises a message.
pub fn encode<T: WireMessage>(message: &T) -> Result<Vec<u8>, WireError> {
    serde_json::to_vec(message).map_err(|e| WireError::Invalid {
        name: T::NAME,
        reason: e.to_string(),
    })
}

/// Parses a message of at most `limit` bytes, checking its version before anything else.
pub fn decode<T: WireMessage>(bytes: &[u8], limit: usize) -> Result<T, WireError> {
    let name = T::NAME;
    if bytes.len() > limit {
        return Err(WireError::TooLarge {
            name,
            size: bytes.len(),
            limit,
        });
    }
    #[derive(Deserialize)]
    struct Probe {
        version: Option<serde_json::Value>,
    }
    let probe: Probe = serde_json::from_slice(bytes).map_err(|e| WireError::Malformed {
        name,
        reason: e.to_string(),
    })?;
    match probe.version.as_ref().and_then(serde_json::Value::as_u64) {
        None => return Err(WireError::MissingVersion { name }),
        Some(v) if v != u64::from(WIRE_VERSION) => {
            return Err(WireError::UnsupportedVersion { name, found: v });
        }
        Some(_) => {}
    }
    serde_json::from_slice(bytes).map_err(|e| WireError::Invalid {
        name,
        reason: e.to_string(),
    })
}

/// One stored event with its position in the task's stream.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    /// Opaque, ordered position (a Redis stream id); pass it back to read what follows.
    pub id: String,
    pub event: ProgressEvent,
}

/// The trace id a kept context names (the second field of `traceparent`), for operators to find
/// a task's trace.
pub fn trace_id(context: &std::collections::BTreeMap<String, String>) -> Option<String> {
    let traceparent = context.get("traceparent")?;
    let id = traceparent.split('-').nth(1)?;
    (id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) && id != "0".repeat(32))
        .then(|| id.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::FailureKind;

    fn request() -> StageRequest {
        StageRequest {
            version: WIRE_VERSION,
            task_id: "t-1".into(),
            stage_id: "triage".into(),
            stage: StageKind::Triage,
            protocol: ProtocolId::Triage,
            required: false,
            attempt: 1,
            priority: Priority::Interactive,
            deadline_unix_ms: 1_800_000_000_000,
            language: Language::En,
            repository: Some(RepositoryRef {
                url: "https://example.com/r.git".into(),
                commit: "abc".into(),
                base: Some("def".into()),
            }),
            inputs: vec![
                InputRef {
                    name: "diff".into(),
                    content: InputContent::Stored {
                        sha256: "00".repeat(32),
                        bytes: 1234,
                    },
                },
                InputRef {
                    name: "title".into(),
                    content: InputContent::Inline {
                        text: "Fix parser".into(),
                    },
                },
            ],
            tools: Tool::READ_ONLY.to_vec(),
            provider: None,
            model: Some("small".into()),
            repair: RepairPolicy {
                mode: RepairMode::Isolated,
                max_attempts: 3,
            },
            structured_output: None,
            validate: ValidateOptions::default(),
            changed_files: None,
        }
    }

    #[test]
    fn messages_round_trip() {
        let r = request();
        let bytes = encode(&r).unwrap();
        assert_eq!(decode::<StageRequest>(&bytes, 1 << 20).unwrap(), r);

        let result = StageResult {
            version: WIRE_VERSION,
            task_id: "t-1".into(),
            stage_id: "triage".into(),
            stage: StageKind::Triage,
            attempt: 1,
            outcome: StageOutcome::ExecutionFailure {
                kind: FailureKind::Auth,
                retryable: false,
                message: "401".into(),
            },
            usage: Usage::default(),
            started_unix_ms: 1,
            finished_unix_ms: 2,
            model: None,
            evidence_cut: None,
        };
        let bytes = encode(&result).unwrap();
        assert_eq!(decode::<StageResult>(&bytes, 1 << 20).unwrap(), result);

        let event = ProgressEvent {
            version: WIRE_VERSION,
            task_id: "t-1".into(),
            at_unix_ms: 3,
            kind: EventType::ProtocolRepair,
            channel: Some(PROTOCOL_REPAIR_CHANNEL.into()),
            stage_id: Some("review".into()),
            message: "Repair round 1 of 3".into(),
            data: serde_json::json!({"attempt": 1, "max": 3, "error": "x", "outcome": "invalid"}),
        };
        let v = serde_json::to_value(&event).unwrap();
        assert_eq!(v["type"], "protocol-repair");
        assert_eq!(v["channel"], "review:protocol_repair");
        let bytes = encode(&event).unwrap();
        assert_eq!(decode::<ProgressEvent>(&bytes, 1 << 20).unwrap(), event);
    }

    #[test]
    fn unknown_version_is_rejected_with_a_clear_error() {
        let mut v = serde_json::to_value(request()).unwrap();
        v["version"] = 2.into();
        let e = decode::<StageRequest>(&serde_json::to_vec(&v).unwrap(), 1 << 20).unwrap_err();
        assert_eq!(
            e,
            WireError::UnsupportedVersion {
                name: "stage request",
                found: 2
            }
        );
        assert!(e.to_string().contains("understands only version 1"), "{e}");

        v.as_object_mut().unwrap().remove("version");
        let e = decode::<StageRequest>(&serde_json::to_vec(&v).unwrap(), 1 << 20).unwrap_err();
        assert_eq!(
            e,
            WireError::MissingVersion {
                name: "stage request"
            }
        );
    }

    #[test]
    fn garbage_oversize_and_wrong_shape_are_named() {
        assert!(matches!(
            decode::<StageRequest>(b"\x00\xffnot json", 1 << 20),
            Err(WireError::Malformed { .. })
        ));
        assert!(matches!(
            decode::<StageRequest>(&[b' '; 100], 10),
            Err(WireError::TooLarge {
                size: 100,
                limit: 10,
                ..
            })
        ));
        let e = decode::<StageRequest>(br#"{"version":1,"task_id":"t"}"#, 1 << 20).unwrap_err();
        assert!(matches!(e, WireError::Invalid { .. }), "{e}");
        assert!(e.to_string().contains("missing field"), "{e}");
    }
}
