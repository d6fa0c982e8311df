//! Every envelope a grammar generates parses; every reduced schema is in its server's subset.

use proptest::prelude::*;
use serde_json::Value;

use super::*;
use crate::gbnf::SplitMix64;

const ENVELOPES: [ProtocolId; 3] = [
    ProtocolId::Review,
    ProtocolId::IssueAnalysis,
    ProtocolId::Scan,
];
const JSON: [ProtocolId; 4] = [
    ProtocolId::Triage,
    ProtocolId::Summary,
    ProtocolId::Reviewer,
    ProtocolId::Validator,
];

fn small() -> Bounds {
    Bounds {
        max_items: 3,
        max_length: 60,
        max_lines: 3,
    }
}

fn parses(protocol: ProtocolId, text: &str) -> Result<(), crate::Diagnostics> {
    match protocol {
        ProtocolId::Review => crate::review::parse(text).map(drop),
        ProtocolId::IssueAnalysis => crate::issue_analysis::parse(text, None).map(drop),
        ProtocolId::Scan => crate::scan::parse(text).map(drop),
        _ => Ok(()),
    }
}

fn sample(protocol: ProtocolId, seed: u64, lines: Option<&CommentableLines>) -> String {
    let spec = envelope_spec(protocol).expect("an envelope protocol");
    grammar::grammar(spec, envelope_bounds(small()), lines).sample(&mut SplitMix64::new(seed))
}

/// Without a diff, a grammar cannot keep START_LINE <= END_LINE (it cannot compare numbers):
/// the one diagnostic an unnarrowed sample may get.
fn only_line_order(d: &crate::Diagnostics) -> bool {
    d.as_slice()
        .iter()
        .all(|d| d.message.contains("is after END_LINE"))
}

fn diff_lines() -> CommentableLines {
    use crate::diff::CommentableFile;
    CommentableLines {
        files: vec![
            CommentableFile {
                path: "src/lib.rs".into(),
                lines: vec![(1, 4), (10, 12)],
            },
            CommentableFile {
                path: ".github/ci.yml".into(),
                lines: vec![(7, 7)],
            },
            // Not a path an envelope can carry: left out of the grammar.
            CommentableFile {
                path: "docs/<a>.md".into(),
                lines: vec![(1, 2)],
            },
        ],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn every_envelope_the_grammar_generates_parses(seed in any::<u64>()) {
        for protocol in ENVELOPES {
            let text = sample(protocol, seed, None);
            let parsed = parses(protocol, &text);
            prop_assert!(parsed.as_ref().err().is_none_or(only_line_order), "{protocol} seed {seed}:\n{text}\n{parsed:?}");
        }
    }

    #[test]
    fn a_grammar_narrowed_to_a_diff_writes_only_commentable_locations(seed in any::<u64>()) {
        let lines = diff_lines();
        for protocol in [ProtocolId::Review, ProtocolId::Scan] {
            let text = sample(protocol, seed, Some(&lines));
            prop_assert!(parses(protocol, &text).is_ok(), "{protocol} seed {seed}:\n{text}");
        }
        let text = sample(ProtocolId::Review, seed, Some(&lines));
        for finding in crate::review::parse(&text).map(|r| r.findings).unwrap_or_default() {
            if let (Some(file), Some(start), Some(end)) = (&finding.file, finding.start_line, finding.end_line) {
                prop_assert!(lines.contains(file, start, end), "{file}:{start}-{end}");
            }
        }
    }
}

#[test]
fn samples_reach_lists_texts_and_none_values() {
    // The property above is only as good as its samples: over many seeds they must include
    // findings, multi-line texts and NONE locations, or the test proves little.
    let (mut findings, mut multiline, mut none, mut ranges) = (false, false, false, false);
    for seed in 0..200 {
        let text = sample(ProtocolId::Review, seed, Some(&diff_lines()));
        let review = crate::review::parse(&text).expect("parses");
        findings |= !review.findings.is_empty();
        multiline |= review.summary.contains('\n');
        none |= review.findings.iter().any(|f| f.file.is_none());
        ranges |= review.findings.iter().any(|f| f.start_line < f.end_line);
    }
    assert!(
        findings && multiline && none && ranges,
        "{findings} {multiline} {none} {ranges}"
    );
}

#[test]
fn the_review_grammar_is_the_gbnf_llama_cpp_reads() {
    let gbnf = envelope_grammar(ProtocolId::Review, Bounds::default(), None).expect("grammar");
    assert!(
        gbnf.starts_with(
            "root ::= \"<SAKURA_REVIEW>\\n\" ((\"<VERSION>\" \"1\" \"</VERSION>\\n\")"
        ),
        "{gbnf}"
    );
    assert!(
        gbnf.contains("[a-zA-Z0-9_\\x2D]"),
        "a dash in a class is hex-escaped: {gbnf}"
    );
    for line in gbnf.lines() {
        let (name, body) = line.split_once(" ::= ").expect("one rule per line");
        assert!(
            name.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{name}"
        );
        assert!(!body.is_empty());
    }
    assert!(
        gbnf.contains("\"critical\" | \"major\" | \"minor\" | \"suggestion\""),
        "{gbnf}"
    );
    assert!(gbnf.contains("{0,20}"), "findings are bounded: {gbnf}");
}

fn walk<'a>(v: &'a Value, out: &mut Vec<&'a serde_json::Map<String, Value>>) {
    match v {
        Value::Object(m) => {
            out.push(m);
            m.values().for_each(|c| walk(c, out));
        }
        Value::Array(a) => a.iter().for_each(|c| walk(c, out)),
        _ => {}
    }
}

fn nodes(protocol: ProtocolId, dialect: SchemaDialect) -> Vec<serde_json::Map<String, Value>> {
    let schema = decoding_schema(protocol, dialect, Bounds::default()).expect("a JSON contract");
    let mut out = Vec::new();
    walk(&schema, &mut out);
    out.into_iter().cloned().collect()
}

#[test]
fn llama_cpp_schemas_have_no_keyword_the_server_refuses_and_every_list_is_bounded() {
    for protocol in JSON {
        for node in nodes(protocol, SchemaDialect::LlamaCpp) {
            for refused in ["pattern", "format", "$ref", "$schema", "$defs"] {
                assert!(
                    !node.contains_key(refused),
                    "{protocol}: {refused} in {node:?}"
                );
            }
            if has_type(&node, "number") {
                // The server enforces no range on numbers: a range becomes an enumeration.
                assert!(!node.contains_key("maximum"), "{protocol}: {node:?}");
            }
            if has_type(&node, "array") {
                assert_eq!(node.get("maxItems"), Some(&Value::from(20)), "{protocol}");
            }
            if has_type(&node, "string") && !node.contains_key("enum") {
                assert_eq!(
                    node.get("maxLength"),
                    Some(&Value::from(2000)),
                    "{protocol}"
                );
            }
        }
    }
}

#[test]
fn openai_strict_schemas_require_every_property_and_allow_no_other() {
    for protocol in JSON {
        let all = nodes(protocol, SchemaDialect::OpenAiStrict);
        assert!(
            all.iter().any(|n| n.contains_key("properties")),
            "{protocol}"
        );
        for node in all {
            for refused in ["format", "minLength", "maxLength", "$ref", "$schema"] {
                assert!(!node.contains_key(refused), "{protocol}: {refused}");
            }
            if let Some(Value::Object(props)) = node.get("properties") {
                assert_eq!(
                    node.get("additionalProperties"),
                    Some(&Value::Bool(false)),
                    "{protocol}"
                );
                let required: Vec<&str> = node
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                for key in props.keys() {
                    assert!(
                        required.contains(&key.as_str()),
                        "{protocol}: {key} not required"
                    );
                }
            }
        }
    }
}

#[test]
fn each_mode_constrains_what_it_can_express_and_nothing_else() {
    let b = Bounds::default();
    let kind = |p, m| constraint(p, m, b, None).map(|c| c.mode());
    assert_eq!(
        kind(ProtocolId::Reviewer, StructuredOutput::JsonSchema),
        Some("json_schema")
    );
    assert_eq!(
        kind(ProtocolId::Reviewer, StructuredOutput::Grammar),
        Some("json_schema")
    );
    assert_eq!(
        kind(ProtocolId::Reviewer, StructuredOutput::Tool),
        Some("json_schema")
    );
    assert_eq!(
        kind(ProtocolId::Review, StructuredOutput::Grammar),
        Some("grammar")
    );
    assert_eq!(kind(ProtocolId::Review, StructuredOutput::JsonSchema), None);
    assert_eq!(kind(ProtocolId::Review, StructuredOutput::Tool), None);
    assert_eq!(kind(ProtocolId::Comments, StructuredOutput::Grammar), None);
    for p in ProtocolId::ALL {
        assert_eq!(kind(p, StructuredOutput::Off), None);
        assert_eq!(kind(p, StructuredOutput::Auto), None);
    }
    assert_eq!(
        schema_name(ProtocolId::IssueAnalysis),
        "verdict_issue_analysis"
    );
}

#[test]
fn a_json_contract_narrowed_to_a_diff_names_only_its_files_and_llama_cpp_lists_each_once() {
    let lines = diff_lines();
    let b = Bounds::default();
    let schema = |p, m| match constraint(p, m, b, Some(&lines)) {
        Some(OutputConstraint::JsonSchema { schema, .. }) => schema,
        other => panic!("{other:?}"),
    };
    let llama = schema(ProtocolId::Summary, StructuredOutput::Grammar);
    let files = &llama["properties"]["files"];
    assert!(files.get("items").is_none(), "{files}");
    assert_eq!(
        (files["minItems"].clone(), files["maxItems"].clone()),
        (Value::from(3), Value::from(3))
    );
    let consts: Vec<&Value> = files["prefixItems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| &f["properties"]["path"]["const"])
        .collect();
    assert_eq!(consts, vec!["src/lib.rs", ".github/ci.yml", "docs/<a>.md"]);

    let strict = schema(ProtocolId::Summary, StructuredOutput::JsonSchema);
    assert_eq!(
        strict["properties"]["files"]["items"]["properties"]["path"]["enum"],
        serde_json::json!(["src/lib.rs", ".github/ci.yml", "docs/<a>.md"])
    );
    let reviewer = schema(ProtocolId::Reviewer, StructuredOutput::Tool);
    assert_eq!(
        reviewer["properties"]["findings"]["items"]["properties"]["file"]["enum"],
        serde_json::json!(["src/lib.rs", ".github/ci.yml", "docs/<a>.md", null])
    );
    assert_eq!(reviewer["properties"]["files_reviewed"]["maxItems"], 3);
}
