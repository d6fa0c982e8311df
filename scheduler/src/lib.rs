//! verdict's task owner: the effects around the pure task policy (`verdict-policy`) — intake,
//! task state, progress streams, publication — and the HTTP API whose contract is
//! `verdict-api`.
//!
//! # Layout (in the order a task flows through it)
//! - [`service`]: the `TaskService` trait the API and CLI talk to, and `ServiceError`.
//! - [`engine`]: the `Scheduler` implementing it, assembled from one part per job: submission,
//!   task records, intake, transitions, progress, the outbox, the results loop and the sweeper,
//!   all on the broker and store traits.
//! - [`diff_pieces`]: a review's diff cut into per-file pieces stored by hash, with coverage.
//! - [`metrics`]: every scheduler metric.
//! - [`api`]: the HTTP API over a `TaskService` (axum router).

pub mod api;
pub mod diff_pieces;
pub mod engine;
pub mod metrics;
pub mod service;
