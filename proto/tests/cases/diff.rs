//! Diff cases: unified diffs read by [`diff::parse`], the source of the diff safety zone (SPEC G2).
//!
//! A case is `<name>.diff` (the diff, byte for byte) plus
//! - `<name>.json`: the expected parse, in the order a reader needs it: `commentable` (the safety
//!   zone, [`Diff::commentable`]), `warnings`, then `files` exactly as parsed ([`diff::FileDiff`]:
//!   paths, status, binary flag, modes, similarity, hunks with their counts and line runs). Line
//!   ranges are inclusive `[start, end]` pairs. Compared as JSON values, so every key counts;
//! - optionally `<name>.queries.json`: questions to the safety zone with their expected answers, a
//!   list of `{"contains": [path, start, end], "answer": bool}`
//!   ([`CommentableLines::contains`]) and `{"lines": path, "answer": [[start, end], …] | null}`
//!   ([`CommentableLines::lines`]). Blessing rewrites the answers and keeps the questions.
//!
//! `real-git-*` cases are the output of the installed git on the repository `diff_git.rs` builds;
//! that test regenerates them under `VERDICT_BLESS=1` and checks the stored ones still match git.

use std::fs;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::ser::{Formatter, Serializer};
use verdict_proto::Diagnostic;
use verdict_proto::diff::{self, CommentableFile, CommentableLines, Diff, FileDiff};

pub(crate) const INPUT: &str = "diff";
pub(crate) const COMPANIONS: &[&str] = &["json", "queries.json"];

/// A case's expected parse; see the module documentation for the layout.
#[derive(Serialize)]
struct Expected<'a> {
    commentable: &'a [CommentableFile],
    warnings: &'a [Diagnostic],
    files: &'a [FileDiff],
}

/// One question to the safety zone and its answer.
#[derive(Serialize, Deserialize)]
#[serde(untagged, deny_unknown_fields)]
enum Query {
    Contains {
        contains: (String, u32, u32),
        answer: bool,
    },
    Lines {
        lines: String,
        answer: Option<Vec<(u32, u32)>>,
    },
}

impl Query {
    /// The same question with the answer the parse gives.
    fn answered(&self, zone: &CommentableLines) -> Query {
        match self {
            Query::Contains { contains, .. } => {
                let (path, start, end) = contains;
                Query::Contains {
                    contains: contains.clone(),
                    answer: zone.contains(path, *start, *end),
                }
            }
            Query::Lines { lines, .. } => Query::Lines {
                lines: lines.clone(),
                answer: zone.lines(lines).map(<[_]>::to_vec),
            },
        }
    }
}

pub(crate) fn check(input: &Path, bless: bool) -> Result<(), String> {
    let name = input.display().to_string();
    let text = fs::read_to_string(input).map_err(|e| format!("{name}: {e}"))?;
    let parsed: Diff = diff::parse(&text);
    let zone = parsed.commentable();
    let got = render(&Expected {
        commentable: &zone.files,
        warnings: &parsed.warnings,
        files: &parsed.files,
    });

    let json_path = input.with_extension("json");
    let queries_path = input.with_extension("queries.json");
    let queries: Option<Vec<Query>> = if queries_path.exists() {
        let queries =
            serde_json::from_str(&fs::read_to_string(&queries_path).unwrap()).map_err(|e| {
                format!(
                    "{}: {e}; expected a list of {{\"contains\": [path, start, end], \"answer\": \
                     bool}} and {{\"lines\": path, \"answer\": [[start, end], …] or null}}",
                    queries_path.display()
                )
            })?;
        Some(queries)
    } else {
        None
    };
    let answered: Option<Vec<Query>> =
        queries.map(|qs| qs.iter().map(|q| q.answered(&zone)).collect());

    if bless {
        fs::write(&json_path, &got).unwrap();
        if let Some(answered) = &answered {
            fs::write(&queries_path, render(answered)).unwrap();
        }
        return Ok(());
    }

    let mut problems = Vec::new();
    match fs::read_to_string(&json_path) {
        Err(e) => problems.push(format!(
            "{}: {e} (write it, or run with VERDICT_BLESS=1); got\n{got}",
            json_path.display()
        )),
        Ok(expected) => {
            let as_value = |s: &str| serde_json::from_str::<serde_json::Value>(s);
            let expected_value =
                as_value(&expected).map_err(|e| format!("{}: {e}", json_path.display()))?;
            if expected_value != as_value(&got).unwrap() {
                problems.push(format!(
                    "{name}: parse differs\n--- expected\n{expected}--- got\n{got}"
                ));
            }
        }
    }
    if let Some(answered) = answered {
        let expected = fs::read_to_string(&queries_path).unwrap();
        let got = render(&answered);
        let as_value = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
        if as_value(&expected) != as_value(&got) {
            problems.push(format!(
                "{}: answers differ\n--- expected\n{expected}--- got\n{got}",
                queries_path.display()
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n\n"))
    }
}

/// JSON laid out for reading line ranges: objects one key per line, arrays on one line
/// (`[[1, 5], [21, 22]]`), objects in arrays cuddled (`[{ … }, { … }]`).
fn render(value: &impl Serialize) -> String {
    let mut out = Vec::new();
    value
        .serialize(&mut Serializer::with_formatter(&mut out, Layout::default()))
        .unwrap();
    out.push(b'\n');
    String::from_utf8(out).unwrap()
}

#[derive(Default)]
struct Layout {
    /// How many objects are open: the indentation of their keys.
    depth: usize,
    /// The innermost open object has a key, so its `}` goes on a line of its own.
    has_value: bool,
}

impl Layout {
    fn new_line<W: ?Sized + io::Write>(&self, writer: &mut W) -> io::Result<()> {
        writer.write_all(b"\n")?;
        writer.write_all("  ".repeat(self.depth).as_bytes())
    }
}

impl Formatter for Layout {
    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if first {
            Ok(())
        } else {
            writer.write_all(b", ")
        }
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        writer.write_all(b"{")
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.depth -= 1;
        if self.has_value {
            self.new_line(writer)?;
        }
        writer.write_all(b"}")
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        if !first {
            writer.write_all(b",")?;
        }
        self.new_line(writer)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        writer.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, _writer: &mut W) -> io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}
