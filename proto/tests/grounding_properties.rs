//! Properties of grounding over arbitrary trees and findings: it never panics, never drops a
//! finding, and never leaves a finding located where the snapshot has no such file or line.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use proptest::prelude::*;
use serde_json::{Value, json};
use verdict_proto::ProtocolId;
use verdict_proto::grounding::{self, LocationNote, LocationStatus, MemoryTree, Scope, Tree};

fn path() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec!["src", "lib", "a.py", "B.py", "x", "."]),
        1..4,
    )
    .prop_map(|segments| segments.join("/"))
}

fn finding() -> impl Strategy<Value = Value> {
    (
        prop::option::of(path()),
        1u32..30,
        0u32..5,
        prop::option::of("[a-z =/]{0,12}"),
    )
        .prop_map(|(file, start, len, quote)| match file {
            Some(file) => json!({"file": file, "start_line": start, "end_line": start + len,
                                  "quote": quote, "title": "t"}),
            None => json!({"file": null, "start_line": null, "end_line": null, "quote": null,
                           "title": "t"}),
        })
}

proptest! {
    #[test]
    fn grounded_findings_are_all_kept_and_located_only_where_the_code_is(
        files in prop::collection::btree_map(path(), "([a-z =/]{0,10}\n){0,20}", 0..6),
        findings in prop::collection::vec(finding(), 0..6),
        changed in prop::option::of(prop::collection::vec(path(), 0..3)),
    ) {
        let tree = MemoryTree::new(files.iter().map(|(p, t)| (p.as_str(), t.as_str())));
        let mut value = json!({"findings": findings.clone(), "files_reviewed": []});
        let scope = Scope { changed_files: changed.as_deref(), commit: Some("c0ffee") };
        let checks = grounding::check(&value, &tree, scope);
        let diagnostics = grounding::diagnostics(ProtocolId::Reviewer, &checks);
        let tally = grounding::apply(&mut value, &checks);
        let out = value["findings"].as_array().unwrap();
        prop_assert_eq!(out.len(), findings.len());
        let unresolved = checks
            .iter()
            .filter(|c| matches!(c.verdict, grounding::Verdict::Unresolved { .. }))
            .count();
        prop_assert_eq!(diagnostics.is_some(), unresolved > 0);
        prop_assert_eq!(tally.unlocated as usize, unresolved);
        for (before, after) in findings.iter().zip(out) {
            match after["file"].as_str() {
                Some(file) => {
                    let view = tree.file(file);
                    prop_assert!(view.is_some(), "located in a file that is not there: {after}");
                    let end = after["end_line"].as_u64().unwrap();
                    prop_assert!(end <= u64::from(view.unwrap().line_count));
                    prop_assert!(after["start_line"].as_u64().unwrap() <= end);
                }
                None if before["file"].is_string() => {
                    let note = LocationNote::of(after).unwrap();
                    prop_assert_eq!(note.status, LocationStatus::Unlocated);
                    let reported = note.reported.unwrap().file;
                    prop_assert_eq!(Some(reported.as_str()), before["file"].as_str());
                }
                None => prop_assert!(LocationNote::of(after).is_none()),
            }
        }
    }
}
