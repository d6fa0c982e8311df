//! verdict's task owner: intake, pipelines and their degradation policy, task state, progress
//! streams and the HTTP API.
//!
//! # Layout
//! - [`config`]: the configuration file and `VERDICT_*` overrides, validated into a typed
//!   `Config` at start-up.
//! - [`document`]: the task document the API returns.
//! - [`service`]: the `TaskService` trait the API and CLI talk to.

pub mod config;
pub mod document;
pub mod service;
