//! The two wire formats the fake speaks, behind one enum, so the server logic (scripts, latency,
//! recording) is written once and only rendering and request checks differ per format.

use serde_json::Value;

use crate::script::{Finish, Reply};
use crate::{anthropic, openai};

/// Which API a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// `POST /v1/chat/completions`.
    OpenAi,
    /// `POST /v1/messages`.
    Anthropic,
}

/// A reply with everything the server decided for it (ids, usage), ready to render.
#[derive(Debug)]
pub(crate) struct Rendered<'a> {
    pub reply: &'a Reply,
    pub model: &'a str,
    /// A server-unique number for response and tool-call ids.
    pub id: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Rendered<'_> {
    pub(crate) fn finish(&self) -> Finish {
        match &self.reply.finish {
            Some(f) => f.clone(),
            None if self.reply.tool_calls.is_empty() => Finish::Stop,
            None => Finish::ToolCalls,
        }
    }
}

impl Wire {
    pub fn path(self) -> &'static str {
        match self {
            Wire::OpenAi => "/v1/chat/completions",
            Wire::Anthropic => "/v1/messages",
        }
    }

    /// Checks the request the way the real API would, so a client that sends a shape the real
    /// service rejects fails here too. Returns the reason for a 400.
    pub(crate) fn validate(self, body: &Value) -> Result<(), String> {
        match self {
            Wire::OpenAi => openai::validate(body),
            Wire::Anthropic => anthropic::validate(body),
        }
    }

    pub(crate) fn render(self, r: &Rendered<'_>) -> Value {
        match self {
            Wire::OpenAi => openai::render(r),
            Wire::Anthropic => anthropic::render(r),
        }
    }

    /// The format's error object for a status (`{"error": {...}}` or
    /// `{"type": "error", "error": {...}}`).
    pub(crate) fn error_body(self, status: u16, message: &str) -> Value {
        match self {
            Wire::OpenAi => openai::error_body(status, message),
            Wire::Anthropic => anthropic::error_body(status, message),
        }
    }
}

/// Shared check helpers: each returns the message a real API would put in its 400.
pub(crate) mod check {
    use serde_json::{Map, Value};

    pub(crate) fn object<'a>(v: &'a Value, at: &str) -> Result<&'a Map<String, Value>, String> {
        v.as_object()
            .ok_or_else(|| format!("{at}: expected an object, got {}", kind(v)))
    }

    pub(crate) fn array<'a>(v: &'a Value, at: &str) -> Result<&'a Vec<Value>, String> {
        v.as_array()
            .ok_or_else(|| format!("{at}: expected an array, got {}", kind(v)))
    }

    pub(crate) fn string<'a>(v: Option<&'a Value>, at: &str) -> Result<&'a str, String> {
        match v {
            Some(Value::String(s)) => Ok(s),
            Some(other) => Err(format!("{at}: expected a string, got {}", kind(other))),
            None => Err(format!("{at}: field required")),
        }
    }

    pub(crate) fn non_empty_string<'a>(v: Option<&'a Value>, at: &str) -> Result<&'a str, String> {
        let s = string(v, at)?;
        if s.is_empty() {
            return Err(format!("{at}: must not be empty"));
        }
        Ok(s)
    }

    pub(crate) fn optional_number_in(v: Option<&Value>, at: &str, max: f64) -> Result<(), String> {
        match v {
            None | Some(Value::Null) => Ok(()),
            Some(Value::Number(n)) => match n.as_f64() {
                Some(x) if (0.0..=max).contains(&x) => Ok(()),
                _ => Err(format!("{at}: must be between 0 and {max}")),
            },
            Some(other) => Err(format!("{at}: expected a number, got {}", kind(other))),
        }
    }

    pub(crate) fn positive_integer(v: Option<&Value>, at: &str) -> Result<(), String> {
        match v.and_then(Value::as_u64) {
            Some(n) if n > 0 => Ok(()),
            _ if v.is_none() => Err(format!("{at}: field required")),
            _ => Err(format!("{at}: must be a positive integer")),
        }
    }

    pub(crate) fn kind(v: &Value) -> &'static str {
        match v {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        }
    }
}

/// A rough token count for replies that do not script their usage: about 4 bytes a token, at
/// least 1, so benchmarks and usage metrics see plausible non-zero numbers.
pub(crate) fn estimate_tokens(bytes: usize) -> u64 {
    u64::try_from(bytes.div_ceil(4).max(1)).unwrap_or(u64::MAX)
}
