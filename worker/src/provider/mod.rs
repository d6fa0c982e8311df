//! The one small trait every LLM backend implements (SPEC E6), over the provider-neutral chat
//! types of [`verdict_proto::chat`] (re-exported here). Wire formats live in the submodules;
//! nothing above this module knows whether it talks to OpenAI, Anthropic or a subprocess.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use verdict_backends::BoxFuture;
pub use verdict_backends::secret::Secret;
pub use verdict_proto::chat::{
    ChatRequest, ChatResponse, FinishReason, Message, OutputConstraint, Role, TokenUsage, ToolCall,
    ToolChoice, ToolDefinition,
};
use verdict_proto::outcome::FailureKind;
pub use verdict_proto::structured::{Bounds as StructuredBounds, StructuredOutput};

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

    /// How calls to this provider are held to the contract while decoding, `auto` resolved
    /// (never [`StructuredOutput::Auto`]): the configured mode, or what the kind supports,
    /// discovered once from the server where it says. A provider that enforces nothing says
    /// [`StructuredOutput::Off`].
    fn structured_output<'a>(
        &'a self,
        _cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, StructuredOutput> {
        Box::pin(async { StructuredOutput::Off })
    }

    /// The bounds a constraint adds where the contract has none.
    fn structured_bounds(&self) -> StructuredBounds {
        StructuredBounds::default()
    }

    /// The model's context window in tokens: the configured `context_window`, else what the
    /// server says (llama.cpp's `/props`); `None` when neither says, and calls are not sized.
    fn context_window<'a>(&'a self, _cancel: &'a CancellationToken) -> BoxFuture<'a, Option<u32>> {
        Box::pin(async { None })
    }

    /// Whether the model can be offered tools. `false` only where the server says its chat
    /// template cannot call them (llama.cpp's `chat_template_caps`): such a model never sees
    /// the tool definitions, so offering them would only cost the first turn its constraint.
    fn calls_tools<'a>(&'a self, _cancel: &'a CancellationToken) -> BoxFuture<'a, bool> {
        Box::pin(async { true })
    }

    /// The configured output limit of one call (`max_tokens`), if any.
    fn output_limit(&self) -> Option<u32> {
        None
    }

    /// Remembers that this provider refused a decoding constraint for `model` (an HTTP 400
    /// naming it): later calls for that model go unconstrained.
    fn refuse_constraint(&self, _model: &str) {}

    /// Whether this provider refused a constraint for `model` before.
    fn refuses_constraint(&self, _model: &str) -> bool {
        false
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
    /// How answers are held to the contract while decoding (`structured_output`); `auto` is
    /// resolved per kind (and, for OpenAI-compatible servers, from llama.cpp's `/props`).
    pub structured_output: StructuredOutput,
    /// `structured_max_items` / `structured_max_length`: bounds a constraint adds.
    pub structured_bounds: StructuredBounds,
    /// The model's context window in tokens (`context_window`); `None`: what the server says,
    /// if it says.
    pub context_window: Option<u32>,
}

pub mod anthropic;
// The factory and the pieces both HTTP clients share (one call, one classification for SPEC E4,
// one transport), each in its own file rather than in this one.
pub mod api;
pub mod build;
pub mod classify;
pub mod exec;
pub mod http;
pub mod openai;
pub mod scripted;

pub use build::{ProviderBuildError, build};
pub use http::http_client;
