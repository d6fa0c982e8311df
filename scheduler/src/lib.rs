//! verdict's task owner: intake, pipelines and their degradation policy, task state, progress
//! streams and the HTTP API.
//!
//! # Layout
//! - [`document`]: the task document the API returns.
//! - [`service`]: the `TaskService` trait the API and CLI talk to.
//! - [`api`]: the HTTP API over a `TaskService` (axum router).
//! - [`client`]: the API's client, for the CLI (`verdict submit`, `verdict tail`).
//! - [`milestone`]: progress events as one readable line each.

pub mod api;
pub mod client;
pub mod document;
pub mod milestone;
pub mod service;
