//! The CLI's side of verdict's HTTP API (`verdict submit`, `tail`, `transcript`, `scan`,
//! `report`): built on the API contract (`verdict-api`) alone, so that it never reaches into the
//! scheduler's internals.
//!
//! # Layout
//! - [`client`]: the API's client — submissions (waiting out a busy or down server for its
//!   `Retry-After`), task and batch reads, transcripts, and the event stream with reconnection.
//! - [`milestone`]: progress events as one readable line each.
//! - [`report`]: the organisation report of a batch of scans, as JSON and as an HTML page.

pub mod client;
pub mod milestone;
pub mod report;
