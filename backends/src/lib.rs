//! verdict's shared backends: the broker, the state stores and the repository sources behind one
//! small trait each, with their real implementations (RabbitMQ, Redis, git) and in-memory ones
//! that behave the same. The worker and the scheduler both build on this crate and on nothing of
//! each other; it is the only code that knows AMQP, Redis or how a repository is fetched.
//!
//! # Layout
//! - [`broker`]: the [`broker::Broker`] trait — confirmed publishing, delayed publishing, dead
//!   letters, subscriptions with prefetch; `broker::amqp` (RabbitMQ, lapin) and
//!   `broker::memory`.
//! - [`store`]: the state-store traits — stage claims and results, progress streams, cancel
//!   signals, versioned documents, stage inputs, the response journal, transcripts;
//!   `store::redis::RedisStore` and `store::memory::MemoryStore` each implement all of them.
//! - [`repo`]: the [`repo::RepositorySource`] trait — a change's diff and snapshots at a commit;
//!   `repo::git` (mirrors and a size-bounded snapshot cache) and `repo::memory`.
//! - [`ratelimit`]: the [`ratelimit::RateLimiter`] trait — provider limits (requests and tokens
//!   per minute) and pauses shared by a whole pool; GCRA in one Lua script on
//!   `store::redis::RedisStore`, and `ratelimit::memory`.
//! - [`code_host`]: the [`code_host::CodeHost`] trait — pull requests and issues read, reviews,
//!   comments, statuses and labels posted; `code_host::github` and `code_host::memory`.
//! - [`clock`], [`secret`], [`trace`]: the small types every process shares — wall time that
//!   follows tokio's virtual time in tests, a credential that never prints, the W3C trace
//!   context in message headers.

pub mod broker;
pub mod clock;
pub mod code_host;
pub mod ratelimit;
pub mod repo;
pub mod secret;
pub mod store;
pub mod trace;

use std::future::Future;
use std::pin::Pin;

/// A boxed, sendable future: what the backend traits return so they stay object-safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
