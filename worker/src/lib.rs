//! verdict's stateless stage executor: turns one stage request into exactly one classified
//! outcome (SPEC E1–E7), against real providers, with no knowledge of queues.
//!
//! # Layout (in the order a stage flows through it)
//! - [`provider`]: the one small trait every LLM backend implements, the chat types, and the
//!   OpenAI-compatible, Anthropic and `exec` clients.
//! - [`repo`]: repository snapshots at a commit, cached and size-bounded.
//! - [`tools`]: the read-only tools (`read`, `grep`, `find`, `ls`) confined to a snapshot.
//! - [`inputs`]: stage inputs, inline or content-addressed.
//! - [`prompt`]: prompt assembly with the trust boundary (P7).
//! - [`executor`]: one stage request → one classified outcome; [`deadline`] (E2), [`retry`]
//!   (E5), [`journal`] (E7) are its parts.
//! - [`transcript`], [`events`], [`metrics`]: what an attempt leaves behind for operators.
//! - [`clock`]: wall time, virtualisable in tests.
//! - [`broker`], [`store`]: the broker and state-store traits with their RabbitMQ/Redis and
//!   in-memory implementations, shared with the scheduler.
//!
//! The AMQP consumer (a later layer) and `verdict dev` both drive the same executor.

pub mod broker;
pub mod clock;
pub mod consumer;
pub mod deadline;
pub mod events;
pub mod executor;
pub mod inputs;
pub mod journal;
pub mod metrics;
pub mod prompt;
pub mod provider;
pub mod repo;
pub mod retry;
pub mod store;
pub mod tools;
pub mod trace;
pub mod transcript;

use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future: what the backend traits return so they stay object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
