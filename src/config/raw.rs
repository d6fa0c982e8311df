//! The configuration file as written: serde structs mirroring the TOML, and the schema of its keys
//! (names and value kinds) that the unknown-key check, the type check and the environment
//! overrides share, so the three cannot disagree about what a key is.
//!
//! Every value is optional here and numbers are `i64` (TOML's integer): whether a key is required
//! and which range it accepts is decided in [`super::validate`], where the error can name the key.
//! A unit test keeps [`ROOT`] and the serde structs in step.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    pub review_timeout_seconds: Option<i64>,
    pub protocol_repair_max_attempts: Option<i64>,
    pub output_language: Option<String>,
    pub issue_categories: Option<Vec<String>>,
    pub default_provider: Option<String>,
    #[serde(default)]
    pub broker: RawBroker,
    #[serde(default)]
    pub redis: RawRedis,
    #[serde(default)]
    pub api: RawApi,
    #[serde(default)]
    pub scheduler: RawScheduler,
    #[serde(default)]
    pub worker: RawWorker,
    #[serde(default)]
    pub retry: RawRetry,
    #[serde(default)]
    pub pipeline: RawPipeline,
    #[serde(default)]
    pub providers: BTreeMap<String, RawProvider>,
    #[serde(default)]
    pub stages: BTreeMap<String, RawStage>,
}

/// `[broker]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBroker {
    pub url: Option<String>,
    pub prefix: Option<String>,
    pub delivery_limit: Option<i64>,
    pub max_requeues: Option<i64>,
    pub message_max_bytes: Option<i64>,
}

/// `[redis]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRedis {
    pub url: Option<String>,
    pub prefix: Option<String>,
    pub result_ttl_seconds: Option<i64>,
    pub transcript_ttl_seconds: Option<i64>,
    pub event_ttl_seconds: Option<i64>,
}

/// `[api]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawApi {
    pub listen: Option<String>,
    pub token_env: Option<String>,
    pub token_file: Option<String>,
    pub allow_unauthenticated: Option<bool>,
    pub max_body_bytes: Option<i64>,
}

/// `[scheduler]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScheduler {
    pub sweep_interval_seconds: Option<i64>,
    pub stall_after_seconds: Option<i64>,
}

/// `[worker]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWorker {
    pub concurrency: Option<i64>,
    pub bulk_concurrency: Option<i64>,
    pub cache_dir: Option<String>,
    pub snapshot_cache_bytes: Option<i64>,
    pub metrics_listen: Option<String>,
    pub shutdown_grace_seconds: Option<i64>,
    pub claim_ttl_seconds: Option<i64>,
}

/// `[retry]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRetry {
    pub budget: Option<i64>,
    pub base_delay_ms: Option<i64>,
    pub max_delay_ms: Option<i64>,
    pub max_inline_wait_seconds: Option<i64>,
}

/// `[pipeline]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPipeline {
    pub reviewers: Option<i64>,
    pub max_diff_bytes_per_reviewer: Option<i64>,
    pub max_diff_bytes: Option<i64>,
    pub triage: Option<bool>,
}

/// `[providers.<name>]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProvider {
    pub kind: Option<String>,
    pub base_url: Option<String>,
    pub model: Option<String>,
    pub api_key_env: Option<String>,
    pub api_key_file: Option<String>,
    pub timeout_seconds: Option<i64>,
    pub connect_timeout_seconds: Option<i64>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f64>,
    pub command: Option<Vec<String>>,
    pub no_tools_flag: Option<String>,
    pub tools_flag: Option<String>,
}

/// `[stages.<stage>]`
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStage {
    pub provider: Option<String>,
    pub model: Option<String>,
    pub tools: Option<Vec<String>>,
    pub repair_mode: Option<String>,
    pub repair_attempts: Option<i64>,
    pub fallback_models: Option<Vec<String>>,
}

/// What a key holds.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    Str,
    Int,
    /// A number; integers are accepted and converted (`temperature = 1`).
    Float,
    Bool,
    /// An array of strings (comma-separated in an environment variable).
    List,
    /// A table with fixed keys.
    Table(&'static [Field]),
    /// A table of named tables that all have the same keys (`[providers.<name>]`).
    Named(&'static [Field], Names),
}

/// Which names a [`Kind::Named`] table accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Names {
    /// Any name made of ASCII letters, digits, `-` and `_` (provider names).
    Any,
    /// Exactly the stage names of `verdict_proto::wire::StageKind`.
    Stages,
}

/// One key of a table.
#[derive(Debug, Clone, Copy)]
pub(super) struct Field {
    pub name: &'static str,
    pub kind: Kind,
}

const fn key(name: &'static str, kind: Kind) -> Field {
    Field { name, kind }
}

pub(super) const BROKER: &[Field] = &[
    key("url", Kind::Str),
    key("prefix", Kind::Str),
    key("delivery_limit", Kind::Int),
    key("max_requeues", Kind::Int),
    key("message_max_bytes", Kind::Int),
];

pub(super) const REDIS: &[Field] = &[
    key("url", Kind::Str),
    key("prefix", Kind::Str),
    key("result_ttl_seconds", Kind::Int),
    key("transcript_ttl_seconds", Kind::Int),
    key("event_ttl_seconds", Kind::Int),
];

pub(super) const API: &[Field] = &[
    key("listen", Kind::Str),
    key("token_env", Kind::Str),
    key("token_file", Kind::Str),
    key("allow_unauthenticated", Kind::Bool),
    key("max_body_bytes", Kind::Int),
];

pub(super) const SCHEDULER: &[Field] = &[
    key("sweep_interval_seconds", Kind::Int),
    key("stall_after_seconds", Kind::Int),
];

pub(super) const WORKER: &[Field] = &[
    key("concurrency", Kind::Int),
    key("bulk_concurrency", Kind::Int),
    key("cache_dir", Kind::Str),
    key("snapshot_cache_bytes", Kind::Int),
    key("metrics_listen", Kind::Str),
    key("shutdown_grace_seconds", Kind::Int),
    key("claim_ttl_seconds", Kind::Int),
];

pub(super) const RETRY: &[Field] = &[
    key("budget", Kind::Int),
    key("base_delay_ms", Kind::Int),
    key("max_delay_ms", Kind::Int),
    key("max_inline_wait_seconds", Kind::Int),
];

pub(super) const PIPELINE: &[Field] = &[
    key("reviewers", Kind::Int),
    key("max_diff_bytes_per_reviewer", Kind::Int),
    key("max_diff_bytes", Kind::Int),
    key("triage", Kind::Bool),
];

pub(super) const PROVIDER: &[Field] = &[
    key("kind", Kind::Str),
    key("base_url", Kind::Str),
    key("model", Kind::Str),
    key("api_key_env", Kind::Str),
    key("api_key_file", Kind::Str),
    key("timeout_seconds", Kind::Int),
    key("connect_timeout_seconds", Kind::Int),
    key("max_tokens", Kind::Int),
    key("temperature", Kind::Float),
    key("command", Kind::List),
    key("no_tools_flag", Kind::Str),
    key("tools_flag", Kind::Str),
];

pub(super) const STAGE: &[Field] = &[
    key("provider", Kind::Str),
    key("model", Kind::Str),
    key("tools", Kind::List),
    key("repair_mode", Kind::Str),
    key("repair_attempts", Kind::Int),
    key("fallback_models", Kind::List),
];

/// The top level of the file.
pub(super) const ROOT: &[Field] = &[
    key("review_timeout_seconds", Kind::Int),
    key("protocol_repair_max_attempts", Kind::Int),
    key("output_language", Kind::Str),
    key("issue_categories", Kind::List),
    key("default_provider", Kind::Str),
    key("broker", Kind::Table(BROKER)),
    key("redis", Kind::Table(REDIS)),
    key("api", Kind::Table(API)),
    key("scheduler", Kind::Table(SCHEDULER)),
    key("worker", Kind::Table(WORKER)),
    key("retry", Kind::Table(RETRY)),
    key("pipeline", Kind::Table(PIPELINE)),
    key("providers", Kind::Named(PROVIDER, Names::Any)),
    key("stages", Kind::Named(STAGE, Names::Stages)),
];

/// The key called `name` in `fields`.
pub(super) fn field(fields: &'static [Field], name: &str) -> Option<&'static Field> {
    fields.iter().find(|f| f.name == name)
}

/// `a, b, c`: the valid keys of a table, for error messages.
pub(super) fn names(fields: &[Field]) -> String {
    fields.iter().map(|f| f.name).collect::<Vec<_>>().join(", ")
}
