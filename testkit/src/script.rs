//! What the fake provider answers: per model, a sequence of behaviours consumed one per request,
//! so a test states the whole conversation with the provider up front ("first a 429, then a
//! fenced answer, then hang").

use std::collections::VecDeque;
use std::time::Duration;

use serde_json::Value;

/// One scripted answer to one request. Build them with the constructors and refine them with the
/// modifiers, e.g. `Behaviour::status(429).retry_after("2")` or
/// `Behaviour::tool_call("read", json!({"path": "a.rs"})).with_text("Let me look.")`.
///
/// The modifiers that only make sense for one kind of answer (`retry_after` for a status,
/// `usage` for a reply, …) panic when applied to another kind: that is a mistake in the test,
/// reported where it was made.
#[derive(Debug, Clone, PartialEq)]
pub enum Behaviour {
    /// A successful completion.
    Reply(Reply),
    /// An HTTP error status.
    Status(StatusReply),
    /// `200 OK` with this body, which is not the JSON a client expects.
    Malformed(String),
    /// Never answers; the request ends when the client gives up or the server shuts down.
    Hang,
    /// Waits, then behaves like the inner behaviour.
    Delayed {
        latency: Latency,
        then: Box<Behaviour>,
    },
}

/// A successful completion, rendered in whichever wire format the request used.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Reply {
    /// `None` renders as OpenAI `content: null` / no Anthropic text block.
    pub text: Option<String>,
    pub tool_calls: Vec<ScriptedToolCall>,
    /// `None`: `ToolCalls` when there are tool calls, else `Stop`.
    pub finish: Option<Finish>,
    /// `(input, output)` tokens; `None` estimates both from the sizes (about 4 bytes a token).
    pub usage: Option<(u64, u64)>,
}

/// A tool call the fake model makes.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptedToolCall {
    pub name: String,
    pub arguments: ToolArguments,
}

/// A tool call's arguments.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolArguments {
    /// Well-formed arguments: an OpenAI `arguments` string, an Anthropic `input` object.
    Json(Value),
    /// Arguments exactly as a sloppy model writes them, possibly broken JSON. OpenAI gets the
    /// text verbatim; Anthropic gets the parsed value when it is an object, else the text as a
    /// JSON string (what a misbehaving gateway would send).
    Raw(String),
}

/// Why the fake model stopped, mapped to each wire format's spelling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// OpenAI `stop`, Anthropic `end_turn`.
    Stop,
    /// OpenAI `length`, Anthropic `max_tokens`.
    Length,
    /// OpenAI `tool_calls`, Anthropic `tool_use`.
    ToolCalls,
    /// Sent verbatim in both formats (e.g. `content_filter`, `refusal`).
    Other(String),
}

/// An HTTP error answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusReply {
    pub status: u16,
    /// Extra response headers, e.g. `retry-after` or `x-ratelimit-reset-requests`.
    pub headers: Vec<(String, String)>,
    /// The body verbatim; `None` renders the wire format's usual error object.
    pub body: Option<String>,
}

/// How long to wait before answering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Latency {
    Fixed(Duration),
    /// Uniformly random in `[min, max]`, drawn per request.
    Between(Duration, Duration),
}

impl Behaviour {
    /// A plain text answer.
    pub fn text(text: impl Into<String>) -> Behaviour {
        Behaviour::Reply(Reply {
            text: Some(text.into()),
            ..Reply::default()
        })
    }

    /// A text answer wrapped in a Markdown fence with this info string (`json`, `xml`, or empty).
    pub fn fenced(info: &str, body: &str) -> Behaviour {
        Behaviour::text(format!("```{info}\n{body}\n```"))
    }

    /// A text answer cut off by the token limit (finish `length` / `max_tokens`).
    pub fn truncated(text: impl Into<String>) -> Behaviour {
        Behaviour::text(text).finish(Finish::Length)
    }

    /// One tool call with well-formed arguments and no text; add text with
    /// [`Behaviour::with_text`] and more calls with [`Behaviour::and_tool_call`].
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Behaviour {
        Behaviour::Reply(Reply::default()).and_tool_call(name, arguments)
    }

    /// One tool call whose arguments are this text verbatim (possibly broken JSON).
    pub fn tool_call_raw(name: impl Into<String>, arguments: impl Into<String>) -> Behaviour {
        Behaviour::Reply(Reply::default()).push_tool_call(ScriptedToolCall {
            name: name.into(),
            arguments: ToolArguments::Raw(arguments.into()),
        })
    }

    /// An HTTP status with the wire format's usual error body; refine with
    /// [`Behaviour::retry_after`], [`Behaviour::header`] and [`Behaviour::body`].
    pub fn status(status: u16) -> Behaviour {
        Behaviour::Status(StatusReply {
            status,
            headers: Vec::new(),
            body: None,
        })
    }

    /// `200 OK` whose body is truncated JSON.
    pub fn malformed() -> Behaviour {
        Behaviour::Malformed("{\"id\": \"broken\", \"choices\": [{\"message\": ".to_owned())
    }

    /// `200 OK` with exactly this body.
    pub fn malformed_body(body: impl Into<String>) -> Behaviour {
        Behaviour::Malformed(body.into())
    }

    /// Never answers until the client gives up or the server shuts down.
    pub fn hang() -> Behaviour {
        Behaviour::Hang
    }

    /// Adds a tool call to a reply.
    pub fn and_tool_call(self, name: impl Into<String>, arguments: Value) -> Behaviour {
        self.push_tool_call(ScriptedToolCall {
            name: name.into(),
            arguments: ToolArguments::Json(arguments),
        })
    }

    /// Sets a reply's text (alongside its tool calls).
    pub fn with_text(self, text: impl Into<String>) -> Behaviour {
        let text = text.into();
        self.map_reply("with_text", |r| r.text = Some(text))
    }

    /// Sets a reply's finish reason.
    pub fn finish(self, finish: Finish) -> Behaviour {
        self.map_reply("finish", |r| r.finish = Some(finish))
    }

    /// Sets a reply's reported token usage.
    pub fn usage(self, input_tokens: u64, output_tokens: u64) -> Behaviour {
        self.map_reply("usage", |r| r.usage = Some((input_tokens, output_tokens)))
    }

    /// Adds a `Retry-After` header to a status answer (seconds or an HTTP date, verbatim).
    pub fn retry_after(self, value: impl Into<String>) -> Behaviour {
        self.header("retry-after", value)
    }

    /// Adds a response header to a status answer.
    pub fn header(self, name: impl Into<String>, value: impl Into<String>) -> Behaviour {
        let (name, value) = (name.into(), value.into());
        self.map_status("header", |s| s.headers.push((name, value)))
    }

    /// Replaces a status answer's body.
    pub fn body(self, body: impl Into<String>) -> Behaviour {
        let body = body.into();
        self.map_status("body", |s| s.body = Some(body))
    }

    /// Waits this long before behaving as `self`.
    pub fn after(self, latency: Duration) -> Behaviour {
        Behaviour::Delayed {
            latency: Latency::Fixed(latency),
            then: Box::new(self),
        }
    }

    /// Waits a random time in `[min, max]` (drawn per request) before behaving as `self`.
    pub fn after_between(self, min: Duration, max: Duration) -> Behaviour {
        Behaviour::Delayed {
            latency: Latency::Between(min.min(max), max.max(min)),
            then: Box::new(self),
        }
    }

    fn push_tool_call(self, call: ScriptedToolCall) -> Behaviour {
        self.map_reply("and_tool_call", |r| r.tool_calls.push(call))
    }

    fn map_reply(self, what: &str, f: impl FnOnce(&mut Reply)) -> Behaviour {
        match self {
            Behaviour::Reply(mut r) => {
                f(&mut r);
                Behaviour::Reply(r)
            }
            Behaviour::Delayed { latency, then } => Behaviour::Delayed {
                latency,
                then: Box::new(then.map_reply(what, f)),
            },
            other => panic!("Behaviour::{what} applies to a reply, not to {other:?}"),
        }
    }

    fn map_status(self, what: &str, f: impl FnOnce(&mut StatusReply)) -> Behaviour {
        match self {
            Behaviour::Status(mut s) => {
                f(&mut s);
                Behaviour::Status(s)
            }
            Behaviour::Delayed { latency, then } => Behaviour::Delayed {
                latency,
                then: Box::new(then.map_status(what, f)),
            },
            other => panic!("Behaviour::{what} applies to Behaviour::status, not to {other:?}"),
        }
    }
}

/// A model's script: behaviours consumed in order, then the `then` behaviour for every further
/// request (default: a 500 saying the script is exhausted, so an unexpected extra call fails
/// loudly instead of passing by accident).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Script {
    steps: VecDeque<Behaviour>,
    then: Option<Behaviour>,
}

impl Script {
    pub fn new(steps: impl IntoIterator<Item = Behaviour>) -> Script {
        Script {
            steps: steps.into_iter().collect(),
            then: None,
        }
    }

    /// The same behaviour for every request (benchmarks: `Script::always(text.after(latency))`).
    pub fn always(behaviour: Behaviour) -> Script {
        Script::new([]).then(behaviour)
    }

    /// What every request after the scripted steps gets.
    pub fn then(mut self, behaviour: Behaviour) -> Script {
        self.then = Some(behaviour);
        self
    }

    /// The next behaviour, or `None` when the script is exhausted and has no `then`.
    pub(crate) fn next_behaviour(&mut self) -> Option<Behaviour> {
        self.steps.pop_front().or_else(|| self.then.clone())
    }

    /// Scripted steps not yet consumed (the `then` behaviour is not counted).
    pub fn remaining(&self) -> usize {
        self.steps.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn steps_are_consumed_in_order_then_the_fallback_repeats() {
        let mut s = Script::new([Behaviour::text("a"), Behaviour::status(429)])
            .then(Behaviour::text("again"));
        assert_eq!(s.next_behaviour(), Some(Behaviour::text("a")));
        assert_eq!(s.next_behaviour(), Some(Behaviour::status(429)));
        assert_eq!(s.remaining(), 0);
        assert_eq!(s.next_behaviour(), Some(Behaviour::text("again")));
        assert_eq!(s.next_behaviour(), Some(Behaviour::text("again")));
        let mut bare = Script::new([Behaviour::hang()]);
        assert_eq!(bare.next_behaviour(), Some(Behaviour::Hang));
        assert_eq!(bare.next_behaviour(), None);
    }

    #[test]
    fn modifiers_reach_through_latency() {
        let b = Behaviour::tool_call("read", json!({"path": "a"}))
            .after(Duration::from_millis(5))
            .with_text("looking")
            .usage(3, 4);
        let Behaviour::Delayed { then, .. } = b else {
            panic!("expected a delay")
        };
        let Behaviour::Reply(r) = *then else {
            panic!("expected a reply")
        };
        assert_eq!(r.text.as_deref(), Some("looking"));
        assert_eq!(r.usage, Some((3, 4)));
        assert_eq!(r.tool_calls.len(), 1);
    }

    #[test]
    #[should_panic(expected = "applies to Behaviour::status")]
    fn retry_after_on_a_reply_is_a_test_bug() {
        let _ = Behaviour::text("x").retry_after("2");
    }
}
