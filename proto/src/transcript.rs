//! Per-attempt transcripts (SPEC O4): every message sent, every raw response, every tool call and
//! repair round, and the outcome — redacted before they leave the process.
//!
//! A worker builds one [`Transcript`] per attempt and stores it at the end; operators read it back
//! later, from any process, which is why its shape lives here.

use serde::{Deserialize, Serialize};

use crate::chat::{ChatResponse, Message, TokenUsage, ToolDefinition};
use crate::outcome::StageOutcome;
use crate::redact::redact;
use crate::wire::StageKind;

/// Why an AI call was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallPurpose {
    /// The first call, or the next one after tool results.
    Turn,
    /// A repair round (E3).
    Repair,
}

/// One thing that happened during an attempt, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case")]
pub enum TranscriptEntry {
    /// One AI call: the messages added since the previous call, what was offered, what came back.
    Call {
        seq: u32,
        purpose: CallPurpose,
        provider: String,
        model: String,
        /// Messages appended to the conversation for this call (the whole prompt for the first
        /// call and for isolated repairs).
        new_messages: Vec<Message>,
        /// Names of the tools offered (empty: none).
        tools: Vec<String>,
        temperature: Option<f32>,
        response: Option<ChatResponse>,
        /// The classified failure of the call, when it failed after its retries.
        error: Option<String>,
        latency_ms: u64,
        /// Whether the response came from the journal of an earlier delivery (E7).
        reused: bool,
    },
    /// A retry of a failed call (E5).
    Retry {
        seq: u32,
        kind: String,
        wait_ms: u64,
        message: String,
    },
    /// A tool call the model made; `executed: false` after the soft deadline.
    ToolCall {
        call_id: String,
        name: String,
        arguments: String,
        executed: bool,
        output: String,
        is_error: bool,
        truncated: bool,
    },
    /// The soft deadline was reached; the finalise message was added.
    DeadlineReached { at_unix_ms: u64 },
    /// A repair round (E3).
    RepairRound {
        attempt: u8,
        max: u8,
        mode: String,
        error: String,
        outcome: String,
    },
    /// The repaired answer's finding count differs from the original's `<FINDING>` count.
    ConsistencyWarning { original: usize, repaired: usize },
    /// The final answer's findings checked against the snapshot: how many were located as
    /// given, corrected, or kept unlocated, with one note per correction or demotion.
    Grounding {
        located: u32,
        corrected: u32,
        unlocated: u32,
        notes: Vec<String>,
    },
}

/// Everything one attempt did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Transcript {
    pub task_id: String,
    pub stage_id: String,
    pub stage: StageKind,
    pub attempt: u32,
    pub started_unix_ms: u64,
    pub finished_unix_ms: u64,
    pub tools_offered: Vec<ToolDefinition>,
    pub entries: Vec<TranscriptEntry>,
    pub usage: TokenUsage,
    pub outcome: Option<StageOutcome>,
}

impl Transcript {
    /// The same transcript with every free text passed through [`redact`] (R3).
    pub fn redacted(mut self) -> Transcript {
        for e in &mut self.entries {
            match e {
                TranscriptEntry::Call {
                    new_messages,
                    response,
                    error,
                    ..
                } => {
                    for m in new_messages.iter_mut() {
                        redact_message(m);
                    }
                    if let Some(r) = response {
                        r.content = redact(&r.content);
                        r.raw = redact(&r.raw);
                        for c in &mut r.tool_calls {
                            c.arguments = redact(&c.arguments);
                        }
                    }
                    if let Some(err) = error {
                        *err = redact(err);
                    }
                }
                TranscriptEntry::Retry { message, .. } => *message = redact(message),
                TranscriptEntry::ToolCall {
                    arguments, output, ..
                } => {
                    *arguments = redact(arguments);
                    *output = redact(output);
                }
                TranscriptEntry::RepairRound { error, .. } => *error = redact(error),
                TranscriptEntry::Grounding { notes, .. } => {
                    for n in notes.iter_mut() {
                        *n = redact(n);
                    }
                }
                TranscriptEntry::DeadlineReached { .. }
                | TranscriptEntry::ConsistencyWarning { .. } => {}
            }
        }
        if let Some(StageOutcome::InvalidOutput { preview, error, .. }) = &mut self.outcome {
            *preview = redact(preview);
            *error = redact(error);
        }
        self
    }
}

fn redact_message(m: &mut Message) {
    m.content = redact(&m.content);
    for c in &mut m.tool_calls {
        c.arguments = redact(&c.arguments);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::{FinishReason, Role};

    #[test]
    fn redaction_reaches_messages_responses_tools_and_outcome() {
        let secret = "sk-proj-ABCDEFGHIJKLMNOPQRSTUV";
        let t = Transcript {
            task_id: "t".into(),
            stage_id: "s".into(),
            stage: StageKind::Review,
            attempt: 1,
            started_unix_ms: 0,
            finished_unix_ms: 1,
            tools_offered: vec![],
            entries: vec![
                TranscriptEntry::Call {
                    seq: 1,
                    purpose: CallPurpose::Turn,
                    provider: "p".into(),
                    model: "m".into(),
                    new_messages: vec![Message {
                        role: Role::User,
                        content: format!("key {secret}"),
                        tool_calls: vec![],
                        tool_call_id: None,
                    }],
                    tools: vec![],
                    temperature: None,
                    response: Some(ChatResponse {
                        content: format!("echo {secret}"),
                        tool_calls: vec![],
                        finish: FinishReason::Stop,
                        usage: TokenUsage::default(),
                        raw: format!("{{\"x\":\"{secret}\"}}"),
                    }),
                    error: None,
                    latency_ms: 1,
                    reused: false,
                },
                TranscriptEntry::ToolCall {
                    call_id: "c".into(),
                    name: "read".into(),
                    arguments: "{}".into(),
                    executed: true,
                    output: format!("OPENAI_API_KEY={secret}"),
                    is_error: false,
                    truncated: false,
                },
            ],
            usage: TokenUsage::default(),
            outcome: None,
        };
        let text = serde_json::to_string(&t.redacted()).unwrap();
        assert!(!text.contains("ABCDEFGHIJ"), "{text}");
    }
}
