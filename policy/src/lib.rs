//! verdict's task policy, pure: what a task is, how its pipeline advances, what its result says
//! and what it publishes — decided from data, with no I/O. The scheduler (`verdict-scheduler`)
//! carries out what it decides.
//!
//! # Layout (in the order a task flows through it)
//! - [`webhook`]: GitHub webhook deliveries verified and read into submissions.
//! - [`scan_batch`]: organisation scans as data — a batch of scan tasks, the repository
//!   filters, the batch document's counts.
//! - [`ignore`]: `pipeline.ignore_paths`, compiled, and how a file it leaves out says so.
//! - [`scan_shards`]: a scan's files classified (scanned or skipped with a reason) and packed
//!   into shards by a token budget.
//! - [`budget`]: per-organisation budgets as data — accounts, periods, estimates, actual cost.
//! - [`task`]: the task record (one versioned document per task).
//! - [`pipeline`]: S1–S7 as a pure state machine over the record.
//! - [`result`]: result models and the multi-stage result policy.
//! - [`merge`]: duplicate findings merged, so a result never lists one twice.
//! - [`scan_merge`]: the shards' scan answers merged into one result.
//! - [`publication`]: what a finished task says on GitHub — the review (event, inline comments
//!   inside the diff safety zone, the body), the issue comment and labels, the commit status.
//!
//! **Invariant:** no I/O and no async runtime: this crate depends on neither `tokio` nor
//! `verdict-backends` nor an HTTP stack (`tests/tidy.rs` checks the manifest), so "pure" is a
//! fact of the build, not a comment.

pub mod budget;
pub mod ignore;
pub mod merge;
pub mod pipeline;
pub mod publication;
pub mod result;
pub mod scan_batch;
pub mod scan_merge;
pub mod scan_shards;
pub mod task;
pub mod webhook;
