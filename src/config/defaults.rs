//! Every default of the configuration in one place, mirrored key by key in
//! `docs/configuration.md`, and the embedded configuration `verdict dev` runs on.

use std::path::PathBuf;

use verdict_proto::wire::{StageKind, Tool};

/// The configuration used when no file is given (`verdict dev`): the local model that
/// `ops/bin/llm` serves; every other key takes its default.
pub const EMBEDDED_DEFAULT_TOML: &str = r#"# verdict's embedded default: the local model served by ops/bin/llm.
# A 135M-parameter English model on one CPU thread: English output, one reviewer, short answers
# and two repair rounds keep a first review to a few minutes.
default_provider = "local"
output_language = "en"
protocol_repair_max_attempts = 2

[pipeline]
reviewers = 1

[providers.local]
kind = "openai"
base_url = "http://127.0.0.1:8091"
model = "smollm2"
max_tokens = 512
temperature = 0.2
timeout_seconds = 180
"#;

/// `VERDICT_*` variables verdict reads that are not configuration keys; overrides ignore them.
pub const KNOWN_ENV_VARS: &[&str] = &[
    "VERDICT_API_TOKEN",
    "VERDICT_SERVER",
    "VERDICT_LLM_HOME",
    "VERDICT_LLM_BUILD",
    "VERDICT_BLESS",
    "VERDICT_BENCH_RATIOS_ONLY",
    "VERDICT_LOG",
    "VERDICT_TRACE",
    "VERDICT_TOOLS",
    "VERDICT_GIT_COMMIT",
];

pub(super) const REVIEW_TIMEOUT_SECONDS: i64 = 600;
/// Above this deadline, a stage comes close to RabbitMQ's default `consumer_timeout` (30 min).
pub(super) const CONSUMER_TIMEOUT_WARNING_SECONDS: i64 = 25 * 60;
pub(super) const OUTPUT_LANGUAGE: &str = "zh-CN";

pub(super) const BROKER_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
pub(super) const BROKER_PREFIX: &str = "verdict";
pub(super) const DELIVERY_LIMIT: i64 = 5;
pub(super) const MAX_REQUEUES: i64 = 3;
pub(super) const MESSAGE_MAX_BYTES: i64 = 1 << 20;
/// RabbitMQ's hard upper bound of `max_message_size`.
pub(super) const MESSAGE_MAX_BYTES_LIMIT: i64 = 512 << 20;

pub(super) const REDIS_URL: &str = "redis://127.0.0.1:6379/";
pub(super) const REDIS_PREFIX: &str = "verdict:";
pub(super) const RESULT_TTL_SECONDS: i64 = 7 * 24 * 3600;
pub(super) const TRANSCRIPT_TTL_SECONDS: i64 = 14 * 24 * 3600;
pub(super) const RECORD_TTL_SECONDS: i64 = 30 * 24 * 3600;
pub(super) const INPUT_TTL_SECONDS: i64 = 7 * 24 * 3600;
/// Above this share of Redis's maxmemory, new tasks wait (issue 14).
pub(super) const INTAKE_MEMORY_PERCENT: i64 = 90;
pub(super) const EVENT_TTL_SECONDS: i64 = 14 * 24 * 3600;

pub(super) const API_LISTEN: &str = "127.0.0.1:8080";
pub(super) const API_TOKEN_ENV: &str = "VERDICT_API_TOKEN";
pub(super) const API_MAX_BODY_BYTES: i64 = 1 << 20;

pub(super) const SWEEP_INTERVAL_SECONDS: i64 = 10;
/// As often as a usual scrape, so a dashboard's queue depth is never more than one poll behind.
pub(super) const QUEUE_STATS_INTERVAL_SECONDS: i64 = 5;
pub(super) const STALL_AFTER_SECONDS: i64 = 30;
/// Long: a stage normally either runs (its lease is live) or waits in a queue; only one that was
/// lost on the way is published again, and a copy of a stage that was merely queued is harmless.
pub(super) const RECOVER_AFTER_SECONDS: i64 = 300;
pub(super) const INTAKE_CONCURRENCY: i64 = 8;
/// Minutes of work at a few hundred intakes a second, and a bounded amount of memory.
pub(super) const INTAKE_BACKLOG: i64 = 4096;
/// A replica gone this long has its intakes taken over; it beats every third of it.
pub(super) const REPLICA_LEASE_SECONDS: i64 = 15;
pub(super) const MAX_INTAKE_BACKLOG: i64 = 1_000_000;
/// Longer than one fetch may take, so git's own limit (which names the repository) comes first.
pub(super) const INTAKE_TIMEOUT_SECONDS: i64 = 900;

pub(super) const FETCH_TIMEOUT_SECONDS: i64 = 600;
pub(super) const LOCAL_TIMEOUT_SECONDS: i64 = 300;

pub(super) const CONCURRENCY: i64 = 8;
pub(super) const BULK_CONCURRENCY: i64 = 4;
pub(super) const MAX_CONCURRENCY: i64 = 1024;
pub(super) const CACHE_DIR: &str = "/var/cache/verdict";
pub(super) const SNAPSHOT_CACHE_BYTES: i64 = 10 << 30;
pub(super) const METRICS_LISTEN: &str = "0.0.0.0:9090";
pub(super) const SHUTDOWN_GRACE_SECONDS: i64 = 60;
/// Short, because a dead worker's stages wait this long at most before another takes them over;
/// renewed every third of it while a stage runs.
pub(super) const CLAIM_TTL_SECONDS: i64 = 15;
pub(super) const RECORD_RETRY_SECONDS: i64 = 300;
/// A claim is renewed every third of its TTL; below this, renewals would flood the store.
pub(super) const MIN_CLAIM_TTL_SECONDS: i64 = 3;

pub(super) const RETRY_BUDGET: i64 = 4;
pub(super) const RETRY_BASE_DELAY_MS: i64 = 500;
pub(super) const RETRY_MAX_DELAY_MS: i64 = 20_000;
pub(super) const RETRY_MAX_INLINE_WAIT_SECONDS: i64 = 30;

pub(super) const REVIEWERS: i64 = 2;
pub(super) const MAX_REVIEWERS: i64 = 16;
pub(super) const MAX_DIFF_BYTES_PER_REVIEWER: i64 = 200_000;
pub(super) const MAX_DIFF_BYTES: i64 = 1_000_000;
pub(super) const TRIAGE: bool = true;
pub(super) const SCAN_SHARD_TOKENS: i64 = 60_000;
pub(super) const SCAN_MAX_FILE_BYTES: i64 = 200_000;
pub(super) const SCAN_MAX_SHARDS: i64 = 64;
/// The most shards `scan.max_shards` may ask for: one scan stage each.
pub(super) const SCAN_MAX_SHARDS_LIMIT: i64 = 1_000;
/// Tokens a budget estimate allows per stage call for the prompt around the content: the
/// system prompt, the contract and the instructions measure about 1,500–2,500 tokens.
pub(super) const BUDGET_PROMPT_TOKENS_PER_STAGE: i64 = 3_000;
/// Tokens a budget estimate allows per stage call for the answer.
pub(super) const BUDGET_OUTPUT_TOKENS_PER_STAGE: i64 = 2_000;

pub(super) const PROVIDER_TIMEOUT_SECONDS: i64 = 300;
pub(super) const PROVIDER_CONNECT_TIMEOUT_SECONDS: i64 = 10;

/// The tools a stage may call unless configured otherwise. The agentic stages that must find
/// their own evidence in the repository (`review`, `scan`, and each `reviewer` over its shard)
/// get all four read-only tools; the stages that judge evidence they are given (`triage` the PR
/// description and diff stats, `summary` the diff, `validator` the findings, `issue-analysis` the
/// issue) get none, which keeps them cheap, fast and deterministic in cost.
pub(super) fn stage_tools(stage: StageKind) -> Vec<Tool> {
    match stage {
        StageKind::Review | StageKind::Scan | StageKind::Reviewer => Tool::READ_ONLY.to_vec(),
        StageKind::Triage
        | StageKind::Summary
        | StageKind::Validator
        | StageKind::IssueAnalysis => Vec::new(),
    }
}

/// The cache directory without a config file (`verdict dev`): `$XDG_CACHE_HOME/verdict`,
/// else `$HOME/.cache/verdict`, else `verdict-cache` in the system's temporary directory.
pub(super) fn dev_cache_dir(lookup: impl Fn(&str) -> Option<String>) -> PathBuf {
    let absolute = |v: Option<String>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    if let Some(dir) = absolute(lookup("XDG_CACHE_HOME")) {
        return dir.join("verdict");
    }
    if let Some(home) = absolute(lookup("HOME")) {
        return home.join(".cache").join("verdict");
    }
    std::env::temp_dir().join("verdict-cache")
}

pub(super) const GITHUB_API_URL: &str = "https://api.github.com";
pub(super) const GITHUB_TIMEOUT_SECONDS: i64 = 30;
pub(super) const GITHUB_STATUS_CONTEXT: &str = "verdict";
pub(super) const GITHUB_LABEL_MIN_CONFIDENCE: f64 = 0.7;
pub(super) const GITHUB_IGNORE_TITLES: &[&str] = &["[skip review]", "[no review]"];
