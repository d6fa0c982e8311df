//! The whole pool in one process (SPEC I1): the scheduler and N workers on the in-memory broker
//! and stores, the same code paths as the distributed deployment. `verdict dev` runs on it, and so
//! do the in-process end-to-end tests.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use verdict_proto::wire::EventType;
use verdict_worker::broker::Broker;
use verdict_worker::broker::memory::MemoryBroker;
use verdict_worker::clock::{Clock, SystemClock};
use verdict_worker::consumer::Consumer;
use verdict_worker::executor::{ExecutorDeps, ProviderRegistry, StageExecutor};
use verdict_worker::inputs::MemoryInputStore;
use verdict_worker::journal::MemoryJournal;
use verdict_worker::metrics::WorkerMetrics;
use verdict_worker::repo::RepositorySource;
use verdict_worker::store::memory::MemoryStore;
use verdict_worker::transcript::MemoryTranscriptStore;

use crate::config::Config;
use crate::document::TaskDocument;
use crate::engine::{Scheduler, SchedulerDeps};
use crate::metrics::SchedulerMetrics;
use crate::runtime;
use crate::service::{ServiceError, TaskService};

/// A running in-process pool.
#[derive(Debug)]
pub struct DevPool {
    pub scheduler: Scheduler,
    pub broker: Arc<MemoryBroker>,
    pub store: Arc<MemoryStore>,
    pub journal: Arc<MemoryJournal>,
    pub transcripts: Arc<MemoryTranscriptStore>,
    pub registry: prometheus::Registry,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

/// Why the pool could not start.
#[derive(Debug, thiserror::Error)]
pub enum DevError {
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

impl DevPool {
    /// Starts a scheduler and `workers` worker consumers.
    pub fn start(
        config: &Config,
        providers: ProviderRegistry,
        repositories: Arc<dyn RepositorySource>,
        workers: usize,
    ) -> Result<DevPool, DevError> {
        let registry = prometheus::Registry::new();
        let broker = Arc::new(MemoryBroker::with_delivery_limit(
            config.broker.delivery_limit,
        ));
        let store = Arc::new(MemoryStore::new());
        let inputs = Arc::new(MemoryInputStore::default());
        let journal = Arc::new(MemoryJournal::default());
        let transcripts = Arc::new(MemoryTranscriptStore::default());
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let scheduler = Scheduler::new(
            SchedulerDeps {
                broker: broker.clone(),
                documents: store.clone(),
                events: store.clone(),
                cancels: store.clone(),
                inputs: inputs.clone(),
                repositories: repositories.clone(),
                clock: clock.clone(),
                metrics: SchedulerMetrics::register(&registry)?,
            },
            runtime::scheduler_settings(config),
        );
        let worker_metrics = WorkerMetrics::register(&registry)?;
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
            let executor = StageExecutor::new(
                ExecutorDeps {
                    providers: providers.clone(),
                    repositories: repositories.clone(),
                    inputs: inputs.clone(),
                    journal: journal.clone(),
                    transcripts: transcripts.clone(),
                    events: store.clone(),
                    metrics: worker_metrics.clone(),
                    clock: clock.clone(),
                },
                config.executor_settings(),
            );
            let consumer = Consumer::new(
                executor,
                broker.clone() as Arc<dyn Broker>,
                store.clone(),
                store.clone(),
                runtime::consumer_settings(config, format!("dev-worker-{n}")),
            );
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
            journal,
            transcripts,
            registry,
            shutdown,
            tasks,
        })
    }

    pub fn service(&self) -> Arc<dyn TaskService> {
        Arc::new(self.scheduler.clone())
    }

    /// Follows a task until it is terminal and its closing event is stored (or `timeout`
    /// passes), returning its document.
    pub async fn wait(&self, id: &str, timeout: Duration) -> Result<TaskDocument, ServiceError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut after: Option<String> = None;
        loop {
            let doc = self.scheduler.task(id).await?;
            let closed = doc.events.iter().any(|e| e.kind == EventType::TaskFinished);
            if doc.state.is_terminal() && closed {
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
        self.broker.shutdown();
        self.tasks.wait().await;
    }
}
