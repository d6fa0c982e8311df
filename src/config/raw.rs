//! The configuration file as written: for each table, a serde struct mirroring the TOML and the
//! schema of its keys (names and value kinds) that the unknown-key check, the type check and the
//! environment overrides share. Both come from one declaration per table ([`table!`]), so what a
//! key is cannot differ between them.
//!
//! Every value is optional here and numbers are `i64` (TOML's integer): whether a key is required
//! and which range it accepts is decided in [`super::validate`], where the error can name the key.

use std::collections::BTreeMap;

use serde::Deserialize;

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

/// Declares one table of the file from its list of keys: the serde struct (`$raw`, every key
/// optional, a missing table empty) and the schema (`$schema`), in the same order.
macro_rules! table {
    ($(#[$doc:meta])* $raw:ident, $schema:ident { $($key:ident: $kind:ident $(($($args:tt)*))?,)* }) => {
        $(#[$doc])*
        #[derive(Debug, Default, PartialEq, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub(super) struct $raw {
            $(pub $key: value_type!($kind $(($($args)*))?),)*
        }

        pub(super) const $schema: &[Field] = &[
            $(key(stringify!($key), value_kind!($kind $(($($args)*))?)),)*
        ];
    };
}

/// The serde type of a [`Kind`].
macro_rules! value_type {
    (Str) => { Option<String> };
    (Int) => { Option<i64> };
    (Float) => { Option<f64> };
    (Bool) => { Option<bool> };
    (List) => { Option<Vec<String>> };
    (Table($raw:ident, $schema:ident)) => { $raw };
    (Named($raw:ident, $schema:ident, $names:ident)) => { BTreeMap<String, $raw> };
}

/// The [`Kind`] a declaration names.
macro_rules! value_kind {
    (Table($raw:ident, $schema:ident)) => {
        Kind::Table($schema)
    };
    (Named($raw:ident, $schema:ident, $names:ident)) => {
        Kind::Named($schema, Names::$names)
    };
    ($kind:ident) => {
        Kind::$kind
    };
}

table! {
    /// The top level of the file.
    RawConfig, ROOT {
        review_timeout_seconds: Int,
        protocol_repair_max_attempts: Int,
        output_language: Str,
        issue_categories: List,
        default_provider: Str,
        broker: Table(RawBroker, BROKER),
        redis: Table(RawRedis, REDIS),
        api: Table(RawApi, API),
        scheduler: Table(RawScheduler, SCHEDULER),
        worker: Table(RawWorker, WORKER),
        retry: Table(RawRetry, RETRY),
        pipeline: Table(RawPipeline, PIPELINE),
        scan: Table(RawScan, SCAN),
        budgets: Table(RawBudgets, BUDGETS),
        organisations: Named(RawOrganisation, ORGANISATION, Any),
        github: Table(RawGitHub, GITHUB),
        repositories: Table(RawRepositories, REPOSITORIES),
        providers: Named(RawProvider, PROVIDER, Any),
        stages: Named(RawStage, STAGE, Stages),
    }
}

table! {
    /// `[broker]`
    RawBroker, BROKER {
        url: Str,
        prefix: Str,
        delivery_limit: Int,
        max_requeues: Int,
        message_max_bytes: Int,
    }
}

table! {
    /// `[redis]`
    RawRedis, REDIS {
        url: Str,
        prefix: Str,
        result_ttl_seconds: Int,
        transcript_ttl_seconds: Int,
        event_ttl_seconds: Int,
        record_ttl_seconds: Int,
        input_ttl_seconds: Int,
        intake_memory_percent: Int,
    }
}

table! {
    /// `[api]`
    RawApi, API {
        listen: Str,
        token_env: Str,
        token_file: Str,
        allow_unauthenticated: Bool,
        max_body_bytes: Int,
    }
}

table! {
    /// `[scheduler]`
    RawScheduler, SCHEDULER {
        sweep_interval_seconds: Int,
        stall_after_seconds: Int,
        recover_after_seconds: Int,
        intake_concurrency: Int,
        intake_backlog: Int,
        replica_lease_seconds: Int,
        intake_timeout_seconds: Int,
        queue_stats_interval_seconds: Int,
    }
}

table! {
    /// `[repositories]`
    RawRepositories, REPOSITORIES {
        allow_hosts: List,
        allow_owners: List,
        allow_patterns: List,
        allow_schemes: List,
        allow_local_paths: Bool,
        fetch_timeout_seconds: Int,
        local_timeout_seconds: Int,
    }
}

table! {
    /// `[worker]`
    RawWorker, WORKER {
        concurrency: Int,
        bulk_concurrency: Int,
        cache_dir: Str,
        snapshot_cache_bytes: Int,
        metrics_listen: Str,
        shutdown_grace_seconds: Int,
        claim_ttl_seconds: Int,
        record_retry_seconds: Int,
        bulk_per_organisation: Int,
        response_cache: Bool,
    }
}

table! {
    /// `[retry]`
    RawRetry, RETRY {
        budget: Int,
        base_delay_ms: Int,
        max_delay_ms: Int,
        max_inline_wait_seconds: Int,
    }
}

table! {
    /// `[pipeline]`
    RawPipeline, PIPELINE {
        reviewers: Int,
        max_diff_bytes_per_reviewer: Int,
        max_diff_bytes: Int,
        triage: Bool,
        ignore_paths: List,
    }
}

table! {
    /// `[scan]`
    RawScan, SCAN {
        shard_tokens: Int,
        max_file_bytes: Int,
        max_shards: Int,
        exclude: List,
    }
}

table! {
    /// `[budgets]`
    RawBudgets, BUDGETS {
        period: Str,
        prompt_tokens_per_stage: Int,
        output_tokens_per_stage: Int,
        default_tokens: Int,
        default_usd: Float,
    }
}

table! {
    /// `[organisations.<name>]`
    RawOrganisation, ORGANISATION {
        budget_tokens: Int,
        budget_usd: Float,
    }
}

table! {
    /// `[github]`
    RawGitHub, GITHUB {
        api_url: Str,
        web_url: Str,
        token_env: Str,
        token_file: Str,
        app_id: Int,
        app_private_key_env: Str,
        app_private_key_file: Str,
        webhook_secret_env: Str,
        webhook_secret_file: Str,
        timeout_seconds: Int,
        publish: Bool,
        approve: Bool,
        degraded_comment: Bool,
        status_context: Str,
        details_url: Str,
        analyse_issues: Bool,
        apply_labels: Bool,
        label_min_confidence: Float,
        pipeline: Str,
        review_drafts: Bool,
        ignore_bots: Bool,
        ignore_authors: List,
        ignore_titles: List,
        ignore_labels: List,
    }
}

table! {
    /// `[providers.<name>]`
    RawProvider, PROVIDER {
        kind: Str,
        base_url: Str,
        model: Str,
        api_key_env: Str,
        api_key_file: Str,
        timeout_seconds: Int,
        connect_timeout_seconds: Int,
        max_tokens: Int,
        temperature: Float,
        command: List,
        no_tools_flag: Str,
        tools_flag: Str,
        structured_output: Str,
        structured_max_items: Int,
        structured_max_length: Int,
        context_window: Int,
        requests_per_minute: Int,
        tokens_per_minute: Int,
        input_usd_per_million_tokens: Float,
        output_usd_per_million_tokens: Float,
    }
}

table! {
    /// `[stages.<stage>]`
    RawStage, STAGE {
        provider: Str,
        model: Str,
        tools: List,
        repair_mode: Str,
        repair_attempts: Int,
        structured_output: Str,
        fallback_models: List,
        requests_per_minute: Int,
        tokens_per_minute: Int,
    }
}

/// The key called `name` in `fields`.
pub(super) fn field(fields: &'static [Field], name: &str) -> Option<&'static Field> {
    fields.iter().find(|f| f.name == name)
}

/// `a, b, c`: the valid keys of a table, for error messages.
pub(super) fn names(fields: &[Field]) -> String {
    fields.iter().map(|f| f.name).collect::<Vec<_>>().join(", ")
}
