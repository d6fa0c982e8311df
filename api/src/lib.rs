//! The API contract of verdict's scheduler: what its HTTP API takes and answers, shared by the
//! server (`verdict-scheduler`), its client (`verdict submit`, `tail`, `scan`) and, later, the
//! web console, so that none of them imports another's internals. Data and names only: no I/O,
//! no HTTP stack, no async runtime.
//!
//! # Layout
//! - [`submission`]: the bodies of `POST /v1/reviews`, `/v1/issue-analyses` and `/v1/scans`,
//!   their options, the answer, and `/readyz`'s.
//! - [`document`]: `GET /v1/tasks/{id}` (a task, its stages, coverage, publication) and its
//!   transcripts.
//! - [`batch`]: `GET /v1/scans/{id}`.
//! - [`http`]: route paths, the error body, the body limit, the SSE event names.

pub mod batch;
pub mod document;
pub mod http;
pub mod submission;
