//! From text to a typed [`Config`] in one pass: TOML syntax, environment overrides, the tree's
//! shape (unknown keys, wrong types), then every range and relation, with each error naming the
//! key (and the environment variable when one set it) and saying how to fix it.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use toml::{Table, Value};
use verdict_policy::budget::{BudgetSettings, Period};
use verdict_proto::Language;
use verdict_proto::budget::{Limit, usd_to_micro};
use verdict_proto::repair::{DEFAULT_MAX_ATTEMPTS, MAX_ATTEMPTS_RANGE, RepairMode};
use verdict_proto::structured::{Bounds as StructuredBounds, StructuredOutput};
use verdict_proto::wire::{RepairPolicy, StageKind, Tool};
use verdict_worker::executor::{ModelLimits, RateLimits};
use verdict_worker::metrics::{Prices, TokenPrice};
use verdict_worker::provider::anthropic::DEFAULT_MAX_TOKENS as ANTHROPIC_DEFAULT_MAX_TOKENS;
use verdict_worker::provider::{
    ApiKeyError, ApiKeySource, ProviderBuildError, ProviderKind, ProviderSettings, Secret,
};
use verdict_worker::retry::RetryPolicy;

use super::defaults as d;
use super::env::{self, Origins};
use super::raw::{self, Field, Kind, Names, RawConfig, RawProvider, RawStage};
use super::{
    ApiConfig, BrokerConfig, Config, ConfigError, ConfigWarning, GitHubConfig, PipelineConfig,
    RedisConfig, RepositoriesConfig, SchedulerConfig, StageConfig, TokenSource, WorkerConfig,
};

/// Parses, overrides and validates one configuration text. `file` names it in syntax errors;
/// `from_file` selects the file defaults (vs. the `verdict dev` ones).
pub(super) fn load_str(
    text: &str,
    file: &str,
    from_file: bool,
    env: &[(String, String)],
) -> Result<Config, ConfigError> {
    let mut tree: Table = text.parse().map_err(|e: toml::de::Error| {
        let (line, column) = e
            .span()
            .map(|span| line_column(text, span.start))
            .unwrap_or((1, 1));
        ConfigError::Syntax {
            file: file.to_owned(),
            line,
            column,
            message: e.message().trim().replace('\n', "; "),
        }
    })?;
    let origins = env::apply(&mut tree, env)?;
    let ctx = Ctx {
        origins: &origins,
        env,
    };
    check_table(&mut tree, raw::ROOT, "", &ctx)?;
    let raw: RawConfig = Value::Table(tree)
        .try_into()
        .map_err(|e: toml::de::Error| ConfigError::Key {
            // Unreachable after the shape check; kept as a clear error rather than a panic.
            key: "<file>".to_owned(),
            value: None,
            problem: e.message().trim().to_owned(),
            env_var: None,
        })?;
    build(raw, &ctx, from_file)
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// What errors need to know: which keys the environment set, and the environment itself.
pub(super) struct Ctx<'a> {
    origins: &'a Origins,
    env: &'a [(String, String)],
}

impl Ctx<'_> {
    pub(super) fn err(
        &self,
        key: &str,
        value: Option<String>,
        problem: impl Into<String>,
    ) -> ConfigError {
        ConfigError::Key {
            key: key.to_owned(),
            value,
            problem: problem.into(),
            env_var: self.origins.var_for(key).map(str::to_owned),
        }
    }

    /// The value of an environment variable (the last one wins, as in a shell).
    pub(super) fn var(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// An integer key: `value` or `default`, within `min..=max` (no upper bound for `None`),
    /// converted to the target type.
    pub(super) fn num<T: TryFrom<i64>>(
        &self,
        key: &str,
        value: Option<i64>,
        default: i64,
        min: i64,
        max: Option<i64>,
    ) -> Result<T, ConfigError> {
        let v = value.unwrap_or(default);
        let problem = match max {
            Some(max) if v < min || v > max => Some(format!(
                "is out of range {min}–{max}; set it between {min} and {max}"
            )),
            None if v < min => Some(format!("is too small; set it to {min} or more")),
            _ => None,
        };
        if let Some(problem) = problem {
            return Err(self.err(key, Some(v.to_string()), problem));
        }
        T::try_from(v).map_err(|_| self.err(key, Some(v.to_string()), "is too large"))
    }

    pub(super) fn seconds(
        &self,
        key: &str,
        value: Option<i64>,
        default: i64,
        min: i64,
    ) -> Result<Duration, ConfigError> {
        self.num(key, value, default, min, None)
            .map(Duration::from_secs)
    }

    /// A text key that, when present, must not be blank.
    pub(super) fn text(
        &self,
        key: &str,
        value: Option<String>,
    ) -> Result<Option<String>, ConfigError> {
        match value {
            Some(v) if v.trim().is_empty() => {
                Err(self.err(key, Some(quote(&v)), "must not be empty"))
            }
            other => Ok(other),
        }
    }

    /// A list of non-blank, distinct texts.
    pub(super) fn names(&self, key: &str, values: Vec<String>) -> Result<Vec<String>, ConfigError> {
        let mut seen = BTreeSet::new();
        for (i, v) in values.iter().enumerate() {
            if v.trim().is_empty() {
                return Err(self.err(&format!("{key}[{i}]"), Some(quote(v)), "must not be empty"));
            }
            if !seen.insert(v.as_str()) {
                return Err(self.err(key, Some(quote(v)), "is listed twice; list it once"));
            }
        }
        Ok(values)
    }

    fn socket(
        &self,
        key: &str,
        value: Option<String>,
        default: &str,
    ) -> Result<SocketAddr, ConfigError> {
        let v = value.unwrap_or_else(|| default.to_owned());
        v.trim().parse().map_err(|_| {
            self.err(
                key,
                Some(quote(&v)),
                format!(
                    "is not a socket address; write an IP address and a port, e.g. {default:?}"
                ),
            )
        })
    }
}

/// Checks a table against its schema: unknown keys and wrong types are errors naming the key.
/// Integers given for number keys become floats, so serde sees one type.
fn check_table(
    table: &mut Table,
    fields: &'static [Field],
    path: &str,
    ctx: &Ctx<'_>,
) -> Result<(), ConfigError> {
    for (name, value) in table.iter_mut() {
        let key = join(path, name);
        let Some(field) = raw::field(fields, name) else {
            let place = if path.is_empty() {
                "valid top-level keys".to_owned()
            } else {
                format!("valid keys in [{path}]")
            };
            return Err(ctx.err(
                &key,
                None,
                format!(
                    "is unknown{}; {place}: {}",
                    suggestion(name, fields.iter().map(|f| f.name)),
                    raw::names(fields)
                ),
            ));
        };
        check_value(value, field.kind, &key, ctx)?;
    }
    Ok(())
}

fn check_value(value: &mut Value, kind: Kind, key: &str, ctx: &Ctx<'_>) -> Result<(), ConfigError> {
    match (kind, &mut *value) {
        (Kind::Str, Value::String(_))
        | (Kind::Int, Value::Integer(_))
        | (Kind::Float, Value::Float(_))
        | (Kind::Bool, Value::Boolean(_)) => Ok(()),
        (Kind::Float, Value::Integer(i)) => {
            let f = *i as f64;
            *value = Value::Float(f);
            Ok(())
        }
        (Kind::List, Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                if !item.is_str() {
                    return Err(ctx.err(
                        &format!("{key}[{i}]"),
                        Some(display(item)),
                        "must be a string",
                    ));
                }
            }
            Ok(())
        }
        (Kind::Table(fields), Value::Table(table)) => check_table(table, fields, key, ctx),
        (Kind::Named(fields, names), Value::Table(entries)) => {
            for (name, entry) in entries.iter_mut() {
                let entry_key = join(key, name);
                check_name(name, names, &entry_key, ctx)?;
                match entry {
                    Value::Table(table) => check_table(table, fields, &entry_key, ctx)?,
                    other => {
                        return Err(ctx.err(
                            &entry_key,
                            Some(display(other)),
                            format!("must be a table, written [{entry_key}]"),
                        ));
                    }
                }
            }
            Ok(())
        }
        (kind, other) => Err(ctx.err(
            key,
            Some(display(other)),
            format!("must be {}", describe(kind)),
        )),
    }
}

fn check_name(name: &str, names: Names, key: &str, ctx: &Ctx<'_>) -> Result<(), ConfigError> {
    match names {
        Names::Stages => {
            if stage_kind(name).is_none() {
                return Err(ctx.err(
                    key,
                    None,
                    format!(
                        "is not a stage{}; valid stages: {}",
                        suggestion(name, StageKind::ALL.iter().map(|s| s.as_str())),
                        env::stage_names()
                    ),
                ));
            }
        }
        Names::Any => {
            let valid = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !valid {
                return Err(ctx.err(
                    key,
                    None,
                    "has an invalid name; provider names are made of ASCII letters, digits, - and _",
                ));
            }
        }
    }
    Ok(())
}

fn describe(kind: Kind) -> &'static str {
    match kind {
        Kind::Str => "a string",
        Kind::Int => "an integer",
        Kind::Float => "a number",
        Kind::Bool => "a boolean (true or false)",
        Kind::List => "an array of strings",
        Kind::Table(_) | Kind::Named(..) => "a table",
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn stage_kind(name: &str) -> Option<StageKind> {
    StageKind::ALL.into_iter().find(|s| s.as_str() == name)
}

/// ` (did you mean `x`?)` when a candidate is close to `name` (a small edit away, or one
/// begins with the other, as in `review_timeout` for `review_timeout_seconds`), else nothing.
pub(super) fn suggestion<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> String {
    let prefix = |c: &str| name.len() >= 4 && (c.starts_with(name) || name.starts_with(c));
    candidates
        .filter_map(|c| {
            let d = strsim::levenshtein(name, c);
            if d <= 2.max(c.len() / 4) {
                Some((d, c))
            } else if prefix(c) {
                Some((usize::MAX, c))
            } else {
                None
            }
        })
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| format!(" (did you mean `{c}`?)"))
        .unwrap_or_default()
}

/// A value fit for an error message: strings quoted, credentials redacted.
fn display(value: &Value) -> String {
    match value {
        Value::String(s) => quote(s),
        Value::Array(_) => "an array".to_owned(),
        Value::Table(_) => "a table".to_owned(),
        Value::Integer(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Boolean(b) => b.to_string(),
        Value::Datetime(dt) => dt.to_string(),
    }
}

pub(super) fn quote(text: &str) -> String {
    format!("{:?}", verdict_proto::redact::redact(&redact_url(text)))
}

/// `text` with the credentials of its URLs hidden ([`verdict_proto::redact::redact_urls`]).
pub(super) fn redact_url(text: &str) -> String {
    verdict_proto::redact::redact_urls(text)
}

/// The parts of a URL the checks need.
pub(super) struct UrlParts<'a> {
    pub scheme: String,
    pub userinfo: bool,
    pub host: &'a str,
    pub port: Option<&'a str>,
    /// Everything between the userinfo and the path: one `host[:port]`, or several separated
    /// by commas.
    pub hosts: &'a str,
    pub path: &'a str,
}

pub(super) fn url_parts(url: &str) -> Option<UrlParts<'_>> {
    let (scheme, rest) = url.split_once("://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    let (userinfo, host_port) = match authority.rfind('@') {
        Some(at) => (true, &authority[at + 1..]),
        None => (false, authority),
    };
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match host_port.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    Some(UrlParts {
        scheme: scheme.to_ascii_lowercase(),
        userinfo,
        host,
        port,
        hosts: host_port,
        path,
    })
}

/// Checks a broker or Redis URL: one of `schemes`, a host (or a socket path for unix schemes),
/// a numeric port when one is given.
fn check_url(
    ctx: &Ctx<'_>,
    key: &str,
    url: &str,
    schemes: &[&str],
    example: &str,
) -> Result<(), ConfigError> {
    let bad = |problem: String| ctx.err(key, Some(quote(url)), problem);
    if url.chars().any(char::is_whitespace) {
        return Err(bad(format!(
            "contains whitespace; write a URL such as {example}"
        )));
    }
    let Some(parts) = url_parts(url) else {
        return Err(bad(format!("is not a URL; write one such as {example}")));
    };
    if !schemes.contains(&parts.scheme.as_str()) {
        return Err(bad(format!(
            "has scheme `{}`; use {}, e.g. {example}",
            parts.scheme,
            schemes.join(" or ")
        )));
    }
    if parts.scheme.contains("unix") {
        if parts.path.len() <= 1 {
            return Err(bad(format!(
                "names no socket path, e.g. {}:///run/redis.sock",
                parts.scheme
            )));
        }
        return Ok(());
    }
    if NODE_LIST_SCHEMES.contains(&parts.scheme.as_str()) {
        // A cluster's seed nodes or the Sentinels: checked node by node by the store's own
        // reading of the URL, which the caller asks next.
        return Ok(());
    }
    if parts.hosts.contains(',') {
        return Err(bad(format!(
            "lists {} hosts; scheme `{}` takes one (a Redis Cluster is `redis+cluster://h1:6379,h2:6379`, Sentinels are `redis+sentinel://s1:26379,s2:26379/service`)",
            parts.hosts.split(',').count(),
            parts.scheme
        )));
    }
    if parts.host.is_empty() {
        return Err(bad(format!("has no host, e.g. {example}")));
    }
    if let Some(port) = parts.port
        && port.parse::<u16>().is_err()
    {
        return Err(bad(format!(
            "has port `{port}`, which is not a number 0–65535"
        )));
    }
    Ok(())
}

/// Schemes whose authority may list several `host:port` nodes.
const NODE_LIST_SCHEMES: &[&str] = &[
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
];

/// The typed configuration from the checked raw one.
fn build(raw: RawConfig, ctx: &Ctx<'_>, from_file: bool) -> Result<Config, ConfigError> {
    let mut warnings = Vec::new();

    let timeout_seconds: i64 = ctx.num(
        "review_timeout_seconds",
        raw.review_timeout_seconds,
        d::REVIEW_TIMEOUT_SECONDS,
        1,
        None,
    )?;
    if timeout_seconds > d::CONSUMER_TIMEOUT_WARNING_SECONDS {
        warnings.push(ConfigWarning {
            key: "review_timeout_seconds".to_owned(),
            message: format!(
                "= {timeout_seconds} is above {} s: a stage must end well below RabbitMQ's consumer_timeout (30 min by default), or the broker closes the channel; raise consumer_timeout in rabbitmq.conf accordingly",
                d::CONSUMER_TIMEOUT_WARNING_SECONDS
            ),
        });
    }
    let repair_max_attempts: u8 = ctx.num(
        "protocol_repair_max_attempts",
        raw.protocol_repair_max_attempts,
        i64::from(DEFAULT_MAX_ATTEMPTS),
        i64::from(*MAX_ATTEMPTS_RANGE.start()),
        Some(i64::from(*MAX_ATTEMPTS_RANGE.end())),
    )?;

    let language_text = raw
        .output_language
        .unwrap_or_else(|| d::OUTPUT_LANGUAGE.to_owned());
    let language = Language::recognise(&language_text).unwrap_or_else(|| {
        warnings.push(ConfigWarning {
            key: "output_language".to_owned(),
            message: format!(
                "= {} is not a recognised language; using zh-CN (SPEC P6). Write en or zh-CN",
                quote(&language_text)
            ),
        });
        Language::normalise(&language_text)
    });

    let issue_categories = match raw.issue_categories {
        Some(list) if list.is_empty() => {
            return Err(ctx.err(
                "issue_categories",
                Some("[]".to_owned()),
                "is empty, which would reject every category; remove the key to accept any category",
            ));
        }
        Some(list) => Some(ctx.names("issue_categories", list)?),
        None => None,
    };

    let broker = broker(raw.broker, ctx)?;
    let redis = redis(raw.redis, ctx)?;
    let api = api(raw.api, ctx)?;
    let worker = worker(raw.worker, ctx, from_file)?;
    let retry = retry(raw.retry, ctx)?;
    let pipeline = pipeline(raw.pipeline, ctx)?;
    let scan = scan(raw.scan, ctx)?;
    let github = super::github::github(raw.github, ctx)?;
    let repositories = repositories(raw.repositories, github.as_ref(), ctx)?;
    let scheduler = scheduler(raw.scheduler, &repositories, ctx)?;

    if raw.providers.is_empty() {
        return Err(ctx.err(
            "providers",
            None,
            "is missing: configure at least one provider, e.g. [providers.main] with kind, base_url and model",
        ));
    }
    let mut providers = Vec::with_capacity(raw.providers.len());
    let mut provider_limits = Vec::with_capacity(raw.providers.len());
    let mut prices = Prices::default();
    for (name, p) in raw.providers {
        let key = format!("providers.{name}");
        if let Some(price) = token_price(
            &key,
            p.input_usd_per_million_tokens,
            p.output_usd_per_million_tokens,
            ctx,
        )? {
            prices.set(&name, price);
        }
        provider_limits.push(model_limits(
            &key,
            p.requests_per_minute,
            p.tokens_per_minute,
            ctx,
        )?);
        providers.push(provider(&name, p, ctx, &mut warnings)?);
    }
    let names: Vec<&str> = providers.iter().map(|p| p.name.as_str()).collect();
    let configured = names.join(", ");
    let default_provider = match (
        ctx.text("default_provider", raw.default_provider)?,
        names.as_slice(),
    ) {
        (Some(name), _) if names.contains(&name.as_str()) => name,
        (Some(name), _) => {
            return Err(ctx.err(
                "default_provider",
                Some(quote(&name)),
                format!("names no configured provider; configured: {configured}"),
            ));
        }
        (None, [only]) => (*only).to_owned(),
        (None, _) => {
            return Err(ctx.err(
                "default_provider",
                None,
                format!("is required when several providers are configured; set it to one of: {configured}"),
            ));
        }
    };

    let mut raw_stages: BTreeMap<StageKind, RawStage> = BTreeMap::new();
    for (name, s) in raw.stages {
        // The shape check accepted only stage names.
        if let Some(kind) = stage_kind(&name) {
            raw_stages.insert(kind, s);
        }
    }
    let mut stages = BTreeMap::new();
    let mut stage_limits = Vec::new();
    for kind in StageKind::ALL {
        let mut s = raw_stages.remove(&kind).unwrap_or_default();
        let key = format!("stages.{}", kind.as_str());
        stage_limits.push((
            kind,
            model_limits(&key, s.requests_per_minute, s.tokens_per_minute, ctx)?,
        ));
        let structured = s.structured_output.take();
        let mut config = stage(kind, s, ctx, &names, &default_provider, repair_max_attempts)?;
        let provider_kind = providers
            .iter()
            .find(|p| p.name == config.provider)
            .map(|p| p.kind);
        config.structured_output = structured_mode(
            &format!("{key}.structured_output"),
            structured,
            provider_kind,
            ctx,
        )?;
        stages.insert(kind, config);
    }
    let budgets = budgets(raw.budgets, raw.organisations, &stages, &prices, ctx)?;
    let rate_limits = rate_limits(
        &providers,
        &provider_limits,
        &stages,
        &stage_limits,
        ctx,
        &mut warnings,
    )?;

    Ok(Config {
        review_timeout: Duration::from_secs(timeout_seconds.unsigned_abs()),
        repair_max_attempts,
        language,
        issue_categories,
        broker,
        redis,
        api,
        scheduler,
        worker,
        retry,
        pipeline,
        scan,
        github,
        repositories,
        providers,
        default_provider,
        stages,
        rate_limits,
        prices,
        budgets,
        warnings,
    })
}

fn broker(raw: raw::RawBroker, ctx: &Ctx<'_>) -> Result<BrokerConfig, ConfigError> {
    let url = ctx
        .text("broker.url", raw.url)?
        .unwrap_or_else(|| d::BROKER_URL.to_owned());
    // The broker's own reading of the URL and its node list (`amqp://u:p@h1,h2:5673/vhost`):
    // refused here exactly as the broker would refuse it, before anything connects.
    if let Some(problem) = verdict_backends::broker::amqp::url_problem(&url) {
        return Err(ctx.err("broker.url", Some(quote(&url)), problem));
    }
    let prefix = ctx
        .text("broker.prefix", raw.prefix)?
        .unwrap_or_else(|| d::BROKER_PREFIX.to_owned());
    if !prefix
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
    {
        return Err(ctx.err(
            "broker.prefix",
            Some(quote(&prefix)),
            "is not usable in queue names; use ASCII letters, digits, -, _, . and :",
        ));
    }
    Ok(BrokerConfig {
        url,
        prefix,
        delivery_limit: ctx.num(
            "broker.delivery_limit",
            raw.delivery_limit,
            d::DELIVERY_LIMIT,
            1,
            None,
        )?,
        max_requeues: ctx.num(
            "broker.max_requeues",
            raw.max_requeues,
            d::MAX_REQUEUES,
            0,
            None,
        )?,
        message_max_bytes: ctx.num(
            "broker.message_max_bytes",
            raw.message_max_bytes,
            d::MESSAGE_MAX_BYTES,
            1024,
            Some(d::MESSAGE_MAX_BYTES_LIMIT),
        )?,
    })
}

fn redis(raw: raw::RawRedis, ctx: &Ctx<'_>) -> Result<RedisConfig, ConfigError> {
    let url = ctx
        .text("redis.url", raw.url)?
        .unwrap_or_else(|| d::REDIS_URL.to_owned());
    check_url(
        ctx,
        "redis.url",
        &url,
        &[
            "redis",
            "rediss",
            "redis+unix",
            "unix",
            "redis+cluster",
            "rediss+cluster",
            "redis+sentinel",
            "rediss+sentinel",
        ],
        "redis://:password@redis:6379/0",
    )?;
    // The store's own reading of the URL (a Sentinel form must name its service, a cluster
    // takes no database): refused here, before anything connects.
    if let Some(problem) = verdict_backends::store::redis::url_problem(&url) {
        return Err(ctx.err("redis.url", Some(quote(&url)), problem));
    }
    let prefix = raw.prefix.unwrap_or_else(|| d::REDIS_PREFIX.to_owned());
    if prefix.contains(['{', '}']) {
        return Err(ctx.err(
            "redis.prefix",
            Some(quote(&prefix)),
            "contains `{` or `}`; remove them: verdict puts each task's Redis Cluster hash tag in its keys itself, and a brace in the prefix would put every key in one slot",
        ));
    }
    Ok(RedisConfig {
        url,
        prefix,
        result_ttl: ctx.seconds(
            "redis.result_ttl_seconds",
            raw.result_ttl_seconds,
            d::RESULT_TTL_SECONDS,
            1,
        )?,
        transcript_ttl: ctx.seconds(
            "redis.transcript_ttl_seconds",
            raw.transcript_ttl_seconds,
            d::TRANSCRIPT_TTL_SECONDS,
            1,
        )?,
        event_ttl: ctx.seconds(
            "redis.event_ttl_seconds",
            raw.event_ttl_seconds,
            d::EVENT_TTL_SECONDS,
            1,
        )?,
        record_ttl: ctx.seconds(
            "redis.record_ttl_seconds",
            raw.record_ttl_seconds,
            d::RECORD_TTL_SECONDS,
            1,
        )?,
        input_ttl: ctx.seconds(
            "redis.input_ttl_seconds",
            raw.input_ttl_seconds,
            d::INPUT_TTL_SECONDS,
            1,
        )?,
        intake_memory_percent: ctx.num(
            "redis.intake_memory_percent",
            raw.intake_memory_percent,
            d::INTAKE_MEMORY_PERCENT,
            1,
            Some(100),
        )?,
    })
}

fn api(raw: raw::RawApi, ctx: &Ctx<'_>) -> Result<ApiConfig, ConfigError> {
    let listen = ctx.socket("api.listen", raw.listen, d::API_LISTEN)?;
    let (token, token_source) = secret(
        ctx,
        ("api.token_env", raw.token_env),
        ("api.token_file", raw.token_file),
        Some(d::API_TOKEN_ENV),
        SecretForm::FirstLine,
    )?;
    // With a default variable there is always a source.
    let token_source =
        token_source.unwrap_or_else(|| TokenSource::Env(d::API_TOKEN_ENV.to_owned()));
    Ok(ApiConfig {
        listen,
        token,
        token_source,
        allow_unauthenticated: raw.allow_unauthenticated.unwrap_or(false),
        max_body_bytes: ctx.num(
            "api.max_body_bytes",
            raw.max_body_bytes,
            d::API_MAX_BODY_BYTES,
            1,
            None,
        )?,
    })
}

/// How a secret is written in its file or variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SecretForm {
    /// A token: the first line, trimmed.
    FirstLine,
    /// A PEM key: the whole text, trimmed.
    Whole,
}

/// A secret given by a variable's name (`env`) or a file (`file`), at most one of them; `default`
/// is the variable read when neither is set. Returns the secret, when its source had one, and
/// where it was looked for. An unreadable or empty file is an error naming the key; an unset or
/// empty variable is no secret (the caller decides whether one is required).
pub(super) fn secret(
    ctx: &Ctx<'_>,
    env: (&str, Option<String>),
    file: (&str, Option<String>),
    default: Option<&str>,
    form: SecretForm,
) -> Result<(Option<Secret>, Option<TokenSource>), ConfigError> {
    let (env_key, env) = env;
    let (file_key, file) = file;
    let env = ctx.text(env_key, env)?;
    let file = ctx.text(file_key, file)?;
    match (env, file) {
        (Some(_), Some(file)) => Err(ctx.err(
            file_key,
            Some(quote(&file)),
            format!("cannot be combined with {env_key}; keep one"),
        )),
        (_, Some(file)) => {
            let path = PathBuf::from(&file);
            let read = match form {
                SecretForm::FirstLine => read_first_line(&path),
                SecretForm::Whole => read_whole(&path),
            };
            let value = read.map_err(|reason| {
                ctx.err(
                    file_key,
                    Some(quote(&file)),
                    format!("cannot be read: {reason}"),
                )
            })?;
            Ok((Some(value), Some(TokenSource::File(path))))
        }
        (var, None) => {
            let Some(var) = var.or_else(|| default.map(str::to_owned)) else {
                return Ok((None, None));
            };
            let value = ctx.var(&var).map(str::trim).filter(|t| !t.is_empty());
            let value = match form {
                SecretForm::FirstLine => value.and_then(|v| v.lines().next()).map(str::trim),
                SecretForm::Whole => value,
            };
            Ok((value.map(Secret::new), Some(TokenSource::Env(var))))
        }
    }
}

/// A whole secret file, trimmed (a PEM key); an empty file is an error.
fn read_whole(path: &std::path::Path) -> Result<Secret, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    match text.trim() {
        "" => Err("the file is empty".to_owned()),
        key => Ok(Secret::new(key)),
    }
}

/// The first line of a secret file, trimmed; an empty file is an error.
pub(super) fn read_first_line(path: &std::path::Path) -> Result<Secret, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    match text.lines().next().map(str::trim) {
        Some(line) if !line.is_empty() => Ok(Secret::new(line)),
        _ => Err("the file is empty".to_owned()),
    }
}

fn worker(
    raw: raw::RawWorker,
    ctx: &Ctx<'_>,
    from_file: bool,
) -> Result<WorkerConfig, ConfigError> {
    let cache_dir = match ctx.text("worker.cache_dir", raw.cache_dir)? {
        Some(dir) => PathBuf::from(dir),
        None if from_file => PathBuf::from(d::CACHE_DIR),
        None => d::dev_cache_dir(|name| ctx.var(name).map(str::to_owned)),
    };
    Ok(WorkerConfig {
        concurrency: ctx.num(
            "worker.concurrency",
            raw.concurrency,
            d::CONCURRENCY,
            1,
            Some(d::MAX_CONCURRENCY),
        )?,
        bulk_concurrency: ctx.num(
            "worker.bulk_concurrency",
            raw.bulk_concurrency,
            d::BULK_CONCURRENCY,
            0,
            Some(d::MAX_CONCURRENCY),
        )?,
        cache_dir,
        snapshot_cache_bytes: ctx.num(
            "worker.snapshot_cache_bytes",
            raw.snapshot_cache_bytes,
            d::SNAPSHOT_CACHE_BYTES,
            1,
            None,
        )?,
        metrics_listen: ctx.socket(
            "worker.metrics_listen",
            raw.metrics_listen,
            d::METRICS_LISTEN,
        )?,
        shutdown_grace: ctx.seconds(
            "worker.shutdown_grace_seconds",
            raw.shutdown_grace_seconds,
            d::SHUTDOWN_GRACE_SECONDS,
            0,
        )?,
        claim_ttl: ctx.seconds(
            "worker.claim_ttl_seconds",
            raw.claim_ttl_seconds,
            d::CLAIM_TTL_SECONDS,
            d::MIN_CLAIM_TTL_SECONDS,
        )?,
        record_retry: ctx.seconds(
            "worker.record_retry_seconds",
            raw.record_retry_seconds,
            d::RECORD_RETRY_SECONDS,
            0,
        )?,
        bulk_per_organisation: ctx.num(
            "worker.bulk_per_organisation",
            raw.bulk_per_organisation,
            0,
            0,
            Some(d::MAX_CONCURRENCY),
        )?,
        response_cache: raw.response_cache.unwrap_or(true),
    })
}

fn scheduler(
    raw: raw::RawScheduler,
    repositories: &RepositoriesConfig,
    ctx: &Ctx<'_>,
) -> Result<SchedulerConfig, ConfigError> {
    let intake_timeout = ctx.seconds(
        "scheduler.intake_timeout_seconds",
        raw.intake_timeout_seconds,
        d::INTAKE_TIMEOUT_SECONDS,
        1,
    )?;
    let fetch = repositories.fetch_timeout.as_secs();
    if intake_timeout <= repositories.fetch_timeout {
        return Err(ctx.err(
            "scheduler.intake_timeout_seconds",
            Some(intake_timeout.as_secs().to_string()),
            format!(
                "is not longer than repositories.fetch_timeout_seconds = {fetch}: an intake fetches at least once, and git's own limit names the repository; set it above {fetch}"
            ),
        ));
    }
    Ok(SchedulerConfig {
        sweep_interval: ctx.seconds(
            "scheduler.sweep_interval_seconds",
            raw.sweep_interval_seconds,
            d::SWEEP_INTERVAL_SECONDS,
            1,
        )?,
        stall_after: ctx.seconds(
            "scheduler.stall_after_seconds",
            raw.stall_after_seconds,
            d::STALL_AFTER_SECONDS,
            1,
        )?,
        recover_after: ctx.seconds(
            "scheduler.recover_after_seconds",
            raw.recover_after_seconds,
            d::RECOVER_AFTER_SECONDS,
            1,
        )?,
        queue_stats_interval: ctx.seconds(
            "scheduler.queue_stats_interval_seconds",
            raw.queue_stats_interval_seconds,
            d::QUEUE_STATS_INTERVAL_SECONDS,
            1,
        )?,
        intake_concurrency: ctx.num(
            "scheduler.intake_concurrency",
            raw.intake_concurrency,
            d::INTAKE_CONCURRENCY,
            1,
            Some(d::MAX_CONCURRENCY),
        )?,
        intake_backlog: ctx.num(
            "scheduler.intake_backlog",
            raw.intake_backlog,
            d::INTAKE_BACKLOG,
            1,
            Some(d::MAX_INTAKE_BACKLOG),
        )?,
        replica_lease: ctx.seconds(
            "scheduler.replica_lease_seconds",
            raw.replica_lease_seconds,
            d::REPLICA_LEASE_SECONDS,
            3,
        )?,
        intake_timeout,
    })
}

/// `[repositories]`: the allowlist's entries each checked (an error names the key and the
/// entry), with the `[github]` web host allowed without repeating it.
fn repositories(
    raw: raw::RawRepositories,
    github: Option<&GitHubConfig>,
    ctx: &Ctx<'_>,
) -> Result<RepositoriesConfig, ConfigError> {
    use verdict_scheduler::engine::{AllowlistRules, RepositoryAllowlist};
    let rules = AllowlistRules {
        hosts: ctx.names(
            "repositories.allow_hosts",
            raw.allow_hosts.unwrap_or_default(),
        )?,
        owners: ctx.names(
            "repositories.allow_owners",
            raw.allow_owners.unwrap_or_default(),
        )?,
        patterns: ctx.names(
            "repositories.allow_patterns",
            raw.allow_patterns.unwrap_or_default(),
        )?,
        schemes: ctx.names(
            "repositories.allow_schemes",
            raw.allow_schemes.unwrap_or_default(),
        )?,
        local_paths: raw.allow_local_paths.unwrap_or(false),
        code_host: github.map(|g| g.web_host.clone()),
    };
    let allowlist = RepositoryAllowlist::new(&rules).map_err(|e| {
        let key = match e.setting {
            "code_host" => "github.web_url".to_owned(),
            setting => format!("repositories.{setting}"),
        };
        ctx.err(&key, Some(quote(&e.value)), e.problem)
    })?;
    Ok(RepositoriesConfig {
        allowlist,
        fetch_timeout: ctx.seconds(
            "repositories.fetch_timeout_seconds",
            raw.fetch_timeout_seconds,
            d::FETCH_TIMEOUT_SECONDS,
            1,
        )?,
        local_timeout: ctx.seconds(
            "repositories.local_timeout_seconds",
            raw.local_timeout_seconds,
            d::LOCAL_TIMEOUT_SECONDS,
            1,
        )?,
    })
}

fn retry(raw: raw::RawRetry, ctx: &Ctx<'_>) -> Result<RetryPolicy, ConfigError> {
    let base_ms: u64 = ctx.num(
        "retry.base_delay_ms",
        raw.base_delay_ms,
        d::RETRY_BASE_DELAY_MS,
        1,
        None,
    )?;
    let max_ms: u64 = ctx.num(
        "retry.max_delay_ms",
        raw.max_delay_ms,
        d::RETRY_MAX_DELAY_MS,
        1,
        None,
    )?;
    if max_ms < base_ms {
        return Err(ctx.err(
            "retry.max_delay_ms",
            Some(max_ms.to_string()),
            format!("is below retry.base_delay_ms = {base_ms}; set it to {base_ms} or more"),
        ));
    }
    Ok(RetryPolicy {
        budget: ctx.num("retry.budget", raw.budget, d::RETRY_BUDGET, 0, None)?,
        base_delay: Duration::from_millis(base_ms),
        max_delay: Duration::from_millis(max_ms),
        max_inline_wait: ctx.seconds(
            "retry.max_inline_wait_seconds",
            raw.max_inline_wait_seconds,
            d::RETRY_MAX_INLINE_WAIT_SECONDS,
            0,
        )?,
    })
}

fn pipeline(raw: raw::RawPipeline, ctx: &Ctx<'_>) -> Result<PipelineConfig, ConfigError> {
    Ok(PipelineConfig {
        reviewers: ctx.num(
            "pipeline.reviewers",
            raw.reviewers,
            d::REVIEWERS,
            1,
            Some(d::MAX_REVIEWERS),
        )?,
        max_diff_bytes_per_reviewer: ctx.num(
            "pipeline.max_diff_bytes_per_reviewer",
            raw.max_diff_bytes_per_reviewer,
            d::MAX_DIFF_BYTES_PER_REVIEWER,
            1,
            None,
        )?,
        max_diff_bytes: ctx.num(
            "pipeline.max_diff_bytes",
            raw.max_diff_bytes,
            d::MAX_DIFF_BYTES,
            1,
            None,
        )?,
        triage: raw.triage.unwrap_or(d::TRIAGE),
        ignore_paths: {
            let globs = ctx.names(
                "pipeline.ignore_paths",
                raw.ignore_paths.unwrap_or_default(),
            )?;
            if let Err(problem) = verdict_policy::ignore::IgnoredPaths::new(&globs) {
                return Err(ctx.err(
                    "pipeline.ignore_paths",
                    None,
                    format!("{problem}; write globs such as \"docs/**\" or \"*.lock\""),
                ));
            }
            globs
        },
    })
}

fn scan(
    raw: raw::RawScan,
    ctx: &Ctx<'_>,
) -> Result<verdict_policy::scan_shards::ScanSettings, ConfigError> {
    Ok(verdict_policy::scan_shards::ScanSettings {
        shard_tokens: ctx.num(
            "scan.shard_tokens",
            raw.shard_tokens,
            d::SCAN_SHARD_TOKENS,
            1,
            None,
        )?,
        max_file_bytes: ctx.num(
            "scan.max_file_bytes",
            raw.max_file_bytes,
            d::SCAN_MAX_FILE_BYTES,
            1,
            None,
        )?,
        max_shards: ctx.num(
            "scan.max_shards",
            raw.max_shards,
            d::SCAN_MAX_SHARDS,
            1,
            Some(d::SCAN_MAX_SHARDS_LIMIT),
        )?,
        exclude: {
            let globs = ctx.names("scan.exclude", raw.exclude.unwrap_or_default())?;
            if let Err(problem) = verdict_policy::ignore::IgnoredPaths::new(&globs) {
                return Err(ctx.err(
                    "scan.exclude",
                    None,
                    format!("{problem}; write globs such as \"docs/**\" or \"*.svg\""),
                ));
            }
            globs
        },
    })
}

/// One `[providers.<name>]`: what the file decides — which keys apply to the provider's kind,
/// the required ones, no credentials in `base_url`, the API key's source — while every value is
/// checked by [`ProviderSettings::validate`], the worker's own check, whose error is reported
/// here against the key as written (and the variable that set it).
fn provider(
    name: &str,
    raw: RawProvider,
    ctx: &Ctx<'_>,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<ProviderSettings, ConfigError> {
    let key = |k: &str| format!("providers.{name}.{k}");
    let kind = match raw.kind.as_deref() {
        Some("openai") => ProviderKind::Openai,
        Some("anthropic") => ProviderKind::Anthropic,
        Some("exec") => ProviderKind::Exec,
        Some(other) => {
            return Err(ctx.err(
                &key("kind"),
                Some(quote(other)),
                "is not a provider kind; use openai, anthropic or exec",
            ));
        }
        None => {
            return Err(ctx.err(
                &key("kind"),
                None,
                "is required; set it to openai, anthropic or exec",
            ));
        }
    };
    let model = raw.model.ok_or_else(|| {
        ctx.err(
            &key("model"),
            None,
            "is required; set it to the model to call",
        )
    })?;
    let http = kind != ProviderKind::Exec;
    let only = |k: &str, present: bool, http_only: bool| {
        if present && http != http_only {
            let kinds = if http_only {
                "kind = \"openai\" or \"anthropic\""
            } else {
                "kind = \"exec\""
            };
            Err(ctx.err(&key(k), None, format!("applies only to {kinds}; remove it")))
        } else {
            Ok(())
        }
    };
    only("base_url", raw.base_url.is_some(), true)?;
    only(
        "connect_timeout_seconds",
        raw.connect_timeout_seconds.is_some(),
        true,
    )?;
    only("max_tokens", raw.max_tokens.is_some(), true)?;
    only("temperature", raw.temperature.is_some(), true)?;
    only("command", raw.command.is_some(), false)?;
    only("no_tools_flag", raw.no_tools_flag.is_some(), false)?;
    only("tools_flag", raw.tools_flag.is_some(), false)?;
    only("context_window", raw.context_window.is_some(), true)?;

    let base_url = match raw.base_url {
        Some(url) if url_parts(&url).is_some_and(|p| p.userinfo) => {
            return Err(ctx.err(
                &key("base_url"),
                Some(quote(&url)),
                "carries credentials; put the key in api_key_env or api_key_file instead",
            ));
        }
        Some(url) => url,
        None if http => {
            return Err(ctx.err(
                &key("base_url"),
                None,
                "is required for this kind; set it to the API's base URL, e.g. https://api.openai.com",
            ));
        }
        None => String::new(),
    };
    let command = match raw.command {
        Some(command) => command,
        None if !http => {
            return Err(ctx.err(
                &key("command"),
                None,
                "is required for kind = \"exec\"; set it to the program and its arguments, e.g. [\"my-agent\", \"--print\"]",
            ));
        }
        None => Vec::new(),
    };
    if !http && raw.no_tools_flag.is_none() {
        warnings.push(ConfigWarning {
            key: key("no_tools_flag"),
            message: "is not set: calls that must run without tools (repairs, calls after the deadline) cannot tell the agent so (SPEC E6); set it to the CLI's no-tools flag".to_owned(),
        });
    }

    // Numbers take the settings' types here (a negative count becomes zero, which the check
    // refuses); whether a value is usable is for `validate` to say.
    let timeout_seconds = raw.timeout_seconds.unwrap_or(d::PROVIDER_TIMEOUT_SECONDS);
    let connect_timeout_seconds = raw
        .connect_timeout_seconds
        .unwrap_or(d::PROVIDER_CONNECT_TIMEOUT_SECONDS);
    let seconds = |v: i64| Duration::from_secs(v.max(0).unsigned_abs());
    let max_tokens = match raw.max_tokens {
        Some(v) => Some(u32::try_from(v.max(0)).map_err(|_| {
            ctx.err(
                &key("max_tokens"),
                Some(v.to_string()),
                format!("is too large; set it to {} or less", u32::MAX),
            )
        })?),
        None => None,
    };
    let structured_output = structured_mode(
        &key("structured_output"),
        raw.structured_output,
        Some(kind),
        ctx,
    )?;
    let structured_bounds = StructuredBounds {
        max_items: ctx.num(
            &key("structured_max_items"),
            raw.structured_max_items,
            i64::from(StructuredBounds::default().max_items),
            1,
            Some(1000),
        )?,
        max_length: ctx.num(
            &key("structured_max_length"),
            raw.structured_max_length,
            i64::from(StructuredBounds::default().max_length),
            16,
            Some(1_000_000),
        )?,
        ..StructuredBounds::default()
    };
    let mut settings = ProviderSettings {
        name: name.to_owned(),
        kind,
        base_url,
        api_key: None,
        model,
        timeout: seconds(timeout_seconds),
        connect_timeout: seconds(connect_timeout_seconds),
        max_tokens,
        temperature: raw.temperature.map(|t| t as f32),
        command,
        no_tools_flag: raw.no_tools_flag,
        tools_flag: raw.tools_flag,
        structured_output: structured_output.unwrap_or(StructuredOutput::Auto),
        structured_bounds,
        context_window: match raw.context_window {
            Some(v) => Some(ctx.num(&key("context_window"), Some(v), v, 512, Some(100_000_000))?),
            None => None,
        },
    };
    settings.validate().map_err(|error| match error {
        ProviderBuildError::Setting {
            key: k, problem, ..
        } => {
            // The value as the operator wrote it, not as the settings hold it.
            let written = match k {
                "timeout_seconds" => Some(timeout_seconds.to_string()),
                "connect_timeout_seconds" => Some(connect_timeout_seconds.to_string()),
                "max_tokens" => raw.max_tokens.map(|v| v.to_string()),
                "temperature" => raw.temperature.map(|t| t.to_string()),
                "base_url" => Some(quote(&settings.base_url)),
                "model" => Some(quote(&settings.model)),
                "no_tools_flag" => settings.no_tools_flag.as_deref().map(quote),
                "tools_flag" => settings.tools_flag.as_deref().map(quote),
                _ => None,
            };
            ctx.err(&key(k), written, problem)
        }
        other => ctx.err(&format!("providers.{name}"), None, other.to_string()),
    })?;
    settings.api_key = api_key(name, raw.api_key_env, raw.api_key_file, ctx)?;
    Ok(settings)
}

/// A provider's API key from `api_key_env` (read from the environment given to
/// [`Config::load`]) or `api_key_file`; neither means the provider needs none.
fn api_key(
    name: &str,
    env: Option<String>,
    file: Option<String>,
    ctx: &Ctx<'_>,
) -> Result<Option<Secret>, ConfigError> {
    let key = |k: &str| format!("providers.{name}.{k}");
    let key_env = ctx.text(&key("api_key_env"), env)?;
    let key_file = ctx.text(&key("api_key_file"), file)?;
    match (key_env, key_file) {
        (Some(_), Some(file)) => Err(ctx.err(
            &key("api_key_file"),
            Some(quote(&file)),
            format!("cannot be combined with {}; keep one", key("api_key_env")),
        )),
        (Some(var), None) => match ctx.var(&var).map(str::trim) {
            Some(v) if !v.is_empty() => Ok(Some(Secret::new(v))),
            _ => {
                let k = key("api_key_env");
                Err(ConfigError::ApiKey {
                    env_var: ctx.origins.var_for(&k).map(str::to_owned),
                    key: k,
                    error: ApiKeyError::MissingEnv {
                        provider: name.to_owned(),
                        var,
                    },
                })
            }
        },
        (None, Some(file)) => ApiKeySource::File(PathBuf::from(file))
            .resolve(name)
            .map_err(|error| {
                let k = key("api_key_file");
                ConfigError::ApiKey {
                    env_var: ctx.origins.var_for(&k).map(str::to_owned),
                    key: k,
                    error,
                }
            }),
        (None, None) => Ok(None),
    }
}

fn stage(
    kind: StageKind,
    raw: RawStage,
    ctx: &Ctx<'_>,
    providers: &[&str],
    default_provider: &str,
    repair_max_attempts: u8,
) -> Result<StageConfig, ConfigError> {
    let key = |k: &str| format!("stages.{}.{k}", kind.as_str());
    let provider = match ctx.text(&key("provider"), raw.provider)? {
        Some(p) if providers.contains(&p.as_str()) => p,
        Some(p) => {
            return Err(ctx.err(
                &key("provider"),
                Some(quote(&p)),
                format!(
                    "names no configured provider{}; configured: {}",
                    suggestion(&p, providers.iter().copied()),
                    providers.join(", ")
                ),
            ));
        }
        None => default_provider.to_owned(),
    };
    let model = ctx.text(&key("model"), raw.model)?;
    let tools = match raw.tools {
        None => d::stage_tools(kind),
        Some(names) => {
            let mut tools = Vec::with_capacity(names.len());
            for name in &names {
                let tool = Tool::READ_ONLY
                    .into_iter()
                    .find(|t| t.as_str() == name)
                    .ok_or_else(|| {
                        ctx.err(
                            &key("tools"),
                            Some(quote(name)),
                            "is not a tool; valid tools: read, grep, find, ls (or [] for none)",
                        )
                    })?;
                if tools.contains(&tool) {
                    return Err(ctx.err(
                        &key("tools"),
                        Some(quote(name)),
                        "is listed twice; list it once",
                    ));
                }
                tools.push(tool);
            }
            tools
        }
    };
    let mode = match raw.repair_mode.as_deref() {
        None => RepairMode::default_for(kind.default_protocol()),
        Some("conversation") => RepairMode::Conversation,
        Some("isolated") => RepairMode::Isolated,
        Some(other) => {
            return Err(ctx.err(
                &key("repair_mode"),
                Some(quote(other)),
                "is not a repair mode; use conversation or isolated",
            ));
        }
    };
    let max_attempts = ctx.num(
        &key("repair_attempts"),
        raw.repair_attempts,
        i64::from(repair_max_attempts),
        i64::from(*MAX_ATTEMPTS_RANGE.start()),
        Some(i64::from(*MAX_ATTEMPTS_RANGE.end())),
    )?;
    let fallback_models = ctx.names(
        &key("fallback_models"),
        raw.fallback_models.unwrap_or_default(),
    )?;
    Ok(StageConfig {
        provider,
        model,
        tools,
        repair: RepairPolicy { mode, max_attempts },
        fallback_models,
        structured_output: None,
    })
}

/// A `structured_output` value, checked against the provider kind when one is known: `tool` is
/// Anthropic's forced tool call, `json_schema` and `grammar` are OpenAI-compatible request
/// fields, and an `exec` agent takes no constraint at all.
fn structured_mode(
    key: &str,
    value: Option<String>,
    kind: Option<ProviderKind>,
    ctx: &Ctx<'_>,
) -> Result<Option<StructuredOutput>, ConfigError> {
    let Some(value) = value else { return Ok(None) };
    let mode = StructuredOutput::ALL
        .iter()
        .copied()
        .find(|m| m.as_str() == value)
        .ok_or_else(|| {
            ctx.err(
                key,
                Some(quote(&value)),
                "is not a structured output mode; use auto, json_schema, grammar, tool or off",
            )
        })?;
    let fits = match (mode, kind) {
        (StructuredOutput::Auto | StructuredOutput::Off, _) | (_, None) => true,
        (StructuredOutput::Tool, Some(k)) => k == ProviderKind::Anthropic,
        (StructuredOutput::JsonSchema | StructuredOutput::Grammar, Some(k)) => {
            k == ProviderKind::Openai
        }
    };
    if !fits {
        let needs = match mode {
            StructuredOutput::Tool => "kind = \"anthropic\"",
            _ => "kind = \"openai\" (grammar: a llama.cpp server)",
        };
        return Err(ctx.err(
            key,
            Some(quote(&value)),
            format!("needs a provider of {needs}; use auto or off for this provider"),
        ));
    }
    Ok(Some(mode))
}

/// `[budgets]` and `[organisations.<name>]` (SPEC X5). A budget in dollars needs every stage's
/// provider priced: otherwise part of the spending could not be counted.
fn budgets(
    raw: raw::RawBudgets,
    organisations: BTreeMap<String, raw::RawOrganisation>,
    stages: &BTreeMap<StageKind, StageConfig>,
    prices: &Prices,
    ctx: &Ctx<'_>,
) -> Result<BudgetSettings, ConfigError> {
    let period = match ctx.text("budgets.period", raw.period)?.as_deref() {
        None | Some("month") => Period::Month,
        Some("day") => Period::Day,
        Some(other) => {
            return Err(ctx.err(
                "budgets.period",
                Some(quote(other)),
                "is not a budget period; use \"month\" (calendar months, UTC) or \"day\"",
            ));
        }
    };
    let limit = |tokens_key: &str,
                 tokens: Option<i64>,
                 usd_key: &str,
                 usd: Option<f64>|
     -> Result<Option<Limit>, ConfigError> {
        let tokens = match tokens {
            Some(_) => Some(ctx.num::<u64>(tokens_key, tokens, 0, 1, None)?),
            None => None,
        };
        let micro_usd = match usd {
            Some(v) if v.is_finite() && v > 0.0 => Some(usd_to_micro(v)),
            Some(v) => {
                return Err(ctx.err(
                    usd_key,
                    Some(v.to_string()),
                    "is not a budget; set it to the most US dollars to spend per period, more than 0",
                ));
            }
            None => None,
        };
        Ok((tokens.is_some() || micro_usd.is_some()).then_some(Limit { tokens, micro_usd }))
    };
    let default = limit(
        "budgets.default_tokens",
        raw.default_tokens,
        "budgets.default_usd",
        raw.default_usd,
    )?;
    let mut by_name = BTreeMap::new();
    for (name, o) in organisations {
        let key = format!("organisations.{name}");
        let Some(l) = limit(
            &format!("{key}.budget_tokens"),
            o.budget_tokens,
            &format!("{key}.budget_usd"),
            o.budget_usd,
        )?
        else {
            return Err(ctx.err(
                &key,
                None,
                "sets no budget; set budget_tokens, budget_usd or both, or remove the table",
            ));
        };
        if by_name.insert(name.to_ascii_lowercase(), l).is_some() {
            return Err(ctx.err(
                &key,
                None,
                "names an organisation another [organisations.<name>] table names too (names are compared case-insensitively); keep one",
            ));
        }
    }
    let mut stage_prices = BTreeMap::new();
    for (kind, stage) in stages {
        if let Some(price) = prices.get(&stage.provider) {
            stage_prices.insert(*kind, price);
        }
    }
    let in_dollars = default
        .iter()
        .chain(by_name.values())
        .any(|l| l.micro_usd.is_some());
    if in_dollars
        && let Some((kind, stage)) = stages
            .iter()
            .find(|(kind, _)| !stage_prices.contains_key(*kind))
    {
        return Err(ctx.err(
            &format!("providers.{}", stage.provider),
            None,
            format!(
                "has no prices, but budgets are set in US dollars and stage {} uses this provider; set input_usd_per_million_tokens and output_usd_per_million_tokens (0 for a free local model), or budget in tokens only",
                kind.as_str()
            ),
        ));
    }
    Ok(BudgetSettings {
        period,
        prompt_tokens_per_stage: ctx.num(
            "budgets.prompt_tokens_per_stage",
            raw.prompt_tokens_per_stage,
            d::BUDGET_PROMPT_TOKENS_PER_STAGE,
            0,
            None,
        )?,
        output_tokens_per_stage: ctx.num(
            "budgets.output_tokens_per_stage",
            raw.output_tokens_per_stage,
            d::BUDGET_OUTPUT_TOKENS_PER_STAGE,
            1,
            None,
        )?,
        default,
        organisations: by_name,
        prices: stage_prices,
    })
}

/// `input_usd_per_million_tokens` and `output_usd_per_million_tokens` of the table `table`: both
/// or neither, each a finite number ≥ 0.
fn token_price(
    table: &str,
    input: Option<f64>,
    output: Option<f64>,
    ctx: &Ctx<'_>,
) -> Result<Option<TokenPrice>, ConfigError> {
    let names = [
        "input_usd_per_million_tokens",
        "output_usd_per_million_tokens",
    ];
    for (name, value) in names.into_iter().zip([input, output]) {
        if let Some(v) = value
            && !(v.is_finite() && v >= 0.0)
        {
            return Err(ctx.err(
                &format!("{table}.{name}"),
                Some(v.to_string()),
                "is not a price; set it to the provider's price in US dollars per million tokens, 0 or more",
            ));
        }
    }
    match (input, output) {
        (Some(input_per_million), Some(output_per_million)) => Ok(Some(TokenPrice {
            input_per_million,
            output_per_million,
        })),
        (None, None) => Ok(None),
        (Some(_), None) | (None, Some(_)) => {
            let missing = if input.is_none() { names[0] } else { names[1] };
            Err(ctx.err(
                &format!("{table}.{missing}"),
                None,
                "is missing: prices go in pairs, set both input_usd_per_million_tokens and output_usd_per_million_tokens (0 when that direction is free)",
            ))
        }
    }
}

/// `requests_per_minute` and `tokens_per_minute` of the table `table`, each at least 1 when set.
fn model_limits(
    table: &str,
    requests: Option<i64>,
    tokens: Option<i64>,
    ctx: &Ctx<'_>,
) -> Result<ModelLimits, ConfigError> {
    let limit = |name: &str, value: Option<i64>| -> Result<Option<u32>, ConfigError> {
        value
            .map(|v| ctx.num(&format!("{table}.{name}"), Some(v), 1, 1, None))
            .transpose()
    };
    Ok(ModelLimits {
        requests_per_minute: limit("requests_per_minute", requests)?,
        tokens_per_minute: limit("tokens_per_minute", tokens)?,
    })
}

/// The pool's rate limits (SPEC Q3): a provider's apply to each of its models; a stage's to the
/// model that stage runs on, over its provider's — one limit per provider and model, so stages
/// sharing a model must agree. Each call reserves its output against a tokens limit: the
/// provider's `max_tokens` (Anthropic's default when unset); without one only the prompt is
/// counted, which is worth a warning.
fn rate_limits(
    providers: &[ProviderSettings],
    provider_limits: &[ModelLimits],
    stages: &BTreeMap<StageKind, StageConfig>,
    stage_limits: &[(StageKind, ModelLimits)],
    ctx: &Ctx<'_>,
    warnings: &mut Vec<ConfigWarning>,
) -> Result<RateLimits, ConfigError> {
    let mut limits = RateLimits::default();
    let mut token_limited: BTreeSet<&str> = BTreeSet::new();
    for (p, l) in providers.iter().zip(provider_limits) {
        let output = match (p.max_tokens, p.kind) {
            (Some(max), _) => max,
            (None, ProviderKind::Anthropic) => ANTHROPIC_DEFAULT_MAX_TOKENS,
            (None, _) => 0,
        };
        limits.set_provider(&p.name, *l, output);
        if l.tokens_per_minute.is_some() {
            token_limited.insert(&p.name);
        }
    }
    // Which stage set each limit (requests, tokens) of a provider and model first, and to what,
    // to name it when another stage differs.
    type SetBy = [Option<(StageKind, u32)>; 2];
    let mut set_by: BTreeMap<(&str, &str), SetBy> = BTreeMap::new();
    for (kind, l) in stage_limits.iter().filter(|(_, l)| !l.is_unlimited()) {
        let Some(stage) = stages.get(kind) else {
            continue;
        };
        let Some(provider) = providers.iter().find(|p| p.name == stage.provider) else {
            continue;
        };
        let model = stage.model.as_deref().unwrap_or(&provider.model);
        let seen = set_by.entry((&provider.name, model)).or_default();
        let values = [l.requests_per_minute, l.tokens_per_minute];
        for (i, name) in ["requests_per_minute", "tokens_per_minute"]
            .into_iter()
            .enumerate()
        {
            let Some(value) = values[i] else { continue };
            match seen[i] {
                Some((other, theirs)) if theirs != value => {
                    return Err(ctx.err(
                        &format!("stages.{}.{name}", kind.as_str()),
                        Some(value.to_string()),
                        format!(
                            "differs from stages.{}.{name} = {theirs}: both stages run model `{model}` on provider `{}`, which has one limit for the whole pool; set the same value on both (or once, as providers.{}.{name}, for every model of the provider)",
                            other.as_str(),
                            provider.name,
                            provider.name,
                        ),
                    ));
                }
                Some(_) => {}
                None => seen[i] = Some((*kind, value)),
            }
        }
        if l.tokens_per_minute.is_some() {
            token_limited.insert(&provider.name);
        }
    }
    for ((provider, model), seen) in &set_by {
        limits.set_model(
            provider,
            model,
            ModelLimits {
                requests_per_minute: seen[0].map(|(_, v)| v),
                tokens_per_minute: seen[1].map(|(_, v)| v),
            },
        );
    }
    for p in providers
        .iter()
        .filter(|p| token_limited.contains(p.name.as_str()))
    {
        if p.max_tokens.is_none() && p.kind != ProviderKind::Anthropic {
            let fix = if p.kind == ProviderKind::Exec {
                "an exec agent's output cannot be bounded, so keep tokens_per_minute below the real limit"
            } else {
                "set max_tokens so each call reserves its output too"
            };
            warnings.push(ConfigWarning {
                key: format!("providers.{}.max_tokens", p.name),
                message: format!(
                    "is not set while a tokens_per_minute limit applies to this provider: calls reserve only their prompt's estimate, not their output; {fix}"
                ),
            });
        }
    }
    Ok(limits)
}
