//! Property tests for the JSON contracts (P4) and `<output>` extraction (P5): no input makes a
//! parser panic or return an unlocated diagnostic, and every valid value, rendered the ways
//! models render it, parses back to itself (SPEC R2).

// Strategy helpers run only under the test runner; a failed `unwrap` there is a failed test.
#![allow(clippy::unwrap_used)]

use std::num::NonZeroU32;

use proptest::prelude::*;
use verdict_proto::contracts::{
    self, ChangeType, Confidence, FileSummary, Finding, ReviewerReport, Risk, Severity, Summary,
    Text, Triage, ValidatorReport, Verdict, VerdictKind,
};
use verdict_proto::output_tag::comments::{
    self, Comments, InlineComment, ThreadReply, TopLevelComment,
};
use verdict_proto::{ProtocolId, ValidateOptions, validate};

const PROTOCOLS: [ProtocolId; 5] = [
    ProtocolId::Triage,
    ProtocolId::Summary,
    ProtocolId::Reviewer,
    ProtocolId::Validator,
    ProtocolId::Comments,
];

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        // Integration tests have no lib.rs beside them to persist regressions next to.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Runs every JSON protocol on `response`; a panic fails the property, and so does a diagnostic
/// without a line inside the response or without a field.
fn holds_every_protocol(response: &str) -> Result<(), TestCaseError> {
    let last_line = u32::try_from(response.split('\n').count()).unwrap();
    for protocol in PROTOCOLS {
        if let Err(diagnostics) = validate(protocol, &ValidateOptions::default(), response) {
            prop_assert!(!diagnostics.is_empty());
            for d in &diagnostics {
                let line = d.line.unwrap_or(0);
                prop_assert!(
                    (1..=last_line).contains(&line) && d.field.is_some(),
                    "{protocol}: {d:?} in {response:?}"
                );
            }
        }
    }
    Ok(())
}

/// Text a model might write, including JSON and Markdown metacharacters.
fn text_with(alphabet: &'static str) -> impl Strategy<Value = Text> {
    proptest::string::string_regex(alphabet)
        .unwrap()
        .prop_filter_map("blank", Text::new)
}

fn text() -> impl Strategy<Value = Text> {
    text_with("[a-zA-Z0-9 .,:;!?'\"\\\\/{}\\[\\]`<>#*_\\-\n\té中文]{1,40}")
}

/// Texts for P5 bodies: no `<`, since a body cannot quote the block's own tags (the contract
/// says so; a model that must can write `\u003c`).
fn body_text() -> impl Strategy<Value = Text> {
    text_with("[a-zA-Z0-9 .,:;!?'\"\\\\/{}\\[\\]`#*_\\-\n\té中文]{1,40}")
}

fn path() -> impl Strategy<Value = Text> {
    text_with("[a-z]{1,8}(/[a-z_]{1,8}){0,3}\\.(rs|ts|md)")
}

fn line() -> impl Strategy<Value = NonZeroU32> {
    (1u32..100_000).prop_map(|n| NonZeroU32::new(n).unwrap())
}

fn severity() -> impl Strategy<Value = Severity> {
    proptest::sample::select(Severity::ALL)
}

fn triage() -> impl Strategy<Value = Triage> {
    (any::<bool>(), text()).prop_map(|(review, reason)| Triage { review, reason })
}

fn summary() -> impl Strategy<Value = Summary> {
    (
        text(),
        proptest::sample::select(ChangeType::ALL),
        proptest::sample::select(Risk::ALL),
        proptest::collection::btree_map(path(), text(), 0..5),
        proptest::collection::vec(text(), 0..4),
    )
        .prop_map(|(summary, change_type, risk, files, focus_areas)| Summary {
            summary,
            change_type,
            risk,
            files: files
                .into_iter()
                .map(|(path, summary)| FileSummary { path, summary })
                .collect(),
            focus_areas,
        })
}

fn finding() -> impl Strategy<Value = Finding> {
    let location = prop_oneof![
        Just((None, None, None, None)),
        (path(), line(), 0u32..50, text()).prop_map(|(file, start, span, quote)| {
            (
                Some(file),
                Some(start),
                Some(start.saturating_add(span)),
                Some(quote),
            )
        }),
    ];
    (
        severity(),
        location,
        text(),
        text(),
        proptest::option::of(text()),
        0u32..=1000,
    )
        .prop_map(
            |(severity, (file, start_line, end_line, quote), title, description, suggestion, c)| {
                Finding {
                    severity,
                    file,
                    start_line,
                    end_line,
                    quote,
                    title,
                    description,
                    suggestion,
                    confidence: Confidence::new(f64::from(c) / 1000.0).unwrap(),
                }
            },
        )
}

fn reviewer() -> impl Strategy<Value = ReviewerReport> {
    (
        proptest::collection::vec(finding(), 0..5),
        proptest::collection::vec(path(), 0..4),
    )
        .prop_map(|(findings, files_reviewed)| ReviewerReport {
            findings,
            files_reviewed,
        })
}

fn validator() -> impl Strategy<Value = ValidatorReport> {
    let verdict = (any::<bool>(), proptest::option::of(severity()), text());
    proptest::collection::vec(verdict, 0..6).prop_map(|verdicts| ValidatorReport {
        verdicts: verdicts
            .into_iter()
            .enumerate()
            .map(|(i, (confirmed, severity, reason))| Verdict {
                id: Text::new(format!("F{}", i + 1)).unwrap(),
                verdict: if confirmed {
                    VerdictKind::Confirmed
                } else {
                    VerdictKind::Rejected
                },
                severity: severity.filter(|_| confirmed),
                reason,
            })
            .collect(),
    })
}

fn comments_value() -> impl Strategy<Value = Comments> {
    (
        proptest::collection::vec((text_with("PRRC_[a-zA-Z0-9]{4,12}"), body_text()), 0..3),
        proptest::collection::vec((path(), line(), body_text()), 0..3),
        proptest::collection::vec(body_text(), 0..3),
    )
        .prop_map(|(replies, inline, top)| Comments {
            thread_replies: replies
                .into_iter()
                .map(|(comment_id, body)| ThreadReply { comment_id, body })
                .collect(),
            new_inline_comments: inline
                .into_iter()
                .map(|(path, line, body)| InlineComment { path, line, body })
                .collect(),
            top_level_comments: top
                .into_iter()
                .map(|body| TopLevelComment { body })
                .collect(),
        })
}

/// How a model may present one JSON object under P4.
#[derive(Debug, Clone)]
enum Presentation {
    Compact,
    Pretty,
    Fenced { tag: &'static str, crlf: bool },
}

fn presentation() -> impl Strategy<Value = (Presentation, String, String)> {
    let how = prop_oneof![
        Just(Presentation::Compact),
        Just(Presentation::Pretty),
        (
            proptest::sample::select(&["json", "JSON", "Json"][..]),
            any::<bool>()
        )
            .prop_map(|(tag, crlf)| Presentation::Fenced { tag, crlf }),
    ];
    (how, "[ \n\t\r]{0,4}", "[ \n\t\r]{0,4}")
}

fn present<T: serde::Serialize>(
    value: &T,
    (how, before, after): &(Presentation, String, String),
) -> String {
    let json = match how {
        Presentation::Compact => serde_json::to_string(value).unwrap(),
        Presentation::Pretty => serde_json::to_string_pretty(value).unwrap(),
        Presentation::Fenced { tag, crlf } => {
            let fenced = format!(
                "```{tag}\n{}\n```",
                serde_json::to_string_pretty(value).unwrap()
            );
            if *crlf {
                fenced.replace('\n', "\r\n")
            } else {
                fenced
            }
        }
    };
    format!("{before}{json}{after}")
}

/// Free-form work before an `<output>` block: prose, code, JSON, even a bare `<output>` mention
/// (allowed; only a complete second pair is an error).
fn prose() -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            "[a-zA-Z ,.]{0,60}",
            Just("{\"draft\": true}".to_owned()),
            Just("```rust\nfn main() {}\n```".to_owned()),
            Just("I will answer in an <output> block.".to_owned()),
        ],
        0..6,
    )
    .prop_map(|lines| lines.join("\n"))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_text_never_breaks_a_parser(response in any::<String>()) {
        holds_every_protocol(&response)?;
    }

    #[test]
    fn json_like_text_never_breaks_a_parser(
        response in "[{}\\[\\]\":,0-9a-z_ \n\r`<>/\\\\.eE+-]{0,120}"
    ) {
        holds_every_protocol(&response)?;
    }

    #[test]
    fn damaged_valid_responses_never_break_a_parser(
        value in reviewer(),
        shape in presentation(),
        prefix in prose(),
        stray_close in any::<bool>(),
        cuts in proptest::collection::vec((any::<proptest::sample::Index>(), "[{}\\[\\]\":,0-9 \n`<>]{0,3}"), 1..6),
    ) {
        let mut response = present(&value, &shape);
        if cuts.len() % 2 == 0 {
            let close = if stray_close { "</output> ends it.\n" } else { "" };
            response = format!("{prefix}\n{close}<output>\n{response}\n</output>\n");
        }
        for (at, insert) in cuts {
            let boundaries: Vec<usize> = (0..=response.len()).filter(|&i| response.is_char_boundary(i)).collect();
            let start = *at.get(&boundaries);
            let end = boundaries.iter().copied().find(|&b| b >= start + insert.len().min(3)).unwrap_or(start);
            response.replace_range(start..end, &insert);
        }
        holds_every_protocol(&response)?;
    }

    #[test]
    fn triage_round_trips(value in triage(), shape in presentation()) {
        let response = present(&value, &shape);
        prop_assert_eq!(contracts::triage::parse(&response), Ok(value), "{}", response);
    }

    #[test]
    fn summary_round_trips(value in summary(), shape in presentation()) {
        let response = present(&value, &shape);
        prop_assert_eq!(contracts::summary::parse(&response), Ok(value), "{}", response);
    }

    #[test]
    fn reviewer_round_trips(value in reviewer(), shape in presentation()) {
        let response = present(&value, &shape);
        prop_assert_eq!(contracts::reviewer::parse(&response), Ok(value), "{}", response);
    }

    #[test]
    fn validator_round_trips(value in validator(), shape in presentation()) {
        let response = present(&value, &shape);
        prop_assert_eq!(contracts::validator::parse(&response), Ok(value), "{}", response);
    }

    #[test]
    fn comments_round_trip_through_an_output_block(
        value in comments_value(),
        work in prose(),
        fence in proptest::sample::select(&["", "```json", "```JSON", "```"][..]),
        pretty in any::<bool>(),
        trailing in "[ \n\t]{0,4}",
    ) {
        let json = if pretty {
            serde_json::to_string_pretty(&value).unwrap()
        } else {
            serde_json::to_string(&value).unwrap()
        };
        let body = if fence.is_empty() { json } else { format!("{fence}\n{json}\n```") };
        let response = format!("{work}\n<output>\n{body}\n</output>{trailing}");
        prop_assert_eq!(comments::parse(&response), Ok(value), "{}", response);
    }
}
