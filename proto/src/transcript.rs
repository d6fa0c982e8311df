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
    /// The attempt's random boundary tokens (P7): the conversation's, then each isolated
    /// repair's. Every other part of a prompt repeats from attempt to attempt, so a store can
    /// keep that part once for all of them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub boundary_tokens: Vec<String>,
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

    /// The transcript as an operator reads it (`verdict transcript`): every message, tool call,
    /// raw response and repair round in full, in order, each under a one-line heading.
    pub fn to_text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let outcome = self
            .outcome
            .as_ref()
            .map_or("unfinished", StageOutcome::label);
        let _ = writeln!(
            out,
            "=== task {} stage {} ({}) attempt {}: {outcome}; {} ms; {} input and {} output tokens",
            self.task_id,
            self.stage_id,
            self.stage.as_str(),
            self.attempt,
            self.finished_unix_ms.saturating_sub(self.started_unix_ms),
            self.usage.input_tokens,
            self.usage.output_tokens,
        );
        if !self.tools_offered.is_empty() {
            let names: Vec<&str> = self.tools_offered.iter().map(|t| t.name.as_str()).collect();
            let _ = writeln!(out, "tools offered: {}", names.join(", "));
        }
        for entry in &self.entries {
            entry.write_text(&mut out);
        }
        if let Some(outcome) = &self.outcome
            && let Ok(json) = serde_json::to_string_pretty(outcome)
        {
            let _ = writeln!(out, "--- outcome\n{json}");
        }
        out
    }
}

impl TranscriptEntry {
    fn write_text(&self, out: &mut String) {
        use std::fmt::Write as _;
        match self {
            TranscriptEntry::Call {
                seq,
                purpose,
                provider,
                model,
                new_messages,
                tools,
                temperature,
                response,
                error,
                latency_ms,
                reused,
            } => {
                let purpose = match purpose {
                    CallPurpose::Turn => "turn",
                    CallPurpose::Repair => "repair",
                };
                let temperature = temperature.map_or("default".to_owned(), |t| t.to_string());
                let tools = if tools.is_empty() {
                    "none".to_owned()
                } else {
                    tools.join(", ")
                };
                let reused = if *reused {
                    ", reused from the journal"
                } else {
                    ""
                };
                let _ = writeln!(
                    out,
                    "--- call {seq} ({purpose}) to {provider} model {model}: temperature {temperature}, tools {tools}, {latency_ms} ms{reused}"
                );
                for m in new_messages {
                    let role = m.role.as_str();
                    match &m.tool_call_id {
                        Some(id) => {
                            let _ = writeln!(out, "[{role} answering {id}]\n{}", m.content);
                        }
                        None => {
                            let _ = writeln!(out, "[{role}]\n{}", m.content);
                        }
                    }
                    write_tool_calls(out, &m.tool_calls);
                }
                if let Some(r) = response {
                    let _ = writeln!(
                        out,
                        "[response: {:?}, {} input and {} output tokens]\n{}",
                        r.finish, r.usage.input_tokens, r.usage.output_tokens, r.content
                    );
                    write_tool_calls(out, &r.tool_calls);
                    if !r.raw.is_empty() {
                        let _ = writeln!(out, "[raw response]\n{}", r.raw);
                    }
                }
                if let Some(e) = error {
                    let _ = writeln!(out, "[failed] {e}");
                }
            }
            TranscriptEntry::Retry {
                seq,
                kind,
                wait_ms,
                message,
            } => {
                let _ = writeln!(
                    out,
                    "--- retry of call {seq} after {wait_ms} ms ({kind}): {message}"
                );
            }
            TranscriptEntry::ToolCall {
                call_id,
                name,
                arguments,
                executed,
                output,
                is_error,
                truncated,
            } => {
                let state = match (executed, is_error, truncated) {
                    (false, _, _) => "not executed",
                    (true, true, _) => "error",
                    (true, false, true) => "truncated",
                    (true, false, false) => "ok",
                };
                let _ = writeln!(
                    out,
                    "--- tool {name} ({call_id}, {state}) {arguments}\n{output}"
                );
            }
            TranscriptEntry::DeadlineReached { at_unix_ms } => {
                let _ = writeln!(out, "--- soft deadline reached at {at_unix_ms} (unix ms)");
            }
            TranscriptEntry::RepairRound {
                attempt,
                max,
                mode,
                error,
                outcome,
            } => {
                let _ = writeln!(
                    out,
                    "--- repair round {attempt} of {max} ({mode}): {outcome}\n{error}"
                );
            }
            TranscriptEntry::ConsistencyWarning { original, repaired } => {
                let _ = writeln!(
                    out,
                    "--- consistency warning: {original} findings before the repair, {repaired} after"
                );
            }
            TranscriptEntry::Grounding {
                located,
                corrected,
                unlocated,
                notes,
            } => {
                let _ = writeln!(
                    out,
                    "--- grounding: {located} located, {corrected} corrected, {unlocated} unlocated"
                );
                for n in notes {
                    let _ = writeln!(out, "  {n}");
                }
            }
        }
    }
}

/// One line per tool call a model made: its id, the tool and the arguments as sent.
fn write_tool_calls(out: &mut String, calls: &[crate::chat::ToolCall]) {
    use std::fmt::Write as _;
    for c in calls {
        let _ = writeln!(out, "[tool call {} {}] {}", c.id, c.name, c.arguments);
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
            boundary_tokens: Vec::new(),
        };
        let text = serde_json::to_string(&t.redacted()).unwrap();
        assert!(!text.contains("ABCDEFGHIJ"), "{text}");
    }

    #[test]
    fn the_text_shows_every_message_response_and_tool_output_in_full() {
        let long = "line of the system prompt\n".repeat(300);
        let t = Transcript {
            task_id: "t-1".into(),
            stage_id: "reviewer-1".into(),
            stage: StageKind::Reviewer,
            attempt: 2,
            started_unix_ms: 1_000,
            finished_unix_ms: 1_250,
            tools_offered: vec![],
            entries: vec![
                TranscriptEntry::Call {
                    seq: 1,
                    purpose: CallPurpose::Turn,
                    provider: "local".into(),
                    model: "smollm2".into(),
                    new_messages: vec![Message::system(long.clone()), Message::user("the diff")],
                    tools: vec!["read".into()],
                    temperature: None,
                    response: Some(ChatResponse {
                        content: "not json".into(),
                        tool_calls: vec![],
                        finish: FinishReason::Length,
                        usage: TokenUsage {
                            input_tokens: 7,
                            output_tokens: 9,
                        },
                        raw: "{\"choices\":[]}".into(),
                    }),
                    error: None,
                    latency_ms: 40,
                    reused: false,
                },
                TranscriptEntry::ToolCall {
                    call_id: "c1".into(),
                    name: "read".into(),
                    arguments: "{\"path\":\"src/a.rs\"}".into(),
                    executed: true,
                    output: "fn a() {}".into(),
                    is_error: false,
                    truncated: false,
                },
                TranscriptEntry::RepairRound {
                    attempt: 1,
                    max: 3,
                    mode: "isolated".into(),
                    error: "- line 1: not JSON".into(),
                    outcome: "invalid".into(),
                },
            ],
            usage: TokenUsage::default(),
            outcome: None,
            boundary_tokens: Vec::new(),
        };
        let text = t.to_text();
        for part in [
            "=== task t-1 stage reviewer-1 (reviewer) attempt 2: unfinished; 250 ms",
            long.as_str(),
            "[user]\nthe diff",
            "--- call 1 (turn) to local model smollm2: temperature default, tools read, 40 ms",
            "[response: Length, 7 input and 9 output tokens]\nnot json",
            "[raw response]\n{\"choices\":[]}",
            "--- tool read (c1, ok) {\"path\":\"src/a.rs\"}\nfn a() {}",
            "--- repair round 1 of 3 (isolated): invalid\n- line 1: not JSON",
        ] {
            assert!(text.contains(part), "missing {part:?} in\n{text}");
        }
    }
}
