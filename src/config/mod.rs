//! verdict's configuration (SPEC I3): one TOML file plus `VERDICT_*` environment overrides, parsed
//! and validated in one pass at start-up into a typed [`Config`] that the processes are then given
//! explicitly. Invalid configuration fails here, with a message naming the key (or the variable)
//! and the fix, never on the first review.
//!
//! The pass, in order:
//! 1. read the file (or the embedded default for `verdict dev`) into a `toml::Table`
//!    (syntax errors carry line and column);
//! 2. [`env`]: apply `VERDICT_<PATH>` overrides onto that tree, typed by the key's schema;
//! 3. [`validate`]: check the tree's shape against [`raw`]'s schema (unknown keys, wrong types),
//!    deserialize it into the raw serde structs, then check ranges and relations and build the
//!    typed [`Config`], resolving API keys and the API token;
//! 4. [`defaults`]: every default lives in one file, documented in `docs/configuration.md`.
//!
//! Every key, its type, default and meaning are documented in `docs/configuration.md`.
//!
//! Why not a configuration crate (evaluated for issue 12): figment 0.10's `Env` reads only the
//! process environment (not the `env` given to [`Config::load`]), types a variable's value by
//! its text rather than by the key (`VERDICT_PIPELINE__TRIAGE=1` is "found unsigned int, expected
//! a boolean", a comma-separated list is "found string, expected a sequence"), cannot map `_` to
//! `-` in the file's own provider names, names `PROVIDERS.LOCAL.TEMPERATURE` rather than the
//! variable, and suggests nothing for a typo; its `toml` feature brings toml 0.8 beside toml 1.
//! garde 0.23 says "lower than 1" with no way to add the fix; validator 0.21 takes a message per
//! attribute; neither applies defaults or converts types, which `validate`'s `Ctx::num` does in
//! the same one call per key.

mod defaults;
mod env;
mod github;
mod raw;
mod validate;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use verdict_proto::Language;
use verdict_proto::wire::{RepairPolicy, StageKind, Tool};
use verdict_scheduler::engine::RepositoryAllowlist;
use verdict_worker::executor::{ExecutorSettings, RateLimits};
use verdict_worker::metrics::{KnownLabels, Prices};
use verdict_worker::provider::{ApiKeyError, ProviderSettings, Secret};
use verdict_worker::retry::RetryPolicy;

pub use defaults::{EMBEDDED_DEFAULT_TOML, KNOWN_ENV_VARS};
pub use github::{GitHubConfig, GitHubCredentials};

/// The validated configuration of every verdict process.
#[derive(Debug, Clone)]
pub struct Config {
    /// `review_timeout_seconds`: the single soft task deadline (SPEC E2).
    pub review_timeout: Duration,
    /// `protocol_repair_max_attempts`: the default repair budget of every stage (SPEC E3).
    pub repair_max_attempts: u8,
    /// `output_language`, normalised (SPEC P6).
    pub language: Language,
    /// `issue_categories`: the category set P2 answers are checked against, when configured.
    pub issue_categories: Option<Vec<String>>,
    pub broker: BrokerConfig,
    pub redis: RedisConfig,
    pub api: ApiConfig,
    pub scheduler: SchedulerConfig,
    pub worker: WorkerConfig,
    pub retry: RetryPolicy,
    pub pipeline: PipelineConfig,
    /// `[scan]`: how a repository scan is sharded and which files it skips (SPEC S4, X4).
    pub scan: verdict_policy::scan_shards::ScanSettings,
    /// `[github]`, when the table is present.
    pub github: Option<GitHubConfig>,
    /// `[repositories]`: which repositories tasks may name, and git's time limits.
    pub repositories: RepositoriesConfig,
    /// `[providers.<name>]`, in name order, API keys already resolved.
    pub providers: Vec<ProviderSettings>,
    /// The provider a stage uses unless `[stages.<stage>] provider` says otherwise.
    pub default_provider: String,
    /// Every stage, defaults filled in.
    pub stages: BTreeMap<StageKind, StageConfig>,
    /// Requests and tokens per minute per provider and model, for the whole pool (SPEC Q3):
    /// `requests_per_minute`/`tokens_per_minute` of `[providers.<name>]` and `[stages.<stage>]`.
    pub rate_limits: RateLimits,
    /// Token prices per provider (`input_usd_per_million_tokens`,
    /// `output_usd_per_million_tokens` of `[providers.<name>]`), for the estimated cost metric.
    pub prices: Prices,
    /// `[budgets]` and `[organisations.<name>]`: per-organisation token and cost budgets
    /// (SPEC X5), with each stage's price.
    pub budgets: verdict_policy::budget::BudgetSettings,
    /// Things that are valid but probably not what was meant; log each once at start-up.
    pub warnings: Vec<ConfigWarning>,
}

/// `[broker]`: RabbitMQ (SPEC Q1). `Debug` redacts the URL's credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct BrokerConfig {
    /// `amqp://` or `amqps://`; may carry credentials, so print [`BrokerConfig::redacted_url`].
    pub url: String,
    /// Prefix of every exchange and queue name.
    pub prefix: String,
    /// `x-delivery-limit` of the quorum queues: deliveries before a message is dead-lettered.
    pub delivery_limit: u32,
    /// Requeues with delay of a retryable execution failure before it is final (SPEC E5).
    pub max_requeues: u32,
    /// Largest message published or accepted.
    pub message_max_bytes: usize,
}

impl BrokerConfig {
    /// The URL without its password, for logs.
    pub fn redacted_url(&self) -> String {
        validate::redact_url(&self.url)
    }
}

impl fmt::Debug for BrokerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrokerConfig")
            .field("url", &self.redacted_url())
            .field("prefix", &self.prefix)
            .field("delivery_limit", &self.delivery_limit)
            .field("max_requeues", &self.max_requeues)
            .field("message_max_bytes", &self.message_max_bytes)
            .finish()
    }
}

/// `[redis]`: task state, results, transcripts and events. `Debug` redacts the URL's credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// One server (`redis://`, `rediss://`, `redis+unix://`, `unix://`), a Redis Cluster
    /// (`redis+cluster://`) or Sentinels (`redis+sentinel://`); may carry credentials.
    pub url: String,
    /// Prefix of every key.
    pub prefix: String,
    pub result_ttl: Duration,
    pub transcript_ttl: Duration,
    pub event_ttl: Duration,
    /// Task and batch records, from their last change.
    pub record_ttl: Duration,
    /// Content-addressed stage inputs (a review's diff pieces), from their last write.
    pub input_ttl: Duration,
    /// Above this share of `maxmemory` on any Redis primary, new tasks wait (503 overloaded).
    pub intake_memory_percent: u8,
}

impl RedisConfig {
    /// The URL without its password, for logs.
    pub fn redacted_url(&self) -> String {
        validate::redact_url(&self.url)
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &self.redacted_url())
            .field("prefix", &self.prefix)
            .field("result_ttl", &self.result_ttl)
            .field("transcript_ttl", &self.transcript_ttl)
            .field("event_ttl", &self.event_ttl)
            .field("record_ttl", &self.record_ttl)
            .field("input_ttl", &self.input_ttl)
            .field("intake_memory_percent", &self.intake_memory_percent)
            .finish()
    }
}

/// Where the API token comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// `api.token_env` (default `VERDICT_API_TOKEN`).
    Env(String),
    /// `api.token_file`.
    File(PathBuf),
}

/// `[api]`: the scheduler's HTTP API (SPEC I2).
#[derive(Debug, Clone)]
pub struct ApiConfig {
    pub listen: SocketAddr,
    /// The bearer token, when its source had one (`Debug` shows `[REDACTED]`).
    pub token: Option<Secret>,
    pub token_source: TokenSource,
    /// Serve without a token (for `verdict dev`, or behind another authentication layer).
    pub allow_unauthenticated: bool,
    pub max_body_bytes: usize,
}

impl ApiConfig {
    /// The token the scheduler must require, or `None` when `allow_unauthenticated` is set and
    /// no token is configured. `verdict scheduler` calls this at start-up so a missing token
    /// fails there (SPEC R3); `verdict dev` may use [`ApiConfig::token`] directly.
    pub fn require_token(&self) -> Result<Option<&Secret>, ConfigError> {
        match (&self.token, self.allow_unauthenticated) {
            (Some(token), _) => Ok(Some(token)),
            (None, true) => Ok(None),
            (None, false) => {
                let (key, value) = match &self.token_source {
                    TokenSource::Env(var) => ("api.token_env", var.clone()),
                    TokenSource::File(path) => ("api.token_file", path.display().to_string()),
                };
                Err(ConfigError::Key {
                    key: key.to_owned(),
                    value: Some(format!("{value:?}")),
                    problem: "gives no API token, and the scheduler requires one; export the variable (or set api.token_file), or set api.allow_unauthenticated = true only behind another authentication layer".to_owned(),
                    env_var: None,
                })
            }
        }
    }
}

/// `[worker]`: one worker process (SPEC Q1, Q2, Q4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerConfig {
    /// Interactive stages in flight (= AMQP prefetch of the interactive queue).
    pub concurrency: usize,
    /// Additional slots for bulk stages, so bulk never starves interactive work.
    pub bulk_concurrency: usize,
    /// Repository mirrors and snapshots.
    pub cache_dir: PathBuf,
    /// Size bound of the snapshot cache.
    pub snapshot_cache_bytes: u64,
    pub metrics_listen: SocketAddr,
    /// How long in-flight stages may finish after SIGTERM before the rest is requeued.
    pub shutdown_grace: Duration,
    /// How long a worker's claim on a running stage lasts without renewal (renewed every third
    /// of it): after a worker dies, its stages wait this long before another may run them.
    pub claim_ttl: Duration,
    /// How long a finished stage's result is held, recording retried, while Redis is down.
    pub record_retry: Duration,
    /// Bulk stages of one organisation running at once across the pool; 0: no cap.
    pub bulk_per_organisation: u32,
    /// Whether identical work is answered from the pool's response cache (X3).
    pub response_cache: bool,
}

/// `[scheduler]`: the sweeper that restarts what a crashed replica left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// How often every scheduler replica sweeps the active tasks.
    pub sweep_interval: Duration,
    /// A stage still unpublished (or an intake nobody owns) this long after it was written is
    /// taken over by the sweeper.
    pub stall_after: Duration,
    /// A stage published this long ago without a result applied is looked up, and published
    /// again when nobody holds it (lost on the way).
    pub recover_after: Duration,
    /// Intakes (revisions resolved, a review's change read) running at once per replica.
    pub intake_concurrency: usize,
    /// Tasks one replica holds for intake (running or waiting for a slot) beyond which API
    /// submissions are answered 429 with `Retry-After`.
    pub intake_backlog: usize,
    /// How long a replica's heartbeat proves it alive: its intakes are taken over by another
    /// replica only once it has lapsed.
    pub replica_lease: Duration,
    /// How long an intake may take, waiting for a slot included, before its task ends
    /// `incomplete`; only an intake older than this is taken over by another replica.
    pub intake_timeout: Duration,
    /// How often the broker's queue counts are polled into gauges.
    pub queue_stats_interval: Duration,
}

/// `[repositories]`: the repository allowlist (SPEC R4) and the time limits of git processes.
#[derive(Debug, Clone)]
pub struct RepositoriesConfig {
    /// `allow_hosts`, `allow_owners`, `allow_patterns`, `allow_schemes` and
    /// `allow_local_paths`, checked, with the `[github]` host allowed.
    pub allowlist: RepositoryAllowlist,
    /// `fetch_timeout_seconds`: the longest a git process that talks to the remote may run.
    pub fetch_timeout: Duration,
    /// `local_timeout_seconds`: the longest a git process that only reads the local mirror may
    /// run.
    pub local_timeout: Duration,
}

impl RepositoriesConfig {
    /// Accepts absolute local paths too: what `verdict dev`'s wiring turns on.
    pub fn allow_local_paths(&mut self) {
        self.allowlist = self.allowlist.with_local_paths();
    }
}

/// `[pipeline]`: the multi-stage PR review (SPEC S1, X4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineConfig {
    /// Reviewer stages run in parallel.
    pub reviewers: usize,
    /// Diff bytes one reviewer gets; larger diffs are sharded by file.
    pub max_diff_bytes_per_reviewer: usize,
    /// Diff bytes reviewed at all; files beyond are listed as not reviewed.
    pub max_diff_bytes: usize,
    /// Whether the optional triage stage runs.
    pub triage: bool,
    /// Globs of changed files reviews leave out (listed as not reviewed).
    pub ignore_paths: Vec<String>,
}

/// `[stages.<stage>]`, defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageConfig {
    /// A configured provider's name.
    pub provider: String,
    /// Overrides the provider's model.
    pub model: Option<String>,
    /// The tool allowlist; empty means no tools.
    pub tools: Vec<Tool>,
    pub repair: RepairPolicy,
    /// Models tried, in order, after the primary model's retry budget is spent (SPEC E5).
    pub fallback_models: Vec<String>,
    /// Overrides the provider's `structured_output` for this stage.
    pub structured_output: Option<verdict_proto::structured::StructuredOutput>,
}

/// A valid setting that is probably not what was meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigWarning {
    /// The config key concerned, e.g. `output_language`.
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "config key {} {}", self.key, self.message)
    }
}

/// Configuration that cannot be used. Every variant names the file, key or variable to fix.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {reason}", path.display())]
    Read { path: PathBuf, reason: String },
    #[error("config file {file}: invalid TOML at line {line}, column {column}: {message}")]
    Syntax {
        /// The file's path, or `<embedded default>`.
        file: String,
        line: usize,
        column: usize,
        message: String,
    },
    /// A key's value is missing, of the wrong type, out of range or inconsistent.
    #[error("{}", describe_key(key, value.as_deref(), problem, env_var.as_deref()))]
    Key {
        /// The dotted key as written in the file, e.g. `stages.reviewer.repair_attempts`.
        key: String,
        /// The offending value as written (redacted), when there is one.
        value: Option<String>,
        /// What is wrong and how to fix it.
        problem: String,
        /// The environment variable that set the value, when one did.
        env_var: Option<String>,
    },
    /// A `VERDICT_*` variable that is no configuration key, or whose value does not parse.
    #[error("environment variable {var}: {problem}")]
    Env { var: String, problem: String },
    /// A provider's API key could not be read.
    #[error("{}config key {key}: {error}", env_var.as_deref().map(|v| format!("environment variable {v}: ")).unwrap_or_default())]
    ApiKey {
        key: String,
        env_var: Option<String>,
        #[source]
        error: ApiKeyError,
    },
}

impl ConfigError {
    /// The config key the error is about, when it is about one.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Key { key, .. } | ConfigError::ApiKey { key, .. } => Some(key),
            _ => None,
        }
    }
}

fn describe_key(key: &str, value: Option<&str>, problem: &str, env_var: Option<&str>) -> String {
    let origin = env_var
        .map(|v| format!("environment variable {v}: "))
        .unwrap_or_default();
    match value {
        Some(value) => format!("{origin}config key {key} = {value} {problem}"),
        None => format!("{origin}config key {key} {problem}"),
    }
}

impl Config {
    /// Loads the configuration: the file at `path` (or, without one, the embedded default for
    /// `verdict dev`), then the `VERDICT_*` overrides in `env`, validated. Other variables in
    /// `env` are read only where the configuration names them (API keys, the API token, and
    /// `XDG_CACHE_HOME`/`HOME` for the default cache directory without a file).
    pub fn load(path: Option<&Path>, env: &[(String, String)]) -> Result<Config, ConfigError> {
        match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
                    path: path.to_owned(),
                    reason: e.to_string(),
                })?;
                validate::load_str(&text, &path.display().to_string(), true, env)
            }
            None => validate::load_str(EMBEDDED_DEFAULT_TOML, "<embedded default>", false, env),
        }
    }

    /// [`Config::load`] with the process environment.
    pub fn from_process(path: Option<&Path>) -> Result<Config, ConfigError> {
        let env: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.to_string_lossy().into_owned())))
            .collect();
        Config::load(path, &env)
    }

    /// The configuration `verdict dev` runs on without a file or overrides: one provider
    /// `local` (OpenAI-compatible, `http://127.0.0.1:8091`, model `smollm2`, no key), every other
    /// key at its default, and the cache in a temporary directory.
    pub fn embedded_default() -> Result<Config, ConfigError> {
        Config::load(None, &[])
    }

    /// A stage's settings (every stage is present in a loaded configuration).
    pub fn stage(&self, stage: StageKind) -> Option<&StageConfig> {
        self.stages.get(&stage)
    }

    /// The label values worker metrics can know in advance: each stage's provider, its model
    /// and its fallback models.
    pub fn known_labels(&self) -> KnownLabels {
        let mut stage_models = Vec::new();
        for (kind, stage) in &self.stages {
            let Some(provider) = self.provider(&stage.provider) else {
                continue;
            };
            let model = stage.model.as_deref().unwrap_or(&provider.model);
            for model in
                std::iter::once(model).chain(stage.fallback_models.iter().map(String::as_str))
            {
                stage_models.push((*kind, provider.name.clone(), model.to_owned()));
            }
        }
        KnownLabels { stage_models }
    }

    /// A configured provider by name.
    pub fn provider(&self, name: &str) -> Option<&ProviderSettings> {
        self.providers.iter().find(|p| p.name == name)
    }

    /// The provider a stage runs on.
    pub fn stage_provider(&self, stage: StageKind) -> Option<&ProviderSettings> {
        self.provider(&self.stage(stage)?.provider)
    }

    /// The model a stage runs on: its own override, else its provider's model.
    pub fn stage_model(&self, stage: StageKind) -> Option<&str> {
        let config = self.stage(stage)?;
        match &config.model {
            Some(model) => Some(model),
            None => self.provider(&config.provider).map(|p| p.model.as_str()),
        }
    }

    /// How the worker executes stages: the retry policy, each stage's fallback models, the rate
    /// limits and the default tool limits.
    pub fn executor_settings(&self) -> ExecutorSettings {
        let fallback_models: HashMap<StageKind, Vec<String>> = self
            .stages
            .iter()
            .filter(|(_, s)| !s.fallback_models.is_empty())
            .map(|(kind, s)| (*kind, s.fallback_models.clone()))
            .collect();
        ExecutorSettings {
            retry: self.retry.clone(),
            fallback_models,
            rate_limits: self.rate_limits.clone(),
            prices: self.prices.clone(),
            response_cache: self.worker.response_cache,
            ..ExecutorSettings::default()
        }
    }
}
