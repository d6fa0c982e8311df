//! verdict's task owner: intake, pipelines and their degradation policy, task state, progress
//! streams and the HTTP API.
//!
//! # Layout (in the order a task flows through it)
//! - [`service`]: the `TaskService` trait the API and CLI talk to (the submissions and
//!   documents it takes and answers are the API contract, `verdict-api`).
//! - [`engine`]: the `Scheduler` implementing it, assembled from one part per job: submission,
//!   task records, intake, transitions, progress, the outbox, the results loop and the sweeper,
//!   all on the broker and store traits.
//! - [`scan_batch`]: organisation scans as data — a batch of scan tasks, the repository
//!   filters, the batch document with its counts.
//! - [`diff_pieces`]: a review's diff cut into per-file pieces stored by hash, with coverage.
//! - [`scan_shards`]: a scan's files classified (scanned or skipped with a reason) and packed
//!   into shards by a token budget.
//! - [`scan_merge`]: the shards' scan answers merged into one result.
//! - [`budget`]: per-organisation budgets as data — accounts, periods, estimates, actual cost.
//! - [`task`]: the task record (one versioned document per task).
//! - [`pipeline`]: S1–S7 as a pure state machine over the record.
//! - [`result`]: result models and the multi-stage result policy.
//! - [`merge`]: duplicate findings merged, so a result never lists one twice.
//! - [`publication`]: what a finished task says on GitHub — the review (event, inline comments
//!   inside the diff safety zone, the body), the issue comment and labels, the commit status.
//! - [`metrics`]: every scheduler metric.
//! - [`api`]: the HTTP API over a `TaskService` (axum router).
//! - [`webhook`]: GitHub webhook deliveries verified and read into submissions.

pub mod api;
pub mod budget;
pub mod diff_pieces;
pub mod engine;
pub mod merge;
pub mod metrics;
pub mod pipeline;
pub mod publication;
pub mod result;
pub mod scan_batch;
pub mod scan_merge;
pub mod scan_shards;
pub mod service;
pub mod task;
pub mod webhook;
