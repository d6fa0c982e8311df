//! From a validated [`Config`] to the settings and parts each process runs with: one mapping,
//! shared by `verdict scheduler`, `verdict worker` and `verdict dev`.

use std::time::Duration;

use verdict_proto::wire::StageKind;
use verdict_worker::consumer::ConsumerSettings;
use verdict_worker::executor::ProviderRegistry;
use verdict_worker::provider::{self, ProviderBuildError};

use crate::config::Config;
use crate::engine::SchedulerSettings;
use crate::pipeline::{PipelineSettings, StageSettings};

/// The pipeline part of the configuration, as copied into each task.
pub fn pipeline_settings(config: &Config) -> PipelineSettings {
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
    }
}

pub fn scheduler_settings(config: &Config) -> SchedulerSettings {
    SchedulerSettings {
        pipeline: pipeline_settings(config),
        review_timeout: config.review_timeout,
        language: config.language,
        message_max_bytes: config.broker.message_max_bytes,
        sweep_interval: Duration::from_secs(10),
        stall_after: Duration::from_secs(30),
    }
}

/// A claim outlives a stage that runs to the soft deadline plus its final calls.
pub fn consumer_settings(config: &Config, worker_id: String) -> ConsumerSettings {
    ConsumerSettings {
        worker_id,
        concurrency: u16::try_from(config.worker.concurrency).unwrap_or(u16::MAX),
        bulk_concurrency: u16::try_from(config.worker.bulk_concurrency).unwrap_or(u16::MAX),
        max_requeues: config.broker.max_requeues,
        message_max_bytes: config.broker.message_max_bytes,
        claim_ttl: Duration::from_secs(60),
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
pub fn process_id(role: &str) -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "local".to_owned());
    format!("{role}-{host}-{}", std::process::id())
}

/// The RabbitMQ settings of a process named `connection_name`.
pub fn amqp_config(
    config: &Config,
    connection_name: &str,
) -> verdict_worker::broker::amqp::AmqpConfig {
    let mut c = verdict_worker::broker::amqp::AmqpConfig::new(config.broker.url.clone());
    c.prefix = config.broker.prefix.clone();
    c.delivery_limit = config.broker.delivery_limit;
    c.connection_name = connection_name.to_owned();
    c
}

/// The Redis settings.
pub fn redis_config(config: &Config) -> verdict_worker::store::redis::RedisConfig {
    let mut c = verdict_worker::store::redis::RedisConfig::new(config.redis.url.clone());
    c.prefix = config.redis.prefix.clone();
    c.result_ttl = config.redis.result_ttl;
    c.transcript_ttl = config.redis.transcript_ttl;
    c.event_ttl = config.redis.event_ttl;
    c
}

/// The repository cache of one process role (`scheduler`, `worker`, `dev`), under
/// `worker.cache_dir`.
pub fn git_config(config: &Config, role: &str) -> verdict_worker::repo::GitSourceConfig {
    let mut c = verdict_worker::repo::GitSourceConfig::new(config.worker.cache_dir.join(role));
    c.max_snapshot_bytes = config.worker.snapshot_cache_bytes;
    c
}
