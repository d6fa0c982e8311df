//! Test and benchmark kit for verdict: a fake LLM provider server speaking the OpenAI
//! chat-completions and Anthropic Messages wire formats, scripted per model, recording every
//! request, and a fake GitHub speaking its REST API. Tests and benchmarks exercise the real
//! provider and GitHub clients over real HTTP with them.
//!
//! # Layout
//! - [`script`]: what the fake answers — [`Behaviour`]s (text, fences, truncation, tool calls,
//!   HTTP errors, malformed bodies, hangs, latency) in a per-model [`Script`].
//! - [`server`]: [`FakeProvider`], the axum server on a loopback port.
//! - [`record`]: [`RecordedRequest`], what the server received, and [`Answer`], what it sent back
//!   (a request its client abandoned first has none).
//! - [`scenario`]: the end-to-end scenarios' configuration, stage answers and sample repository.
//! - `wire`, `openai`, `anthropic`: the two formats — request checks as strict as the real APIs
//!   on the fields verdict sends, response rendering and error bodies.
//! - [`github`]: [`FakeGitHub`], GitHub's REST API under a GitHub Enterprise-style `/api/v3`
//!   root (pull requests, issues, reviews with GitHub's diff rules, statuses, comments, labels,
//!   App JWTs and installation tokens, pagination, faults), and signed webhook payloads.
//! - [`services`]: private RabbitMQ and Redis deployments on loopback (single nodes, a Redis
//!   Cluster, a Sentinel group, a RabbitMQ cluster) for tests that kill, stop and restart them.
//!
//! ```no_run
//! # async fn demo() {
//! use std::time::Duration;
//! use verdict_testkit::{Behaviour, FakeProvider, Script};
//!
//! let fake = FakeProvider::start().await;
//! fake.script(
//!     "model-a",
//!     Script::new([Behaviour::status(429).retry_after("2"), Behaviour::text("hello")]),
//! );
//! // ... point a client at fake.base_url() ...
//! let seen = fake.wait_for_requests(2, Duration::from_secs(5)).await.unwrap();
//! assert_eq!(seen[0].model.as_deref(), Some("model-a"));
//! # }
//! ```

mod anthropic;
pub mod github;
pub mod local_model;
mod openai;
pub mod record;
pub mod script;
pub mod server;
pub mod services;
mod wire;

pub use github::FakeGitHub;
pub use local_model::LocalModel;
pub use record::{Answer, RecordedRequest, WaitTimeout};
pub use script::{Behaviour, Finish, Latency, Reply, Script, ScriptedToolCall, ToolArguments};
pub use server::FakeProvider;
pub use wire::Wire;

pub mod scenario;
