//! GitHub's failures as [`CodeHostError`]s, in one place: which status is which kind, how long a
//! rate limit asks us to wait, GitHub's `errors` list in its own words, and messages made safe to
//! show (redacted, short, never the credential the request carried).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use octocrab::GitHubError;
use verdict_proto::redact::{REDACTED, redact, safe_preview};

use crate::code_host::CodeHostError;
use crate::secret::Secret;

/// How many characters of GitHub's message go into an error.
const MESSAGE_CHARS: usize = 300;

/// A credential shorter than this is not replaced verbatim (it would mangle ordinary words).
const MIN_SCRUBBED_LEN: usize = 6;

/// The error for a failed exchange about `what` ("pull request acme/shop#42"), made with
/// `credential`.
pub(super) fn from_octocrab(
    error: octocrab::Error,
    what: &str,
    credential: &Secret,
) -> CodeHostError {
    let scrub = |text: &str| scrub(text, credential);
    match error {
        octocrab::Error::GitHub { source, .. } => from_status(&Answer::of(&source), what, scrub),
        octocrab::Error::Json { source, .. } => CodeHostError::Protocol {
            reason: scrub(&format!("{what}: {source}")),
        },
        octocrab::Error::Serde { source, .. } => CodeHostError::Protocol {
            reason: scrub(&format!("{what}: {source}")),
        },
        octocrab::Error::InvalidUtf8 { source, .. } => CodeHostError::Protocol {
            reason: scrub(&format!("{what}: {source}")),
        },
        other => match transport(&other) {
            Some(reason) => CodeHostError::Unavailable {
                reason: scrub(&format!("{what}: {reason}")),
            },
            None => CodeHostError::Protocol {
                reason: scrub(&format!("{what}: {}", chain(&other))),
            },
        },
    }
}

/// The error for an exchange about `what` that got no complete answer within `timeout`.
pub(super) fn timed_out(what: &str, timeout: Duration) -> CodeHostError {
    CodeHostError::Unavailable {
        reason: format!("{what}: no complete answer within {timeout:?}"),
    }
}

/// What an HTTP answer that is not a success said.
struct Answer<'a> {
    status: u16,
    message: &'a str,
    errors: &'a [serde_json::Value],
    headers: &'a HeaderMap,
}

static NO_HEADERS: std::sync::LazyLock<HeaderMap> = std::sync::LazyLock::new(HeaderMap::new);

impl<'a> Answer<'a> {
    fn of(error: &'a GitHubError) -> Answer<'a> {
        Answer {
            status: error.status_code.as_u16(),
            message: &error.message,
            errors: error.errors.as_deref().unwrap_or_default(),
            headers: error.headers.as_ref().unwrap_or(&NO_HEADERS),
        }
    }
}

fn from_status(answer: &Answer<'_>, what: &str, scrub: impl Fn(&str) -> String) -> CodeHostError {
    let status = answer.status;
    let message = scrub(&safe_preview(answer.message, MESSAGE_CHARS));
    let headers = answer.headers;
    if status == 429 || (status == 403 && rate_limited(headers)) {
        return CodeHostError::RateLimited {
            retry_after: wait(headers, SystemTime::now()),
            message,
        };
    }
    match status {
        401 | 403 => CodeHostError::Denied { status, message },
        404 | 410 => CodeHostError::NotFound {
            what: what.to_owned(),
        },
        422 => CodeHostError::Rejected {
            message,
            errors: answer
                .errors
                .iter()
                .map(|e| scrub(&error_text(e)))
                .filter(|e| !e.is_empty())
                .collect(),
        },
        300..=399 => CodeHostError::NotFound {
            what: format!("{what} (GitHub answered {status}: it moved; use its new name)"),
        },
        408 | 500..=599 => CodeHostError::Unavailable {
            reason: format!("{what}: HTTP {status}: {message}"),
        },
        _ => CodeHostError::Rejected {
            message: format!("HTTP {status}: {message}"),
            errors: Vec::new(),
        },
    }
}

/// GitHub's rate-limit refusals: a 403 saying the quota is spent (`x-ratelimit-remaining: 0`)
/// or asking to wait (`retry-after`, its secondary limits). Other 403s are permissions.
fn rate_limited(headers: &HeaderMap) -> bool {
    header(headers, "x-ratelimit-remaining") == Some("0") || headers.contains_key("retry-after")
}

/// The wait GitHub asked for: `retry-after` (seconds), else until `x-ratelimit-reset` (epoch
/// seconds); a reset in the past is no wait.
pub(super) fn wait(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    if let Some(seconds) = header(headers, "retry-after").and_then(|v| v.parse::<u64>().ok()) {
        return Some(Duration::from_secs(seconds));
    }
    let reset = header(headers, "x-ratelimit-reset").and_then(|v| v.parse::<u64>().ok())?;
    let now = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    Some(Duration::from_secs(reset.saturating_sub(now)))
}

fn header<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// One entry of GitHub's `errors`: a string, or an object's `message`, else its
/// `resource`/`field`/`code`.
fn error_text(entry: &serde_json::Value) -> String {
    match entry {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Object(fields) => {
            let text = |key: &str| fields.get(key).and_then(|v| v.as_str());
            if let Some(message) = text("message") {
                return message.to_owned();
            }
            let place: Vec<&str> = ["resource", "field"].into_iter().filter_map(text).collect();
            match (place.is_empty(), text("code")) {
                (false, Some(code)) => format!("{}: {code}", place.join(".")),
                (true, Some(code)) => code.to_owned(),
                (false, None) => place.join("."),
                (true, None) => entry.to_string(),
            }
        }
        other => other.to_string(),
    }
}

/// Why a request got no HTTP answer, when that is what happened (connect, reset, timeout).
fn transport(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        if let Some(http) = e.downcast_ref::<reqwest::Error>() {
            let what = if http.is_timeout() {
                "no complete answer in time"
            } else if http.is_connect() {
                "cannot connect"
            } else {
                "the connection failed"
            };
            return Some(format!("{what}: {}", chain(http)));
        }
        current = e.source();
    }
    None
}

/// An error and its sources, joined (a top-level "error sending request" hides the cause).
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    safe_preview(&out, MESSAGE_CHARS)
}

/// Credential-shaped text redacted, and the request's own credential whatever its shape.
pub(super) fn scrub(text: &str, credential: &Secret) -> String {
    let redacted = redact(text);
    let value = credential.expose();
    if value.len() >= MIN_SCRUBBED_LEN {
        redacted.replace(value, REDACTED)
    } else {
        redacted
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use http::HeaderValue;

    fn map(
        status: u16,
        headers: &[(&'static str, &str)],
        body: serde_json::Value,
    ) -> CodeHostError {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        let errors = body
            .get("errors")
            .and_then(|e| e.as_array())
            .cloned()
            .unwrap_or_default();
        let answer = Answer {
            status,
            message: body["message"].as_str().unwrap(),
            errors: &errors,
            headers: &map,
        };
        from_status(&answer, "pull request a/b#1", |t| t.to_owned())
    }

    #[test]
    fn statuses_map_to_kinds() {
        let m = || serde_json::json!({"message": "m"});
        assert!(
            matches!(map(404, &[], m()), CodeHostError::NotFound { what } if what == "pull request a/b#1")
        );
        assert!(matches!(
            map(401, &[], m()),
            CodeHostError::Denied { status: 401, .. }
        ));
        assert!(matches!(
            map(403, &[("x-ratelimit-remaining", "12")], m()),
            CodeHostError::Denied { status: 403, .. }
        ));
        assert!(matches!(
            map(502, &[], m()),
            CodeHostError::Unavailable { .. }
        ));
        assert!(matches!(map(400, &[], m()), CodeHostError::Rejected { .. }));
        assert!(matches!(map(301, &[], m()), CodeHostError::NotFound { .. }));
    }

    #[test]
    fn rate_limits_carry_their_waits() {
        let body = || serde_json::json!({"message": "API rate limit exceeded"});
        let e = map(429, &[("retry-after", "30")], body());
        assert_eq!(e.retry_after(), Some(Duration::from_secs(30)), "{e}");
        let e = map(403, &[("retry-after", "7")], body());
        assert_eq!(e.retry_after(), Some(Duration::from_secs(7)), "{e}");
        let reset = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs()
            + 120;
        let e = map(
            403,
            &[
                ("x-ratelimit-remaining", "0"),
                ("x-ratelimit-reset", &reset.to_string()),
            ],
            body(),
        );
        let wait = e.retry_after().unwrap();
        assert!(
            wait <= Duration::from_secs(120) && wait >= Duration::from_secs(110),
            "{wait:?}"
        );
        assert!(e.retryable());
        assert_eq!(super::wait(&HeaderMap::new(), SystemTime::now()), None);
    }

    #[test]
    fn unprocessable_keeps_githubs_words_from_strings_and_objects() {
        let body = serde_json::json!({"message": "Validation Failed", "errors": [
            "Pull request review thread line must be part of the diff",
            {"resource": "Issue", "field": "title", "code": "missing_field"},
            {"message": "Body is required", "code": "custom"},
        ]});
        let CodeHostError::Rejected { message, errors } = map(422, &[], body) else {
            panic!("a 422 is a rejection");
        };
        assert_eq!(message, "Validation Failed");
        assert_eq!(
            errors,
            [
                "Pull request review thread line must be part of the diff",
                "Issue.title: missing_field",
                "Body is required"
            ]
        );
    }

    #[test]
    fn the_credential_is_scrubbed_whatever_its_shape() {
        let secret = Secret::new("plain-test-token");
        assert_eq!(
            scrub(
                "echo plain-test-token and ghs_abcdefghijklmnopqrstuvwxyz0123",
                &secret
            ),
            format!("echo {REDACTED} and {REDACTED}")
        );
    }
}
