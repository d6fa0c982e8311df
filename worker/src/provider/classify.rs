//! SPEC E4 for HTTP providers, in one place: which [`FailureKind`] an HTTP status or a transport
//! error is, how long the provider asked us to wait, and how an error message is made safe to
//! show (redacted, short, never containing the API key). Both the OpenAI-compatible and the
//! Anthropic clients go through here, so they cannot drift apart.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::HeaderMap;
use verdict_proto::outcome::FailureKind;
use verdict_proto::redact::{REDACTED, redact, safe_preview};

use super::{ProviderError, Secret};

/// How many characters of a provider's error body go into a message.
const EXCERPT_CHARS: usize = 300;

/// A key shorter than this is not replaced verbatim in messages: it would mangle ordinary words,
/// and no real provider issues keys that short.
const MIN_SCRUBBED_KEY_LEN: usize = 6;

/// Per-wire differences in classification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    OpenAi,
    /// Anthropic's 529 "overloaded" is a capacity signal like 429, not an outage.
    Anthropic,
}

/// The kind of failure an HTTP status means (only called for non-2xx statuses).
///
/// - 429, and 529 for Anthropic → `RateLimited` (slows the whole pool for that model, SPEC Q3);
/// - other 5xx and 409 (a conflict the provider says to retry) → `ProviderUnavailable`;
/// - 408 → `Timeout` (the server gave up waiting; retryable like a transport timeout);
/// - 401, 403, and 402 (billing: an operator must act, like a bad key) → `Auth`;
/// - 3xx (redirects are not followed: a POST must not silently change target, and a moved API
///   means the base URL is wrong), 400, 404, 413, 422 and every other 4xx → `BadRequest`;
/// - anything else (1xx) → `ProviderUnavailable`.
pub fn kind_for_status(status: u16, flavor: Flavor) -> FailureKind {
    match status {
        429 => FailureKind::RateLimited,
        529 if flavor == Flavor::Anthropic => FailureKind::RateLimited,
        408 => FailureKind::Timeout,
        401..=403 => FailureKind::Auth,
        409 => FailureKind::ProviderUnavailable,
        300..=499 => FailureKind::BadRequest,
        _ => FailureKind::ProviderUnavailable,
    }
}

/// The error for a non-2xx answer: its kind, the status, what the provider asked us to wait, and
/// a message with the status and a redacted excerpt of the body.
pub fn status_error(
    provider: &str,
    status: u16,
    headers: &HeaderMap,
    body: &[u8],
    flavor: Flavor,
    key: Option<&Secret>,
) -> ProviderError {
    let kind = kind_for_status(status, flavor);
    let reason = reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or(if status == 529 { "Overloaded" } else { "" });
    let mut message = format!("provider `{provider}`: HTTP {status} {reason}");
    if (300..400).contains(&status)
        && let Some(location) = headers
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
    {
        message.push_str(&format!(
            " (redirected to {location}; redirects are not followed: fix base_url)"
        ));
    }
    let excerpt = error_excerpt(body);
    if !excerpt.is_empty() {
        message.push_str(": ");
        message.push_str(&excerpt);
    }
    ProviderError {
        kind,
        message: scrub(&message, key),
        status: Some(status),
        retry_after: retry_after(headers, SystemTime::now()),
    }
}

/// The error for a request that got no HTTP answer.
pub fn transport_error(
    provider: &str,
    error: &reqwest::Error,
    timeout: Duration,
    key: Option<&Secret>,
) -> ProviderError {
    let kind = if error.is_timeout() {
        FailureKind::Timeout
    } else if error.is_builder() {
        FailureKind::Internal
    } else {
        // Connect (refused, DNS, TLS), reset mid-request or mid-body, redirect: all transient.
        FailureKind::ProviderUnavailable
    };
    let what = match kind {
        FailureKind::Timeout => format!("no complete response within {timeout:?}"),
        FailureKind::Internal => "cannot build the request".to_owned(),
        _ if error.is_connect() => "cannot connect".to_owned(),
        _ => "the connection failed".to_owned(),
    };
    let message = format!("provider `{provider}`: {what}: {}", error_chain(error));
    ProviderError::new(kind, scrub(&message, key))
}

/// The error for a 2xx answer whose body is not the JSON the wire format promises. Classified
/// `ProviderUnavailable` (retryable): a well-formed request got a broken answer, which is the
/// provider's fault and usually transient (a gateway cutting a body, an overloaded backend
/// answering HTML); it is not a protocol violation by the model, so it must not reach the
/// repair loop.
pub fn malformed_error(
    provider: &str,
    status: u16,
    problem: &str,
    body: &[u8],
    key: Option<&Secret>,
) -> ProviderError {
    let preview = safe_preview(&String::from_utf8_lossy(body), EXCERPT_CHARS);
    let message = format!(
        "provider `{provider}`: HTTP {status} with a body that is not a valid response ({problem}): {preview}"
    );
    ProviderError {
        status: Some(status),
        ..ProviderError::new(FailureKind::ProviderUnavailable, scrub(&message, key))
    }
}

/// Redacts credential-shaped text and, as a second line of defence, the configured key itself
/// (providers echo keys in "invalid API key" errors, and a local key need not look like one).
pub fn scrub(text: &str, key: Option<&Secret>) -> String {
    let redacted = redact(text);
    match key.map(Secret::expose) {
        Some(k) if k.len() >= MIN_SCRUBBED_KEY_LEN => redacted.replace(k, REDACTED),
        _ => redacted,
    }
}

/// The useful part of an error body: `error.message` (both OpenAI and Anthropic, with the error
/// type or code when given), a top-level `message`/`detail` (gateways), else the body itself;
/// redacted, single-line-safe, at most [`EXCERPT_CHARS`] characters.
fn error_excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let parsed: Option<serde_json::Value> = serde_json::from_str(&text).ok();
    let from_json = parsed.as_ref().and_then(|v| {
        let error = v.get("error");
        let message = error
            .and_then(|e| e.get("message").or(Some(e)))
            .and_then(|m| m.as_str())
            .or_else(|| v.get("message").and_then(|m| m.as_str()))
            .or_else(|| v.get("detail").and_then(|m| m.as_str()))?;
        let label = error
            .and_then(|e| e.get("type").or_else(|| e.get("code")))
            .and_then(|t| t.as_str());
        Some(match label {
            Some(l) => format!("{l}: {message}"),
            None => message.to_owned(),
        })
    });
    safe_preview(from_json.as_deref().unwrap_or(text.trim()), EXCERPT_CHARS)
}

/// An error and its sources, joined: reqwest's top-level message alone ("error sending request")
/// hides the cause an operator needs ("Connection refused").
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
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
    out
}

/// What the provider asked us to wait, from the first header family present, in this order:
/// 1. `retry-after-ms` (milliseconds, OpenAI and Azure);
/// 2. `Retry-After` (delay-seconds, decimals tolerated, or an IMF-fixdate HTTP-date);
/// 3. rate-limit reset headers: OpenAI's `x-ratelimit-reset-{requests,tokens}` (Go-style
///    durations such as `1s`, `6m0s`, `20ms`) and Anthropic's
///    `anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-reset` (RFC 3339
///    timestamps). Of these, the limits whose `remaining` header says `0` count; when none says
///    so, all present count; the longest wait wins, since every exhausted limit must reset.
///
/// Dates in the past give zero. Unparseable values are ignored.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = header("retry-after-ms").and_then(parse_non_negative) {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    if let Some(value) = header("retry-after") {
        if let Some(secs) = parse_non_negative(value) {
            return Some(Duration::from_secs_f64(secs));
        }
        if let Some(at) = parse_http_date(value) {
            return Some(at.duration_since(now).unwrap_or(Duration::ZERO));
        }
    }
    let mut waits: Vec<(bool, Duration)> = Vec::new();
    for limit in ["requests", "tokens"] {
        if let Some(d) = header(&format!("x-ratelimit-reset-{limit}")).and_then(parse_go_duration) {
            let exhausted = header(&format!("x-ratelimit-remaining-{limit}")) == Some("0");
            waits.push((exhausted, d));
        }
    }
    for limit in ["requests", "tokens", "input-tokens", "output-tokens"] {
        if let Some(at) =
            header(&format!("anthropic-ratelimit-{limit}-reset")).and_then(parse_rfc3339)
        {
            let exhausted = header(&format!("anthropic-ratelimit-{limit}-remaining")) == Some("0");
            waits.push((exhausted, at.duration_since(now).unwrap_or(Duration::ZERO)));
        }
    }
    let any_exhausted = waits.iter().any(|(exhausted, _)| *exhausted);
    waits
        .into_iter()
        .filter(|(exhausted, _)| *exhausted || !any_exhausted)
        .map(|(_, d)| d)
        .max()
}

/// A finite, non-negative decimal number of seconds or milliseconds, within a day's worth of
/// range checks: absurd values are treated as unparseable rather than overflowing `Duration`.
fn parse_non_negative(text: &str) -> Option<f64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    let v: f64 = text.parse().ok()?;
    (v.is_finite() && v < 1e12).then_some(v)
}

/// A Go `time.Duration` string as OpenAI sends it: `1s`, `6m0s`, `20ms`, `1h2m3.5s`, `250us`.
pub fn parse_go_duration(text: &str) -> Option<Duration> {
    let mut rest = text;
    let mut total = 0.0_f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..number_len].parse().ok()?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds_per_unit = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" | "μs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * seconds_per_unit;
    }
    (total.is_finite() && total < 1e12).then(|| Duration::from_secs_f64(total))
}

/// An IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the only HTTP-date form senders may
/// generate (RFC 9110 §5.6.7); the obsolete forms are not accepted.
pub fn parse_http_date(text: &str) -> Option<SystemTime> {
    let (_weekday, rest) = text.split_once(", ")?;
    let mut parts = rest.split(' ');
    let day: u32 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    let (h, m, s) = parse_hms(parts.next()?)?;
    if parts.next()? != "GMT" || parts.next().is_some() {
        return None;
    }
    unix_time(year, month, day, h, m, s, 0.0, 0)
}

/// An RFC 3339 timestamp (`2024-06-01T12:00:30Z`, `…30.5+02:00`).
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let (date, time) = text.split_once(['T', 't', ' '])?;
    let mut ymd = date.split('-');
    let year: i64 = ymd.next()?.parse().ok()?;
    let month: u32 = ymd.next()?.parse().ok()?;
    let day: u32 = ymd.next()?.parse().ok()?;
    if ymd.next().is_some() {
        return None;
    }
    let zone_at = time.find(['Z', 'z', '+', '-'])?;
    let (clock, zone) = time.split_at(zone_at);
    let (hms, fraction) = match clock.split_once('.') {
        Some((hms, frac)) if !frac.is_empty() && frac.bytes().all(|b| b.is_ascii_digit()) => {
            (hms, format!("0.{frac}").parse().ok()?)
        }
        Some(_) => return None,
        None => (clock, 0.0),
    };
    let (h, m, s) = parse_hms(hms)?;
    let offset_secs = match zone {
        "Z" | "z" => 0,
        _ => {
            let sign = if zone.starts_with('-') { -1 } else { 1 };
            let (oh, om) = zone[1..].split_once(':')?;
            let (oh, om): (i64, i64) = (oh.parse().ok()?, om.parse().ok()?);
            if oh > 23 || om > 59 {
                return None;
            }
            sign * (oh * 3600 + om * 60)
        }
    };
    unix_time(year, month, day, h, m, s, fraction, offset_secs)
}

fn parse_hms(text: &str) -> Option<(u32, u32, u32)> {
    let mut hms = text.split(':');
    let h: u32 = hms.next()?.parse().ok()?;
    let m: u32 = hms.next()?.parse().ok()?;
    let s: u32 = hms.next()?.parse().ok()?;
    (hms.next().is_none() && h < 24 && m < 60 && s <= 60).then_some((h, m, s))
}

/// Civil UTC time (minus a zone offset) to `SystemTime`; `None` before 1970 or for invalid dates.
#[allow(clippy::too_many_arguments)]
fn unix_time(
    year: i64,
    month: u32,
    day: u32,
    h: u32,
    m: u32,
    s: u32,
    fraction: f64,
    offset_secs: i64,
) -> Option<SystemTime> {
    if !(1..=12).contains(&month) || day == 0 || day > 31 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + i64::from(h) * 3600 + i64::from(m) * 60 + i64::from(s) - offset_secs;
    let secs = u64::try_from(secs).ok()?;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs) + Duration::from_secs_f64(fraction))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((month + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn statuses_map_to_the_e4_kinds() {
        use FailureKind::*;
        let cases = [
            (429, Flavor::OpenAi, RateLimited),
            (529, Flavor::Anthropic, RateLimited),
            (529, Flavor::OpenAi, ProviderUnavailable),
            (500, Flavor::OpenAi, ProviderUnavailable),
            (503, Flavor::Anthropic, ProviderUnavailable),
            (401, Flavor::OpenAi, Auth),
            (403, Flavor::Anthropic, Auth),
            (402, Flavor::OpenAi, Auth),
            (400, Flavor::OpenAi, BadRequest),
            (404, Flavor::Anthropic, BadRequest),
            (413, Flavor::OpenAi, BadRequest),
            (422, Flavor::OpenAi, BadRequest),
            (301, Flavor::OpenAi, BadRequest),
            (408, Flavor::OpenAi, Timeout),
            (409, Flavor::OpenAi, ProviderUnavailable),
        ];
        for (status, flavor, kind) in cases {
            assert_eq!(kind_for_status(status, flavor), kind, "{status} {flavor:?}");
        }
    }

    #[test]
    fn retry_after_in_seconds_milliseconds_and_http_dates() {
        let now = at(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(
            retry_after(&headers(&[("retry-after", "2")]), now),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "1.5")]), now),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "Sun, 06 Nov 1994 08:50:07 GMT")]),
                now
            ),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after", "Sun, 06 Nov 1994 08:00:00 GMT")]),
                now
            ),
            Some(Duration::ZERO),
            "a date in the past means now"
        );
        assert_eq!(
            retry_after(
                &headers(&[("retry-after-ms", "250"), ("retry-after", "9")]),
                now
            ),
            Some(Duration::from_millis(250)),
            "milliseconds are more precise and win"
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
        assert_eq!(retry_after(&headers(&[("retry-after", "-3")]), now), None);
        assert_eq!(retry_after(&headers(&[]), now), None);
    }

    #[test]
    fn openai_reset_headers_prefer_the_exhausted_limit() {
        let now = at(0);
        let both = headers(&[
            ("x-ratelimit-reset-requests", "1s"),
            ("x-ratelimit-reset-tokens", "6m0s"),
        ]);
        assert_eq!(retry_after(&both, now), Some(Duration::from_secs(360)));
        let requests_exhausted = headers(&[
            ("x-ratelimit-reset-requests", "20ms"),
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-tokens", "6m0s"),
            ("x-ratelimit-remaining-tokens", "1200"),
        ]);
        assert_eq!(
            retry_after(&requests_exhausted, now),
            Some(Duration::from_millis(20))
        );
        let with_retry_after =
            headers(&[("x-ratelimit-reset-tokens", "6m0s"), ("retry-after", "3")]);
        assert_eq!(
            retry_after(&with_retry_after, now),
            Some(Duration::from_secs(3))
        );
    }

    #[test]
    fn anthropic_reset_headers_are_timestamps() {
        let now = parse_rfc3339("2025-03-01T12:00:00Z").unwrap();
        let h = headers(&[
            ("anthropic-ratelimit-requests-reset", "2025-03-01T12:00:05Z"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-tokens-reset", "2025-03-01T12:01:00Z"),
            ("anthropic-ratelimit-tokens-remaining", "5000"),
        ]);
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(5)));
        let past = headers(&[("anthropic-ratelimit-tokens-reset", "2025-03-01T11:00:00Z")]);
        assert_eq!(retry_after(&past, now), Some(Duration::ZERO));
    }

    #[test]
    fn go_durations() {
        let cases = [
            ("1s", Some(Duration::from_secs(1))),
            ("6m0s", Some(Duration::from_secs(360))),
            ("20ms", Some(Duration::from_millis(20))),
            ("1h2m3.5s", Some(Duration::from_millis(3_723_500))),
            ("250us", Some(Duration::from_micros(250))),
            ("0.5s", Some(Duration::from_millis(500))),
            ("", None),
            ("5", None),
            ("5x", None),
            ("s", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_go_duration(text), want, "{text:?}");
        }
    }

    #[test]
    fn timestamps() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(at(0)));
        assert_eq!(
            parse_rfc3339("2000-03-01T00:00:00Z"),
            Some(at(951_868_800)),
            "after a leap day in a century leap year"
        );
        assert_eq!(
            parse_rfc3339("2024-06-01T14:00:30+02:00"),
            parse_rfc3339("2024-06-01T12:00:30Z")
        );
        assert_eq!(
            parse_rfc3339("2024-06-01T12:00:30.250Z").unwrap(),
            parse_rfc3339("2024-06-01T12:00:30Z").unwrap() + Duration::from_millis(250)
        );
        assert_eq!(parse_rfc3339("2024-13-01T00:00:00Z"), None);
        assert_eq!(
            parse_rfc3339("2024-06-01T12:00:30"),
            None,
            "a zone is required"
        );
        assert_eq!(parse_rfc3339("1969-12-31T23:59:59Z"), None);
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(at(784_111_777))
        );
        assert_eq!(parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT"), None);
        assert_eq!(parse_http_date("Sun, 06 Nov 1994 08:49:37 PST"), None);
    }

    #[test]
    fn status_errors_quote_the_error_message_without_secrets() {
        let key = Secret::new("local-key-4242");
        let body = br#"{"error": {"message": "Incorrect API key provided: local-key-4242 (Bearer sk-proj-abcdefghijklmnopqrstuvwx)", "type": "invalid_request_error"}}"#;
        let e = status_error(
            "p",
            401,
            &HeaderMap::new(),
            body,
            Flavor::OpenAi,
            Some(&key),
        );
        assert_eq!(e.kind, FailureKind::Auth);
        assert_eq!(e.status, Some(401));
        assert!(
            e.message.starts_with(
                "provider `p`: HTTP 401 Unauthorized: invalid_request_error: Incorrect API key"
            ),
            "{}",
            e.message
        );
        assert!(!e.message.contains("local-key-4242"), "{}", e.message);
        assert!(!e.message.contains("abcdefghij"), "{}", e.message);

        let anthropic =
            br#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#;
        let h = headers(&[("retry-after", "7")]);
        let e = status_error("a", 529, &h, anthropic, Flavor::Anthropic, None);
        assert_eq!(e.kind, FailureKind::RateLimited);
        assert_eq!(e.retry_after, Some(Duration::from_secs(7)));
        assert_eq!(
            e.message,
            "provider `a`: HTTP 529 Overloaded: overloaded_error: Overloaded"
        );

        let html = "<html>".to_owned() + &"x".repeat(1000);
        let e = status_error(
            "p",
            502,
            &HeaderMap::new(),
            html.as_bytes(),
            Flavor::OpenAi,
            None,
        );
        assert!(e.message.chars().count() < 400, "{}", e.message);
        assert!(e.message.ends_with('…'));
    }

    #[test]
    fn short_keys_are_not_scrubbed_verbatim() {
        let key = Secret::new("abc");
        assert_eq!(scrub("abcdef", Some(&key)), "abcdef");
        let key = Secret::new("abcdef");
        assert_eq!(scrub("x abcdef y", Some(&key)), "x [REDACTED] y");
    }
}
