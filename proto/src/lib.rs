//! verdict's shared language: everything two processes must agree on, and nothing that does I/O.
//!
//! # Layout
//! - [`budget`]: token prices and the amounts budgets count (X5).
//! - [`diagnostic`]: located, quotable reasons a response broke its contract.
//! - [`language`]: the output-language normalisation (P6).
//! - [`protocol`]: the protocol names and families.
//! - [`names`], [`severity`]: closed sets of wire names, spelled one way everywhere.
//! - [`review`], [`issue_analysis`], [`scan`]: the tagged envelopes P1–P3.
//! - [`contracts`]: the JSON stage contracts P4 (triage, summary, reviewer, validator).
//! - [`output_tag`]: `<output>` extraction for free-form agents (P5).
//! - [`validate`]: one entry point from protocol name + response to canonical JSON.
//! - [`contract`]: the contract text each protocol's prompts show.
//! - [`diff`]: unified-diff parsing into commentable new-side lines.
//! - [`grounding`]: whether findings point at code that exists, and the notes they carry.
//! - [`evidence`]: fencing untrusted material behind per-call boundary markers (P7).
//! - [`repair`]: the texts of repair rounds, conversation and isolated (E3).
//! - [`outcome`]: the classified end of every stage attempt (E4).
//! - [`redact`]: secret redaction and safe previews (E4, O4, R3).
//! - [`publication`]: review, comment and status drafts; pull-request and issue URLs (G1–G3).
//! - [`revision`]: the one syntax rule for a revision a person types (SHA, branch, tag, `HEAD~1`).
//! - [`wire`]: the versioned messages between scheduler and workers, and stored events.
//! - [`files`]: a commit's files as a repository source lists them.
//! - [`secret`]: a credential whose `Debug` and `Display` never show it (R3).
//! - [`chat`]: the provider-neutral chat vocabulary (messages, tool calls, request, response).
//! - [`transcript`]: what one stage attempt did, as stored for operators (O4).
//!
//! **Invariant:** this crate does no I/O — no files, sockets, clocks, randomness or async runtime.
//! Callers pass in everything that varies (boundary markers, timestamps), so every function here is
//! deterministic and testable from data files.

pub mod budget;
pub mod chat;
pub mod contract;
pub mod contracts;
pub mod diagnostic;
pub mod diff;
pub mod echo;
mod envelope;
pub mod evidence;
pub mod files;
pub mod gbnf;
pub mod grounding;
pub mod issue_analysis;
pub mod language;
pub mod location;
pub mod names;
pub mod outcome;
pub mod output_tag;
pub mod protocol;
pub mod publication;
pub mod redact;
pub mod repair;
pub mod review;
pub mod revision;
pub mod scan;
pub mod secret;
pub mod severity;
pub mod structured;
pub mod transcript;
pub mod validate;
pub mod wire;

pub use diagnostic::{Diagnostic, DiagnosticCode, Diagnostics};
pub use language::Language;
pub use protocol::{ProtocolFamily, ProtocolId};
pub use validate::{ValidateOptions, validate};
