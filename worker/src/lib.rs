//! verdict's stage executor and the worker loop around it: one stage request in, exactly one
//! classified outcome out (SPEC E1–E7), against real providers.
//!
//! # Layout (in the order a stage flows through it)
//! - [`consumer`]: the worker loop — takes stage requests from a [`verdict_backends::broker`]
//!   subscription, claims, executes, records the result, publishes it, acknowledges.
//! - [`executor`]: one stage request → one classified outcome; [`deadline`] (E2), [`retry`] (E5)
//!   and [`journal`] (E7) are its parts; [`cache`] (X3) answers identical work of any task.
//! - [`prompt`]: prompt assembly with the trust boundary (P7).
//! - [`tools`]: the read-only tools (`read`, `grep`, `find`, `ls`) confined to a snapshot.
//! - [`provider`]: the one small trait every LLM backend implements, and the OpenAI-compatible,
//!   Anthropic and `exec` clients.
//! - [`metrics`]: every worker metric.
//!
//! Queues, stores and repositories come from `verdict_backends` as traits: this crate knows
//! neither AMQP nor Redis nor git, and nothing of the scheduler.

pub mod cache;
pub mod consumer;
pub mod deadline;
pub mod executor;
pub mod journal;
pub mod metrics;
pub mod prompt;
pub mod provider;
pub mod retry;
pub mod tools;
