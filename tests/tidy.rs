//! Tidy checks: the repository's own cross-references hold, without building or running anything.
//!
//! Each check reads files under the repository root (the files `git ls-files --cached --others
//! --exclude-standard` lists, so a new file counts before it is committed; without git, a walk of
//! the tree that skips `target/` and `.git/`) and fails with every offender and how to fix it.
//!
//! 1. **Requirement ids resolve.** A citation is a letter of `PESGXQOKIRF` followed by one or two
//!    digits, as a whole word (`SPEC E7`, `(E2)`, `P1 rule 7`, `E4/E5`). A range of one letter,
//!    `X1–X5` or `X1-X5`, cites every id in it. An id written right after a quote or a backtick
//!    (`"F1"`, `` `F1` ``) is a value, not a citation: that is how the validator's finding ids are
//!    written. Citations are read in Rust files, TOML files, Markdown files, `ops/` and `.ci/`,
//!    except test data (`proto/tests/data/`), the sample repository (`ops/sample/`) and
//!    `docs/requirements.md` itself. Every cited id must be defined in `docs/requirements.md` by
//!    a line starting with `- **<ID>**`, and no id may be defined twice.
//! 2. **Every module file is on the map.** For each crate (the workspace members of the root
//!    `Cargo.toml`, and the root package as `src`), every `.rs` file under its `src/` must be
//!    named in the section of `ARCHITECTURE.md` headed ``### `<crate dir>/` `` (the root package's
//!    heading is ``### `src/` ``; a section ends at the next `##` or `###` heading). A section
//!    consists of bullets (a line starting with `- ` plus the indented lines that follow it) and
//!    paragraph text (every other line), and all its paragraph text together counts as one more
//!    bullet. With paths relative to the crate's `src/`:
//!    - a top-level file `f.rs` is named when the section contains `` `f.rs` ``;
//!    - `D/mod.rs` is named when some bullet contains `` `D/` `` (`D` is the full directory path,
//!      nested ones too: `` `broker/amqp/` ``);
//!    - any other `D/f.rs` is named when one bullet contains both `` `D/` `` and `` `f.rs` ``.
//! 3. **Every Rust file says why it exists.** The first line of every `.rs` file — library
//!    modules, binaries, tests, benches and fuzz targets alike — starts with `//!`.
//! 4. **Dependencies point one way.** `proto` depends on no verdict crate and no I/O crate;
//!    `backends` on `proto` only; `worker` and `scheduler` never on each other, not even for their
//!    tests; `lapin` and `redis` appear in `backends/Cargo.toml` alone.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The letters that begin a requirement id, one per group of the specification.
const ID_LETTERS: &str = "PESGXQOKIRF";
const REQUIREMENTS: &str = "docs/requirements.md";
const ARCHITECTURE: &str = "ARCHITECTURE.md";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file of the repository, as paths relative to the root with `/` separators, sorted.
fn repository_files(root: &Path) -> Vec<String> {
    let listed = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(root)
        .output()
        .ok()
        .filter(|output| output.status.success());
    let mut files: Vec<String> = match listed {
        Some(output) => String::from_utf8_lossy(&output.stdout)
            .split('\0')
            .filter(|path| !path.is_empty())
            // A file deleted but not yet staged is still listed as cached.
            .filter(|path| root.join(path).is_file())
            .map(str::to_owned)
            .collect(),
        None => {
            let mut found = Vec::new();
            walk(root, root, &mut found);
            found
        }
    };
    files.sort();
    files.dedup();
    files
}

fn walk(root: &Path, dir: &Path, found: &mut Vec<String>) {
    for entry in fs::read_dir(dir).unwrap().map(Result::unwrap) {
        let path = entry.path();
        let name = entry.file_name();
        if entry.file_type().unwrap().is_dir() {
            if name != "target" && name != ".git" {
                walk(root, &path, found);
            }
        } else {
            let relative = path.strip_prefix(root).unwrap();
            let parts: Vec<_> = relative.iter().map(|part| part.to_string_lossy()).collect();
            found.push(parts.join("/"));
        }
    }
}

fn read(root: &Path, path: &str) -> String {
    let bytes = fs::read(root.join(path))
        .unwrap_or_else(|error| panic!("cannot read {path} under the repository root: {error}"));
    String::from_utf8_lossy(&bytes).into_owned()
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Reads an id (`E7`) at the start of `text`: its letter, its number and its length in bytes.
/// The id must end the word: `E7a` and `P123` are not ids.
fn id_at(text: &str) -> Option<(char, u32, usize)> {
    let mut chars = text.chars();
    let letter = chars.next().filter(|c| ID_LETTERS.contains(*c))?;
    let digits: String = chars
        .clone()
        .take_while(char::is_ascii_digit)
        .take(3)
        .collect();
    if digits.is_empty() || digits.len() > 2 {
        return None;
    }
    let len = 1 + digits.len();
    if text[len..].chars().next().is_some_and(is_word_char) {
        return None;
    }
    Some((letter, digits.parse().ok()?, len))
}

/// Every requirement id `text` cites, in order, with the 1-based line of each; ranges expanded.
fn citations(text: &str) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let mut previous: Option<char> = None;
        let mut rest = line;
        while let Some(c) = rest.chars().next() {
            let starts_word = !previous.is_some_and(|p| is_word_char(p) || "\"'`".contains(p));
            if let Some((letter, first, len)) = id_at(rest).filter(|_| starts_word) {
                let after = &rest[len..];
                let range_end = ["-", "–"].iter().find_map(|dash| {
                    let (end_letter, last, end_len) = id_at(after.strip_prefix(dash)?)?;
                    (end_letter == letter && last >= first).then_some((last, dash.len() + end_len))
                });
                let (last, consumed) =
                    range_end.map_or((first, len), |(last, extra)| (last, len + extra));
                for number in first..=last {
                    found.push((format!("{letter}{number}"), index + 1));
                }
                previous = rest[..consumed].chars().last();
                rest = &rest[consumed..];
            } else {
                previous = Some(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    found
}

/// Whether citations in `path` are checked.
fn cites_requirements(path: &str) -> bool {
    let excluded = path == REQUIREMENTS
        || path.starts_with("proto/tests/data/")
        || path.starts_with("ops/sample/");
    let text_kind = [".rs", ".toml", ".md"]
        .iter()
        .any(|ext| path.ends_with(ext))
        || path.starts_with("ops/")
        || path.starts_with(".ci/");
    text_kind && !excluded
}

/// The ids `docs/requirements.md` defines (`- **E7** …`), each with the lines defining it.
fn definitions(text: &str) -> BTreeMap<String, Vec<usize>> {
    let mut defined: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (index, line) in text.lines().enumerate() {
        let Some(rest) = line.strip_prefix("- **") else {
            continue;
        };
        let Some((id, _)) = rest.split_once("**") else {
            continue;
        };
        if id_at(id).is_some_and(|(_, _, len)| len == id.len()) {
            defined.entry(id.to_owned()).or_default().push(index + 1);
        }
    }
    defined
}

#[test]
fn cited_requirement_ids_are_defined() {
    let root = root();
    let defined = definitions(&read(&root, REQUIREMENTS));
    let mut undefined: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut cited = BTreeSet::new();
    for path in repository_files(&root)
        .iter()
        .filter(|path| cites_requirements(path))
    {
        for (id, line) in citations(&read(&root, path)) {
            if !defined.contains_key(&id) {
                undefined
                    .entry(id.clone())
                    .or_default()
                    .push(format!("{path}:{line}"));
            }
            cited.insert(id);
        }
    }
    assert!(
        !cited.is_empty(),
        "no requirement citation found: is the file list empty?"
    );
    let mut problems = Vec::new();
    if !undefined.is_empty() {
        let places: Vec<String> = undefined
            .iter()
            .map(|(id, places)| format!("  {id}, cited at {}", places.join(", ")))
            .collect();
        problems.push(format!(
            "these requirement ids are cited but not defined in {REQUIREMENTS}:\n{}\n\
             Fix: add a bullet `- **<ID>** — <what the requirement demands>` to {REQUIREMENTS} \
             in its group, or correct the citation. A value that only looks like an id (a \
             finding id such as F1) is written in quotes or backticks, which this check skips.",
            places.join("\n")
        ));
    }
    let duplicates: Vec<String> = defined
        .iter()
        .filter(|(_, lines)| lines.len() > 1)
        .map(|(id, lines)| format!("  {id} on lines {lines:?}"))
        .collect();
    if !duplicates.is_empty() {
        problems.push(format!(
            "{REQUIREMENTS} defines these ids more than once:\n{}\nFix: keep one bullet per id.",
            duplicates.join("\n")
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// One crate's section of ARCHITECTURE.md, split as the naming rule reads it.
#[derive(Debug, Default)]
struct Section {
    /// The whole section, for top-level files.
    text: String,
    /// Each bullet with its continuation lines, and all paragraph text as one more entry.
    bullets: Vec<String>,
}

impl Section {
    fn parse(lines: &[&str]) -> Self {
        let mut bullets = Vec::new();
        let mut paragraph = String::new();
        let mut current: Option<String> = None;
        for line in lines {
            if line.starts_with("- ") {
                bullets.extend(current.replace((*line).to_owned()));
            } else if let Some(bullet) = current
                .as_mut()
                .filter(|_| line.starts_with(char::is_whitespace) && !line.trim().is_empty())
            {
                bullet.push('\n');
                bullet.push_str(line);
            } else {
                bullets.extend(current.take());
                paragraph.push_str(line);
                paragraph.push('\n');
            }
        }
        bullets.extend(current);
        bullets.push(paragraph);
        Self {
            text: lines.join("\n"),
            bullets,
        }
    }

    /// Whether `file`, relative to the crate's `src/`, is named (the rule in this file's docs).
    fn names(&self, file: &str) -> bool {
        match file.rsplit_once('/') {
            None => self.text.contains(&format!("`{file}`")),
            Some((dir, "mod.rs")) => self
                .bullets
                .iter()
                .any(|b| b.contains(&format!("`{dir}/`"))),
            Some((dir, name)) => self.bullets.iter().any(|bullet| {
                bullet.contains(&format!("`{dir}/`")) && bullet.contains(&format!("`{name}`"))
            }),
        }
    }
}

/// The crate sections of ARCHITECTURE.md by their directory (`proto`, …, `src`).
fn architecture_sections(text: &str) -> BTreeMap<String, Section> {
    let lines: Vec<&str> = text.lines().collect();
    let mut sections = BTreeMap::new();
    for (start, line) in lines.iter().enumerate() {
        let Some(dir) = line
            .strip_prefix("### `")
            .and_then(|rest| rest.split_once("/`"))
            .map(|(dir, _)| dir)
        else {
            continue;
        };
        let body = &lines[start + 1..];
        let end = body
            .iter()
            .position(|line| line.starts_with("## ") || line.starts_with("### "))
            .unwrap_or(body.len());
        sections.insert(dir.to_owned(), Section::parse(&body[..end]));
    }
    sections
}

/// The crate directories whose modules the map must name: the workspace members and `src`.
fn crate_dirs(root: &Path) -> Vec<String> {
    let manifest = read(root, "Cargo.toml");
    let members = manifest
        .lines()
        .find_map(|line| line.trim().strip_prefix("members"))
        .expect("the root Cargo.toml lists its workspace members on one `members = [...]` line");
    let mut dirs: Vec<String> = members
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    dirs.push("src".to_owned());
    dirs
}

#[test]
fn every_module_file_is_named_in_architecture() {
    let root = root();
    let sections = architecture_sections(&read(&root, ARCHITECTURE));
    let files = repository_files(&root);
    let mut missing = Vec::new();
    for dir in crate_dirs(&root) {
        let src = if dir == "src" {
            "src/".to_owned()
        } else {
            format!("{dir}/src/")
        };
        let modules: Vec<&str> = files
            .iter()
            .filter_map(|path| path.strip_prefix(src.as_str()))
            .filter(|file| file.ends_with(".rs"))
            .collect();
        let Some(section) = sections.get(&dir) else {
            missing.push(format!(
                "  no section headed ### `{dir}/` (add one for the crate, naming its {} module files)",
                modules.len()
            ));
            continue;
        };
        for file in modules {
            if !section.names(file) {
                let how = match file.rsplit_once('/') {
                    None => format!("mention `{file}` in the section"),
                    Some((d, "mod.rs")) => format!("give `{d}/` a bullet"),
                    Some((d, name)) => format!("name `{name}` in the bullet of `{d}/`"),
                };
                missing.push(format!("  {src}{file}: {how} of ### `{dir}/`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{ARCHITECTURE} does not name these module files:\n{}\n\
         Say in the crate's section what each one owns (and what it must not touch). A directory \
         is written as its full path below the crate's src/ (`broker/amqp/`, not `amqp/`), in \
         backticks, in the same bullet as its files.",
        missing.join("\n")
    );
}

#[test]
fn every_rust_file_starts_with_a_module_doc_line() {
    let root = root();
    let undocumented: Vec<String> = repository_files(&root)
        .into_iter()
        .filter(|path| path.ends_with(".rs"))
        .filter(|path| !read(&root, path).starts_with("//!"))
        .map(|path| format!("  {path}"))
        .collect();
    assert!(
        undocumented.is_empty(),
        "these Rust files do not start with a `//!` line:\n{}\n\
         Make the first line a `//!` comment saying why the module exists.",
        undocumented.join("\n")
    );
}

#[test]
fn citations_are_whole_words_with_ranges_expanded() {
    let ids = |text: &str| {
        citations(text)
            .into_iter()
            .map(|(id, _)| id)
            .collect::<Vec<_>>()
    };
    assert_eq!(ids("SPEC E7, (E2) and P1 rule 7"), ["E7", "E2", "P1"]);
    assert_eq!(ids("E4/E5"), ["E4", "E5"]);
    assert_eq!(ids("S1–S3 and Q1-Q2"), ["S1", "S2", "S3", "Q1", "Q2"]);
    assert_eq!(ids("pipeline (pure S6–S7)"), ["S6", "S7"]);
    // Ranges join one letter only; otherwise both ends are plain citations.
    assert_eq!(ids("P1–E3"), ["P1", "E3"]);
    // Not whole words, too many digits, lowercase, sections and values.
    assert!(ids("E7a xE7 P123 p1 SPEC 2a W3C sha256 0xF1 E_1").is_empty());
    assert!(ids(r#"ids "F1", `F2` and 'F3'"#).is_empty());
    assert_eq!(citations("first\nsecond cites R3"), [("R3".to_owned(), 2)]);
}

#[test]
fn definitions_are_bold_bullets_of_one_id() {
    let text = "intro with E1\n- **E1** — one\n- **E2**: two\n- **Note** x\n- **E1** again\n";
    let defined = definitions(text);
    assert_eq!(
        defined.keys().map(String::as_str).collect::<Vec<_>>(),
        ["E1", "E2"]
    );
    assert_eq!(defined["E1"], [2, 5]);
}

#[test]
fn the_naming_rule_needs_directory_and_file_in_one_bullet() {
    let section = Section::parse(&[
        "Paragraph naming `lib.rs` and `server.rs`.",
        "- `broker/` — `mod.rs`: the trait; `memory.rs`: in process.",
        "- `broker/amqp/` — `config.rs` (checked first),",
        "  `publish.rs` on a continuation line.",
        "- `store/` — traits.",
        "  ",
        "`events.rs` in a paragraph after a blank line.",
    ]);
    assert!(section.names("lib.rs") && section.names("server.rs"));
    assert!(section.names("broker/mod.rs") && section.names("broker/memory.rs"));
    assert!(section.names("broker/amqp/mod.rs") && section.names("broker/amqp/publish.rs"));
    assert!(section.names("store/mod.rs"));
    // The file is named, but not in the directory's bullet.
    assert!(!section.names("store/events.rs"));
    // `amqp/` alone is not the full path, and `config.rs` sits in another directory's bullet.
    assert!(!section.names("amqp/config.rs") && !section.names("broker/config.rs"));
    assert!(!section.names("main.rs") && !section.names("repo/mod.rs"));
}

/// The dependency names of each `[dependencies]`/`[dev-dependencies]`-like table of a manifest,
/// keyed by table name.
fn manifest_dependencies(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut tables: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines().map(str::trim) {
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = header.ends_with("dependencies").then(|| header.to_owned());
            continue;
        }
        let Some(table) = &current else { continue };
        let name = line.split(['=', '.', ' ']).next().unwrap_or("").trim();
        if !name.is_empty() && !name.starts_with('#') {
            tables
                .entry(table.clone())
                .or_default()
                .insert(name.to_owned());
        }
    }
    tables
}

#[test]
fn dependencies_point_one_way() {
    let root = root();
    let manifest = |dir: &str| manifest_dependencies(&read(&root, &format!("{dir}/Cargo.toml")));
    let all = |dir: &str| -> BTreeSet<String> { manifest(dir).into_values().flatten().collect() };
    let normal = |dir: &str| manifest(dir).remove("dependencies").unwrap_or_default();
    let mut problems = Vec::new();
    let forbid = |dir: &str, deps: &BTreeSet<String>, banned: &[&str], why: &str| {
        banned
            .iter()
            .filter(|b| deps.contains(**b))
            .map(|b| format!("{dir}/Cargo.toml depends on `{b}`: {why}"))
            .collect::<Vec<_>>()
    };
    let verdict = |deps: &BTreeSet<String>| -> BTreeSet<String> {
        deps.iter()
            .filter(|d| d.starts_with("verdict-"))
            .cloned()
            .collect()
    };
    problems.extend(forbid(
        "proto",
        &normal("proto"),
        &["tokio", "reqwest", "lapin", "redis"],
        "proto does no I/O",
    ));
    let proto_verdict = verdict(&normal("proto"));
    if !proto_verdict.is_empty() {
        problems.push(format!(
            "proto depends on {proto_verdict:?}: it must depend on no verdict crate"
        ));
    }
    // The contract is data shared by the server and its clients: proto and serde, nothing else.
    let api_verdict = verdict(&normal("api"));
    if api_verdict.iter().any(|d| d != "verdict-proto") {
        problems.push(format!(
            "api depends on {api_verdict:?}: the API contract may depend on verdict-proto only"
        ));
    }
    problems.extend(forbid(
        "api",
        &normal("api"),
        &["tokio", "reqwest", "axum", "lapin", "redis"],
        "the API contract is data: no I/O, no HTTP stack, no async runtime",
    ));
    // The task policy is pure: data in, decisions out.
    let policy_verdict = verdict(&normal("policy"));
    if policy_verdict
        .iter()
        .any(|d| d != "verdict-proto" && d != "verdict-api")
    {
        problems.push(format!(
            "policy depends on {policy_verdict:?}: the pure task policy may depend on verdict-proto and verdict-api only"
        ));
    }
    problems.extend(forbid(
        "policy",
        &normal("policy"),
        &["tokio", "tokio-util", "futures-util", "reqwest", "axum", "lapin", "redis"],
        "the task policy does no I/O and runs no async code; the scheduler carries out what it decides",
    ));
    problems.extend(forbid(
        "client",
        &all("client"),
        &[
            "verdict-scheduler",
            "verdict-backends",
            "verdict-worker",
            "axum",
        ],
        "the CLI's side of the API builds on the contract (verdict-api), never on the server",
    ));
    let backends_verdict = verdict(&normal("backends"));
    if backends_verdict.iter().any(|d| d != "verdict-proto") {
        problems.push(format!(
            "backends depends on {backends_verdict:?}: it may depend on verdict-proto only"
        ));
    }
    problems.extend(forbid(
        "worker",
        &all("worker"),
        &["verdict-scheduler"],
        "the worker and the scheduler never depend on each other; move what both need to backends or proto",
    ));
    problems.extend(forbid(
        "scheduler",
        &all("scheduler"),
        &["verdict-worker"],
        "the worker and the scheduler never depend on each other; move what both need to backends or proto",
    ));
    for dir in [
        "proto",
        "api",
        "policy",
        "client",
        "worker",
        "scheduler",
        "testkit",
        ".",
    ] {
        problems.extend(forbid(
            dir,
            &normal(dir),
            &["lapin", "redis"],
            "only backends knows AMQP and Redis",
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn manifest_dependencies_are_read_per_table() {
    let deps = manifest_dependencies(
        "[package]\nname = \"x\"\n\n[dependencies]\nverdict-proto.workspace = true\n# note\ntokio = { workspace = true }\n\n[dev-dependencies]\nproptest.workspace = true\n\n[lints]\nworkspace = true\n",
    );
    assert_eq!(
        deps["dependencies"],
        BTreeSet::from(["verdict-proto".to_owned(), "tokio".to_owned()])
    );
    assert_eq!(
        deps["dev-dependencies"],
        BTreeSet::from(["proptest".to_owned()])
    );
    assert_eq!(deps.len(), 2);
}
