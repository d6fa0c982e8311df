//! Echo detection: an answer that repeats the contract's own placeholders or example values
//! ("natural-language reason", the example's paths and titles) follows the format and says
//! nothing. A tiny model held to a grammar or schema does exactly that, so such an answer is
//! invalid output (`echoed-contract`) and can never pass as a completed review.

use std::collections::HashSet;
use std::sync::OnceLock;

use serde_json::Value;

use crate::contracts::{JsonContract, ReviewerReport, Summary, Triage, ValidatorReport};
use crate::envelope::EnvelopeSpec;
use crate::{Diagnostic, DiagnosticCode, Diagnostics, Language, ProtocolId};

/// Every echo in `value` (the canonical value of a valid `response`), as diagnostics located in
/// `response`; `None` when the answer is its own.
pub fn check(protocol: ProtocolId, response: &str, value: &Value) -> Option<Diagnostics> {
    let copied = placeholders(protocol);
    if copied.is_empty() {
        return None;
    }
    let mut found = Vec::new();
    walk(value, &mut String::new(), &mut |path, text| {
        if copied.contains(&normalise(text)) {
            found.push((path.to_owned(), text.to_owned()));
        }
    });
    if found.is_empty() {
        return None;
    }
    let diagnostics = found
        .into_iter()
        .map(|(path, text)| {
            let shown = crate::redact::safe_preview(&text, 80);
            Diagnostic::new(
                DiagnosticCode::EchoedContract,
                format!(
                    "\"{shown}\" is copied from the output contract's placeholder or example; write what you found in this change instead"
                ),
            )
            .at_line_opt(line_of(response, &text))
            .in_field(path)
        })
        .collect();
    Some(Diagnostics::new(diagnostics))
}

/// The protocol's placeholders and example values in every language, normalised. Only texts
/// a real answer would not write word for word: enumeration values, `NONE`, one-word strings
/// and the example's paths are left out, so a legitimate `major` or `src/lib.rs` never counts.
fn placeholders(protocol: ProtocolId) -> &'static HashSet<String> {
    static SETS: OnceLock<Vec<(ProtocolId, HashSet<String>)>> = OnceLock::new();
    let sets = SETS.get_or_init(|| ProtocolId::ALL.iter().map(|&p| (p, collect(p))).collect());
    static EMPTY: OnceLock<HashSet<String>> = OnceLock::new();
    sets.iter()
        .find(|(p, _)| *p == protocol)
        .map(|(_, s)| s)
        .unwrap_or_else(|| EMPTY.get_or_init(HashSet::new))
}

fn collect(protocol: ProtocolId) -> HashSet<String> {
    let mut texts: Vec<String> = Vec::new();
    let mut sentences: Vec<String> = Vec::new();
    for language in [Language::En, Language::ZhCn] {
        match protocol {
            ProtocolId::Review => hints(&crate::review::SPEC, language, &mut texts),
            ProtocolId::IssueAnalysis => hints(&crate::issue_analysis::SPEC, language, &mut texts),
            ProtocolId::Scan => hints(&crate::scan::SPEC, language, &mut texts),
            ProtocolId::Triage => example::<Triage>(language, &mut sentences),
            ProtocolId::Summary => example::<Summary>(language, &mut sentences),
            ProtocolId::Reviewer => example::<ReviewerReport>(language, &mut sentences),
            ProtocolId::Validator => example::<ValidatorReport>(language, &mut sentences),
            ProtocolId::Comments => {}
        }
    }
    // An example's path or one-line name is what a real answer on a similar change could
    // write; its sentences are not.
    let sentences = sentences
        .iter()
        .map(|t| normalise(t))
        .filter(|t| sentence(t));
    texts
        .iter()
        .map(|t| normalise(t))
        .filter(|t| distinctive(t))
        .chain(sentences)
        .collect()
}

/// Three words or more, or (for scripts written without spaces) eight characters or more.
fn sentence(text: &str) -> bool {
    text.split_whitespace().count() >= 3 || (!text.is_ascii() && text.chars().count() >= 8)
}

/// A placeholder long enough that a real answer would not write it word for word.
fn distinctive(text: &str) -> bool {
    text != "none"
        && (text.contains(' ')
            || text.contains('/')
            || (text.chars().count() >= 4 && !text.is_ascii()))
}

/// The skeleton's hints of text and free-value fields: `repository/path|NONE` gives
/// `repository/path`. Hints of enumerations list real values and are skipped.
fn hints(spec: &EnvelopeSpec, language: Language, out: &mut Vec<String>) {
    use crate::envelope::{Domain, Kind};
    for field in spec.tags() {
        let free = match &field.kind {
            Kind::Text => true,
            Kind::Scalar(domain) => {
                matches!(domain, Domain::PathOrNone | Domain::Line | Domain::Word)
            }
            Kind::Record(_) | Kind::List(_) => false,
        };
        if free {
            let hint = language.pick(field.hint.0, field.hint.1);
            out.extend(hint.split('|').map(str::to_owned));
        }
    }
}

/// Every string of the contract's example (the contract text shows it).
fn example<T: JsonContract>(language: Language, out: &mut Vec<String>) {
    if let Ok(value) = serde_json::to_value(T::example(language)) {
        walk(&value, &mut String::new(), &mut |_, text| {
            out.push(text.to_owned())
        });
    }
}

/// Calls `visit` with the JSON path and text of every string in `value`.
fn walk(value: &Value, path: &mut String, visit: &mut dyn FnMut(&str, &str)) {
    match value {
        Value::String(s) => visit(if path.is_empty() { "$" } else { path }, s),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                walk(item, path, visit);
                path.truncate(len);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                walk(item, path, visit);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Lowercase, whitespace collapsed, without a final full stop: how a copy is recognised.
fn normalise(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    words.join(" ").trim_end_matches(['.', '。']).to_lowercase()
}

/// The first line of `response` holding the first line of `text`.
fn line_of(response: &str, text: &str) -> Option<u32> {
    let needle = text.lines().find(|l| !l.trim().is_empty())?.trim();
    response
        .lines()
        .position(|l| l.contains(needle))
        .map(|i| i as u32 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(reason: &str, title: &str, file: &str) -> String {
        format!(
            "<SAKURA_REVIEW>\n<VERSION>1</VERSION>\n<SCORE>8</SCORE>\n<DECISION>comment</DECISION>\n<DECISION_REASON>\n{reason}\n</DECISION_REASON>\n<SUMMARY>\nThe change renames a helper.\n</SUMMARY>\n<FINDINGS>\n<FINDING>\n<SEVERITY>minor</SEVERITY>\n<FILE>{file}</FILE>\n<START_LINE>3</START_LINE>\n<END_LINE>4</END_LINE>\n<TITLE>\n{title}\n</TITLE>\n<DESCRIPTION>\nThe new name hides that it allocates.\n</DESCRIPTION>\n<SUGGESTION>\nNONE\n</SUGGESTION>\n</FINDING>\n</FINDINGS>\n</SAKURA_REVIEW>\n"
        )
    }

    #[test]
    fn an_envelope_repeating_the_skeletons_placeholders_is_an_echo() {
        let text = review("Natural-language reason", "short title", "repository/path");
        let err = crate::validate(ProtocolId::Review, &Default::default(), &text).unwrap_err();
        let echoes: Vec<_> = err
            .as_slice()
            .iter()
            .map(|d| (d.code, d.field.clone().unwrap_or_default(), d.line))
            .collect();
        assert_eq!(
            echoes,
            vec![
                (
                    DiagnosticCode::EchoedContract,
                    "decision_reason".to_owned(),
                    Some(6)
                ),
                (
                    DiagnosticCode::EchoedContract,
                    "findings[0].file".to_owned(),
                    Some(14)
                ),
                (
                    DiagnosticCode::EchoedContract,
                    "findings[0].title".to_owned(),
                    Some(18)
                ),
            ]
        );
    }

    #[test]
    fn an_answer_of_its_own_is_not_an_echo_even_with_enumeration_values() {
        let text = review(
            "Only a rename; minor readability risk.",
            "Name hides allocation",
            "src/lib.rs",
        );
        assert!(crate::validate(ProtocolId::Review, &Default::default(), &text).is_ok());
    }

    #[test]
    fn a_json_answer_copying_the_contracts_example_is_an_echo() {
        let example = serde_json::to_string(&ReviewerReport::example(Language::En)).unwrap();
        let err = crate::validate(ProtocolId::Reviewer, &Default::default(), &example).unwrap_err();
        assert!(
            err.as_slice()
                .iter()
                .all(|d| d.code == DiagnosticCode::EchoedContract),
            "{err:?}"
        );
        assert!(
            err.as_slice()
                .iter()
                .any(|d| d.field.as_deref() == Some("findings[0].title"))
        );
        // The same structure with its own words passes.
        let own = example
            .replace(
                "Retries re-send non-idempotent deliveries",
                "Timeout retry duplicates charges",
            )
            .replace("src/webhook/sender.rs", "src/pay.rs");
        let own: Value = serde_json::from_str(&own).unwrap();
        let mut own = own;
        for finding in own["findings"].as_array_mut().unwrap() {
            for key in ["description", "quote", "suggestion", "title"] {
                if finding[key].is_string() {
                    finding[key] = Value::from(format!("own {key} text for this change"));
                }
            }
        }
        own["files_reviewed"] = serde_json::json!(["src/pay.rs"]);
        let text = own.to_string();
        assert!(
            crate::validate(ProtocolId::Reviewer, &Default::default(), &text).is_ok(),
            "{text}"
        );
    }
}
