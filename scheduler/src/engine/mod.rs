//! The scheduler engine: the parts that carry a task from submission to its stored result on the
//! broker and store traits, around the pure pipeline ([`crate::pipeline`]), and the [`Scheduler`]
//! that assembles them.
//!
//! Every change to a task is a compare-and-set of its whole record, so several replicas can
//! consume results at once without double-advancing a task. Stages are written as `planned` in
//! the same update that decides them (an outbox), then published and marked `dispatched`; a
//! replica that crashes in between leaves them `planned`, and the sweeper of any replica
//! publishes them again (workers deduplicate, SPEC E7).
//!
//! # Layout (in the order a task flows through it)
//! - [`facade`]: `TaskService` for [`Scheduler`]: submit, look up, follow and cancel tasks.
//! - [`submission`]: a submission validated into a new task record (no I/O).
//! - [`records`]: task records loaded, created and changed with compare-and-set; the only code
//!   that writes a record or the index of active tasks.
//! - [`intake`]: a queued task's inputs prepared (its revisions resolved to commits, a review's
//!   change read and its diff stored), then the task started.
//! - [`transition`]: a pipeline transition stored, then its side effects: events, terminal
//!   bookkeeping, publication of planned stages.
//! - [`progress`]: a task's progress stream: drafts stamped and appended, events read back.
//! - [`outbox`]: planned stages published and marked dispatched.
//! - [`results`]: a stage result from a worker decoded and applied; acknowledged, requeued or
//!   dead-lettered.
//! - [`publish`]: a finished task's outcome posted to its pull request or issue, and its commit
//!   status, each attempt safe to repeat.
//! - [`sweeper`]: what a crashed replica left: intakes restarted, planned stages republished,
//!   publications retried.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use verdict_backends::broker::{Broker, BrokerError, Route};
use verdict_backends::clock::Clock;
use verdict_backends::publish::Publisher;
use verdict_backends::repo::RepositorySource;
use verdict_backends::store::{CancelSignals, DocumentStore, EventLog, InputStore, StoreError};
use verdict_proto::Language;

use crate::metrics::SchedulerMetrics;
use crate::pipeline::PipelineSettings;
use crate::service::ServiceError;

mod facade;
mod intake;
mod outbox;
mod progress;
mod publish;
mod records;
mod results;
mod submission;
mod sweeper;
mod transition;

pub use submission::new_id;

use facade::Service;
use intake::Intake;
use outbox::Outbox;
use progress::Progress;
use publish::Publication;
use records::TaskRecords;
use results::Results;
use sweeper::Sweeper;
use transition::Transitions;

/// Stage results taken from the queue at once (each is applied in its own background task).
const RESULTS_PREFETCH: u16 = 32;

/// The backends a scheduler talks to.
#[derive(Debug, Clone)]
pub struct SchedulerDeps {
    pub broker: Arc<dyn Broker>,
    pub documents: Arc<dyn DocumentStore>,
    pub events: Arc<dyn EventLog>,
    pub cancels: Arc<dyn CancelSignals>,
    pub inputs: Arc<dyn InputStore>,
    pub repositories: Arc<dyn RepositorySource>,
    /// The code host pull requests and issues are read from and results published to; `None`
    /// when no GitHub is configured (submissions that need one are refused).
    pub publisher: Option<Arc<dyn Publisher>>,
    pub clock: Arc<dyn Clock>,
    pub metrics: SchedulerMetrics,
}

/// What the scheduler decides with.
#[derive(Debug, Clone)]
pub struct SchedulerSettings {
    /// Copied into every task at submission.
    pub pipeline: PipelineSettings,
    pub review_timeout: Duration,
    pub language: Language,
    /// Largest stage-result message accepted from the queue.
    pub message_max_bytes: usize,
    /// How often the sweeper looks for stalled tasks.
    pub sweep_interval: Duration,
    /// A stage still `planned` (or a task still `queued`) this long after being written is
    /// taken over by the sweeper.
    pub stall_after: Duration,
    /// The code host, when one is configured.
    pub code_host: Option<CodeHostSettings>,
}

/// What the scheduler knows of the configured code host (GitHub or GitHub Enterprise).
#[derive(Debug, Clone, PartialEq)]
pub struct CodeHostSettings {
    /// The web host pull-request and issue URLs must name (`github.com`, `ghe.example.com`).
    pub web_host: String,
    /// How results are written there.
    pub publish: crate::publication::PublishSettings,
    /// Apply the labels an issue analysis suggests (only those the repository defines).
    pub apply_labels: bool,
}

/// The scheduler; cheap to clone (everything inside is shared).
#[derive(Debug, Clone)]
pub struct Scheduler {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    service: Service,
    results: Results,
    sweeper: Sweeper,
    broker: Arc<dyn Broker>,
    sweep_interval: Duration,
    /// Result handlers, intakes and publications in flight; `run` waits for them before it
    /// returns.
    background: TaskTracker,
    /// Cancelled when `run` stops: publications in flight give their claims back instead of
    /// holding up the shutdown.
    stop: CancellationToken,
}

/// The parts more than one other part is built on, assembled once.
#[derive(Debug)]
struct Parts {
    records: TaskRecords,
    progress: Progress,
    outbox: Outbox,
    publication: Publication,
    transitions: Transitions,
    intake: Intake,
}

impl Parts {
    /// The parts; `background` runs what they start and must not wait for (publications).
    fn assemble(
        deps: &SchedulerDeps,
        settings: &SchedulerSettings,
        background: &TaskTracker,
        stop: &CancellationToken,
    ) -> Parts {
        let records = TaskRecords::new(deps);
        let progress = Progress::new(deps);
        let outbox = Outbox::new(deps, &records);
        let publication = Publication::new(
            deps,
            settings.code_host.clone(),
            &records,
            &progress,
            background,
            stop,
        );
        let transitions = Transitions::new(deps, &records, &progress, &outbox, &publication);
        let intake = Intake::new(deps, &records, &transitions);
        Parts {
            records,
            progress,
            outbox,
            publication,
            transitions,
            intake,
        }
    }
}

impl Scheduler {
    pub fn new(deps: SchedulerDeps, settings: SchedulerSettings) -> Scheduler {
        let background = TaskTracker::new();
        let stop = CancellationToken::new();
        let parts = Parts::assemble(&deps, &settings, &background, &stop);
        Scheduler {
            inner: Arc::new(Inner {
                service: Service::new(&deps, &settings, &parts, &background),
                results: Results::new(&deps, &settings, &parts),
                sweeper: Sweeper::new(&deps, &settings, &parts),
                broker: deps.broker,
                sweep_interval: settings.sweep_interval,
                background,
                stop,
            }),
        }
    }

    /// Consumes stage results and sweeps until `shutdown`; then waits for the result handlers
    /// and intakes it started.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<(), BrokerError> {
        let inner = &self.inner;
        let mut results = inner
            .broker
            .consume(Route::Results, RESULTS_PREFETCH)
            .await?;
        let mut sweep = tokio::time::interval(inner.sweep_interval);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                delivery = results.next() => match delivery {
                    Some(d) => {
                        let handler = inner.results.clone();
                        inner.background.spawn(async move { handler.handle(d).await });
                    }
                    None => break,
                },
                _ = sweep.tick() => inner.sweeper.sweep().await,
            }
        }
        inner.stop.cancel();
        inner.background.close();
        inner.background.wait().await;
        Ok(())
    }

    fn service(&self) -> &Service {
        &self.inner.service
    }
}

fn unavailable(e: StoreError) -> ServiceError {
    ServiceError::Unavailable(e.to_string())
}

#[cfg(test)]
mod fixture;
