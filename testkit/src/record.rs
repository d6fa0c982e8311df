//! What the fake provider saw: every request with its headers and parsed body, so a test asserts
//! on what a client actually put on the wire (the API key header, the absence of `tools`, …).

use std::fmt;
use std::time::{Duration, Instant};

use serde_json::Value;

/// One request as received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// Arrival order across all models, from 0 (counting requests not kept, see
    /// [`crate::FakeProvider::set_recording`]).
    pub seq: usize,
    /// `/v1/chat/completions` or `/v1/messages`.
    pub path: String,
    /// Header names in lowercase, values as sent (lossily decoded), in arrival order.
    pub headers: Vec<(String, String)>,
    /// The parsed JSON body (`Null` when it was not JSON).
    pub body: Value,
    pub raw_body: String,
    /// The body's `model` field.
    pub model: Option<String>,
    /// Why the server answered 400 without consulting the script, if it did.
    pub rejection: Option<String>,
    /// When it arrived (its body read).
    pub at: Instant,
}

impl RecordedRequest {
    /// The first value of a header (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The token of an `Authorization: Bearer <token>` header.
    pub fn bearer_token(&self) -> Option<&str> {
        self.header("authorization")
            .and_then(|v| v.strip_prefix("Bearer "))
    }

    /// The body's `messages` array (empty when absent).
    pub fn messages(&self) -> &[Value] {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }
}

/// A request the fake finished answering: its status, and when. A request whose client went away
/// first (the connection closed during its latency or hang) has none — the answer was never
/// produced, so nothing was paid for; that is how a test tells a call a killed client abandoned
/// from one it received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// The request's [`RecordedRequest::seq`].
    pub seq: usize,
    /// The HTTP status sent.
    pub status: u16,
    /// When the response was handed to the connection.
    pub at: Instant,
}

/// [`crate::FakeProvider::wait_for_requests`] gave up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitTimeout {
    pub wanted: usize,
    pub received: usize,
    pub timeout: Duration,
}

impl fmt::Display for WaitTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "waited {:?} for {} requests to the fake provider, received {}",
            self.timeout, self.wanted, self.received
        )
    }
}

impl std::error::Error for WaitTimeout {}
