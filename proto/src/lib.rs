//! verdict's shared language: everything two processes must agree on, and nothing that does I/O.
//!
//! # Layout
//! - [`diagnostic`]: located, quotable reasons a response broke its contract.
//! - [`language`]: the output-language normalisation (P6).
//! - [`protocol`]: the protocol names and families.
//!
//! **Invariant:** this crate does no I/O — no files, sockets, clocks, randomness or async runtime.
//! Callers pass in everything that varies (boundary markers, timestamps), so every function here is
//! deterministic and testable from data files.

pub mod diagnostic;
pub mod language;
pub mod protocol;

pub use diagnostic::{Diagnostic, DiagnosticCode, Diagnostics};
pub use language::Language;
pub use protocol::{ProtocolFamily, ProtocolId};
