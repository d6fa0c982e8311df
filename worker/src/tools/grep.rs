//! `grep`: lines matching a regular expression, across the repository or part of it.

use std::path::Path;

use regex::bytes::{Regex, RegexBuilder};
use serde::Deserialize;
use serde_json::json;

use super::output::{Body, cut_chars, decode_line, human_bytes, looks_binary};
use super::path::{confine, display, quote};
use super::walk::{Entry, GlobFilter, Kind, walk};
use super::{ToolLimits, ToolOutput, Usage, lenient_bool};
use crate::provider::ToolDefinition;

/// Longer patterns are refused: no review needs them, and they cost compile time.
const MAX_PATTERN_CHARS: usize = 1000;

/// Compiled-regex memory bound (the regex crate's default is 10 MiB; patterns here are small).
const REGEX_SIZE_LIMIT: usize = 2 << 20;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GrepArgs {
    pattern: String,
    #[serde(default)]
    glob: Option<String>,
    #[serde(default)]
    path: Option<String>,
    #[serde(default, deserialize_with = "lenient_bool")]
    case_insensitive: Option<bool>,
}

impl Usage for GrepArgs {
    const USAGE: &'static str = r#"{"pattern": "<Rust regex>", "glob"?: "<e.g. *.rs or src/**/*.rs>", "path"?: "<directory>", "case_insensitive"?: true|false}"#;
}

pub(crate) fn definition(limits: &ToolLimits) -> ToolDefinition {
    ToolDefinition {
        name: "grep".to_owned(),
        description: format!(
            "Search the contents of the repository's files, line by line, with a regular \
             expression (Rust `regex` syntax: escape `( ) [ ] {{ }} . * + ? | ^ $ \\` with `\\`; \
             no look-around or backreferences; a match never spans lines). Output: one \
             `path:line:text` per matching line, sorted by path then line number; paths are \
             relative to the repository root. At most {matches} matching lines are shown (the \
             total is reported); binary files and files larger than {file_max} are skipped (the \
             output says how many); symbolic links are not followed. Narrow a search with `glob` \
             (without `/` it matches file names at any depth, e.g. `*.rs`; with `/` it matches \
             paths, e.g. `src/**/*.rs`; `*` stays within a directory, `**` crosses them) and \
             `path` (a directory or file to search instead of the whole repository).",
            matches = limits.grep_max_matches,
            file_max = human_bytes(limits.grep_max_file_bytes),
        ),
        parameters: json!({
            "type": "object",
            "properties": {
                "pattern": {
                    "type": "string",
                    "description": "A Rust regular expression, matched against each line, e.g. `fn\\s+parse_\\w+`."
                },
                "glob": {
                    "type": "string",
                    "description": "Only files matching this glob, e.g. `*.rs` or `src/**/*.{ts,tsx}`."
                },
                "path": {
                    "type": "string",
                    "description": "A directory (or file) to search, relative to the repository root. Default: the whole repository."
                },
                "case_insensitive": {
                    "type": "boolean",
                    "description": "Ignore case. Default false."
                }
            },
            "required": ["pattern"],
            "additionalProperties": false
        }),
    }
}

/// What the search went through, for the closing notes.
#[derive(Debug, Default)]
struct Tally {
    files: u64,
    matches: u64,
    shown: u64,
    skipped_binary: u64,
    skipped_large: u64,
    unreadable: u64,
    scanned_bytes: u64,
    scan_capped: bool,
}

pub(crate) fn run(root: &Path, limits: &ToolLimits, args: &GrepArgs) -> ToolOutput {
    if args.pattern.chars().count() > MAX_PATTERN_CHARS {
        return ToolOutput::error(format!(
            "the pattern is longer than {MAX_PATTERN_CHARS} characters; search for a shorter, distinctive part"
        ));
    }
    let regex = match RegexBuilder::new(&args.pattern)
        .case_insensitive(args.case_insensitive.unwrap_or(false))
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
    {
        Ok(regex) => regex,
        Err(e) => {
            return ToolOutput::error(format!(
                "invalid regex {}: {e}\npatterns use Rust regex syntax: escape special characters with `\\` (e.g. `foo\\(`), and look-around and backreferences are not supported",
                quote(&args.pattern)
            ));
        }
    };
    let glob = match args.glob.as_deref().map(GlobFilter::new).transpose() {
        Ok(glob) => glob,
        Err(message) => return ToolOutput::error(message),
    };
    let requested = args.path.as_deref().unwrap_or("");
    let start = match confine(root, requested) {
        Ok(start) => start,
        Err(e) => return ToolOutput::error(e.message(requested)),
    };

    let mut walk_capped = false;
    let files: Vec<(String, std::path::PathBuf, u64)> = if start.is_file() {
        // One file asked for by name: the glob does not apply.
        let bytes = std::fs::metadata(&start).map(|m| m.len()).unwrap_or(0);
        vec![(display(root, &start), start.clone(), bytes)]
    } else {
        let walked = walk(root, &start, limits.walk_max_entries);
        walk_capped = walked.capped;
        walked
            .entries
            .into_iter()
            .filter(|e| e.kind == Kind::File && glob.as_ref().is_none_or(|g| g.matches(e)))
            .map(
                |Entry {
                     shown, path, bytes, ..
                 }| (shown, path, bytes),
            )
            .collect()
    };

    let mut body = Body::new(limits.max_output_bytes);
    let mut tally = Tally::default();
    for (shown, path, bytes) in &files {
        if *bytes > limits.grep_max_file_bytes {
            tally.skipped_large += 1;
            continue;
        }
        if tally.scanned_bytes.saturating_add(*bytes) > limits.grep_max_scan_bytes {
            tally.scan_capped = true;
            break;
        }
        let Ok(content) = std::fs::read(path) else {
            tally.unreadable += 1;
            continue;
        };
        tally.scanned_bytes += content.len() as u64;
        if looks_binary(&content) {
            tally.skipped_binary += 1;
            continue;
        }
        tally.files += 1;
        search_file(&regex, shown, &content, limits, &mut body, &mut tally);
    }

    finish(args, requested, limits, body, &tally, walk_capped)
}

fn search_file(
    regex: &Regex,
    shown: &str,
    content: &[u8],
    limits: &ToolLimits,
    body: &mut Body,
    tally: &mut Tally,
) {
    if content.is_empty() {
        return;
    }
    // A final newline ends the last line; it does not start another one.
    let content = content.strip_suffix(b"\n").unwrap_or(content);
    for (index, line) in content.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if !regex.is_match(line) {
            continue;
        }
        tally.matches += 1;
        if tally.shown as usize >= limits.grep_max_matches || body.is_full() {
            continue;
        }
        let (text, _) = decode_line(line, false);
        let (text, cut) = cut_chars(&text, limits.max_line_chars);
        let marker = if cut { "… [line cut]" } else { "" };
        if body.push_line(&format!("{shown}:{}:{text}{marker}", index + 1)) {
            tally.shown += 1;
        }
    }
}

fn finish(
    args: &GrepArgs,
    requested: &str,
    limits: &ToolLimits,
    body: Body,
    tally: &Tally,
    walk_capped: bool,
) -> ToolOutput {
    let mut notes = Vec::new();
    let mut truncated = false;
    let place = if requested.is_empty() {
        "the repository".to_owned()
    } else {
        quote(requested)
    };
    let at_least = if tally.scan_capped || walk_capped {
        "at least "
    } else {
        ""
    };
    if tally.matches == 0 {
        notes.push(format!(
            "no matches for {} in {} file(s) under {place}{}",
            quote(&args.pattern),
            tally.files,
            args.glob
                .as_deref()
                .map(|g| format!(" matching {}", quote(g)))
                .unwrap_or_default()
        ));
    } else if tally.shown < tally.matches {
        truncated = true;
        let why = if body.is_full() {
            format!(
                "the output limit of {}",
                human_bytes(limits.max_output_bytes as u64)
            )
        } else {
            format!("at most {} per call", limits.grep_max_matches)
        };
        notes.push(format!(
            "[truncated: {} of {at_least}{} matches shown ({why}); narrow the pattern, the glob or the path]",
            tally.shown, tally.matches
        ));
    }
    if tally.scan_capped {
        truncated = true;
        notes.push(format!(
            "[truncated: the search stopped after reading {} in {} file(s); narrow the glob or the path]",
            human_bytes(tally.scanned_bytes),
            tally.files
        ));
    }
    if walk_capped {
        truncated = true;
        notes.push(format!(
            "[truncated: only the first {} entries of the tree were searched; narrow the path or the glob]",
            limits.walk_max_entries
        ));
    }
    let mut skipped = Vec::new();
    if tally.skipped_binary > 0 {
        skipped.push(format!("{} binary file(s)", tally.skipped_binary));
    }
    if tally.skipped_large > 0 {
        skipped.push(format!(
            "{} file(s) larger than {}",
            tally.skipped_large,
            human_bytes(limits.grep_max_file_bytes)
        ));
    }
    if tally.unreadable > 0 {
        skipped.push(format!("{} unreadable file(s)", tally.unreadable));
    }
    if !skipped.is_empty() {
        notes.push(format!("[note: skipped {}]", skipped.join(", ")));
    }
    ToolOutput::text(body.finish(&notes), truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(pattern: &str, glob: Option<&str>, path: Option<&str>) -> GrepArgs {
        GrepArgs {
            pattern: pattern.to_owned(),
            glob: glob.map(str::to_owned),
            path: path.map(str::to_owned),
            case_insensitive: None,
        }
    }

    fn tree() -> (tempfile::TempDir, std::path::PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("src/util")).unwrap();
        std::fs::create_dir_all(root.join("docs")).unwrap();
        std::fs::write(root.join("src/main.rs"), "fn main() {\n    todo()\n}\n").unwrap();
        std::fs::write(
            root.join("src/util/mod.rs"),
            "// TODO: later\nfn todo() {}\n",
        )
        .unwrap();
        std::fs::write(root.join("src.rs"), "fn todo_top() {}\n").unwrap();
        std::fs::write(root.join("docs/a.md"), "todo list\r\nTODO again\n").unwrap();
        std::fs::write(root.join("blob.bin"), b"todo\0\x01").unwrap();
        std::fs::write(root.join("latin1.txt"), b"todo caf\xe9\n").unwrap();
        let root = root.canonicalize().unwrap();
        (tmp, root)
    }

    #[test]
    fn matches_are_sorted_by_path_then_line() {
        let (_tmp, root) = tree();
        let out = run(&root, &ToolLimits::default(), &args("todo", None, None));
        assert_eq!(
            out.content,
            "docs/a.md:1:todo list\n\
             latin1.txt:1:todo caf\u{fffd}\n\
             src.rs:1:fn todo_top() {}\n\
             src/main.rs:2:    todo()\n\
             src/util/mod.rs:2:fn todo() {}\n\
             [note: skipped 1 binary file(s)]"
        );
        assert!(!out.is_error && !out.truncated);
    }

    #[test]
    fn glob_path_and_case() {
        let (_tmp, root) = tree();
        let limits = ToolLimits::default();
        let rs = run(&root, &limits, &args("todo", Some("*.rs"), None));
        assert_eq!(
            rs.content,
            "src.rs:1:fn todo_top() {}\nsrc/main.rs:2:    todo()\nsrc/util/mod.rs:2:fn todo() {}"
        );
        let under_src = run(&root, &limits, &args("todo", Some("src/**/*.rs"), None));
        assert_eq!(
            under_src.content.lines().count(),
            2,
            "{}",
            under_src.content
        );
        let in_util = run(&root, &limits, &args("todo", None, Some("src/util")));
        assert_eq!(in_util.content, "src/util/mod.rs:2:fn todo() {}");
        let one_file = run(&root, &limits, &args("TODO", None, Some("docs/a.md")));
        assert_eq!(one_file.content, "docs/a.md:2:TODO again");
        let mut insensitive = args("TODO", Some("*.md"), None);
        insensitive.case_insensitive = Some(true);
        let md = run(&root, &limits, &insensitive);
        assert_eq!(md.content, "docs/a.md:1:todo list\ndocs/a.md:2:TODO again");
    }

    #[test]
    fn no_match_says_where_it_looked() {
        let (_tmp, root) = tree();
        let out = run(
            &root,
            &ToolLimits::default(),
            &args("zebra", Some("*.rs"), None),
        );
        assert_eq!(
            out.content,
            "no matches for `zebra` in 3 file(s) under the repository matching `*.rs`"
        );
        assert!(!out.is_error);
    }

    #[test]
    fn the_match_limit_truncates_but_counts_everything() {
        let tmp = tempfile::tempdir().unwrap();
        let text: String = (0..30).map(|i| format!("hit {i}\n")).collect();
        std::fs::write(tmp.path().join("a.txt"), &text).unwrap();
        std::fs::write(tmp.path().join("b.txt"), &text).unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let limits = ToolLimits {
            grep_max_matches: 40,
            ..ToolLimits::default()
        };
        let out = run(&root, &limits, &args("hit", None, None));
        assert!(out.truncated);
        assert_eq!(out.content.lines().count(), 41);
        assert!(out.content.contains("b.txt:10:hit 9\n"));
        assert!(out.content.ends_with(
            "[truncated: 40 of 60 matches shown (at most 40 per call); narrow the pattern, the glob or the path]"
        ), "{}", out.content);
    }

    #[test]
    fn large_files_and_the_scan_budget() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("a.txt"), "x\n".repeat(100)).unwrap();
        std::fs::write(tmp.path().join("b.txt"), "x\n".repeat(100)).unwrap();
        std::fs::write(tmp.path().join("c.txt"), "x\n".repeat(1000)).unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let limits = ToolLimits {
            grep_max_file_bytes: 1000,
            grep_max_scan_bytes: 300,
            ..ToolLimits::default()
        };
        let out = run(&root, &limits, &args("x", None, None));
        assert!(out.truncated);
        assert_eq!(
            out.content
                .lines()
                .filter(|l| l.starts_with("a.txt:"))
                .count(),
            100
        );
        assert!(
            out.content
                .contains("[truncated: the search stopped after reading 200 B in 1 file(s)")
        );
        assert!(
            !out.content.contains("matches shown"),
            "all 100 matches found were shown"
        );

        let skipped = run(
            &root,
            &ToolLimits {
                grep_max_file_bytes: 1000,
                ..ToolLimits::default()
            },
            &args("x", None, None),
        );
        assert!(
            skipped
                .content
                .ends_with("[note: skipped 1 file(s) larger than 1000 B]"),
            "{}",
            skipped.content
        );
        assert!(!skipped.truncated);
    }

    #[test]
    fn empty_lines_are_lines() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("blank.txt"), "\n").unwrap();
        std::fs::write(tmp.path().join("empty.txt"), "").unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let out = run(&root, &ToolLimits::default(), &args("^$", None, None));
        assert_eq!(out.content, "blank.txt:1:");
    }

    #[test]
    fn bad_patterns_are_errors() {
        let (_tmp, root) = tree();
        let out = run(&root, &ToolLimits::default(), &args("foo(", None, None));
        assert!(out.is_error);
        assert!(
            out.content.starts_with("invalid regex `foo(`"),
            "{}",
            out.content
        );
        let long = run(
            &root,
            &ToolLimits::default(),
            &args(&"a".repeat(2000), None, None),
        );
        assert!(long.is_error);
        let bad_glob = run(
            &root,
            &ToolLimits::default(),
            &args("x", Some("/etc/*"), None),
        );
        assert!(bad_glob.is_error);
    }
}
