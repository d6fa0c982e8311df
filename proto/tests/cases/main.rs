//! The one table-driven test for every parser: each input file under `data/<kind>/` is a case.
//!
//! - `data/<protocol>/` (one directory per [`ProtocolId`]): model responses, see [`protocol`].
//! - `data/diff/`: unified diffs, see [`diff`].
//! - `data/grounding/`: findings checked against a snapshot's files, see [`grounding`].
//!
//! Adding a case is adding files; a file that belongs to no case fails the test rather than being
//! silently skipped. `VERDICT_BLESS=1 cargo test -p verdict-proto --test cases` rewrites the
//! expectations from the current behaviour — review the diff before committing it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod diff;
mod grounding;
mod protocol;

use std::fs;
use std::path::{Path, PathBuf};

use verdict_proto::ProtocolId;

/// What the files of one directory under `data/` are cases of.
#[derive(Clone, Copy)]
enum Kind {
    Protocol(ProtocolId),
    Diff,
    Grounding,
}

impl Kind {
    fn of(dir: &Path) -> Kind {
        let name = dir.file_name().unwrap().to_str().unwrap();
        if name == "diff" {
            return Kind::Diff;
        }
        if name == "grounding" {
            return Kind::Grounding;
        }
        let protocol = name.parse().unwrap_or_else(|e| {
            panic!(
                "directory {}: {e} (or `diff` for diff cases, `grounding` for grounding cases)",
                dir.display()
            )
        });
        Kind::Protocol(protocol)
    }

    /// The extension of a case's input: one case per file with it.
    fn input(self) -> &'static str {
        match self {
            Kind::Protocol(_) => protocol::INPUT,
            Kind::Diff => diff::INPUT,
            Kind::Grounding => grounding::INPUT,
        }
    }

    /// The other files a case may have, by what replaces the input's extension.
    fn companions(self) -> &'static [&'static str] {
        match self {
            Kind::Protocol(_) => protocol::COMPANIONS,
            Kind::Diff => diff::COMPANIONS,
            Kind::Grounding => grounding::COMPANIONS,
        }
    }

    fn check(self, input: &Path, bless: bool) -> Result<(), String> {
        match self {
            Kind::Protocol(protocol) => protocol::check(protocol, input, bless),
            Kind::Diff => diff::check(input, bless),
            Kind::Grounding => grounding::check(input, bless),
        }
    }
}

#[test]
fn every_case_under_data_matches_its_expectation() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let bless = std::env::var_os("VERDICT_BLESS").is_some();
    let mut failures = Vec::new();
    let mut count = 0;
    for dir in sorted_entries(&root) {
        let kind = Kind::of(&dir);
        let files = sorted_entries(&dir);
        let inputs: Vec<&PathBuf> = files
            .iter()
            .filter(|f| f.extension().and_then(|e| e.to_str()) == Some(kind.input()))
            .collect();
        if inputs.is_empty() {
            failures.push(format!(
                "{}: no `.{}` case in the directory",
                dir.display(),
                kind.input()
            ));
        }
        for file in &files {
            if !inputs.contains(&file) && case_input(kind, file).is_none() {
                failures.push(format!(
                    "{}: belongs to no case (expected `<name>.{}` beside it; companions are {})",
                    file.display(),
                    kind.input(),
                    kind.companions()
                        .iter()
                        .map(|c| format!("`<name>.{c}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        for input in inputs {
            count += 1;
            if let Err(f) = kind.check(input, bless) {
                failures.push(f);
            }
        }
    }
    assert!(count > 0, "no cases found under {}", root.display());
    assert!(
        failures.is_empty(),
        "{} problems in {count} cases:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// The input of the case a companion file belongs to, if that input exists.
fn case_input(kind: Kind, file: &Path) -> Option<PathBuf> {
    let name = file.file_name()?.to_str()?;
    kind.companions().iter().find_map(|companion| {
        let stem = name.strip_suffix(companion)?.strip_suffix('.')?;
        let input = file.with_file_name(format!("{stem}.{}", kind.input()));
        input.is_file().then_some(input)
    })
}

fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}
