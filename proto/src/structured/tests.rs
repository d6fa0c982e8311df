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
    let kind = |p, m| constraint(p, m, b, Scope::default()).map(|c| c.mode());
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
    let schema = |p, m| match constraint(
        p,
        m,
        b,
        Scope {
            lines: Some(&lines),
            finding_ids: &[],
        },
    ) {
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
    let [at_file, whole_change] = reviewer["properties"]["findings"]["items"]["anyOf"]
        .as_array()
        .expect("a finding at a file or about the whole change")
        .as_slice()
    else {
        panic!("{reviewer}");
    };
    assert_eq!(
        at_file["properties"]["file"]["enum"],
        serde_json::json!(["src/lib.rs", ".github/ci.yml", "docs/<a>.md"])
    );
    assert_eq!(at_file["properties"]["start_line"]["type"], "integer");
    for key in ["file", "start_line", "end_line", "quote"] {
        assert_eq!(
            whole_change["properties"][key],
            serde_json::json!({"type": "null"})
        );
    }
    assert_eq!(reviewer["properties"]["files_reviewed"]["maxItems"], 3);
}

/// One value a reduced schema admits, drawn at random: the keywords the reduced schemas use and
/// nothing else (an unknown keyword is ignored, so a schema that relied on one would show up as
/// an invalid sample).
fn sample_value(node: &Value, rng: &mut SplitMix64) -> Value {
    let pick = |rng: &mut SplitMix64, n: usize| rng.below(n as u64) as usize;
    if let Some(c) = node.get("const") {
        return c.clone();
    }
    if let Some(Value::Array(options)) = node.get("enum") {
        return options[pick(rng, options.len())].clone();
    }
    if let Some(Value::Array(options)) = node.get("anyOf") {
        return sample_value(&options[pick(rng, options.len())], rng);
    }
    let ty = match node.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => ts[pick(rng, ts.len())].as_str().unwrap_or("null"),
        _ => "null",
    };
    let bound = |key: &str, default: u64| node.get(key).and_then(Value::as_u64).unwrap_or(default);
    match ty {
        "object" => {
            let props = node.get("properties").and_then(Value::as_object);
            Value::Object(
                props
                    .into_iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), sample_value(v, rng)))
                    .collect(),
            )
        }
        "array" => {
            if let Some(Value::Array(prefix)) = node.get("prefixItems") {
                return Value::Array(prefix.iter().map(|p| sample_value(p, rng)).collect());
            }
            let (min, max) = (bound("minItems", 0), bound("maxItems", 3).min(3));
            let n = min + rng.below(max.saturating_sub(min) + 1);
            let item = node.get("items").cloned().unwrap_or(Value::Null);
            Value::Array((0..n).map(|_| sample_value(&item, rng)).collect())
        }
        "string" => {
            const WORDS: [&str; 6] = ["guard", "the", "index", "overflows", "here", "x"];
            let max = bound("maxLength", 40).clamp(1, 40) as usize;
            let mut s = String::new();
            for i in 0..1 + pick(rng, 5) {
                if i > 0 {
                    s.push(' ');
                }
                s.push_str(WORDS[pick(rng, WORDS.len())]);
            }
            s.truncate(max);
            Value::from(s.trim_end().to_owned())
        }
        "integer" => Value::from(bound("minimum", 0) + rng.below(50)),
        "number" => Value::from(rng.below(11) as f64 / 10.0),
        "boolean" => Value::Bool(rng.below(2) == 1),
        _ => Value::Null,
    }
}

/// What a sample may still get wrong: the rules no keyword of its dialect can state — a
/// reviewer's START <= END; a validator's unique ids and a summary's unique paths, except where
/// llama.cpp lists them as a tuple (the scope names them).
fn beyond_schemas(protocol: ProtocolId, tuple: bool, d: &crate::Diagnostics) -> bool {
    d.as_slice().iter().all(|d| match protocol {
        ProtocolId::Reviewer => d.message.contains("is before \"start_line\""),
        ProtocolId::Validator => !tuple && d.message.starts_with("duplicate id"),
        ProtocolId::Summary => !tuple && d.message.contains("list each changed file once"),
        _ => false,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn every_value_a_reduced_schema_admits_passes_the_contract(seed in any::<u64>()) {
        let lines = diff_lines();
        let ids = ["F1".to_owned(), "F2".to_owned()];
        let mut rng = SplitMix64::new(seed);
        for protocol in JSON {
            for (mode, dialect) in [
                (StructuredOutput::JsonSchema, SchemaDialect::OpenAiStrict),
                (StructuredOutput::Grammar, SchemaDialect::LlamaCpp),
                (StructuredOutput::Tool, SchemaDialect::Anthropic),
            ] {
                let narrowed = Scope { lines: Some(&lines), finding_ids: &ids };
                for scope in [Scope::default(), narrowed] {
                    let Some(OutputConstraint::JsonSchema { schema, .. }) =
                        constraint(protocol, mode, small(), scope)
                    else {
                        panic!("{protocol}: no schema under {mode}");
                    };
                    let text = sample_value(&schema, &mut rng).to_string();
                    if let Err(d) = crate::validate(protocol, &Default::default(), &text) {
                        let tuple = dialect == SchemaDialect::LlamaCpp && scope.lines.is_some();
                        prop_assert!(
                            beyond_schemas(protocol, tuple, &d),
                            "{protocol} {dialect:?}: {text}\n{d:?}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn a_validator_schema_admits_no_severity_on_a_rejection_and_names_only_the_given_ids() {
    let ids = ["F1".to_owned(), "F3".to_owned()];
    let scope = Scope {
        lines: None,
        finding_ids: &ids,
    };
    let Some(OutputConstraint::JsonSchema { schema, .. }) = constraint(
        ProtocolId::Validator,
        StructuredOutput::Grammar,
        Bounds::default(),
        scope,
    ) else {
        panic!("no schema");
    };
    let verdicts = &schema["properties"]["verdicts"];
    assert_eq!(
        (verdicts["minItems"].clone(), verdicts["maxItems"].clone()),
        (2.into(), 2.into())
    );
    let tuple = verdicts["prefixItems"].as_array().expect("a tuple");
    for (item, id) in tuple.iter().zip(&ids) {
        let [confirmed, rejected] = item["anyOf"].as_array().expect("two verdicts").as_slice()
        else {
            panic!("{item}");
        };
        assert_eq!(confirmed["properties"]["id"]["const"], id.as_str());
        assert_eq!(
            confirmed["properties"]["verdict"]["enum"],
            serde_json::json!(["confirmed"])
        );
        assert_eq!(
            rejected["properties"]["verdict"]["enum"],
            serde_json::json!(["rejected"])
        );
        assert_eq!(
            rejected["properties"]["severity"],
            serde_json::json!({"type": "null"})
        );
    }
    let Some(OutputConstraint::JsonSchema { schema, .. }) = constraint(
        ProtocolId::Validator,
        StructuredOutput::JsonSchema,
        Bounds::default(),
        scope,
    ) else {
        panic!("no schema");
    };
    let item = &schema["properties"]["verdicts"]["items"]["anyOf"][1];
    assert_eq!(
        item["properties"]["id"]["enum"],
        serde_json::json!(["F1", "F3"])
    );
}

#[test]
fn bounds_fitted_to_the_output_limit_leave_room_for_every_item_and_field() {
    let bounds = Bounds::default();
    let fitted = bounds.fitted_to_output(1024);
    assert_eq!(
        (fitted.max_items, fitted.max_length, fitted.max_lines),
        (4, 1024, 2)
    );
    assert_eq!(bounds.fitted_to_output(16_384), bounds);
    let small = bounds.fitted_to_output(256);
    assert_eq!(
        (small.max_items, small.max_length, small.max_lines),
        (1, 256, 1)
    );
    let none = bounds.fitted_to_output(0);
    assert_eq!(
        (none.max_items, none.max_length, none.max_lines),
        (1, 64, 1)
    );
}
