//! The provider-neutral chat vocabulary: messages, tool calls, one request and one response.
//!
//! It lives in `proto` because more than one process reads it: a worker journals responses that
//! a later delivery on another worker reuses (SPEC E7), and transcripts written by workers are
//! read back by operators through the scheduler (SPEC O4). Wire formats of real providers are the
//! worker's business; these types are what they are mapped to and from.

use serde::{Deserialize, Serialize};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    /// The result of a tool call, answering [`Message::tool_call_id`].
    Tool,
}

impl Role {
    /// The role as the wire formats and transcripts name it (its serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
    /// Tool calls the assistant made in this turn (assistant messages only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The call this message answers (tool messages only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn system(content: impl Into<String>) -> Message {
        Message::plain(Role::System, content)
    }

    pub fn user(content: impl Into<String>) -> Message {
        Message::plain(Role::User, content)
    }

    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Message {
        Message {
            role: Role::Assistant,
            content: content.into(),
            tool_calls,
            tool_call_id: None,
        }
    }

    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: Role::Tool,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.into()),
        }
    }

    fn plain(role: Role, content: impl Into<String>) -> Message {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A tool the model may call: name, description and a JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

/// A tool call as the model made it. `arguments` is the JSON text the model produced, kept raw:
/// it may be malformed, and the tool answers that as an error the model can fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// Whether the model may call tools in this request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// The model decides (only meaningful with a non-empty tool list).
    Auto,
    /// No tool calls: repair calls and every call after the soft deadline.
    None,
}

/// What the provider should hold the answer to while decoding (structured outputs): the output
/// contract of the stage, in the form the provider enforces. The answer is still parsed and
/// validated as any other; a constraint only makes a valid answer likely.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum OutputConstraint {
    /// The answer is one JSON document valid against `schema`, already reduced to the subset the
    /// provider accepts. OpenAI-compatible servers get it as `response_format`; Anthropic as the
    /// input schema of a forced tool call named `name`.
    JsonSchema {
        name: String,
        schema: serde_json::Value,
    },
    /// The whole answer matches this GBNF grammar (llama.cpp's `grammar`).
    Grammar { gbnf: String },
}

impl OutputConstraint {
    /// The mode's name, as the `structured_output` setting and metrics spell it.
    pub fn mode(&self) -> &'static str {
        match self {
            OutputConstraint::JsonSchema { .. } => "json_schema",
            OutputConstraint::Grammar { .. } => "grammar",
        }
    }
}

/// One AI call, provider-neutral.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    /// Empty means no tools: OpenAI/Anthropic clients send none, `exec` passes its no-tools flag.
    #[serde(default)]
    pub tools: Vec<ToolDefinition>,
    pub tool_choice: ToolChoice,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Set only on calls without tools (a schema or grammar and tool calls exclude each other).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub constraint: Option<OutputConstraint>,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    /// Cut off by the token limit: the answer is probably truncated.
    Length,
    ToolCalls,
    Other(String),
}

/// Tokens one call consumed, as the provider reported them (zero when it did not).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TokenUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// One AI call's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    /// The text of the answer (may be empty when the model only called tools).
    pub content: String,
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    pub finish: FinishReason,
    #[serde(default)]
    pub usage: TokenUsage,
    /// The response body as received (for transcripts; redacted before it is stored).
    #[serde(default)]
    pub raw: String,
}
