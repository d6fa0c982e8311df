//! The process side of verdict: the configuration and the wiring of every process, shared by the
//! `verdict` binary's subcommands and the end-to-end tests. Behaviour lives in the crates below;
//! this crate only decides which parts a process runs, on which backends, with which settings.
//!
//! # Layout
//! - [`config`]: one TOML file plus `VERDICT_*` overrides, validated at start-up into a typed
//!   [`config::Config`] whose errors name the key and the fix (SPEC I3).
//! - [`runtime`]: from the configuration to running parts — [`runtime::Backends`] (RabbitMQ,
//!   Redis, git) and [`runtime::Assembly`], the one builder of schedulers and worker consumers.
//! - [`dev`]: the whole pool in one process on the in-memory backends (`verdict dev`, SPEC I1).
//!
//! The binary's own modules (`main.rs`, `commands/`, `process.rs`, `telemetry.rs`) hold the
//! argument parsing, exit codes, signals, health endpoints and log setup; `anyhow` is used only
//! there.

pub mod config;
pub mod dev;
pub mod runtime;
