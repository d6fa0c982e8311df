//! Property tests for the envelope parsers (P1–P3): they never panic, every rejection is located,
//! and rendering a valid value then parsing it gives the same value back — also through CRLF, an
//! accepted outer fence and a short preamble.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use proptest::prelude::*;
use verdict_proto::issue_analysis::{
    self, AssigneeSuggestion, IssueAnalysis, LabelSuggestion, Priority,
};
use verdict_proto::review::{self, Decision, Finding, Review, Severity};
use verdict_proto::scan::{self, ScanCategory, ScanFinding, ScanReport};
use verdict_proto::{Diagnostics, ProtocolId, ValidateOptions, validate};

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// One line of free text that is never a tag line (P1 rule 5), may contain tag-like text
/// mid-line, and has no line terminator.
fn text_line() -> impl Strategy<Value = String> {
    "[ a-zA-Z0-9`<>/_.,:;()=\\-{}\\[\\]éß漢字]{0,40}".prop_filter("a tag line is structure", |l| {
        let t = l.trim();
        !(t.starts_with('<') && t.ends_with('>'))
    })
}

/// A non-empty text as a block field holds it: first and last lines non-blank, no `NONE`.
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(text_line(), 1..5)
        .prop_map(|lines| lines.join("\n"))
        .prop_filter("needs visible first and last lines", |t| {
            let lines: Vec<&str> = t.split('\n').collect();
            !lines[0].trim().is_empty()
                && !lines[lines.len() - 1].trim().is_empty()
                && t.trim() != "NONE"
        })
}

fn path() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_]{0,8}(/[a-z0-9_]{1,8}){0,3}\\.(rs|go|py|ts)"
}

fn location() -> impl Strategy<Value = (Option<String>, Option<u32>, Option<u32>)> {
    prop_oneof![
        Just((None, None, None)),
        (path(), 1u32..5000, 0u32..50).prop_map(|(p, s, len)| (Some(p), Some(s), Some(s + len))),
    ]
}

fn severity() -> impl Strategy<Value = Severity> {
    prop::sample::select(Severity::ALL.to_vec())
}

fn finding() -> impl Strategy<Value = Finding> {
    (
        severity(),
        location(),
        text(),
        text(),
        prop::option::of(text()),
    )
        .prop_map(
            |(severity, (file, start_line, end_line), title, description, suggestion)| Finding {
                severity,
                file,
                start_line,
                end_line,
                title,
                description,
                suggestion,
            },
        )
}

fn review() -> impl Strategy<Value = Review> {
    (
        1u8..=10,
        prop::sample::select(Decision::ALL.to_vec()),
        text(),
        text(),
        prop::collection::vec(finding(), 0..5),
    )
        .prop_map(
            |(model_score, decision, decision_reason, summary, findings)| {
                let score = findings
                    .iter()
                    .map(|f| f.severity.score_cap())
                    .fold(model_score, u8::min);
                Review {
                    version: 1,
                    score,
                    model_score,
                    score_capped: score < model_score,
                    decision,
                    decision_reason,
                    summary,
                    findings,
                }
            },
        )
}

fn single_line() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_/.-]{1,20}"
}

fn confidence() -> impl Strategy<Value = f64> {
    (0u32..=100).prop_map(|n| f64::from(n) / 100.0)
}

fn issue_analysis() -> impl Strategy<Value = IssueAnalysis> {
    (
        (
            single_line(),
            prop::sample::select(Priority::ALL.to_vec()),
            text(),
            text(),
        ),
        prop::collection::vec((single_line(), confidence(), text()), 0..4),
        prop::collection::vec((single_line(), confidence(), text()), 0..3),
        (
            prop::option::of(text()),
            prop::option::of(1u64..100_000),
            prop::option::of(text()),
        ),
    )
        .prop_map(
            |(
                (category, priority, summary, feasibility),
                labels,
                assignees,
                (milestone, dup, title),
            )| {
                IssueAnalysis {
                    version: 1,
                    category,
                    priority,
                    summary,
                    feasibility,
                    suggested_labels: labels
                        .into_iter()
                        .map(|(name, confidence, reason)| LabelSuggestion {
                            name,
                            confidence,
                            reason,
                        })
                        .collect(),
                    suggested_assignees: assignees
                        .into_iter()
                        .map(|(username, confidence, reason)| AssigneeSuggestion {
                            username,
                            confidence,
                            reason,
                        })
                        .collect(),
                    suggested_milestone: milestone,
                    duplicate_of: dup,
                    suggested_title: title,
                }
            },
        )
}

fn scan_report() -> impl Strategy<Value = ScanReport> {
    let finding = (
        severity(),
        prop::sample::select(ScanCategory::ALL.to_vec()),
        location(),
        text(),
        text(),
        prop::option::of(text()),
        0u8..=100,
    )
        .prop_map(
            |(
                severity,
                category,
                (file, start_line, end_line),
                title,
                description,
                suggestion,
                confidence,
            )| {
                ScanFinding {
                    severity,
                    category,
                    file,
                    start_line,
                    end_line,
                    title,
                    description,
                    suggestion,
                    confidence,
                }
            },
        );
    (1u8..=100, text(), prop::collection::vec(finding, 0..4)).prop_map(
        |(overall_score, summary, findings)| ScanReport {
            version: 1,
            overall_score,
            summary,
            findings,
        },
    )
}

/// What a model might wrap a valid envelope in, all of which P1 rule 6 tolerates.
fn wrapping() -> impl Strategy<Value = (String, String)> {
    prop_oneof![
        Just((String::new(), String::new())),
        Just(("```\n".to_owned(), "```\n".to_owned())),
        Just(("```xml\n".to_owned(), "```".to_owned())),
        Just(("```text\n\n".to_owned(), "\n```\n".to_owned())),
        Just(("```plaintext\n".to_owned(), "```\n\n".to_owned())),
        Just(("Here is the result.\n\n".to_owned(), "\nDone.\n".to_owned())),
        Just(("Result:\n```xml\n".to_owned(), "```\n".to_owned())),
    ]
}

fn assert_located(d: &Diagnostics) {
    for x in d {
        assert!(
            x.line.is_some() && x.field.is_some(),
            "unlocated diagnostic {x:?}"
        );
        assert!(!x.message.is_empty());
    }
}

/// Lines built from protocol tags and text, so random inputs reach deep parser states.
fn tag_soup() -> impl Strategy<Value = String> {
    let tags = [
        "SAKURA_REVIEW",
        "SAKURA_SCAN",
        "SAKURA_ISSUE_ANALYSIS",
        "VERSION",
        "SCORE",
        "DECISION",
        "DECISION_REASON",
        "SUMMARY",
        "FINDINGS",
        "FINDING",
        "SEVERITY",
        "FILE",
        "START_LINE",
        "END_LINE",
        "TITLE",
        "DESCRIPTION",
        "SUGGESTION",
        "CATEGORY",
        "CONFIDENCE",
        "LABEL",
        "SUGGESTED_LABELS",
        "NAME",
        "REASON",
        "OVERALL_SCORE",
        "NOTES",
    ];
    let line = prop_oneof![
        prop::sample::select(tags.to_vec()).prop_map(|t| format!("<{t}>")),
        prop::sample::select(tags.to_vec()).prop_map(|t| format!("</{t}>")),
        (prop::sample::select(tags.to_vec()), "[ a-z0-9<>NOE]{0,6}")
            .prop_map(|(t, v)| format!("<{t}>{v}</{t}>")),
        Just("```".to_owned()),
        Just(String::new()),
        "[ -~]{0,20}",
    ];
    prop::collection::vec(line, 0..60).prop_map(|l| l.join("\n"))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn envelope_parsers_never_panic_on_arbitrary_text(s in "\\PC*") {
        for p in [ProtocolId::Review, ProtocolId::IssueAnalysis, ProtocolId::Scan] {
            if let Err(d) = validate(p, &ValidateOptions::default(), &s) {
                assert_located(&d);
            }
        }
    }

    #[test]
    fn envelope_parsers_never_panic_on_tag_soup(s in tag_soup()) {
        for p in [ProtocolId::Review, ProtocolId::IssueAnalysis, ProtocolId::Scan] {
            if let Err(d) = validate(p, &ValidateOptions::default(), &s) {
                assert_located(&d);
            }
        }
    }

    #[test]
    fn review_round_trips(r in review(), (pre, post) in wrapping(), crlf in any::<bool>()) {
        let mut text = format!("{pre}{}{post}", r.to_envelope());
        if crlf {
            text = text.replace('\n', "\r\n");
        }
        prop_assert_eq!(review::parse(&text).map_err(|d| d.to_string()), Ok(r));
    }

    #[test]
    fn issue_analysis_round_trips(a in issue_analysis(), (pre, post) in wrapping()) {
        let text = format!("{pre}{}{post}", a.to_envelope());
        prop_assert_eq!(issue_analysis::parse(&text, None).map_err(|d| d.to_string()), Ok(a));
    }

    #[test]
    fn scan_round_trips(s in scan_report(), (pre, post) in wrapping()) {
        let text = format!("{pre}{}{post}", s.to_envelope());
        prop_assert_eq!(scan::parse(&text).map_err(|d| d.to_string()), Ok(s));
    }

    /// Dropping, duplicating or truncating lines of a valid envelope never panics, and whatever
    /// is rejected is rejected with located diagnostics.
    #[test]
    fn mutated_reviews_are_parsed_or_located(
        r in review(),
        drop in prop::collection::vec(any::<prop::sample::Index>(), 0..3),
        dup in prop::option::of(any::<prop::sample::Index>()),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let text = r.to_envelope();
        let mut lines: Vec<&str> = text.lines().collect();
        for i in drop {
            if !lines.is_empty() {
                lines.remove(i.index(lines.len()));
            }
        }
        if let Some(i) = dup
            && !lines.is_empty() {
                let at = i.index(lines.len());
                lines.insert(at, lines[at]);
            }
        let mut mutated = lines.join("\n");
        if let Some(i) = cut {
            let mut at = i.index(mutated.len() + 1);
            while !mutated.is_char_boundary(at) {
                at -= 1;
            }
            mutated.truncate(at);
        }
        if let Err(d) = review::parse(&mutated) {
            assert_located(&d);
        }
    }

    /// Two envelopes are always rejected, whatever surrounds them (P1 rule 6).
    #[test]
    fn two_envelopes_are_always_rejected(a in review(), b in review(), (pre, post) in wrapping()) {
        let text = format!("{pre}{}{post}\n{}", a.to_envelope(), b.to_envelope());
        prop_assert!(review::parse(&text).is_err());
    }
}
