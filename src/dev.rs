//! The whole pool in one process (SPEC I1): the scheduler and N workers on the in-memory broker
//! and stores, the same code paths as the distributed deployment. `verdict dev` runs on it, and so
//! do the in-process end-to-end tests.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use verdict_api::document::PublicationState;
use verdict_api::document::TaskDocument;
use verdict_backends::broker::memory::MemoryBroker;
use verdict_backends::clock::SystemClock;
use verdict_backends::code_host::CodeHost;
use verdict_backends::ratelimit::MemorySlots;
use verdict_backends::ratelimit::memory::MemoryRateLimiter;
use verdict_backends::repo::RepositorySource;
use verdict_backends::store::memory::MemoryStore;
use verdict_proto::wire::EventType;
use verdict_scheduler::engine::Scheduler;
use verdict_scheduler::service::{ServiceError, TaskService};
use verdict_worker::executor::ProviderRegistry;

use crate::config::Config;
use crate::runtime::{Assembly, Backends, WiringError};

/// A running in-process pool.
#[derive(Debug)]
pub struct DevPool {
    pub scheduler: Scheduler,
    pub broker: Arc<MemoryBroker>,
    /// Every kind of shared state: task records, events, results, inputs, the response journal
    /// and transcripts.
    pub store: Arc<MemoryStore>,
    pub registry: prometheus::Registry,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

impl DevPool {
    /// Starts a scheduler and `workers` worker consumers, reading repositories from
    /// `repositories` and pull requests from `code_host` (when GitHub is configured).
    pub fn start(
        config: &Config,
        providers: ProviderRegistry,
        repositories: Arc<dyn RepositorySource>,
        code_host: Option<Arc<dyn CodeHost>>,
        workers: usize,
    ) -> Result<DevPool, WiringError> {
        // Local paths are what `verdict dev` reviews; only its wiring accepts them (SPEC R4).
        let mut config = config.clone();
        config.repositories.allow_local_paths();
        let config = &config;
        let broker = Arc::new(MemoryBroker::with_delivery_limit(
            config.broker.delivery_limit,
        ));
        let store = Arc::new(MemoryStore::new());
        let assembly = Assembly::new(
            config,
            Backends {
                broker: broker.clone(),
                store: store.clone(),
                limiter: Arc::new(MemoryRateLimiter::new()),
                slots: Arc::new(MemorySlots::new()),
                repositories,
                code_host,
                clock: Arc::new(SystemClock),
            },
        );
        let scheduler = assembly.scheduler()?;
        let shutdown = CancellationToken::new();
        let tasks = TaskTracker::new();
        {
            let (scheduler, shutdown) = (scheduler.clone(), shutdown.clone());
            tasks.spawn(async move {
                if let Err(e) = scheduler.run(shutdown).await {
                    tracing::error!(error = %e, "scheduler stopped");
                }
            });
        }
        for n in 1..=workers.max(1) {
            let consumer = assembly.worker(format!("dev-worker-{n}"), providers.clone())?;
            let shutdown = shutdown.clone();
            tasks.spawn(async move {
                if let Err(e) = consumer.run(shutdown).await {
                    tracing::error!(error = %e, "worker stopped");
                }
            });
        }
        tasks.close();
        Ok(DevPool {
            scheduler,
            broker,
            store,
            registry: assembly.registry().clone(),
            shutdown,
            tasks,
        })
    }

    pub fn service(&self) -> Arc<dyn TaskService> {
        Arc::new(self.scheduler.clone())
    }

    /// Follows a task until it is terminal, its closing event is stored and its publication (if
    /// it has one) has settled — or `timeout` passes — returning its document.
    pub async fn wait(&self, id: &str, timeout: Duration) -> Result<TaskDocument, ServiceError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut after: Option<String> = None;
        loop {
            let doc = self.scheduler.task(id).await?;
            let closed = doc.events.iter().any(|e| e.kind == EventType::TaskFinished);
            let published = doc
                .publication
                .as_ref()
                .is_none_or(|p| p.state != PublicationState::Pending);
            if doc.state.is_terminal() && closed && published {
                return Ok(doc);
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(doc);
            }
            let events = self
                .scheduler
                .events(id, after.as_deref(), left.min(Duration::from_secs(1)))
                .await?;
            if let Some(last) = events.last() {
                after = Some(last.id.clone());
            }
        }
    }

    /// Stops consuming and waits for the scheduler and workers to end.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.broker.stop();
        self.tasks.wait().await;
    }
}
