//! Tests that span the contracts: checked-in schemas, walker coverage, both parse paths agreeing,
//! examples and contract texts.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::extract::{Frame, json_body};
use super::schema_check::unsupported_keywords;
use super::*;
use crate::output_tag::comments::Comments;

/// Every generated schema, by the file name it is checked in under.
fn generated() -> Vec<(&'static str, Value)> {
    vec![
        ("triage", Triage::schema().clone()),
        ("summary", Summary::schema().clone()),
        ("reviewer", ReviewerReport::schema().clone()),
        ("validator", ValidatorReport::schema().clone()),
        ("comments", Comments::schema().clone()),
    ]
}

fn proto_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

#[test]
fn checked_in_schemas_match_the_types() {
    let dir = proto_dir().join("schemas");
    let bless = std::env::var_os("VERDICT_BLESS").is_some();
    let mut stale = Vec::new();
    for (name, schema) in generated() {
        let path = dir.join(format!("{name}.schema.json"));
        let mut text = contract_text::schema_json(&schema);
        text.push('\n');
        if bless {
            fs::create_dir_all(&dir).unwrap();
            fs::write(&path, &text).unwrap();
            continue;
        }
        let on_disk = fs::read_to_string(&path).unwrap_or_default();
        if on_disk.replace("\r\n", "\n") != text {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "generated schemas differ from the checked-in files (rerun with VERDICT_BLESS=1 and review the diff): {stale:?}"
    );
}

#[test]
fn the_walker_enforces_every_keyword_the_schemas_use() {
    for (name, schema) in generated() {
        let unsupported = unsupported_keywords(&schema);
        assert!(unsupported.is_empty(), "{name}: {unsupported:#?}");
    }
}

#[test]
fn every_property_is_required() {
    // The contract says "include every property"; nullable ones are written as null.
    fn walk(schema: &Value, at: &str) {
        if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
            let required: Vec<&str> = schema["required"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            for name in properties.keys() {
                assert!(
                    required.contains(&name.as_str()),
                    "{at}: {name} is not required"
                );
            }
            assert_eq!(schema["additionalProperties"], Value::Bool(false), "{at}");
        }
        if let Some(defs) = schema.get("$defs").and_then(Value::as_object) {
            for (name, def) in defs {
                walk(def, &format!("{at}/$defs/{name}"));
            }
        }
    }
    for (name, schema) in generated() {
        walk(&schema, name);
    }
}

#[test]
fn examples_are_valid_in_both_languages() {
    for language in [Language::En, Language::ZhCn] {
        let text = serde_json::to_string(&Triage::example(language)).unwrap();
        assert_eq!(triage::parse(&text).unwrap(), Triage::example(language));
        let text = serde_json::to_string(&Summary::example(language)).unwrap();
        assert_eq!(summary::parse(&text).unwrap(), Summary::example(language));
        let text = serde_json::to_string(&ReviewerReport::example(language)).unwrap();
        assert_eq!(
            reviewer::parse(&text).unwrap(),
            ReviewerReport::example(language)
        );
        let text = serde_json::to_string(&ValidatorReport::example(language)).unwrap();
        assert_eq!(
            validator::parse(&text).unwrap(),
            ValidatorReport::example(language)
        );
    }
}

#[test]
fn the_fallback_is_a_valid_triage_decision() {
    let fallback = Triage::fallback();
    assert!(fallback.review);
    assert_eq!(fallback.reason.as_str(), TRIAGE_FALLBACK_REASON);
    let text = serde_json::to_string(&fallback).unwrap();
    assert_eq!(triage::parse(&text).unwrap(), fallback);
}

#[test]
fn contract_texts_show_schema_example_and_rules() {
    for protocol in [
        ProtocolId::Triage,
        ProtocolId::Summary,
        ProtocolId::Reviewer,
        ProtocolId::Validator,
    ] {
        for language in [Language::En, Language::ZhCn] {
            let text = contract_text(protocol, language);
            assert!(text.contains("\"$schema\""), "{protocol} {language}");
            assert!(text.contains("```json"), "{protocol} {language}");
            assert!(text.contains(protocol.as_str()), "{protocol} {language}");
        }
        assert!(contract_text(protocol, Language::ZhCn).contains("只回复一个"));
        assert!(contract_text(protocol, Language::En).contains("exactly one JSON object"));
    }
}

#[test]
fn the_reviewer_contract_asks_for_a_quote_and_says_when_it_is_null() {
    for (language, rule) in [
        (Language::En, "\"quote\" must be null"),
        (Language::ZhCn, "\"quote\" 必须为 null"),
    ] {
        let text = contract_text(ProtocolId::Reviewer, language);
        assert!(text.contains("\"quote\": {"), "schema: {text}");
        assert!(text.contains("copied verbatim from the file"), "{text}");
        assert!(text.contains("\"quote\": \"    loop {"), "example: {text}");
        assert!(text.contains(rule), "{language}: {text}");
    }
}

fn agree<T: JsonContract>(response: &str) -> Result<(), String> {
    let Ok(body) = json_body(response, 0, response.len(), Frame::Response) else {
        return Ok(()); // extraction is shared; both paths see the same refusal
    };
    let fast_ok = fast::<T>(body).is_ok();
    let slow = validate_value::<T>(response, body, &Tolerance::STRICT);
    if fast_ok == slow.is_ok() {
        Ok(())
    } else {
        Err(format!("fast path valid: {fast_ok}, slow path: {slow:?}"))
    }
}

#[test]
fn fast_and_slow_paths_agree_on_every_data_case() {
    let data = proto_dir().join("tests/data");
    let mut checked = 0;
    let mut failures = Vec::new();
    for (dir, check) in [
        ("triage", agree::<Triage> as fn(&str) -> Result<(), String>),
        ("summary", agree::<Summary>),
        ("reviewer", agree::<ReviewerReport>),
        ("validator", agree::<ValidatorReport>),
    ] {
        let Ok(entries) = fs::read_dir(data.join(dir)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.extension().and_then(|e| e.to_str()) != Some("txt") {
                continue;
            }
            let response = fs::read_to_string(&path).unwrap();
            // Each response against every contract: wrong-contract inputs exercise far more
            // failure shapes than the cases written for it.
            for other in [
                agree::<Triage> as fn(&str) -> Result<(), String>,
                agree::<Summary>,
                agree::<ReviewerReport>,
                agree::<ValidatorReport>,
            ] {
                if let Err(e) = other(&response) {
                    failures.push(format!("{}: {e}", path.display()));
                }
            }
            if let Err(e) = check(&response) {
                failures.push(format!("{}: {e}", path.display()));
            }
            checked += 1;
        }
    }
    assert!(checked > 0, "no data cases found");
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Every node of a JSON value, as paths of object keys / array indexes.
fn node_paths(value: &Value, at: &mut Vec<PathStep>, out: &mut Vec<Vec<PathStep>>) {
    out.push(at.clone());
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                at.push(PathStep::Key(k.clone()));
                node_paths(v, at, out);
                at.pop();
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                at.push(PathStep::Index(i));
                node_paths(v, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

#[derive(Debug, Clone)]
enum PathStep {
    Key(String),
    Index(usize),
}

fn node_mut<'a>(value: &'a mut Value, path: &[PathStep]) -> &'a mut Value {
    path.iter().fold(value, |v, step| match step {
        PathStep::Key(k) => &mut v[k.as_str()],
        PathStep::Index(i) => &mut v[*i],
    })
}

/// Values that break (or happen to satisfy) the contracts in interesting ways.
fn replacement_pool() -> Vec<Value> {
    serde_json::from_str(
        r#"[null, true, 0, 1, -1, 1.5, 0.25, 4294967296, "", " ", "x", "critical", "Major",
            "rejected", "confirmed", "F1", "low", "feature", "src/a.rs", [], {}, [{}], ["a"],
            {"severity": "minor"}, {"path": "src/a.rs", "summary": "s"}]"#,
    )
    .unwrap()
}

/// Applies one structural edit to `value`: replace a node, drop or add a property, duplicate or
/// clear an array.
fn mutate(value: &mut Value, node: proptest::sample::Index, op: u8, pick: proptest::sample::Index) {
    let mut paths = Vec::new();
    node_paths(value, &mut Vec::new(), &mut paths);
    let path = node.get(&paths).clone();
    let pool = replacement_pool();
    let target = node_mut(value, &path);
    match (op % 4, target) {
        (0, Value::Object(map)) if !map.is_empty() => {
            let key = pick.get(&map.keys().cloned().collect::<Vec<_>>()).clone();
            map.remove(&key);
        }
        (1, Value::Object(map)) => {
            let name = ["extra", "confidence", "line", "id", "reason", "file"][pick.index(6)];
            map.insert(name.to_owned(), pick.get(&pool).clone());
        }
        (2, Value::Array(items)) if !items.is_empty() => {
            let copy = pick.get(items).clone();
            items.push(copy);
        }
        (3, Value::Array(items)) => items.clear(),
        (_, target) => *target = pick.get(&pool).clone(),
    }
}

fn check_agreement<T: JsonContract>(
    edits: &[(proptest::sample::Index, u8, proptest::sample::Index)],
) -> Result<(), proptest::test_runner::TestCaseError> {
    let mut value = serde_json::to_value(T::example(Language::En)).unwrap();
    for (node, op, pick) in edits {
        mutate(&mut value, *node, *op, *pick);
    }
    let response = serde_json::to_string_pretty(&value).unwrap();
    proptest::prop_assert!(
        agree::<T>(&response).is_ok(),
        "{}: {response}",
        agree::<T>(&response).unwrap_err()
    );
    Ok(())
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config {
        cases: 256,
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    })]

    /// Structurally damaged examples: the typed fast path and the schema walker must still agree
    /// on valid versus invalid, for every contract.
    #[test]
    fn fast_and_slow_paths_agree_on_damaged_examples(
        edits in proptest::collection::vec(
            (proptest::prelude::any::<proptest::sample::Index>(), 0u8..8, proptest::prelude::any::<proptest::sample::Index>()),
            1..4,
        )
    ) {
        check_agreement::<Triage>(&edits)?;
        check_agreement::<Summary>(&edits)?;
        check_agreement::<ReviewerReport>(&edits)?;
        check_agreement::<ValidatorReport>(&edits)?;
    }
}
