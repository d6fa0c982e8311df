//! The HTTP surface both sides name: route paths, the one error body, the request size limit and
//! the event stream's event names — so a client builds the same paths and reads the same
//! shapes the server writes, without importing the server.

use serde::{Deserialize, Serialize};

use crate::document::TaskState;

/// The largest request body accepted. Submissions carry titles, bodies and options, not diffs
/// (those are fetched from the repository), so 1 MiB is generous.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// The body of every error response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong: a stable code for programs, a message for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

/// The SSE event name of the closing message.
pub const END_EVENT: &str = "end";
/// The SSE event name of a backend failure; the stream closes after it.
pub const ERROR_EVENT: &str = "error";

/// The data of the `end` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamEnd {
    pub state: TaskState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The path of a task, its id percent-encoded as one path segment.
pub fn task_location(id: &str) -> String {
    format!("/v1/tasks/{}", path_segment(id))
}

/// `text` percent-encoded as one path segment (unreserved characters kept).
pub fn path_segment(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `id` percent-encoded as one path segment.
fn segment(id: &str) -> String {
    task_location(id)
        .trim_start_matches("/v1/tasks/")
        .to_owned()
}

/// The path of a scan batch, its id percent-encoded as one path segment.
pub fn batch_location(id: &str) -> String {
    format!("/v1/scans/{}", segment(id))
}
