//! What the HTTP API and the CLI ask of the scheduler, as one trait: submit, look up, follow and
//! cancel tasks. The API layer is a thin adapter over it; `verdict dev` and the scheduler process
//! provide the same implementation on different backends.

use std::time::Duration;

use verdict_api::batch::ScanBatchDocument;
use verdict_api::document::TaskDocument;
use verdict_api::submission::{
    IssueAnalysisSubmission, Readiness, ReviewSubmission, ScanBatchSubmission, ScanSubmission,
    Submitted,
};
use verdict_backends::BoxFuture;
use verdict_backends::store::StoredEvent;
use verdict_proto::transcript::Transcript;

/// Why a call failed; the API maps each to a status and a JSON error naming the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// 404.
    #[error("task {0} does not exist")]
    NotFound(String),
    /// 404 for `GET /v1/scans/{id}`.
    #[error("scan batch {0} does not exist")]
    NoSuchBatch(String),
    /// 404 for a stage the task does not have; names the ones it has.
    #[error("task {task} has no stage `{stage}`; its stages are {stages}")]
    NoSuchStage {
        task: String,
        stage: String,
        stages: String,
    },
    /// 400: the request is wrong; the message names the field and the fix.
    #[error("{0}")]
    Invalid(String),
    /// 409: e.g. cancelling a task that already ended.
    #[error("{0}")]
    Conflict(String),
    /// 413: a field is larger than the pool can carry; the message names the field, its size
    /// and the limit.
    #[error("{0}")]
    TooLarge(String),
    /// 503: a backend is down; retry later.
    #[error("service unavailable: {0}")]
    Unavailable(String),
    /// 429: intake's backlog is full; nothing was created, submit again after `retry_after_secs`.
    #[error("{reason}")]
    Busy {
        reason: String,
        retry_after_secs: u64,
    },
    /// 503 with `Retry-After`: a backend is out of room (Redis at its `maxmemory`, RabbitMQ
    /// blocking publishers under a memory or disk alarm); nothing was created, submit again
    /// after `retry_after_secs`. Tasks already accepted wait and continue.
    #[error("{reason}")]
    Overloaded {
        reason: String,
        retry_after_secs: u64,
    },
}

/// The scheduler as the API sees it.
pub trait TaskService: Send + Sync + std::fmt::Debug {
    fn submit_review(&self, s: ReviewSubmission) -> BoxFuture<'_, Result<Submitted, ServiceError>>;
    fn submit_issue_analysis(
        &self,
        s: IssueAnalysisSubmission,
    ) -> BoxFuture<'_, Result<Submitted, ServiceError>>;
    fn submit_scan(&self, s: ScanSubmission) -> BoxFuture<'_, Result<Submitted, ServiceError>>;

    /// Accepts a scan batch at once (its repositories are enumerated in the background) and
    /// answers with its id.
    fn submit_scan_batch(
        &self,
        s: ScanBatchSubmission,
    ) -> BoxFuture<'_, Result<Submitted, ServiceError>>;

    /// The batch with its members' states and counts.
    fn scan_batch<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<ScanBatchDocument, ServiceError>>;

    /// Drives the batch on again now: enumerates it if that never finished, creates the member
    /// tasks not yet created; finished repositories are never scanned again.
    fn resume_scan_batch<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<ScanBatchDocument, ServiceError>>;

    /// The task document, events included.
    fn task<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<TaskDocument, ServiceError>>;

    /// Requests cancellation; returns the document as it is now (the task reaches `aborted`
    /// once in-flight stages have stopped).
    fn cancel<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<TaskDocument, ServiceError>>;

    /// Events after position `after`, waiting up to `wait` when there are none yet.
    fn events<'a>(
        &'a self,
        id: &'a str,
        after: Option<&'a str>,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>, ServiceError>>;

    /// The task's stored transcripts in reading order (every attempt of every stage, or of
    /// `stage` only), as the workers redacted them; an expired one is absent.
    fn transcripts<'a>(
        &'a self,
        id: &'a str,
        stage: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<Transcript>, ServiceError>>;

    fn readiness(&self) -> BoxFuture<'_, Readiness>;
}
