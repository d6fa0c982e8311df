//! P4 JSON stage contracts (triage, summary, reviewer, validator): one JSON object per response,
//! held to a schema generated from the Rust types, with every violation located by line and path.
//!
//! # Layout
//! - [`extract`]: where the object is (plain or one ```` ```json ```` fence), never searching prose.
//! - `strict`, [`fields`]: serde types and adapters that accept exactly what the schemas accept.
//! - [`schema_check`]: the schema walker that lists every violation on the slow path.
//! - `locate`: the line of a JSON path in the response, for diagnostics.
//! - [`tolerance`]: aliases and defaults a contract may tolerate (used by P5).
//! - [`triage`], [`summary`], [`reviewer`], [`validator`]: the contracts themselves.
//! - [`contract_text`](mod@contract_text): the contract as the prompts show it.
//!
//! # Two paths, one answer
//! The fast path parses straight into the contract type (`deny_unknown_fields`, strict adapters)
//! and runs its cross-field rules: no intermediate `Value`, no positions. Only when it fails does
//! the slow path parse to a `Value`, walk the schema, run the same rules over the raw value, and
//! locate each violation, so the repair round gets the complete list. Both paths must agree on
//! valid versus invalid; a test runs both over every data case.

pub mod contract_text;
pub mod extract;
pub mod fields;
pub(crate) mod locate;
pub mod path;
pub mod reviewer;
pub mod schema_check;
pub(crate) mod strict;
pub mod summary;
pub mod tolerance;
pub mod triage;
pub mod validator;
pub mod violation;

use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::diagnostic::Collector;
use crate::{Diagnostic, DiagnosticCode, Diagnostics, Language, ProtocolId};

use extract::{Body, Frame};
use locate::{Index, Lines};
use path::JsonPath;
use tolerance::Tolerance;
use violation::{Anchor, Violation};

pub use fields::{Confidence, Severity, Text};
pub use reviewer::{Finding, ReviewerReport};
pub use summary::{ChangeType, FileSummary, Risk, Summary};
pub use triage::{TRIAGE_FALLBACK_REASON, Triage};
pub use validator::{ValidatorReport, Verdict, VerdictKind};

/// A JSON output contract: a Rust type whose generated JSON Schema is the contract, plus the
/// rules a schema cannot express.
pub trait JsonContract:
    std::fmt::Debug + Serialize + DeserializeOwned + JsonSchema + Sized
{
    /// The protocol this contract is.
    const PROTOCOL: ProtocolId;

    /// The generated JSON Schema (cached; see [`generate_schema`]).
    fn schema() -> &'static Value;

    /// Rules over several fields of a value that already satisfies the schema (fast path).
    fn check(&self, _out: &mut Vec<Violation>) {}

    /// The same rules over a raw value that may break the schema elsewhere (slow path), so one
    /// repair round sees every problem. Must skip whatever is ill-typed (the schema walker reports
    /// that) and must agree with [`JsonContract::check`] on values that satisfy the schema.
    fn check_value(value: &Value, out: &mut Vec<Violation>) {
        if let Ok(typed) = strict::from_value::<Self>(value.clone()) {
            typed.check(out);
        }
    }

    /// A short valid example, shown with the schema in the contract text.
    fn example(language: Language) -> Self;

    /// Contract rules beyond "match the schema", one sentence each, in `language`.
    fn rules(_language: Language) -> &'static [&'static str] {
        &[]
    }
}

/// The JSON Schema (draft 2020-12) of a contract type, as checked in under `proto/schemas/`.
pub fn generate_schema<T: JsonSchema>() -> Value {
    schemars::schema_for!(T).to_value()
}

/// Parses a P4 response: one JSON object, plain or in one ```` ```json ```` fence, that satisfies
/// `T`'s schema and rules. Every diagnostic on failure, each with line and field.
pub fn parse<T: JsonContract>(response: &str) -> Result<T, Diagnostics> {
    let body = extract::json_body(response, 0, response.len(), Frame::Response)
        .map_err(Diagnostics::one)?;
    parse_body(response, body)
}

/// The canonical JSON value of a P4 response (what `verdict validate` and the stage result carry).
pub fn validate_canonical(protocol: ProtocolId, response: &str) -> Result<Value, Diagnostics> {
    match protocol {
        ProtocolId::Triage => triage::parse(response).and_then(|v| crate::validate::canonical(&v)),
        ProtocolId::Summary => {
            summary::parse(response).and_then(|v| crate::validate::canonical(&v))
        }
        ProtocolId::Reviewer => {
            reviewer::parse(response).and_then(|v| crate::validate::canonical(&v))
        }
        ProtocolId::Validator => {
            validator::parse(response).and_then(|v| crate::validate::canonical(&v))
        }
        other => Err(Diagnostics::one(
            Diagnostic::new(
                DiagnosticCode::InvalidJson,
                format!("protocol \"{other}\" is not a JSON stage contract"),
            )
            .at_line(1)
            .in_field("$"),
        )),
    }
}

/// The contract text of a P4 protocol in `language` (empty for protocols that are not P4).
pub fn contract_text(protocol: ProtocolId, language: Language) -> String {
    match protocol {
        ProtocolId::Triage => contract_text::render::<Triage>(language),
        ProtocolId::Summary => contract_text::render::<Summary>(language),
        ProtocolId::Reviewer => contract_text::render::<ReviewerReport>(language),
        ProtocolId::Validator => contract_text::render::<ValidatorReport>(language),
        _ => String::new(),
    }
}

/// Fast path, then slow path when it fails: the typed value, or every diagnostic.
pub(crate) fn parse_body<T: JsonContract>(
    response: &str,
    body: Body<'_>,
) -> Result<T, Diagnostics> {
    let fast_failure = match fast::<T>(body) {
        Ok(value) => return Ok(value),
        Err(failure) => failure,
    };
    match validate_value::<T>(response, body, &Tolerance::STRICT) {
        Err(diagnostics) => Err(diagnostics),
        // The paths disagree (a test guards against this): trust the stricter one and still say
        // what it objected to, rather than accept or reject without a reason.
        Ok(_) => Err(fast_failure.into_diagnostics(response, body)),
    }
}

/// Why the fast path refused a body.
#[derive(Debug)]
pub(crate) enum FastFailure {
    Serde(serde_json::Error),
    Rules(Vec<Violation>),
}

impl FastFailure {
    fn into_diagnostics(self, response: &str, body: Body<'_>) -> Diagnostics {
        let lines = Lines::new(response);
        match self {
            FastFailure::Serde(e) => Diagnostics::one(json_error(&lines, body, &e)),
            FastFailure::Rules(violations) => {
                let index = Index::build(body.text);
                let mut collector = Collector::default();
                for v in violations {
                    collector.push(locate_violation(&lines, &index, body, &v.path, &v));
                }
                collector
                    .finish::<()>(None)
                    .err()
                    .unwrap_or_else(|| Diagnostics::new(Vec::new()))
            }
        }
    }
}

/// Typed parse plus the contract's rules; no positions, no `Value`.
pub(crate) fn fast<T: JsonContract>(body: Body<'_>) -> Result<T, FastFailure> {
    let value = strict::from_str::<T>(body.text).map_err(FastFailure::Serde)?;
    let mut violations = Vec::new();
    value.check(&mut violations);
    if violations.is_empty() {
        Ok(value)
    } else {
        Err(FastFailure::Rules(violations))
    }
}

/// The slow path: parse to `Value`, apply `tolerance`, walk the schema, run the rules, locate
/// every violation. Returns the typed value when nothing is wrong: contracts with a tolerance
/// (P5) parse through here directly, while P4 only gets here after the fast path refused.
pub(crate) fn validate_value<T: JsonContract>(
    response: &str,
    body: Body<'_>,
    tolerance: &Tolerance,
) -> Result<T, Diagnostics> {
    let lines = Lines::new(response);
    let mut values = serde_json::Deserializer::from_str(body.text).into_iter::<Value>();
    let value = match values.next() {
        None => {
            return Err(Diagnostics::one(
                Diagnostic::new(
                    DiagnosticCode::InvalidJson,
                    format!("{}; found nothing inside the fence", body.frame.rule()),
                )
                .at_line(lines.line(body.offset))
                .in_field("$"),
            ));
        }
        Some(Err(e)) => return Err(Diagnostics::one(json_error(&lines, body, &e))),
        Some(Ok(value)) => value,
    };
    let end = values.byte_offset();

    let mut collector = Collector::default();
    let rest = body.text.get(end..).unwrap_or("");
    let trailing = rest.trim_start();
    if !trailing.is_empty() {
        let at = body.offset + end + (rest.len() - trailing.len());
        collector.push(extract::text_after(&lines, at, trailing, body.frame));
    }
    if !value.is_object() {
        collector.push(
            Diagnostic::new(
                DiagnosticCode::NotAnObject,
                format!(
                    "{}; found {} instead",
                    body.frame.rule(),
                    extract::describe_value(&value)
                ),
            )
            .at_line(lines.line(body.offset))
            .in_field("$"),
        );
        return collector.finish::<T>(None);
    }

    let text = body.text.get(..end).unwrap_or(body.text);
    let index = Index::build(text);
    let mut located: Vec<(usize, Diagnostic)> = Vec::new();
    for (path, key_offset) in &index.duplicates {
        let name = path.last_key().unwrap_or_default();
        located.push((
            *key_offset,
            Diagnostic::new(
                DiagnosticCode::InvalidJson,
                format!(
                    "property \"{name}\" is given more than once in the same object; give each property once"
                ),
            )
            .at_line(lines.line(body.offset + key_offset))
            .in_field(path.to_string()),
        ));
    }

    let schema = T::schema();
    let normalised = tolerance::normalise(value, schema, tolerance);
    let mut violations: Vec<(JsonPath, Violation)> = normalised
        .violations
        .iter()
        .map(|v| (v.path.clone(), v.clone()))
        .collect();
    let mut canonical = schema_check::check(schema, &normalised.value, tolerance);
    T::check_value(&normalised.value, &mut canonical);
    for v in canonical {
        if !normalised.reported.contains(&v.path) {
            violations.push((normalised.written_path(&v.path), v));
        }
    }
    for (written, v) in &violations {
        let diagnostic = locate_violation(&lines, &index, body, written, v);
        let offset = anchor_offset(&index, written, v.anchor).unwrap_or(0);
        located.push((offset, diagnostic));
    }

    if located.is_empty() && collector.is_empty() {
        match strict::from_value::<T>(normalised.value) {
            Ok(typed) => return Ok(typed),
            // The walker accepted what serde refused: report serde's reason rather than nothing.
            Err(e) => located.push((
                0,
                Diagnostic::new(
                    DiagnosticCode::ConstraintViolation,
                    format!(
                        "the object does not match the contract: {}",
                        strip_position(&e)
                    ),
                )
                .at_line(lines.line(body.offset))
                .in_field("$"),
            )),
        }
    }
    located.sort_by_key(|(offset, _)| *offset);
    for (_, d) in located {
        collector.push(d);
    }
    collector.finish::<T>(None)
}

/// The byte offset (within the body) a violation points at; walks up to the nearest written
/// ancestor when the path itself is not in the text (a default the tolerance filled in).
fn anchor_offset(index: &Index, written: &JsonPath, anchor: Anchor) -> Option<usize> {
    let mut path = match anchor {
        Anchor::EnclosingObject => written.parent(),
        Anchor::Value | Anchor::Key => written.clone(),
    };
    loop {
        if let Some(spot) = index.spot(&path) {
            return Some(match anchor {
                Anchor::Key => spot.key.unwrap_or(spot.value),
                Anchor::Value | Anchor::EnclosingObject => spot.value,
            });
        }
        path.pop()?;
    }
}

fn locate_violation(
    lines: &Lines,
    index: &Index,
    body: Body<'_>,
    written: &JsonPath,
    v: &Violation,
) -> Diagnostic {
    let offset = anchor_offset(index, written, v.anchor).unwrap_or(0);
    Diagnostic::new(v.code, v.message.clone())
        .at_line(lines.line(body.offset + offset))
        .in_field(written.to_string())
}

/// A serde_json syntax error as a diagnostic at its line in the response.
pub(crate) fn json_error(lines: &Lines, body: Body<'_>, e: &serde_json::Error) -> Diagnostic {
    let first_line = lines.line(body.offset);
    let line = first_line.saturating_add(u32::try_from(e.line().max(1) - 1).unwrap_or(u32::MAX));
    let column = if e.line() <= 1 {
        lines.column(body.offset) + e.column().max(1) - 1
    } else {
        e.column().max(1)
    };
    let message = match e.classify() {
        serde_json::error::Category::Eof => format!(
            "the JSON object is incomplete: it ends at line {line} before every brace and bracket is closed, so the output looks truncated; emit the complete object"
        ),
        serde_json::error::Category::Syntax => format!(
            "invalid JSON at line {line}, column {column}: {}; write strict JSON: double-quoted keys and strings, no comments, no trailing commas",
            strip_position(e)
        ),
        _ => format!(
            "invalid JSON at line {line}, column {column}: {}",
            strip_position(e)
        ),
    };
    Diagnostic::new(DiagnosticCode::InvalidJson, message)
        .at_line(line)
        .in_field("$")
}

/// serde_json's message without its " at line L column C" suffix (positions are ours to report).
fn strip_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

/// Repeated strings, for "must be unique" rules: each later occurrence as
/// `(index of the first, index of this one, the string)`.
pub(crate) fn duplicates<'a>(
    items: impl IntoIterator<Item = (usize, &'a str)>,
) -> Vec<(usize, usize, &'a str)> {
    let mut first: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    let mut found = Vec::new();
    for (i, s) in items {
        match first.get(s) {
            Some(&earlier) => found.push((earlier, i, s)),
            None => {
                first.insert(s, i);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests;
