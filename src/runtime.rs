//! From a validated [`Config`] to running parts: the one wiring that `verdict scheduler`,
//! `verdict worker` and `verdict dev` share, so the three cannot drift apart.
//!
//! A process first gets its [`Backends`] — RabbitMQ, Redis and a git repository cache
//! ([`Backends::connect`]), or the in-memory ones (`crate::dev`) — then an [`Assembly`] builds
//! the scheduler engine and any number of worker consumers on them, each with its settings taken
//! from the configuration here and nowhere else.

use std::sync::{Arc, Mutex, PoisonError};

use verdict_backends::broker::Broker;
use verdict_backends::broker::amqp::{AmqpBroker, AmqpConfig};
use verdict_backends::clock::{Clock, SystemClock};
use verdict_backends::code_host::CodeHost;
use verdict_backends::code_host::github::{
    GitHubAuth, GitHubCodeHost, GitHubConfig, GitHubConfigError,
};
use verdict_backends::ratelimit::{RateLimiter, SlotLimiter};
use verdict_backends::repo::{
    GitCredentials, GitRepositorySource, GitSourceConfig, RepoError, RepositorySource,
};
use verdict_backends::store::StateStore;
use verdict_backends::store::redis::{RedisConfig, RedisStore};
use verdict_policy::pipeline::{PipelineSettings, StageSettings};
use verdict_policy::publication::PublishSettings;
use verdict_proto::wire::StageKind;
use verdict_scheduler::engine::{
    CodeHostSettings, Scheduler, SchedulerDeps, SchedulerSettings, SystemResolver,
};
use verdict_scheduler::metrics::SchedulerMetrics;
use verdict_worker::consumer::{Consumer, ConsumerSettings};
use verdict_worker::executor::{ExecutorDeps, ProviderRegistry, StageExecutor};
use verdict_worker::journal::LocalFallback;
use verdict_worker::metrics::WorkerMetrics;
use verdict_worker::provider::{self, ProviderBuildError};

use crate::config::{Config, GitHubCredentials};

/// Why a process could not be assembled; each names the setting to check.
#[derive(Debug, thiserror::Error)]
pub enum WiringError {
    #[error("connect to RabbitMQ (broker.url): {0}")]
    Broker(#[from] verdict_backends::broker::BrokerError),
    #[error("connect to Redis (redis.url): {0}")]
    Store(#[from] verdict_backends::store::StoreError),
    #[error("open the repository cache under {dir} (worker.cache_dir): {reason}")]
    Repositories { dir: String, reason: String },
    #[error("configure providers: {0}")]
    Providers(#[from] ProviderBuildError),
    #[error("register metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("configure GitHub ([github]): {0}")]
    GitHub(#[from] GitHubConfigError),
}

/// Which process a repository cache belongs to: each keeps its own folder under
/// `worker.cache_dir`, so a scheduler and a worker on one host never share a mirror lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Scheduler,
    Worker,
    Dev,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Scheduler => "scheduler",
            Role::Worker => "worker",
            Role::Dev => "dev",
        }
    }
}

/// What a process runs on: one broker, one store holding every kind of shared state, one
/// repository source and a clock.
#[derive(Debug, Clone)]
pub struct Backends {
    pub broker: Arc<dyn Broker>,
    pub store: Arc<dyn StateStore>,
    /// The pool's rate limits (SPEC Q3): on the store's Redis connection, or in memory.
    pub limiter: Arc<dyn RateLimiter>,
    /// The pool's per-organisation caps on bulk stages (SPEC Q6), alike.
    pub slots: Arc<dyn SlotLimiter>,
    pub repositories: Arc<dyn RepositorySource>,
    /// The code host (GitHub), when `[github]` is configured.
    pub code_host: Option<Arc<dyn CodeHost>>,
    pub clock: Arc<dyn Clock>,
}

impl Backends {
    /// RabbitMQ and Redis as configured, and the git repository cache of `role`; `name`
    /// identifies this process's broker connection.
    pub async fn connect(config: &Config, name: &str, role: Role) -> Result<Backends, WiringError> {
        let broker = AmqpBroker::connect(amqp_config(config, name)).await?;
        let store = RedisStore::connect(redis_config(config)).await?;
        let github = open_github(config)?;
        let credentials = github.clone().map(|g| g as Arc<dyn GitCredentials>);
        let repositories = open_repositories(config, role, credentials).await?;
        Ok(Backends {
            broker: Arc::new(broker),
            limiter: Arc::new(store.clone()),
            slots: Arc::new(store.clone()),
            store: Arc::new(store),
            repositories,
            code_host: github.map(|g| g as Arc<dyn CodeHost>),
            clock: Arc::new(SystemClock),
        })
    }
}

/// Builds the parts of a process on its backends. Metrics of every part go to one registry,
/// which the process serves on `/metrics`.
#[derive(Debug)]
pub struct Assembly {
    config: Config,
    backends: Backends,
    registry: prometheus::Registry,
    /// Registered once, shared by every consumer of the process (`verdict dev` runs several).
    worker_metrics: Mutex<Option<WorkerMetrics>>,
}

impl Assembly {
    pub fn new(config: &Config, backends: Backends) -> Assembly {
        Assembly {
            config: config.clone(),
            backends,
            registry: prometheus::Registry::new(),
            worker_metrics: Mutex::new(None),
        }
    }

    pub fn backends(&self) -> &Backends {
        &self.backends
    }

    pub fn registry(&self) -> &prometheus::Registry {
        &self.registry
    }

    /// The scheduler engine (call once per process: its metrics are registered here).
    pub fn scheduler(&self) -> Result<Scheduler, WiringError> {
        let b = &self.backends;
        let store = &b.store;
        Ok(Scheduler::new(
            SchedulerDeps {
                broker: b.broker.clone(),
                documents: store.clone(),
                events: store.clone(),
                cancels: store.clone(),
                inputs: store.clone(),
                results: store.clone(),
                repositories: b.repositories.clone(),
                code_host: b.code_host.clone(),
                resolver: Arc::new(SystemResolver),
                clock: b.clock.clone(),
                metrics: self.scheduler_metrics()?,
                budgets: store.clone(),
                liveness: store.clone(),
                transcripts: store.clone(),
                archive: store.clone(),
                capacity: store.clone(),
            },
            scheduler_settings(&self.config),
        ))
    }

    /// One worker consumer named `worker_id`, with its own stage executor over `providers`.
    pub fn worker(
        &self,
        worker_id: String,
        providers: ProviderRegistry,
    ) -> Result<Consumer, WiringError> {
        let b = &self.backends;
        let store = &b.store;
        let executor = StageExecutor::new(
            ExecutorDeps {
                providers,
                repositories: b.repositories.clone(),
                inputs: store.clone(),
                // Responses are also kept in this process's memory, so a stage it runs again
                // after Redis could not be written still answers from what was paid for.
                journal: Arc::new(LocalFallback::new(store.clone(), JOURNAL_MEMORY_ENTRIES)),
                cache: store.clone(),
                transcripts: store.clone(),
                events: store.clone(),
                limiter: b.limiter.clone(),
                metrics: self.worker_metrics()?,
                clock: b.clock.clone(),
            },
            self.config.executor_settings(),
        );
        Ok(Consumer::new(
            executor,
            b.broker.clone(),
            store.clone(),
            store.clone(),
            b.slots.clone(),
            consumer_settings(&self.config, worker_id),
        ))
    }

    /// The scheduler's metrics, with the configured stages' models known in advance.
    fn scheduler_metrics(&self) -> Result<SchedulerMetrics, prometheus::Error> {
        let m = SchedulerMetrics::register(&self.registry)?;
        let stage_models: Vec<(StageKind, String)> = self
            .config
            .known_labels()
            .stage_models
            .into_iter()
            .map(|(stage, _, model)| (stage, model))
            .collect();
        m.initialise_models(&stage_models);
        Ok(m)
    }

    fn worker_metrics(&self) -> Result<WorkerMetrics, prometheus::Error> {
        let mut slot = self
            .worker_metrics
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(m) = slot.as_ref() {
            return Ok(m.clone());
        }
        let m = WorkerMetrics::register(&self.registry)?;
        m.initialise(&self.config.known_labels(), &self.config.prices);
        *slot = Some(m.clone());
        Ok(m)
    }
}

/// The pipeline part of the configuration, as copied into each task.
fn pipeline_settings(config: &Config) -> PipelineSettings {
    let stages = StageKind::ALL
        .into_iter()
        .filter_map(|kind| {
            let s = config.stage(kind)?;
            Some((
                kind,
                StageSettings {
                    provider: Some(s.provider.clone()),
                    model: s.model.clone(),
                    tools: s.tools.clone(),
                    repair: s.repair,
                    structured_output: s.structured_output,
                },
            ))
        })
        .collect();
    PipelineSettings {
        triage: config.pipeline.triage,
        reviewers: u8::try_from(config.pipeline.reviewers).unwrap_or(u8::MAX),
        max_diff_bytes_per_reviewer: config.pipeline.max_diff_bytes_per_reviewer,
        max_diff_bytes: config.pipeline.max_diff_bytes,
        stages,
        issue_categories: config.issue_categories.clone(),
        ignore_paths: config.pipeline.ignore_paths.clone(),
        scan: config.scan.clone(),
    }
}

fn scheduler_settings(config: &Config) -> SchedulerSettings {
    SchedulerSettings {
        pipeline: pipeline_settings(config),
        review_timeout: config.review_timeout,
        language: config.language,
        message_max_bytes: config.broker.message_max_bytes,
        sweep_interval: config.scheduler.sweep_interval,
        queue_stats_interval: config.scheduler.queue_stats_interval,
        stall_after: config.scheduler.stall_after,
        recover_after: config.scheduler.recover_after,
        intake_concurrency: config.scheduler.intake_concurrency,
        intake_backlog: config.scheduler.intake_backlog,
        intake_timeout: config.scheduler.intake_timeout,
        repositories: config.repositories.allowlist.clone(),
        budgets: config.budgets.clone(),
        replica_lease: config.scheduler.replica_lease,
        code_host: config.github.as_ref().map(|g| CodeHostSettings {
            web_host: g.web_host.clone(),
            publish: PublishSettings {
                language: config.language,
                approve: g.approve,
                degraded_comment: g.degraded_comment,
                status_context: g.status_context.clone(),
                details_url: g.details_url.clone(),
                label_min_confidence: g.label_min_confidence,
            },
            apply_labels: g.apply_labels,
        }),
    }
}

fn consumer_settings(config: &Config, worker_id: String) -> ConsumerSettings {
    ConsumerSettings {
        worker_id,
        concurrency: u16::try_from(config.worker.concurrency).unwrap_or(u16::MAX),
        bulk_concurrency: u16::try_from(config.worker.bulk_concurrency).unwrap_or(u16::MAX),
        max_requeues: config.broker.max_requeues,
        message_max_bytes: config.broker.message_max_bytes,
        claim_ttl: config.worker.claim_ttl,
        record_retry: config.worker.record_retry,
        bulk_per_organisation: config.worker.bulk_per_organisation,
        shutdown_grace: config.worker.shutdown_grace,
    }
}

/// Every configured provider, built and validated; the configured default is the default.
pub fn provider_registry(config: &Config) -> Result<ProviderRegistry, ProviderBuildError> {
    let mut registry = ProviderRegistry::new();
    for settings in &config.providers {
        registry.insert(provider::build(settings.clone())?);
    }
    registry.set_default(&config.default_provider);
    Ok(registry)
}

/// A name for this process, unique enough among workers for claims and logs.
pub fn process_id(role: Role) -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "local".to_owned());
    format!("{}-{host}-{}", role.as_str(), std::process::id())
}

/// The RabbitMQ settings of a process named `connection_name`.
fn amqp_config(config: &Config, connection_name: &str) -> AmqpConfig {
    let mut c = AmqpConfig::new(config.broker.url.clone());
    c.prefix = config.broker.prefix.clone();
    c.delivery_limit = config.broker.delivery_limit;
    c.connection_name = connection_name.to_owned();
    c
}

/// The Redis settings.
fn redis_config(config: &Config) -> RedisConfig {
    let mut c = RedisConfig::new(config.redis.url.clone());
    c.prefix = config.redis.prefix.clone();
    c.result_ttl = config.redis.result_ttl;
    c.transcript_ttl = config.redis.transcript_ttl;
    c.event_ttl = config.redis.event_ttl;
    c.document_ttl = Some(config.redis.record_ttl);
    c.input_ttl = config.redis.input_ttl;
    c.intake_memory_percent = config.redis.intake_memory_percent;
    c
}

/// The GitHub client `[github]` configures, if it does: the scheduler's code host and every
/// process's credentials for fetching repositories over HTTPS. Call it inside the async runtime.
pub fn open_github(config: &Config) -> Result<Option<Arc<GitHubCodeHost>>, WiringError> {
    let Some(github) = &config.github else {
        return Ok(None);
    };
    let auth = match &github.credentials {
        GitHubCredentials::Token(token) => GitHubAuth::Token(token.clone()),
        GitHubCredentials::App {
            app_id,
            private_key,
        } => GitHubAuth::App {
            app_id: *app_id,
            private_key_pem: private_key.clone(),
        },
    };
    let mut settings = GitHubConfig::new(github.api_url.clone(), auth);
    settings.timeout = github.timeout;
    // Clone URLs are on the web host (github.com, or the Enterprise server's own host).
    let web_host = github.web_host.clone();
    if !settings.git_hosts.contains(&web_host) {
        settings.git_hosts.push(web_host);
    }
    Ok(Some(Arc::new(GitHubCodeHost::new(settings)?)))
}

/// Provider responses each worker process keeps in memory besides the shared journal (a few KB
/// each): enough for every call of its in-flight stages.
const JOURNAL_MEMORY_ENTRIES: usize = 4096;

/// How many processes of one role may share a `worker.cache_dir`, each in its own slot.
const CACHE_SLOTS: usize = 64;

/// The repository cache settings of process role `role` in slot `slot` (1-based) under
/// `worker.cache_dir`: `<role>` for the first process, `<role>-<slot>` for the others.
fn git_config(config: &Config, role: Role, slot: usize) -> GitSourceConfig {
    let name = match slot {
        0 | 1 => role.as_str().to_owned(),
        n => format!("{}-{n}", role.as_str()),
    };
    let mut c = GitSourceConfig::new(config.worker.cache_dir.join(name));
    c.max_snapshot_bytes = config.worker.snapshot_cache_bytes;
    c.fetch_timeout = config.repositories.fetch_timeout;
    c.local_timeout = config.repositories.local_timeout;
    c
}

/// Opens the first repository cache slot of `role` that no other live process holds (a cache
/// directory belongs to one process at a time; several workers on one host each get their own
/// and keep it across restarts), off the async threads (it scans the directory).
pub async fn open_repositories(
    config: &Config,
    role: Role,
    credentials: Option<Arc<dyn GitCredentials>>,
) -> Result<Arc<GitRepositorySource>, WiringError> {
    let configs: Vec<GitSourceConfig> = (1..=CACHE_SLOTS)
        .map(|slot| {
            let mut git = git_config(config, role, slot);
            git.credentials.clone_from(&credentials);
            git
        })
        .collect();
    let root = config.worker.cache_dir.clone();
    let dir = root.display().to_string();
    let opened = tokio::task::spawn_blocking(move || {
        for git in configs {
            match GitRepositorySource::open(git) {
                Err(RepoError::CacheInUse { .. }) => continue,
                other => return other,
            }
        }
        Err(RepoError::CacheInUse { dir: root })
    })
    .await;
    let failed = |reason: String| WiringError::Repositories {
        dir: dir.clone(),
        reason,
    };
    let source = opened
        .map_err(|e| failed(e.to_string()))?
        .map_err(|e| failed(e.to_string()))?;
    Ok(Arc::new(source))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The configured timings reach the parts that use them (not only the parsed `Config`).
    #[test]
    fn configured_timings_reach_the_scheduler_and_the_consumer() {
        let env = [
            ("VERDICT_SCHEDULER__SWEEP_INTERVAL_SECONDS", "7"),
            ("VERDICT_SCHEDULER__STALL_AFTER_SECONDS", "11"),
            ("VERDICT_WORKER__CLAIM_TTL_SECONDS", "13"),
            ("VERDICT_WORKER__SHUTDOWN_GRACE_SECONDS", "17"),
            ("VERDICT_SCHEDULER__INTAKE_CONCURRENCY", "3"),
            ("VERDICT_SCHEDULER__INTAKE_TIMEOUT_SECONDS", "19"),
            ("VERDICT_REPOSITORIES__FETCH_TIMEOUT_SECONDS", "5"),
            ("VERDICT_REPOSITORIES__LOCAL_TIMEOUT_SECONDS", "2"),
            ("VERDICT_REPOSITORIES__ALLOW_HOSTS", "git.example.com"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let config = Config::load(None, &env).unwrap();

        let scheduler = scheduler_settings(&config);
        assert_eq!(scheduler.sweep_interval, Duration::from_secs(7));
        assert_eq!(scheduler.stall_after, Duration::from_secs(11));
        assert_eq!(scheduler.intake_concurrency, 3);
        assert_eq!(scheduler.intake_timeout, Duration::from_secs(19));
        assert!(
            scheduler
                .repositories
                .check_url("https://git.example.com/a/b.git")
                .is_ok()
        );
        assert!(scheduler.repositories.check_url("/srv/repo").is_err());

        let git = git_config(&config, Role::Scheduler, 1);
        assert_eq!(git.fetch_timeout, Duration::from_secs(5));
        assert_eq!(git.local_timeout, Duration::from_secs(2));

        let consumer = consumer_settings(&config, "w".to_owned());
        assert_eq!(consumer.claim_ttl, Duration::from_secs(13));
        assert_eq!(consumer.shutdown_grace, Duration::from_secs(17));
    }

    /// `verdict dev` serves the scheduler's and the worker's metrics from one registry: both
    /// register `verdict_build_info`, which must agree on its help and labels.
    #[test]
    fn scheduler_and_worker_metrics_share_one_registry() {
        let registry = prometheus::Registry::new();
        SchedulerMetrics::register(&registry).unwrap();
        WorkerMetrics::register(&registry).unwrap();
        let roles: Vec<String> = registry
            .gather()
            .iter()
            .filter(|f| f.name() == "verdict_build_info")
            .flat_map(|f| f.get_metric().iter())
            .flat_map(|m| m.get_label().iter())
            .filter(|l| l.name() == "role")
            .map(|l| l.value().to_owned())
            .collect();
        assert_eq!(roles, ["scheduler", "worker"]);
    }

    #[test]
    fn each_cache_slot_of_a_role_is_its_own_directory() {
        let config = Config::load(None, &[]).unwrap();
        let root = &config.worker.cache_dir;
        assert_eq!(
            git_config(&config, Role::Worker, 1).cache_dir,
            root.join("worker")
        );
        assert_eq!(
            git_config(&config, Role::Worker, 3).cache_dir,
            root.join("worker-3")
        );
        assert_eq!(
            git_config(&config, Role::Dev, 1).cache_dir,
            root.join("dev")
        );
    }
}
