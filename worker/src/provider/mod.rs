//! The one small trait every LLM backend implements, and the provider-neutral chat types the
//! executor speaks (SPEC E6). Wire formats live in the submodules; nothing above this module knows
//! whether it talks to OpenAI, Anthropic or a subprocess.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use verdict_proto::outcome::FailureKind;

use crate::BoxFuture;

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

/// Why a call produced no answer, already classified (SPEC E4). The message never contains a
/// credential: clients build it from status, error kind and a redacted body excerpt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ProviderError {
    pub kind: FailureKind,
    pub message: String,
    /// The HTTP status, when there was one.
    pub status: Option<u16>,
    /// What the provider asked us to wait (`Retry-After`, rate-limit reset headers).
    pub retry_after: Option<Duration>,
}

impl ProviderError {
    pub fn new(kind: FailureKind, message: impl Into<String>) -> ProviderError {
        ProviderError {
            kind,
            message: message.into(),
            status: None,
            retry_after: None,
        }
    }
}

/// Which wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// `POST {base_url}/v1/chat/completions` (OpenAI, vLLM, llama.cpp, Ollama, DeepSeek, …).
    Openai,
    /// `POST {base_url}/v1/messages`.
    Anthropic,
    /// A local agent CLI: prompt on stdin, answer on stdout.
    Exec,
}

/// One LLM backend. Implementations classify every failure into a [`FailureKind`], honour
/// `cancel` promptly (returning [`FailureKind::Cancelled`]), apply their transport timeout
/// (returning [`FailureKind::Timeout`]), and never log or return credentials.
pub trait Provider: Send + Sync + fmt::Debug {
    /// The configured name (`[providers.<name>]`): a metrics label and a transcript field.
    fn name(&self) -> &str;

    fn kind(&self) -> ProviderKind;

    /// The model used when a stage does not override it.
    fn default_model(&self) -> &str;

    /// Performs one call. `workdir` is the repository snapshot for providers that run a local
    /// agent in it (`exec`); HTTP providers ignore it.
    fn complete<'a>(
        &'a self,
        request: &'a ChatRequest,
        workdir: Option<&'a std::path::Path>,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<ChatResponse, ProviderError>>;
}

/// A credential. Its `Debug` and `Display` never show the value.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<str>);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(Arc::from(value.into()))
    }

    /// The value, for the one place that puts it on the wire.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([REDACTED])")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[REDACTED]")
    }
}

/// Where an API key comes from; resolved once at start-up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApiKeySource {
    /// No key (local servers such as llama.cpp).
    None,
    /// The named environment variable.
    Env(String),
    /// The first line of a file (Kubernetes secret mounts).
    File(PathBuf),
}

/// A key source that could not be read; names the variable or file and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiKeyError {
    #[error(
        "provider `{provider}`: environment variable {var} is not set or empty; export it, or change api_key_env"
    )]
    MissingEnv { provider: String, var: String },
    #[error("provider `{provider}`: cannot read API key file {path}: {reason}; check api_key_file")]
    File {
        provider: String,
        path: PathBuf,
        reason: String,
    },
}

impl ApiKeySource {
    /// Reads the key now. Start-up code calls this so a missing key fails fast, not on the first
    /// review.
    pub fn resolve(&self, provider: &str) -> Result<Option<Secret>, ApiKeyError> {
        match self {
            ApiKeySource::None => Ok(None),
            ApiKeySource::Env(var) => match std::env::var(var) {
                Ok(v) if !v.trim().is_empty() => Ok(Some(Secret::new(v.trim()))),
                _ => Err(ApiKeyError::MissingEnv {
                    provider: provider.to_owned(),
                    var: var.clone(),
                }),
            },
            ApiKeySource::File(path) => std::fs::read_to_string(path)
                .map_err(|e| ApiKeyError::File {
                    provider: provider.to_owned(),
                    path: path.clone(),
                    reason: e.to_string(),
                })
                .and_then(|text| match text.lines().next().map(str::trim) {
                    Some(key) if !key.is_empty() => Ok(Some(Secret::new(key))),
                    _ => Err(ApiKeyError::File {
                        provider: provider.to_owned(),
                        path: path.clone(),
                        reason: "the file is empty".to_owned(),
                    }),
                }),
        }
    }
}

/// Everything one configured provider needs (`[providers.<name>]`), validated.
#[derive(Debug, Clone)]
pub struct ProviderSettings {
    pub name: String,
    pub kind: ProviderKind,
    /// Scheme, host and optional path prefix, without the `/v1/...` endpoint path.
    pub base_url: String,
    pub api_key: Option<Secret>,
    pub model: String,
    /// Upper bound for one whole call (connect + response body, or subprocess lifetime).
    pub timeout: Duration,
    pub connect_timeout: Duration,
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    /// `exec` only: the program and its arguments.
    pub command: Vec<String>,
    /// `exec` only: the argument passed when the tool list is empty (e.g. `--no-tools`).
    pub no_tools_flag: Option<String>,
    /// `exec` only: an argument template passed when tools are allowed; `{tools}` becomes the
    /// comma-separated allowlist (e.g. `--tools={tools}`).
    pub tools_flag: Option<String>,
}

pub mod anthropic;
// Added by the providers work: the factory and the pieces both HTTP clients share (one
// classification for SPEC E4, one transport), each in its own file rather than in this one.
pub mod build;
pub mod classify;
pub mod exec;
pub mod http;
pub mod openai;
pub mod scripted;

pub use build::{ProviderBuildError, build};
pub use http::http_client;
