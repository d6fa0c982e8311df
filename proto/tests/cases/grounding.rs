//! Grounding cases: a snapshot's files and a stage's canonical value, checked by
//! [`grounding::check`] and written back by [`grounding::apply`].
//!
//! A case is `<name>.case` (JSON: `protocol`, optional `commit` and `changed_files`, `files` as
//! path → text, and the canonical `value` the stage parsed) plus `<name>.expected.json`: the
//! `diagnostics` a repair round would quote (or `null` when every location resolved), the `tally`,
//! and the `value` after grounding (corrections applied, unresolved locations demoted, notes
//! added). Compared as JSON values, so every key counts.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};
use verdict_proto::ProtocolId;
use verdict_proto::grounding::{self, MemoryTree, Scope};

pub(crate) const INPUT: &str = "case";
pub(crate) const COMPANIONS: &[&str] = &["expected.json"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    protocol: String,
    #[serde(default)]
    commit: Option<String>,
    #[serde(default)]
    changed_files: Option<Vec<String>>,
    files: BTreeMap<String, String>,
    value: Value,
}

pub(crate) fn check(input: &Path, bless: bool) -> Result<(), String> {
    let shown = input.display();
    let text = fs::read_to_string(input).map_err(|e| format!("{shown}: {e}"))?;
    let case: Case = serde_json::from_str(&text).map_err(|e| format!("{shown}: {e}"))?;
    let protocol: ProtocolId = case.protocol.parse().map_err(|e| format!("{shown}: {e}"))?;
    if !grounding::applies_to(protocol) {
        return Err(format!("{shown}: grounding does not apply to {protocol:?}"));
    }
    let tree = MemoryTree::new(case.files.iter().map(|(p, t)| (p.as_str(), t.as_str())));
    let scope = Scope {
        changed_files: case.changed_files.as_deref(),
        commit: case.commit.as_deref(),
    };
    let checks = grounding::check(&case.value, &tree, scope);
    let diagnostics = grounding::diagnostics(protocol, &checks);
    let mut value = case.value.clone();
    let tally = grounding::apply(&mut value, &checks);
    let actual = json!({
        "diagnostics": diagnostics,
        "tally": {"located": tally.located, "corrected": tally.corrected, "unlocated": tally.unlocated},
        "value": value,
    });
    let expected_path = input.with_extension("expected.json");
    if bless {
        let pretty = serde_json::to_string_pretty(&actual).map_err(|e| e.to_string())? + "\n";
        fs::write(&expected_path, pretty).map_err(|e| format!("{shown}: {e}"))?;
        return Ok(());
    }
    let expected: Value = match fs::read_to_string(&expected_path) {
        Ok(t) => {
            serde_json::from_str(&t).map_err(|e| format!("{}: {e}", expected_path.display()))?
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(format!(
                "{shown}: no {} (VERDICT_BLESS=1 writes it)",
                expected_path.display()
            ));
        }
        Err(e) => return Err(format!("{}: {e}", expected_path.display())),
    };
    if actual == expected {
        Ok(())
    } else {
        Err(format!(
            "{shown}: grounding differs from {}:\n{}",
            expected_path.display(),
            serde_json::to_string_pretty(&actual).unwrap_or_default()
        ))
    }
}
