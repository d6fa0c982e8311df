//! Unit tests of the configuration: defaults, errors naming their key, environment overrides,
//! key resolution, and the example files that must keep parsing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use verdict_proto::Language;
use verdict_proto::repair::RepairMode;
use verdict_proto::wire::{StageKind, Tool};
use verdict_worker::provider::ProviderKind;

use super::raw::{self, Field, Kind};
use super::validate::load_str;
use super::{Config, ConfigError, TokenSource};

const BASE: &str = r#"
[providers.local]
kind = "openai"
base_url = "http://127.0.0.1:8091"
model = "m"
"#;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn load(text: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    load_str(text, "test.toml", true, &env(vars))
}

fn ok(text: &str, vars: &[(&str, &str)]) -> Config {
    match load(text, vars) {
        Ok(config) => config,
        Err(e) => panic!("should load: {e}\n---\n{text}"),
    }
}

fn err(text: &str, vars: &[(&str, &str)]) -> String {
    match load(text, vars) {
        Ok(_) => panic!("should be refused:\n{text}"),
        Err(e) => e.to_string(),
    }
}

fn repo_file(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

#[test]
fn defaults() {
    let c = ok(BASE, &[]);
    assert_eq!(c.review_timeout, Duration::from_secs(600));
    assert_eq!(c.repair_max_attempts, 3);
    assert_eq!(c.language, Language::ZhCn);
    assert_eq!(c.issue_categories, None);
    assert_eq!(c.broker.url, "amqp://guest:guest@127.0.0.1:5672/%2f");
    assert_eq!(c.broker.prefix, "verdict");
    assert_eq!(c.broker.delivery_limit, 5);
    assert_eq!(c.broker.max_requeues, 3);
    assert_eq!(c.broker.message_max_bytes, 1 << 20);
    assert_eq!(c.redis.url, "redis://127.0.0.1:6379/");
    assert_eq!(c.redis.prefix, "verdict:");
    assert_eq!(c.redis.result_ttl, Duration::from_secs(604_800));
    assert_eq!(c.redis.transcript_ttl, Duration::from_secs(1_209_600));
    assert_eq!(c.redis.event_ttl, Duration::from_secs(1_209_600));
    assert_eq!(c.redis.record_ttl, Duration::from_secs(2_592_000));
    assert_eq!(c.redis.input_ttl, Duration::from_secs(604_800));
    assert_eq!(c.api.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(
        c.api.token_source,
        TokenSource::Env("VERDICT_API_TOKEN".into())
    );
    assert!(c.api.token.is_none());
    assert!(!c.api.allow_unauthenticated);
    assert_eq!(c.api.max_body_bytes, 1 << 20);
    assert_eq!(c.worker.concurrency, 8);
    assert_eq!(c.worker.bulk_concurrency, 4);
    assert_eq!(c.worker.cache_dir, PathBuf::from("/var/cache/verdict"));
    assert_eq!(c.worker.snapshot_cache_bytes, 10 << 30);
    assert_eq!(c.worker.metrics_listen.to_string(), "0.0.0.0:9090");
    assert_eq!(c.worker.shutdown_grace, Duration::from_secs(60));
    assert_eq!(c.worker.claim_ttl, Duration::from_secs(15));
    assert_eq!(c.worker.record_retry, Duration::from_secs(300));
    assert_eq!(c.worker.bulk_per_organisation, 0);
    assert_eq!(c.scheduler.sweep_interval, Duration::from_secs(10));
    assert_eq!(c.scheduler.stall_after, Duration::from_secs(30));
    assert_eq!(c.scheduler.intake_concurrency, 8);
    assert_eq!(c.scheduler.intake_backlog, 4096);
    assert_eq!(c.scheduler.replica_lease, Duration::from_secs(15));
    assert_eq!(c.scheduler.intake_timeout, Duration::from_secs(900));
    assert_eq!(c.repositories.fetch_timeout, Duration::from_secs(600));
    assert_eq!(c.repositories.local_timeout, Duration::from_secs(300));
    // Nothing remote is allowed until a host is configured, and no local path.
    let allowlist = &c.repositories.allowlist;
    assert!(allowlist.check_url("https://github.com/a/b.git").is_err());
    assert!(allowlist.check_url("/srv/repo").is_err());
    assert_eq!(c.retry, verdict_worker::retry::RetryPolicy::default());
    assert_eq!(c.pipeline.reviewers, 2);
    assert_eq!(c.pipeline.max_diff_bytes_per_reviewer, 200_000);
    assert_eq!(c.pipeline.max_diff_bytes, 1_000_000);
    assert!(c.pipeline.triage);
    assert_eq!(c.default_provider, "local");
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);

    let p = &c.providers[0];
    assert_eq!((p.name.as_str(), p.kind), ("local", ProviderKind::Openai));
    assert_eq!(p.timeout, Duration::from_secs(300));
    assert_eq!(p.connect_timeout, Duration::from_secs(10));
    assert_eq!(
        (p.max_tokens, p.temperature, p.api_key.is_none()),
        (None, None, true)
    );

    // Every stage is present, on the default provider, with its documented tools and repair.
    assert_eq!(c.stages.len(), StageKind::ALL.len());
    for kind in StageKind::ALL {
        let s = c.stage(kind).unwrap();
        assert_eq!(s.provider, "local");
        assert_eq!(s.model, None);
        assert_eq!(c.stage_model(kind), Some("m"));
        assert_eq!(s.repair.max_attempts, 3);
        assert!(s.fallback_models.is_empty());
        let agentic = matches!(
            kind,
            StageKind::Review | StageKind::Scan | StageKind::Reviewer
        );
        let tools = if agentic {
            Tool::READ_ONLY.to_vec()
        } else {
            vec![]
        };
        assert_eq!(s.tools, tools, "{kind:?}");
        let envelope = matches!(
            kind,
            StageKind::Review | StageKind::Scan | StageKind::IssueAnalysis
        );
        let mode = if envelope {
            RepairMode::Conversation
        } else {
            RepairMode::Isolated
        };
        assert_eq!(s.repair.mode, mode, "{kind:?}");
    }
}

#[test]
fn embedded_default_parses_and_validates() {
    let c = Config::embedded_default().unwrap();
    assert_eq!(c.providers.len(), 1);
    let p = &c.providers[0];
    assert_eq!(p.name, "local");
    assert_eq!(p.kind, ProviderKind::Openai);
    assert_eq!(p.base_url, "http://127.0.0.1:8091");
    assert_eq!(p.model, "smollm2");
    assert!(p.api_key.is_none());
    assert_eq!(c.default_provider, "local");
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert_eq!(
        c.worker.cache_dir,
        std::env::temp_dir().join("verdict-cache")
    );

    // Without a file the cache goes under the user's cache directory, and overrides apply.
    let c = Config::load(
        None,
        &env(&[
            ("HOME", "/home/u"),
            (
                "VERDICT_PROVIDERS__LOCAL__BASE_URL",
                "http://127.0.0.1:9999",
            ),
        ]),
    )
    .unwrap();
    assert_eq!(c.worker.cache_dir, PathBuf::from("/home/u/.cache/verdict"));
    assert_eq!(c.providers[0].base_url, "http://127.0.0.1:9999");
    let c = Config::load(None, &env(&[("XDG_CACHE_HOME", "/c"), ("HOME", "/h")])).unwrap();
    assert_eq!(c.worker.cache_dir, PathBuf::from("/c/verdict"));
}

/// Each case: a TOML snippet (given [`BASE`] unless it configures providers itself) and the
/// start of the error it must produce, which names the key.
#[test]
fn every_validation_error_names_its_key() {
    let cases: &[(&str, &str)] = &[
        // top level
        (
            "review_timeout_seconds = 0",
            "config key review_timeout_seconds = 0 is too small; set it to 1 or more",
        ),
        (
            "review_timeout_seconds = \"600\"",
            "config key review_timeout_seconds = \"600\" must be an integer",
        ),
        (
            "protocol_repair_max_attempts = 0",
            "config key protocol_repair_max_attempts = 0 is out of range 1–10; set it between 1 and 10",
        ),
        (
            "protocol_repair_max_attempts = 11",
            "config key protocol_repair_max_attempts = 11 is out of range 1–10",
        ),
        (
            "output_language = 3",
            "config key output_language = 3 must be a string",
        ),
        (
            "issue_categories = []",
            "config key issue_categories = [] is empty",
        ),
        (
            "issue_categories = [\"bug\", \"bug\"]",
            "config key issue_categories = \"bug\" is listed twice",
        ),
        (
            "issue_categories = [\"bug\", \" \"]",
            "config key issue_categories[1] = \" \" must not be empty",
        ),
        (
            "issue_categories = [\"bug\", 2]",
            "config key issue_categories[1] = 2 must be a string",
        ),
        (
            "issue_categories = \"bug\"",
            "config key issue_categories = \"bug\" must be an array of strings",
        ),
        (
            "default_provider = \"nope\"",
            "config key default_provider = \"nope\" names no configured provider; configured: local",
        ),
        (
            "review_timeout = 600",
            "config key review_timeout is unknown (did you mean `review_timeout_seconds`?); valid top-level keys: review_timeout_seconds,",
        ),
        ("broker = 5", "config key broker = 5 must be a table"),
        // broker
        (
            "[broker]\nurl = \"http://rabbit:5672\"",
            "config key broker.url = \"http://rabbit:5672\" has scheme `http`; use amqp or amqps",
        ),
        (
            "[broker]\nurl = \"amqp://u:hunter22@:5672\"",
            "config key broker.url = \"amqp://u:[REDACTED]@:5672\" has no host",
        ),
        (
            "[broker]\nurl = \"amqp://rabbit:56x2\"",
            "config key broker.url = \"amqp://rabbit:56x2\" has port `56x2`",
        ),
        (
            "[broker]\nurl = \"amqp://u:hunter22@rabbit-1:5672,,rabbit-3:5672/%2f\"",
            "config key broker.url = \"amqp://u:[REDACTED]@rabbit-1:5672,,rabbit-3:5672/%2f\" has an empty entry in its node list; separate nodes with one comma each",
        ),
        (
            "[broker]\nurl = \"amqp://rabbit-1,rabbit-2:5x72\"",
            "config key broker.url = \"amqp://rabbit-1,rabbit-2:5x72\" has port `5x72`, which is not a number 1–65535, in node `rabbit-2:5x72`",
        ),
        (
            "[broker]\nurl = \"rabbit\"",
            "config key broker.url = \"rabbit\" is not a URL",
        ),
        (
            "[broker]\nurl = \"\"",
            "config key broker.url = \"\" must not be empty",
        ),
        (
            "[broker]\nprefix = \"my prefix\"",
            "config key broker.prefix = \"my prefix\" is not usable in queue names",
        ),
        (
            "[broker]\ndelivery_limit = 0",
            "config key broker.delivery_limit = 0 is too small; set it to 1 or more",
        ),
        (
            "[broker]\nmax_requeues = -1",
            "config key broker.max_requeues = -1 is too small; set it to 0 or more",
        ),
        (
            "[broker]\nmessage_max_bytes = 1073741824",
            "config key broker.message_max_bytes = 1073741824 is out of range 1024–536870912",
        ),
        (
            "[broker]\nurll = \"amqp://x\"",
            "config key broker.urll is unknown (did you mean `url`?); valid keys in [broker]: url, prefix, delivery_limit, max_requeues, message_max_bytes",
        ),
        // redis
        (
            "[redis]\nurl = \"amqp://x\"",
            "config key redis.url = \"amqp://x\" has scheme `amqp`; use redis or rediss or redis+unix or unix or redis+cluster or rediss+cluster or redis+sentinel or rediss+sentinel",
        ),
        (
            "[redis]\nurl = \"redis://h1:6379,h2:6379\"",
            "config key redis.url = \"redis://h1:6379,h2:6379\" lists 2 hosts; scheme `redis` takes one (a Redis Cluster is `redis+cluster://h1:6379,h2:6379`",
        ),
        (
            "[redis]\nurl = \"redis+cluster://h1:6379,h2:x\"",
            "config key redis.url = \"redis+cluster://h1:6379,h2:x\" has port `x` in node `h2:x`, which is not a number 0–65535",
        ),
        (
            "[redis]\nurl = \"redis+sentinel://s1:26379,s2:26379\"",
            "config key redis.url = \"redis+sentinel://s1:26379,s2:26379\" names no service; write the name the Sentinels watch after the nodes",
        ),
        (
            "[redis]\nurl = \"unix://\"",
            "config key redis.url = \"unix://\" names no socket path",
        ),
        (
            "[redis]\nprefix = \"v{1}:\"",
            "config key redis.prefix = \"v{1}:\" contains `{` or `}`; remove them",
        ),
        (
            "[redis]\nresult_ttl_seconds = 0",
            "config key redis.result_ttl_seconds = 0 is too small",
        ),
        (
            "[redis]\ntranscript_ttl_seconds = 0",
            "config key redis.transcript_ttl_seconds = 0 is too small",
        ),
        (
            "[redis]\nrecord_ttl_seconds = 0",
            "config key redis.record_ttl_seconds = 0 is too small",
        ),
        (
            "[redis]\nintake_memory_percent = 101",
            "config key redis.intake_memory_percent = 101 is out of range 1–100",
        ),
        (
            "[redis]\ninput_ttl_seconds = -1",
            "config key redis.input_ttl_seconds = -1 is too small",
        ),
        (
            "[redis]\nevent_ttl_seconds = -5",
            "config key redis.event_ttl_seconds = -5 is too small",
        ),
        // api
        (
            "[api]\nlisten = \"localhost:80\"",
            "config key api.listen = \"localhost:80\" is not a socket address",
        ),
        (
            "[api]\nlisten = \"127.0.0.1\"",
            "config key api.listen = \"127.0.0.1\" is not a socket address",
        ),
        (
            "[api]\ntoken_env = \"X\"\ntoken_file = \"/t\"",
            "config key api.token_file = \"/t\" cannot be combined with api.token_env",
        ),
        (
            "[api]\ntoken_file = \"/nonexistent/token\"",
            "config key api.token_file = \"/nonexistent/token\" cannot be read",
        ),
        (
            "[api]\ntoken_env = \" \"",
            "config key api.token_env = \" \" must not be empty",
        ),
        (
            "[api]\nallow_unauthenticated = \"yes\"",
            "config key api.allow_unauthenticated = \"yes\" must be a boolean",
        ),
        (
            "[api]\nmax_body_bytes = 0",
            "config key api.max_body_bytes = 0 is too small",
        ),
        // worker
        (
            "[worker]\nconcurrency = 0",
            "config key worker.concurrency = 0 is out of range 1–1024; set it between 1 and 1024",
        ),
        (
            "[worker]\nconcurrency = 1025",
            "config key worker.concurrency = 1025 is out of range 1–1024",
        ),
        (
            "[worker]\nbulk_concurrency = -1",
            "config key worker.bulk_concurrency = -1 is out of range 0–1024",
        ),
        (
            "[worker]\ncache_dir = \"\"",
            "config key worker.cache_dir = \"\" must not be empty",
        ),
        (
            "[worker]\nsnapshot_cache_bytes = 0",
            "config key worker.snapshot_cache_bytes = 0 is too small",
        ),
        (
            "[worker]\nmetrics_listen = \":9090\"",
            "config key worker.metrics_listen = \":9090\" is not a socket address; write an IP address and a port, e.g. \"0.0.0.0:9090\"",
        ),
        (
            "[worker]\nclaim_ttl_seconds = 2",
            "config key worker.claim_ttl_seconds = 2 is too small; set it to 3 or more",
        ),
        (
            "[scheduler]\nsweep_interval_seconds = 0",
            "config key scheduler.sweep_interval_seconds = 0 is too small; set it to 1 or more",
        ),
        (
            "[scheduler]\nintake_concurrency = 0",
            "config key scheduler.intake_concurrency = 0 is out of range 1–1024",
        ),
        (
            "[scheduler]\nintake_timeout_seconds = 600",
            "config key scheduler.intake_timeout_seconds = 600 is not longer than repositories.fetch_timeout_seconds = 600: an intake fetches at least once",
        ),
        // repositories
        (
            "[repositories]\nfetch_timeout_seconds = 0",
            "config key repositories.fetch_timeout_seconds = 0 is too small; set it to 1 or more",
        ),
        (
            "[repositories]\nlocal_timeout_seconds = 0",
            "config key repositories.local_timeout_seconds = 0 is too small",
        ),
        (
            "[repositories]\nallow_hosts = [\"https://github.com\"]",
            "config key repositories.allow_hosts = \"https://github.com\" is not a host; write a host name",
        ),
        (
            "[repositories]\nallow_hosts = [\"\"]",
            "config key repositories.allow_hosts[0] = \"\" must not be empty",
        ),
        (
            "[repositories]\nallow_owners = [\"acme\"]",
            "config key repositories.allow_owners = \"acme\" names no host, and no [github] is configured; write HOST/OWNER",
        ),
        (
            "[repositories]\nallow_patterns = [\"github.com/acme/*\"]",
            "config key repositories.allow_patterns = \"github.com/acme/*\" does not start with a scheme",
        ),
        (
            "[repositories]\nallow_schemes = [\"ext\"]",
            "config key repositories.allow_schemes = \"ext\" makes git run a program",
        ),
        (
            "[repositories]\nallow_schemes = [\"file\"]",
            "config key repositories.allow_schemes = \"file\" is a local path, which only `verdict dev` reads",
        ),
        (
            "[repositories]\nallow_local_paths = \"yes\"",
            "config key repositories.allow_local_paths = \"yes\" must be a boolean",
        ),
        (
            "[worker]\nshutdown_grace_seconds = -1",
            "config key worker.shutdown_grace_seconds = -1 is too small; set it to 0 or more",
        ),
        // retry
        (
            "[retry]\nbudget = -1",
            "config key retry.budget = -1 is too small",
        ),
        (
            "[retry]\nbase_delay_ms = 0",
            "config key retry.base_delay_ms = 0 is too small",
        ),
        (
            "[retry]\nbase_delay_ms = 1000\nmax_delay_ms = 999",
            "config key retry.max_delay_ms = 999 is below retry.base_delay_ms = 1000",
        ),
        (
            "[retry]\nmax_inline_wait_seconds = -1",
            "config key retry.max_inline_wait_seconds = -1 is too small",
        ),
        // pipeline
        (
            "[pipeline]\nreviewers = 0",
            "config key pipeline.reviewers = 0 is out of range 1–16",
        ),
        (
            "[pipeline]\nreviewers = 17",
            "config key pipeline.reviewers = 17 is out of range 1–16",
        ),
        (
            "[pipeline]\nmax_diff_bytes_per_reviewer = 0",
            "config key pipeline.max_diff_bytes_per_reviewer = 0 is too small",
        ),
        (
            "[pipeline]\nmax_diff_bytes = 0",
            "config key pipeline.max_diff_bytes = 0 is too small",
        ),
        (
            "[pipeline]\ntriage = 1",
            "config key pipeline.triage = 1 must be a boolean",
        ),
        // stages
        (
            "[stages.reviewer]\nrepair_attempts = 12",
            "config key stages.reviewer.repair_attempts = 12 is out of range 1–10; set it between 1 and 10",
        ),
        (
            "[stages.reviewer]\nprovider = \"locl\"",
            "config key stages.reviewer.provider = \"locl\" names no configured provider (did you mean `local`?); configured: local",
        ),
        (
            "[stages.review]\nmodel = \"\"",
            "config key stages.review.model = \"\" must not be empty",
        ),
        (
            "[stages.scan]\ntools = [\"write\"]",
            "config key stages.scan.tools = \"write\" is not a tool; valid tools: read, grep, find, ls",
        ),
        (
            "[stages.scan]\ntools = [\"read\", \"read\"]",
            "config key stages.scan.tools = \"read\" is listed twice",
        ),
        (
            "[stages.triage]\nrepair_mode = \"loose\"",
            "config key stages.triage.repair_mode = \"loose\" is not a repair mode; use conversation or isolated",
        ),
        (
            "[stages.triage]\nfallback_models = [\"a\", \"a\"]",
            "config key stages.triage.fallback_models = \"a\" is listed twice",
        ),
        (
            "[stages.issue_analysis]\nmodel = \"x\"",
            "config key stages.issue_analysis is not a stage (did you mean `issue-analysis`?); valid stages: triage, summary, reviewer, validator, review, issue-analysis, scan",
        ),
        (
            "[stages.review]\ntool = []",
            "config key stages.review.tool is unknown (did you mean `tools`?); valid keys in [stages.review]: provider, model, tools, repair_mode, repair_attempts, structured_output, fallback_models",
        ),
        (
            "[stages]\nreview = 1",
            "config key stages.review = 1 must be a table, written [stages.review]",
        ),
        // providers
        (
            "review_timeout_seconds = 5",
            "config key providers is missing: configure at least one provider",
        ),
        (
            "[providers.a]\nkind = \"openai\"\nbase_url = \"http://a\"\nmodel = \"m\"\n[providers.b]\nkind = \"openai\"\nbase_url = \"http://b\"\nmodel = \"m\"",
            "config key default_provider is required when several providers are configured; set it to one of: a, b",
        ),
        (
            "[providers.x]\nbase_url = \"http://a\"\nmodel = \"m\"",
            "config key providers.x.kind is required; set it to openai, anthropic or exec",
        ),
        (
            "[providers.x]\nkind = \"gemini\"\nbase_url = \"http://a\"\nmodel = \"m\"",
            "config key providers.x.kind = \"gemini\" is not a provider kind",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nbase_url = \"http://a\"",
            "config key providers.x.model is required",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nmodel = \"m\"",
            "config key providers.x.base_url is required for this kind",
        ),
        (
            "[providers.x]\nkind = \"anthropic\"\nbase_url = \"ftp://a\"\nmodel = \"m\"",
            "config key providers.x.base_url = \"ftp://a\" is not a usable http(s) base URL",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nbase_url = \"https://user:hunter22@gw\"\nmodel = \"m\"",
            "config key providers.x.base_url = \"https://user:[REDACTED]@gw\" carries credentials",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nbase_url = \"http://a\"\nmodel = \"m\"\ncommand = [\"a\"]",
            "config key providers.x.command applies only to kind = \"exec\"; remove it",
        ),
        (
            "[providers.x]\nkind = \"exec\"\nmodel = \"m\"\ncommand = [\"a\"]\nbase_url = \"http://a\"",
            "config key providers.x.base_url applies only to kind = \"openai\" or \"anthropic\"",
        ),
        (
            "[providers.x]\nkind = \"exec\"\nmodel = \"m\"\ncommand = [\"a\"]\ntemperature = 0",
            "config key providers.x.temperature applies only to kind = \"openai\" or \"anthropic\"",
        ),
        (
            "[providers.x]\nkind = \"exec\"\nmodel = \"m\"",
            "config key providers.x.command is required for kind = \"exec\"",
        ),
        (
            "[providers.x]\nkind = \"exec\"\nmodel = \"m\"\ncommand = []",
            "config key providers.x.command must name the program",
        ),
        (
            "[providers.x]\nkind = \"exec\"\nmodel = \"m\"\ncommand = [\" \", \"-p\"]",
            "config key providers.x.command must name the program",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nbase_url = \"http://a\"\nmodel = \"m\"\ntimeout_seconds = 0",
            "config key providers.x.timeout_seconds = 0 is too small",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nbase_url = \"http://a\"\nmodel = \"m\"\nconnect_timeout_seconds = 0",
            "config key providers.x.connect_timeout_seconds = 0 is too small",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nbase_url = \"http://a\"\nmodel = \"m\"\nmax_tokens = 0",
            "config key providers.x.max_tokens = 0 is too small; set it to 1 or more",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nbase_url = \"http://a\"\nmodel = \"m\"\nmax_tokens = 4294967296",
            "config key providers.x.max_tokens = 4294967296 is too large; set it to 4294967295 or less",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nbase_url = \"http://a\"\nmodel = \"m\"\ntimeout_seconds = -5",
            "config key providers.x.timeout_seconds = -5 is too small; set it to 1 or more",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nbase_url = \"http://a\"\nmodel = \" \"",
            "config key providers.x.model = \" \" must not be empty",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nbase_url = \"http://a\"\nmodel = \"m\"\nstructured_output = \"strict\"",
            "config key providers.x.structured_output = \"strict\" is not a structured output mode; use auto, json_schema, grammar, tool or off",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nbase_url = \"http://a\"\nmodel = \"m\"\nstructured_output = \"tool\"",
            "config key providers.x.structured_output = \"tool\" needs a provider of kind = \"anthropic\"; use auto or off for this provider",
        ),
        (
            "[providers.x]\nkind = \"exec\"\nmodel = \"m\"\ncommand = [\"a\"]\nno_tools_flag = \"-n\"\nstructured_output = \"grammar\"",
            "config key providers.x.structured_output = \"grammar\" needs a provider of kind = \"openai\" (grammar: a llama.cpp server); use auto or off for this provider",
        ),
        (
            "[providers.x]\nkind = \"anthropic\"\nbase_url = \"http://a\"\nmodel = \"m\"\n\n[stages.triage]\nstructured_output = \"json_schema\"",
            "config key stages.triage.structured_output = \"json_schema\" needs a provider of kind = \"openai\" (grammar: a llama.cpp server); use auto or off for this provider",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nbase_url = \"http://a\"\nmodel = \"m\"\nstructured_max_items = 0",
            "config key providers.x.structured_max_items = 0 is out of range 1–1000; set it between 1 and 1000",
        ),
        (
            "[providers.x]\nkind = \"exec\"\nmodel = \"m\"\ncommand = [\"a\"]\nno_tools_flag = \"\"",
            "config key providers.x.no_tools_flag = \"\" must not be empty",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nbase_url = \"http://a\"\nmodel = \"m\"\ntemperature = nan",
            "config key providers.x.temperature = NaN is out of range 0–2",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nbase_url = \"http://a\"\nmodel = \"m\"\ntemperature = 2.5",
            "config key providers.x.temperature = 2.5 is out of range 0–2",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nbase_url = \"http://a\"\nmodel = \"m\"\ntemperature = \"hot\"",
            "config key providers.x.temperature = \"hot\" must be a number",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nbase_url = \"http://a\"\nmodel = \"m\"\napi_key_env = \"A\"\napi_key_file = \"/f\"",
            "config key providers.x.api_key_file = \"/f\" cannot be combined with providers.x.api_key_env",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nbase_url = \"http://a\"\nmodel = \"m\"\napi_key_env = \"NOT_SET_ANYWHERE\"",
            "config key providers.x.api_key_env: provider `x`: environment variable NOT_SET_ANYWHERE is not set or empty",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nbase_url = \"http://a\"\nmodel = \"m\"\napi_key_file = \"/nonexistent/key\"",
            "config key providers.x.api_key_file: provider `x`: cannot read API key file /nonexistent/key",
        ),
        (
            "[providers.x]\nkind = \"openai\"\nbase_url = \"http://a\"\nmodel = \"m\"\nkey = \"sk-1\"",
            "config key providers.x.key is unknown; valid keys in [providers.x]: kind, base_url, model, api_key_env, api_key_file,",
        ),
        (
            "[providers.\"my gw\"]\nkind = \"openai\"\nbase_url = \"http://a\"\nmodel = \"m\"",
            "config key providers.my gw has an invalid name",
        ),
        (
            "[providers]\nx = \"openai\"",
            "config key providers.x = \"openai\" must be a table",
        ),
    ];
    let mut failures = Vec::new();
    for (snippet, expected) in cases {
        let text = if snippet.contains("[providers")
            || snippet.starts_with("review_timeout_seconds = 5")
        {
            (*snippet).to_owned()
        } else {
            format!("{snippet}\n{BASE}")
        };
        match load(&text, &[]) {
            Ok(_) => failures.push(format!("{snippet:?}: accepted, expected {expected:?}")),
            Err(e) => {
                let message = e.to_string();
                if !message.starts_with(expected) {
                    failures.push(format!(
                        "{snippet:?}:\n   got {message}\n  want {expected}…"
                    ));
                }
                assert!(e.key().is_some(), "{message}");
                assert!(!message.contains("hunter22"), "{message}");
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn redis_cluster_and_sentinel_urls_are_accepted() {
    for url in [
        "redis+cluster://:pw@10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379",
        "rediss+cluster://redis-cluster:6379",
        "redis+sentinel://s1:26379,s2:26379,s3:26379/verdict/2",
    ] {
        let c = ok(&format!("[redis]\nurl = \"{url}\"\n{BASE}"), &[]);
        assert_eq!(c.redis.url, url);
    }
}

#[test]
fn syntax_errors_give_line_and_column() {
    let e = err("[broker]\nurl = \"amqp://x\"\nprefix = \n", &[]);
    assert!(
        e.starts_with("config file test.toml: invalid TOML at line 3, column"),
        "{e}"
    );
    let e = err("a = 1\na = 2\n", &[]);
    assert!(e.contains("line 2"), "{e}");
}

#[test]
fn environment_overrides_each_type() {
    let text = format!(
        "{BASE}\n[providers.openai-gw]\nkind = \"openai\"\nbase_url = \"https://gw.example\"\nmodel = \"big\"\n"
    );
    let c = ok(
        &text,
        &[
            // integers, top level and in a table
            ("VERDICT_REVIEW_TIMEOUT_SECONDS", "900"),
            ("VERDICT_WORKER__CONCURRENCY", " 16 "),
            // strings
            ("VERDICT_BROKER__URL", "amqps://u:p@rabbit.example:5671/%2f"),
            ("VERDICT_OUTPUT_LANGUAGE", "en"),
            ("VERDICT_DEFAULT_PROVIDER", "openai-gw"),
            // booleans
            ("VERDICT_PIPELINE__TRIAGE", "false"),
            ("VERDICT_API__ALLOW_UNAUTHENTICATED", "1"),
            // a number, in a provider whose name has a `-`
            ("VERDICT_PROVIDERS__OPENAI_GW__TEMPERATURE", "0.2"),
            (
                "VERDICT_PROVIDERS__LOCAL__BASE_URL",
                "http://127.0.0.1:9999",
            ),
            // lists, top level and in a stage whose name has a `-`
            ("VERDICT_ISSUE_CATEGORIES", "bug, feature ,question"),
            ("VERDICT_STAGES__ISSUE_ANALYSIS__FALLBACK_MODELS", "a,b"),
            ("VERDICT_STAGES__REVIEW__TOOLS", ""),
            ("VERDICT_STAGES__REVIEWER__MODEL", "strong"),
            // not configuration keys, but verdict's: ignored
            ("VERDICT_LOG", "debug"),
            ("VERDICT_TRACE", "verdict_worker=debug"),
            ("VERDICT_API_TOKEN", "t0ken"),
            // not verdict's at all
            ("PATH", "/bin"),
        ],
    );
    assert_eq!(c.review_timeout, Duration::from_secs(900));
    assert_eq!(c.worker.concurrency, 16);
    assert_eq!(c.broker.url, "amqps://u:p@rabbit.example:5671/%2f");
    assert_eq!(c.language, Language::En);
    assert_eq!(c.default_provider, "openai-gw");
    assert!(!c.pipeline.triage);
    assert!(c.api.allow_unauthenticated);
    assert_eq!(c.provider("openai-gw").unwrap().temperature, Some(0.2));
    assert_eq!(
        c.provider("local").unwrap().base_url,
        "http://127.0.0.1:9999"
    );
    assert_eq!(
        c.issue_categories,
        Some(vec!["bug".into(), "feature".into(), "question".into()])
    );
    let analysis = c.stage(StageKind::IssueAnalysis).unwrap();
    assert_eq!(analysis.fallback_models, ["a", "b"]);
    assert_eq!(analysis.provider, "openai-gw");
    assert!(c.stage(StageKind::Review).unwrap().tools.is_empty());
    assert_eq!(c.stage_model(StageKind::Reviewer), Some("strong"));
    assert_eq!(c.stage_model(StageKind::Summary), Some("big"));
    assert_eq!(c.api.token.as_ref().map(|t| t.expose()), Some("t0ken"));

    // An override can define a provider the file does not have.
    let c = ok(
        BASE,
        &[
            ("VERDICT_PROVIDERS__CLAUDE__KIND", "anthropic"),
            (
                "VERDICT_PROVIDERS__CLAUDE__BASE_URL",
                "https://api.anthropic.com",
            ),
            ("VERDICT_PROVIDERS__CLAUDE__MODEL", "claude"),
            ("VERDICT_DEFAULT_PROVIDER", "claude"),
        ],
    );
    assert_eq!(
        c.stage_provider(StageKind::Review).unwrap().kind,
        ProviderKind::Anthropic
    );
}

#[test]
fn errors_in_overridden_values_name_the_variable() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "VERDICT_WORKER__CONCURRENCY",
            "0",
            "environment variable VERDICT_WORKER__CONCURRENCY: config key worker.concurrency = 0 is out of range 1–1024",
        ),
        (
            "VERDICT_WORKER__CONCURRENCY",
            "eight",
            "environment variable VERDICT_WORKER__CONCURRENCY: `eight` is not an integer (config key worker.concurrency)",
        ),
        (
            "VERDICT_PIPELINE__TRIAGE",
            "maybe",
            "environment variable VERDICT_PIPELINE__TRIAGE: `maybe` is not a boolean (true or false) (config key pipeline.triage)",
        ),
        (
            "VERDICT_PROVIDERS__LOCAL__TEMPERATURE",
            "hot",
            "environment variable VERDICT_PROVIDERS__LOCAL__TEMPERATURE: `hot` is not a number",
        ),
        (
            "VERDICT_BROKER__URL",
            "http://u:hunter22@x",
            "environment variable VERDICT_BROKER__URL: config key broker.url = \"http://u:[REDACTED]@x\" has scheme `http`",
        ),
        (
            "VERDICT_STAGES__SCAN__TOOLS",
            "read,write",
            "environment variable VERDICT_STAGES__SCAN__TOOLS: config key stages.scan.tools = \"write\" is not a tool",
        ),
        (
            "VERDICT_PROVIDERS__LOCAL__API_KEY_ENV",
            "NOPE_KEY",
            "environment variable VERDICT_PROVIDERS__LOCAL__API_KEY_ENV: config key providers.local.api_key_env: provider `local`: environment variable NOPE_KEY is not set",
        ),
        // Values the worker's provider check refuses name the variable too.
        (
            "VERDICT_PROVIDERS__LOCAL__TIMEOUT_SECONDS",
            "0",
            "environment variable VERDICT_PROVIDERS__LOCAL__TIMEOUT_SECONDS: config key providers.local.timeout_seconds = 0 is too small; set it to 1 or more",
        ),
        (
            "VERDICT_PROVIDERS__LOCAL__BASE_URL",
            "ftp://x",
            "environment variable VERDICT_PROVIDERS__LOCAL__BASE_URL: config key providers.local.base_url = \"ftp://x\" is not a usable http(s) base URL",
        ),
        // A provider created by an override is checked like any other.
        (
            "VERDICT_PROVIDERS__NEW__MODEL",
            "m",
            "environment variable VERDICT_PROVIDERS__NEW__MODEL: config key providers.new.kind is required",
        ),
    ];
    for (var, value, expected) in cases {
        let e = err(BASE, &[(var, value)]);
        assert!(
            e.starts_with(expected),
            "{var}={value}:\n   got {e}\n  want {expected}…"
        );
        assert!(!e.contains("hunter22"), "{e}");
    }
}

#[test]
fn unknown_environment_variables_are_rejected() {
    let cases: &[(&str, &str)] = &[
        (
            "VERDICT_BROKER__URLL",
            "environment variable VERDICT_BROKER__URLL: there is no key `urll` in [broker] (did you mean `url`?); valid keys: url, prefix,",
        ),
        (
            "VERDICT_BROKERS__URL",
            "environment variable VERDICT_BROKERS__URL: there is no key `brokers` at the top level (did you mean `broker`?)",
        ),
        (
            "VERDICT_REVIEW_TIMEOUT",
            "environment variable VERDICT_REVIEW_TIMEOUT: there is no key `review_timeout` at the top level",
        ),
        (
            "VERDICT_API_TOKENS",
            "environment variable VERDICT_API_TOKENS: there is no key `api_tokens`",
        ),
        (
            "VERDICT_BROKER",
            "environment variable VERDICT_BROKER: config key broker is a table; set one of its keys (url, prefix,",
        ),
        (
            "VERDICT_BROKER__URL__HOST",
            "environment variable VERDICT_BROKER__URL__HOST: config key broker.url is a value, not a table; use VERDICT_BROKER__URL",
        ),
        (
            "VERDICT_STAGES__FOO__MODEL",
            "environment variable VERDICT_STAGES__FOO__MODEL: `foo` is not a stage; valid stages (with _ for -): triage,",
        ),
        (
            "VERDICT_PROVIDERS__LOCAL",
            "environment variable VERDICT_PROVIDERS__LOCAL: config key providers.local is a table",
        ),
        (
            "VERDICT_PROVIDERS",
            "environment variable VERDICT_PROVIDERS: config key providers is a table of named tables",
        ),
        (
            "VERDICT_",
            "environment variable VERDICT_: names no configuration key",
        ),
    ];
    for (var, expected) in cases {
        let e = err(BASE, &[(var, "x")]);
        assert!(
            e.starts_with(expected),
            "{var}:\n   got {e}\n  want {expected}…"
        );
        assert!(e.contains("VERDICT_LOG"), "lists the known variables: {e}");
    }

    // A VERDICT_* variable the configuration names as a key source is read, not rejected.
    let text = BASE.replace(
        "model = \"m\"",
        "model = \"m\"\napi_key_env = \"VERDICT_LOCAL_KEY\"",
    );
    let c = ok(&text, &[("VERDICT_LOCAL_KEY", "sk-local")]);
    assert_eq!(
        c.providers[0].api_key.as_ref().unwrap().expose(),
        "sk-local"
    );
    let c = ok(
        BASE,
        &[
            ("VERDICT_API__TOKEN_ENV", "VERDICT_MY_TOKEN"),
            ("VERDICT_MY_TOKEN", "tok"),
        ],
    );
    assert_eq!(c.api.token.as_ref().unwrap().expose(), "tok");
    // So are the GitHub credentials' variables (a chart may name them VERDICT_*).
    let text = format!(
        "[github]\ntoken_env = \"VERDICT_GH_TOKEN\"\nwebhook_secret_env = \"VERDICT_GH_HOOK\"\n{BASE}"
    );
    ok(
        &text,
        &[("VERDICT_GH_TOKEN", "ghp_x"), ("VERDICT_GH_HOOK", "hook")],
    );
    // Every known variable is ignored.
    let known: Vec<(&str, &str)> = super::KNOWN_ENV_VARS.iter().map(|v| (*v, "1")).collect();
    ok(BASE, &known);
    // Only the VERDICT_ prefix is ours.
    ok(BASE, &[("verdict_broker__urll", "x"), ("XVERDICT_A", "x")]);
}

#[test]
fn unknown_keys_list_the_valid_ones() {
    let e = err(&format!("[worker]\nconcurency = 4\n{BASE}"), &[]);
    assert_eq!(
        e,
        "config key worker.concurency is unknown (did you mean `concurrency`?); valid keys in [worker]: concurrency, bulk_concurrency, cache_dir, snapshot_cache_bytes, metrics_listen, shutdown_grace_seconds, claim_ttl_seconds, record_retry_seconds, bulk_per_organisation, response_cache"
    );
    let e = err(&format!("colour = 1\n{BASE}"), &[]);
    assert_eq!(
        e,
        "config key colour is unknown; valid top-level keys: review_timeout_seconds, protocol_repair_max_attempts, output_language, issue_categories, default_provider, broker, redis, api, scheduler, worker, retry, pipeline, scan, budgets, organisations, github, repositories, providers, stages"
    );
}

#[test]
fn provider_keys_resolve_from_env_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, "sk-from-file\nsecond line ignored\n").unwrap();
    let empty_file = dir.path().join("empty");
    std::fs::write(&empty_file, "\n").unwrap();
    let text = format!(
        r#"
default_provider = "gw"
[providers.gw]
kind = "openai"
base_url = "https://gw.example/v1"
model = "big"
api_key_env = "GW_KEY"

[providers.claude]
kind = "anthropic"
base_url = "https://api.anthropic.com"
model = "claude"
api_key_file = "{}"
"#,
        key_file.display()
    );
    let c = ok(&text, &[("GW_KEY", "  sk-from-env \n")]);
    assert_eq!(
        c.provider("gw").unwrap().api_key.as_ref().unwrap().expose(),
        "sk-from-env"
    );
    assert_eq!(
        c.provider("claude")
            .unwrap()
            .api_key
            .as_ref()
            .unwrap()
            .expose(),
        "sk-from-file"
    );
    let debug = format!("{c:?}");
    assert!(!debug.contains("sk-from"), "{debug}");

    let e = err(&text, &[("GW_KEY", "  ")]);
    assert!(
        e.contains("providers.gw.api_key_env") && e.contains("GW_KEY is not set"),
        "{e}"
    );
    let e = err(&text.replace("/key\"", "/empty\""), &[("GW_KEY", "k")]);
    assert!(
        e.contains("providers.claude.api_key_file") && e.contains("the file is empty"),
        "{e}"
    );
}

#[test]
fn api_token_is_required_unless_unauthenticated_is_allowed() {
    let c = ok(BASE, &[]);
    let e = c.api.require_token().unwrap_err().to_string();
    assert!(
        e.starts_with("config key api.token_env = \"VERDICT_API_TOKEN\" gives no API token"),
        "{e}"
    );
    let c = ok(BASE, &[("VERDICT_API_TOKEN", "tok")]);
    assert_eq!(c.api.require_token().unwrap().unwrap().expose(), "tok");
    let c = ok(&format!("[api]\nallow_unauthenticated = true\n{BASE}"), &[]);
    assert!(c.api.require_token().unwrap().is_none());

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "file-token\n").unwrap();
    let c = ok(
        &format!(
            "[api]\ntoken_file = {:?}\n{BASE}",
            file.display().to_string()
        ),
        &[("VERDICT_API_TOKEN", "env")],
    );
    assert_eq!(
        c.api.require_token().unwrap().unwrap().expose(),
        "file-token"
    );
    assert_eq!(c.api.token_source, TokenSource::File(file));
}

#[test]
fn debug_never_shows_secrets() {
    let text = format!(
        "[broker]\nurl = \"amqp://user:hunter22@rabbit:5672/%2f\"\n[redis]\nurl = \"redis://:hunter22@redis:6379/0\"\n{}",
        BASE.replace("model = \"m\"", "model = \"m\"\napi_key_env = \"K\"")
    );
    let c = ok(
        &text,
        &[("K", "sk-hunter22"), ("VERDICT_API_TOKEN", "hunter22")],
    );
    let debug = format!("{c:?}");
    assert!(!debug.contains("hunter22"), "{debug}");
    assert!(
        debug.contains("amqp://user:[REDACTED]@rabbit:5672/%2f"),
        "{debug}"
    );
    assert_eq!(c.redis.redacted_url(), "redis://:[REDACTED]@redis:6379/0");
    assert_eq!(
        super::validate::redact_url("https://ghp_token@github.com/o/r"),
        "https://[REDACTED]@github.com/o/r"
    );
    assert_eq!(super::validate::redact_url("no url"), "no url");
}

#[test]
fn a_broker_url_may_list_a_clusters_nodes() {
    let url = "amqp://user:hunter22@rabbit-0:5672,rabbit-1:5672,rabbit-2/verdict";
    let c = ok(&format!("[broker]\nurl = \"{url}\"\n{BASE}"), &[]);
    assert_eq!(c.broker.url, url);
    assert_eq!(
        c.broker.redacted_url(),
        "amqp://user:[REDACTED]@rabbit-0:5672,rabbit-1:5672,rabbit-2/verdict"
    );
    let c = ok(
        BASE,
        &[("VERDICT_BROKER__URL", "amqps://u:p@a:5671,b:5671/%2f")],
    );
    assert_eq!(c.broker.url, "amqps://u:p@a:5671,b:5671/%2f");
}

#[test]
fn warnings_for_valid_but_doubtful_settings() {
    let exec = "[providers.agent]\nkind = \"exec\"\nmodel = \"m\"\ncommand = [\"agent\", \"-p\"]\n";
    let c = ok(
        &format!("output_language = \"fr\"\nreview_timeout_seconds = 1800\n{exec}"),
        &[],
    );
    assert_eq!(c.language, Language::ZhCn);
    let keys: Vec<&str> = c.warnings.iter().map(|w| w.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "review_timeout_seconds",
            "output_language",
            "providers.agent.no_tools_flag"
        ]
    );
    assert!(
        c.warnings[0].to_string().contains("consumer_timeout"),
        "{}",
        c.warnings[0]
    );
    assert!(
        c.warnings[1]
            .to_string()
            .contains("\"fr\" is not a recognised language")
    );
    let c = ok(
        &format!("output_language = \"en-US\"\n{exec}no_tools_flag = \"--no-tools\"\n"),
        &[],
    );
    assert_eq!(c.language, Language::En);
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert_eq!(c.providers[0].command, ["agent", "-p"]);
    assert_eq!(c.providers[0].base_url, "");
}

#[test]
fn stages_inherit_and_override() {
    let text = format!(
        r#"
protocol_repair_max_attempts = 5
default_provider = "local"
{BASE}
[providers.cheap]
kind = "openai"
base_url = "http://127.0.0.1:8092"
model = "tiny"

[stages.triage]
provider = "cheap"
repair_attempts = 2
repair_mode = "conversation"

[stages.validator]
tools = ["read", "grep"]
fallback_models = ["m2", "m3"]
"#
    );
    let c = ok(&text, &[]);
    let triage = c.stage(StageKind::Triage).unwrap();
    assert_eq!(triage.provider, "cheap");
    assert_eq!(c.stage_model(StageKind::Triage), Some("tiny"));
    assert_eq!(triage.repair.max_attempts, 2);
    assert_eq!(triage.repair.mode, RepairMode::Conversation);
    let validator = c.stage(StageKind::Validator).unwrap();
    assert_eq!(validator.tools, [Tool::Read, Tool::Grep]);
    assert_eq!(validator.repair.max_attempts, 5);
    assert_eq!(c.stage(StageKind::Review).unwrap().repair.max_attempts, 5);

    let settings = c.executor_settings();
    assert_eq!(settings.retry, c.retry);
    assert_eq!(settings.fallback_models.len(), 1);
    assert_eq!(
        settings.fallback_models[&StageKind::Validator],
        ["m2", "m3"]
    );
}

#[test]
fn integers_are_accepted_for_numbers() {
    let c = ok(
        &BASE.replace(
            "model = \"m\"",
            "model = \"m\"\ntemperature = 1\nmax_tokens = 4096",
        ),
        &[],
    );
    assert_eq!(c.providers[0].temperature, Some(1.0));
    assert_eq!(c.providers[0].max_tokens, Some(4096));
}

/// The example configuration checked in for operators keeps parsing.
#[test]
fn example_file_parses() {
    let path = repo_file("ops/config/verdict.example.toml");
    let c = Config::load(
        Some(&path),
        &env(&[
            ("GATEWAY_API_KEY", "sk-gw"),
            ("ANTHROPIC_API_KEY", "sk-ant"),
            ("VERDICT_API_TOKEN", "tok"),
        ]),
    )
    .unwrap();
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    assert!(c.providers.len() >= 3, "{:?}", c.providers);
    assert!(c.api.require_token().unwrap().is_some());
    let e = Config::load(Some(&path), &[]).unwrap_err().to_string();
    assert!(e.contains("api_key_env"), "{e}");
}

/// The complete example in docs/configuration.md parses, and the document mentions every key.
#[test]
fn documented_example_parses_and_every_key_is_documented() {
    let doc = std::fs::read_to_string(repo_file("docs/configuration.md")).unwrap();
    let (_, after) = doc.split_once("## Complete example").unwrap();
    let (_, block) = after.split_once("```toml\n").unwrap();
    let (example, _) = block.split_once("\n```").unwrap();
    let c = ok(example, &[("OPENAI_API_KEY", "sk")]);
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);

    fn walk(fields: &[Field], path: &str, doc: &str, missing: &mut Vec<String>) {
        for f in fields {
            let key = if path.is_empty() {
                f.name.to_owned()
            } else {
                format!("{path}.{}", f.name)
            };
            match f.kind {
                Kind::Table(inner) => walk(inner, &key, doc, missing),
                Kind::Named(inner, _) => walk(inner, &format!("{key}.<name>"), doc, missing),
                _ => {
                    if !doc.contains(&format!("`{key}`")) {
                        missing.push(key);
                    }
                }
            }
        }
    }
    let mut missing = Vec::new();
    walk(
        raw::ROOT,
        "",
        &doc.replace("<stage>", "<name>"),
        &mut missing,
    );
    assert!(missing.is_empty(), "undocumented keys: {missing:?}");
}

#[test]
fn github_takes_a_token_or_an_app_and_derives_its_web_host() {
    assert!(ok(BASE, &[]).github.is_none(), "no table, no GitHub");
    let token = format!("{BASE}\n[github]\ntoken_env = \"GH_TOKEN\"\n");
    let c = ok(&token, &[("GH_TOKEN", "ghp_secret\n")]);
    let g = c.github.unwrap();
    assert_eq!(g.api_url, "https://api.github.com");
    assert_eq!(
        (g.web_url.as_str(), g.web_host.as_str()),
        ("https://github.com", "github.com")
    );
    assert!(
        matches!(&g.credentials, super::GitHubCredentials::Token(t) if t.expose() == "ghp_secret")
    );
    assert_eq!(g.timeout, Duration::from_secs(30));
    assert!(g.policy.publish && g.policy.analyse_issues && g.approve);
    assert!(!g.degraded_comment && !g.apply_labels);
    assert_eq!(
        g.policy.filters.ignore_titles,
        ["[skip review]", "[no review]"]
    );
    assert_eq!(g.status_context, "verdict");
    assert!(!format!("{g:?}").contains("ghp_secret"));

    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("app.pem");
    std::fs::write(
        &key,
        "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----\n",
    )
    .unwrap();
    let app = format!(
        "{BASE}\n[github]\napi_url = \"https://ghe.example.com:8443/api/v3/\"\napp_id = 42\napp_private_key_file = {:?}\nwebhook_secret_env = \"HOOK\"\n",
        key.display()
    );
    let g = ok(&app, &[("HOOK", "s3cret")]).github.unwrap();
    assert_eq!(g.api_url, "https://ghe.example.com:8443/api/v3");
    assert_eq!(g.web_host, "ghe.example.com:8443");
    assert_eq!(g.webhook_secret.unwrap().expose(), "s3cret");
    match g.credentials {
        super::GitHubCredentials::App {
            app_id,
            private_key,
        } => {
            assert_eq!(app_id, 42);
            assert!(
                private_key.expose().contains("\nMIIB\n"),
                "the whole PEM is kept"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn github_errors_name_the_key_and_the_fix() {
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: &[Case<'_>] = &[
        (
            "publish = false",
            &[],
            "config key github has no credentials; set token_env or token_file",
        ),
        (
            "token_env = \"GH\"",
            &[],
            "github.token_env = \"GH\" names a variable that is not set or empty",
        ),
        (
            "token_env = \"GH\"\napp_id = 3\napp_private_key_env = \"K\"",
            &[("GH", "t"), ("K", "k")],
            "cannot be combined with GitHub App credentials",
        ),
        ("app_id = 3", &[], "needs the App's private key too"),
        (
            "app_private_key_env = \"K\"",
            &[("K", "k")],
            "github.app_id is required with an App private key",
        ),
        (
            "token_env = \"GH\"\napi_url = \"https://u:p@ghe/api/v3\"",
            &[("GH", "t")],
            "must not carry credentials",
        ),
        (
            "token_env = \"GH\"\napi_url = \"ftp://ghe\"",
            &[("GH", "t")],
            "must be an https:// URL",
        ),
        (
            "token_env = \"GH\"\npipeline = \"fast\"",
            &[("GH", "t")],
            "use multi (staged review) or single",
        ),
        (
            "token_env = \"GH\"\nlabel_min_confidence = 2",
            &[("GH", "t")],
            "is out of range 0–1",
        ),
        (
            "token_env = \"GH\"\nwebhook_secret_env = \"HOOK\"",
            &[("GH", "t")],
            "github.webhook_secret_env = \"HOOK\" names a variable that is not set",
        ),
        (
            "token_env = \"GH\"\ndetails_url = \"verdict/tasks\"",
            &[("GH", "t")],
            "is not an http(s) URL",
        ),
        (
            "token_env = \"GH\"\nignore_labels = [\"wip\", \"wip\"]",
            &[("GH", "t")],
            "is listed twice",
        ),
    ];
    for (table, vars, expected) in cases {
        let text = format!("{BASE}\n[github]\n{table}\n");
        let e = err(&text, vars);
        assert!(e.contains(expected), "{table}: {e}");
    }
}

#[test]
fn the_allowlist_allows_the_github_host_and_what_is_listed() {
    let c = ok(
        &format!(
            "[github]\ntoken_env = \"GH\"\n[repositories]\nallow_hosts = [\"git.example.com:8443\"]\nallow_owners = [\"gitlab.com/team\"]\nallow_schemes = [\"ssh\"]\n{BASE}"
        ),
        &[("GH", "ghp_x")],
    );
    let allowlist = &c.repositories.allowlist;
    for url in [
        "https://github.com/anyone/repo.git",
        "https://git.example.com:8443/x.git",
        "https://gitlab.com/team/tool.git",
        "git@github.com:acme/shop.git",
    ] {
        assert!(allowlist.check_url(url).is_ok(), "{url}");
    }
    for url in [
        "https://git.example.com/x.git",
        "https://gitlab.com/other/tool.git",
        "http://github.com/a/b.git",
        "/srv/repo",
    ] {
        assert!(allowlist.check_url(url).is_err(), "{url}");
    }
    // Owners on the GitHub host narrow it.
    let c = ok(
        &format!("[github]\ntoken_env = \"GH\"\n[repositories]\nallow_owners = [\"acme\"]\n{BASE}"),
        &[("GH", "ghp_x")],
    );
    let allowlist = &c.repositories.allowlist;
    assert!(
        allowlist
            .check_url("https://github.com/acme/shop.git")
            .is_ok()
    );
    assert!(
        allowlist
            .check_url("https://github.com/other/shop.git")
            .is_err()
    );
    let mut dev = c.repositories.clone();
    dev.allow_local_paths();
    assert!(dev.allowlist.check_url("/srv/repo").is_ok());
}

#[test]
fn ignore_paths_are_globs_checked_at_start_up() {
    let c = ok(
        &format!("{BASE}\n[pipeline]\nignore_paths = [\"*.lock\", \"docs/**\"]\n"),
        &[],
    );
    assert_eq!(c.pipeline.ignore_paths, ["*.lock", "docs/**"]);
    let e = err(
        &format!("{BASE}\n[pipeline]\nignore_paths = [\"src/{{a\"]\n"),
        &[],
    );
    assert!(
        e.starts_with("config key pipeline.ignore_paths `src/{a` is not a glob"),
        "{e}"
    );
}

#[test]
fn rate_limits_per_provider_and_per_stage_model() {
    use verdict_worker::executor::ModelLimits;
    let limits = |rpm: Option<u32>, tpm: Option<u32>| ModelLimits {
        requests_per_minute: rpm,
        tokens_per_minute: tpm,
    };
    let c = ok(BASE, &[]);
    assert!(c.rate_limits.is_empty(), "no limits unless configured");
    assert!(c.executor_settings().rate_limits.is_empty());

    let text = format!(
        "{}requests_per_minute = 500\ntokens_per_minute = 200000\nmax_tokens = 1000\n\n[stages.triage]\nmodel = \"mini\"\nrequests_per_minute = 3000\n\n[stages.summary]\nmodel = \"mini\"\nrequests_per_minute = 3000\ntokens_per_minute = 1000000\n",
        BASE
    );
    let c = ok(&text, &[]);
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
    let r = &c.executor_settings().rate_limits;
    // Every model of the provider has the provider's limits, separately.
    assert_eq!(r.limits("local", "m"), limits(Some(500), Some(200_000)));
    assert_eq!(r.limits("local", "other"), limits(Some(500), Some(200_000)));
    // The stages' model has what they set, over the provider's.
    assert_eq!(
        r.limits("local", "mini"),
        limits(Some(3000), Some(1_000_000))
    );

    // Environment overrides, as for every key.
    let c = ok(
        BASE,
        &[("VERDICT_PROVIDERS__LOCAL__REQUESTS_PER_MINUTE", "60")],
    );
    assert_eq!(c.rate_limits.limits("local", "m"), limits(Some(60), None));
}

#[test]
fn rate_limit_errors_name_the_key_and_the_fix() {
    let e = err(&format!("{BASE}requests_per_minute = 0\n"), &[]);
    assert!(
        e.contains("providers.local.requests_per_minute = 0 is too small; set it to 1 or more"),
        "{e}"
    );
    let e = err(
        &format!("{BASE}\n[stages.triage]\ntokens_per_minute = -5\n"),
        &[],
    );
    assert!(e.contains("stages.triage.tokens_per_minute = -5"), "{e}");
    // Two stages on one model set different limits: one limit per provider and model.
    let e = err(
        &format!(
            "{BASE}\n[stages.triage]\nrequests_per_minute = 10\n\n[stages.summary]\nrequests_per_minute = 20\n"
        ),
        &[],
    );
    assert!(
        e.contains("stages.summary.requests_per_minute = 20")
            && e.contains("differs from stages.triage.requests_per_minute = 10")
            && e.contains("model `m` on provider `local`"),
        "{e}"
    );
    // A tokens limit without max_tokens counts only prompts: valid, but worth a warning.
    let c = ok(&format!("{BASE}tokens_per_minute = 10000\n"), &[]);
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    assert_eq!(c.warnings[0].key, "providers.local.max_tokens");
    assert!(
        c.warnings[0].message.contains("set max_tokens"),
        "{}",
        c.warnings[0]
    );
}

/// The keys the Helm chart sets itself (from its ports and volumes) and so refuses in `config:`.
const CHART_OWNED_KEYS: &[&str] = &["api.listen", "worker.metrics_listen", "worker.cache_dir"];

/// Every difference between a table of the configuration and the chart's schema of it.
fn chart_schema_drift(
    fields: &'static [Field],
    schema: &serde_json::Value,
    path: &str,
    drift: &mut Vec<String>,
) {
    let at = |name: &str| {
        if path.is_empty() {
            name.to_owned()
        } else {
            format!("{path}.{name}")
        }
    };
    if schema["additionalProperties"] != serde_json::Value::Bool(false) {
        drift.push(format!(
            "{}: additionalProperties must be false",
            if path.is_empty() { "config" } else { path }
        ));
    }
    let properties = schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for name in properties.keys() {
        if !fields.iter().any(|f| f.name == name) {
            drift.push(format!("{}: not a configuration key", at(name)));
        }
    }
    for field in fields {
        let key = at(field.name);
        let Some(property) = properties.get(field.name) else {
            if !CHART_OWNED_KEYS.contains(&key.as_str()) {
                drift.push(format!("{key}: missing from the chart's schema"));
            }
            continue;
        };
        if CHART_OWNED_KEYS.contains(&key.as_str()) {
            drift.push(format!(
                "{key}: set by the chart, so the schema must refuse it"
            ));
        }
        let expected = match field.kind {
            Kind::Str => "string",
            Kind::Int => "integer",
            Kind::Float => "number",
            Kind::Bool => "boolean",
            Kind::List => "array",
            Kind::Table(_) | Kind::Named(..) => "object",
        };
        if property["type"] != expected {
            drift.push(format!(
                "{key}: type {} in the schema, {expected} in the configuration",
                property["type"]
            ));
        }
        match field.kind {
            Kind::List if property["items"]["type"] != "string" => {
                drift.push(format!("{key}: items must be strings"));
            }
            Kind::Table(inner) => chart_schema_drift(inner, property, &key, drift),
            Kind::Named(inner, _) => {
                let entry = format!("{key}.<name>");
                chart_schema_drift(inner, &property["additionalProperties"], &entry, drift);
            }
            _ => {}
        }
    }
}

/// The chart renders `config:` into the ConfigMap key for key, so its values schema must accept
/// exactly the configuration's keys, with their types: a key added to `raw.rs` and not to
/// `helm/verdict/values.schema.json` (or the other way round) fails here.
#[test]
fn the_charts_values_schema_mirrors_every_configuration_key() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("helm/verdict/values.schema.json");
    let text = std::fs::read_to_string(&path).expect("read the chart's values.schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&text).expect("values.schema.json is JSON");
    let config = &schema["properties"]["config"];
    assert!(
        config.is_object(),
        "values.schema.json has no properties.config"
    );
    let mut drift = Vec::new();
    chart_schema_drift(raw::ROOT, config, "", &mut drift);
    assert!(
        drift.is_empty(),
        "helm/verdict/values.schema.json and src/config/raw.rs disagree:\n{}",
        drift.join("\n")
    );
    // The stage names the schema allows are verdict's stage names.
    let stages: Vec<&str> = config["properties"]["stages"]["propertyNames"]["enum"]
        .as_array()
        .expect("config.stages.propertyNames.enum")
        .iter()
        .filter_map(serde_json::Value::as_str)
        .collect();
    let expected: Vec<&str> = StageKind::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(stages, expected);
}

#[test]
fn token_prices_go_in_pairs_and_are_not_negative() {
    let c = ok(
        &format!("{BASE}input_usd_per_million_tokens = 2.5\noutput_usd_per_million_tokens = 10\n"),
        &[],
    );
    let price = c.prices.get("local").unwrap();
    assert_eq!(price.input_per_million, 2.5);
    assert_eq!(price.output_per_million, 10.0);
    assert!(ok(BASE, &[]).prices.get("local").is_none());

    let e = err(&format!("{BASE}input_usd_per_million_tokens = 2.5\n"), &[]);
    assert!(
        e.contains("providers.local.output_usd_per_million_tokens is missing"),
        "{e}"
    );
    let e = err(
        &format!("{BASE}input_usd_per_million_tokens = -1\noutput_usd_per_million_tokens = 1\n"),
        &[],
    );
    assert!(
        e.contains("providers.local.input_usd_per_million_tokens = -1 is not a price"),
        "{e}"
    );
    let c = ok(
        BASE,
        &[
            (
                "VERDICT_PROVIDERS__LOCAL__INPUT_USD_PER_MILLION_TOKENS",
                "1",
            ),
            (
                "VERDICT_PROVIDERS__LOCAL__OUTPUT_USD_PER_MILLION_TOKENS",
                "0",
            ),
        ],
    );
    assert!(
        c.prices.get("local").is_some(),
        "settable from the environment"
    );
}

#[test]
fn the_response_cache_is_on_unless_turned_off() {
    assert!(ok(BASE, &[]).worker.response_cache);
    assert!(ok(BASE, &[]).executor_settings().response_cache);
    let off = ok(BASE, &[("VERDICT_WORKER__RESPONSE_CACHE", "false")]);
    assert!(!off.executor_settings().response_cache);
    let e = err(&format!("[worker]\nresponse_cache = 1\n{BASE}"), &[]);
    assert!(e.contains("worker.response_cache"), "{e}");
}

#[test]
fn queue_stats_interval_defaults_to_five_seconds() {
    assert_eq!(
        ok(BASE, &[]).scheduler.queue_stats_interval,
        Duration::from_secs(5)
    );
    let e = err(
        &format!("[scheduler]\nqueue_stats_interval_seconds = 0\n{BASE}"),
        &[],
    );
    assert!(
        e.contains("scheduler.queue_stats_interval_seconds = 0 is too small"),
        "{e}"
    );
}

#[test]
fn budgets_are_per_organisation_with_a_default_and_need_prices_in_dollars() {
    let none = ok(BASE, &[]);
    assert!(!none.budgets.any(), "no budget unless configured");
    assert_eq!(none.budgets.period, verdict_policy::budget::Period::Month);
    assert_eq!(none.budgets.prompt_tokens_per_stage, 3_000);
    assert_eq!(none.budgets.output_tokens_per_stage, 2_000);

    let c = ok(
        &format!(
            "[budgets]\nperiod = \"day\"\ndefault_tokens = 1000\n[organisations.Acme]\nbudget_tokens = 5000\n{BASE}"
        ),
        &[],
    );
    assert_eq!(c.budgets.period, verdict_policy::budget::Period::Day);
    assert_eq!(
        c.budgets.limit_of("acme").and_then(|l| l.tokens),
        Some(5_000)
    );
    assert_eq!(
        c.budgets.limit_of("other").and_then(|l| l.tokens),
        Some(1_000)
    );

    let from_env = ok(
        BASE,
        &[("VERDICT_ORGANISATIONS__ACME__BUDGET_TOKENS", "42")],
    );
    assert_eq!(
        from_env.budgets.limit_of("acme").and_then(|l| l.tokens),
        Some(42)
    );

    let e = err(&format!("[budgets]\nperiod = \"week\"\n{BASE}"), &[]);
    assert!(
        e.contains("budgets.period = \"week\" is not a budget period"),
        "{e}"
    );
    let e = err(&format!("[organisations.acme]\n{BASE}"), &[]);
    assert!(e.contains("organisations.acme sets no budget"), "{e}");
    let e = err(
        &format!("[organisations.acme]\nbudget_tokens = 0\n{BASE}"),
        &[],
    );
    assert!(e.contains("organisations.acme.budget_tokens = 0"), "{e}");
    let e = err(
        &format!("[organisations.acme]\nbudget_usd = -2\n{BASE}"),
        &[],
    );
    assert!(
        e.contains("organisations.acme.budget_usd = -2 is not a budget"),
        "{e}"
    );
    let e = err(
        &format!("[organisations.acme]\nbudget_usd = 20\n{BASE}"),
        &[],
    );
    assert!(
        e.contains("providers.local has no prices, but budgets are set in US dollars"),
        "{e}"
    );
    let priced = ok(
        &format!(
            "[organisations.acme]\nbudget_usd = 20\n{BASE}input_usd_per_million_tokens = 1\noutput_usd_per_million_tokens = 4\n"
        ),
        &[],
    );
    let limit = priced.budgets.limit_of("acme").unwrap();
    assert_eq!(limit.micro_usd, Some(20_000_000));
    assert!(
        priced
            .budgets
            .prices
            .contains_key(&verdict_proto::wire::StageKind::Scan)
    );
}

#[test]
fn structured_output_defaults_to_auto_and_a_stage_may_override_it() {
    use verdict_proto::structured::StructuredOutput;
    let c = ok(BASE, &[]);
    assert_eq!(c.providers[0].structured_output, StructuredOutput::Auto);
    assert_eq!(c.providers[0].structured_bounds, Default::default());
    assert_eq!(c.stage(StageKind::Review).unwrap().structured_output, None);

    let c = ok(
        &format!(
            "{}\n[stages.review]\nstructured_output = \"off\"\n",
            BASE.replace(
                "model = \"m\"",
                "model = \"m\"\nstructured_output = \"grammar\"\nstructured_max_items = 5\nstructured_max_length = 300\ncontext_window = 8192",
            )
        ),
        &[],
    );
    let p = &c.providers[0];
    assert_eq!(p.structured_output, StructuredOutput::Grammar);
    assert_eq!(
        (
            p.structured_bounds.max_items,
            p.structured_bounds.max_length
        ),
        (5, 300)
    );
    assert_eq!(
        c.stage(StageKind::Review).unwrap().structured_output,
        Some(StructuredOutput::Off)
    );
}
