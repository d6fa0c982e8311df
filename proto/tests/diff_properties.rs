//! Properties of the diff parser: it never panics, whatever it is given, and on any valid diff a
//! small generator can render, its commentable lines are exactly the generator model's.
//!
//! The generator's content lines are drawn from characters that make them look like headers
//! (`--- a/x`, `+++`, `@@`, `\`), so a parser that reads lines by their look rather than by the
//! hunk counts fails here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use proptest::sample::select;
use verdict_proto::diff::{self, CommentableFile, CommentableLines, FileStatus};

#[derive(Debug, Clone)]
enum Op {
    Context(String),
    Add(String),
    Remove(String),
}

#[derive(Debug, Clone)]
struct HunkModel {
    /// Unchanged lines between the previous hunk (or the file start) and this one.
    gap: u32,
    ops: Vec<Op>,
    section: Option<String>,
}

#[derive(Debug, Clone)]
enum Change {
    Modified(Vec<HunkModel>),
    Added(Vec<String>),
    Deleted(Vec<String>),
    Binary { patch: bool },
    ModeOnly,
    Renamed(Vec<HunkModel>),
}

#[derive(Debug, Clone)]
struct FileModel {
    name: String,
    change: Change,
    /// `diff --git` headers rather than a plain `diff -u` pair (forced for git-only shapes).
    git: bool,
}

#[derive(Debug, Clone)]
struct Style {
    crlf: bool,
    /// Write empty context lines without their space, as some tools do.
    strip_empty_context: bool,
    /// Write counts of 1 as git does (`@@ -3 +3 @@`).
    omit_one_counts: bool,
    /// End each file's last line with `\ No newline at end of file`.
    no_newline_at_end: bool,
}

fn content() -> impl Strategy<Value = String> {
    let piece = select(vec![
        "",
        "-",
        "+",
        " ",
        "@",
        "@@ ",
        "\\",
        "-- a/x",
        "++ b/x",
        "diff --git a/x b/x",
        "a",
        "é",
        "\t",
        "\"",
    ]);
    prop::collection::vec(piece, 0..3).prop_map(|p| p.concat())
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        content().prop_map(Op::Context),
        content().prop_map(Op::Add),
        content().prop_map(Op::Remove),
    ]
}

fn hunks() -> impl Strategy<Value = Vec<HunkModel>> {
    let hunk = (
        0u32..6,
        prop::collection::vec(op(), 1..8),
        prop::option::of(select(vec!["fn main() {", "impl A", "", "@@ x"])),
    )
        .prop_map(|(gap, ops, section)| HunkModel {
            gap,
            ops,
            section: section.map(str::to_owned),
        });
    prop::collection::vec(hunk, 1..4)
}

fn change() -> impl Strategy<Value = Change> {
    let lines = || prop::collection::vec(content(), 0..5);
    prop_oneof![
        4 => hunks().prop_map(Change::Modified),
        1 => lines().prop_map(Change::Added),
        1 => lines().prop_map(Change::Deleted),
        1 => any::<bool>().prop_map(|patch| Change::Binary { patch }),
        1 => Just(Change::ModeOnly),
        1 => hunks().prop_map(Change::Renamed),
    ]
}

fn files() -> impl Strategy<Value = Vec<FileModel>> {
    let file = (
        change(),
        any::<bool>(),
        select(vec![
            "f{}.rs",
            "dir/sub file{}.txt",
            "q\"{}.txt",
            "caf\u{e9}{}.md",
        ]),
    );
    prop::collection::vec(file, 0..6).prop_map(|files| {
        files
            .into_iter()
            .enumerate()
            .map(|(i, (change, git, pattern))| {
                let git = git || matches!(change, Change::ModeOnly | Change::Renamed(_));
                FileModel {
                    name: pattern.replace("{}", &i.to_string()),
                    change,
                    git,
                }
            })
            .collect()
    })
}

fn style() -> impl Strategy<Value = Style> {
    (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(a, b, c, d)| Style {
        crlf: a,
        strip_empty_context: b,
        omit_one_counts: c,
        no_newline_at_end: d,
    })
}

/// The name as git writes it: C-quoted (with the prefix inside the quotes) when it holds a quote,
/// a backslash, a control or a non-ASCII byte.
fn git_name(prefix: &str, name: &str) -> String {
    let full = format!("{prefix}{name}");
    if !full
        .bytes()
        .any(|b| b == b'"' || b == b'\\' || !(0x20..0x80).contains(&b))
    {
        return full;
    }
    let mut out = String::from("\"");
    for b in full.bytes() {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("\\{b:03o}")),
        }
    }
    out.push('"');
    out
}

/// A `---`/`+++` name: git ends names containing a space with a tab; `diff -u` adds a timestamp.
fn pair_name(prefix: &str, name: &str, git: bool) -> String {
    if git {
        let quoted = git_name(prefix, name);
        if quoted.contains(' ') && !quoted.starts_with('"') {
            format!("{quoted}\t")
        } else {
            quoted
        }
    } else {
        format!("{prefix}{name}\t2024-01-02 03:04:05.000000000 +0000")
    }
}

struct Rendered {
    text: String,
    expected: CommentableLines,
    statuses: Vec<FileStatus>,
}

fn render(files: &[FileModel], style: &Style) -> Rendered {
    let eol = if style.crlf { "\r\n" } else { "\n" };
    let mut text = String::new();
    let mut expected = Vec::new();
    let mut statuses = Vec::new();
    let line = |text: &mut String, s: &str| {
        text.push_str(s);
        text.push_str(eol);
    };
    for file in files {
        let name = &file.name;
        let renamed_from = format!("old-{name}");
        let old_name = match file.change {
            Change::Renamed(_) => renamed_from.as_str(),
            _ => name.as_str(),
        };
        if file.git {
            line(
                &mut text,
                &format!(
                    "diff --git {} {}",
                    git_name("a/", old_name),
                    git_name("b/", name)
                ),
            );
        }
        let (status, lines) = match &file.change {
            Change::Modified(hunks) => {
                if file.git {
                    line(&mut text, "index 1111111..2222222 100644");
                }
                line(
                    &mut text,
                    &format!("--- {}", pair_name("a/", name, file.git)),
                );
                line(
                    &mut text,
                    &format!("+++ {}", pair_name("b/", name, file.git)),
                );
                let lines = render_hunks(&mut text, hunks, style, eol);
                (FileStatus::Modified, Some(lines))
            }
            Change::Renamed(hunks) => {
                line(&mut text, "similarity index 90%");
                line(
                    &mut text,
                    &format!("rename from {}", git_name("", old_name)),
                );
                line(&mut text, &format!("rename to {}", git_name("", name)));
                line(
                    &mut text,
                    &format!("--- {}", pair_name("a/", old_name, true)),
                );
                line(&mut text, &format!("+++ {}", pair_name("b/", name, true)));
                let lines = render_hunks(&mut text, hunks, style, eol);
                (FileStatus::Renamed, Some(lines))
            }
            Change::Added(content) => {
                if file.git {
                    line(&mut text, "new file mode 100644");
                }
                let mut lines = Vec::new();
                if !content.is_empty() || !file.git {
                    line(&mut text, "--- /dev/null");
                    line(
                        &mut text,
                        &format!("+++ {}", pair_name("b/", name, file.git)),
                    );
                }
                if !content.is_empty() {
                    let ops: Vec<Op> = content.iter().cloned().map(Op::Add).collect();
                    let hunk = HunkModel {
                        gap: 0,
                        ops,
                        section: None,
                    };
                    lines = render_hunks(&mut text, &[hunk], style, eol);
                }
                (FileStatus::Added, Some(lines))
            }
            Change::Deleted(content) => {
                if file.git {
                    line(&mut text, "deleted file mode 100644");
                }
                if !content.is_empty() || !file.git {
                    line(
                        &mut text,
                        &format!("--- {}", pair_name("a/", name, file.git)),
                    );
                    line(&mut text, "+++ /dev/null");
                }
                if !content.is_empty() {
                    let ops: Vec<Op> = content.iter().cloned().map(Op::Remove).collect();
                    let hunk = HunkModel {
                        gap: 0,
                        ops,
                        section: None,
                    };
                    render_hunks(&mut text, &[hunk], style, eol);
                }
                (FileStatus::Deleted, None)
            }
            Change::Binary { patch } => {
                if file.git && *patch {
                    line(&mut text, "index 1111111..2222222");
                    for l in [
                        "GIT binary patch",
                        "literal 12",
                        "Tc${NkU|?lnU|?WmU;qFC0C@lb",
                        "",
                        "literal 12",
                        "Tc${NkU|?lnU|?WmU;qFC0C@lb",
                        "",
                    ] {
                        line(&mut text, l);
                    }
                } else {
                    // `diff -u` never quotes; git does.
                    let (a, b) = if file.git {
                        (git_name("a/", name), git_name("b/", name))
                    } else {
                        (format!("a/{name}"), format!("b/{name}"))
                    };
                    line(&mut text, &format!("Binary files {a} and {b} differ"));
                }
                (FileStatus::Modified, Some(Vec::new()))
            }
            Change::ModeOnly => {
                line(&mut text, "old mode 100644");
                line(&mut text, "new mode 100755");
                (FileStatus::ModeChanged, Some(Vec::new()))
            }
        };
        statuses.push(status);
        if let Some(lines) = lines {
            expected.push(CommentableFile {
                path: name.clone(),
                lines,
            });
        }
    }
    Rendered {
        text,
        expected: CommentableLines { files: expected },
        statuses,
    }
}

/// Renders the hunks of one file and returns the model's commentable ranges.
fn render_hunks(
    text: &mut String,
    hunks: &[HunkModel],
    style: &Style,
    eol: &str,
) -> Vec<(u32, u32)> {
    let mut new_lines: Vec<u32> = Vec::new();
    // Next line number on each side.
    let (mut old, mut new) = (1u32, 1u32);
    for (index, hunk) in hunks.iter().enumerate() {
        old += hunk.gap;
        new += hunk.gap;
        let context = hunk
            .ops
            .iter()
            .filter(|o| matches!(o, Op::Context(_)))
            .count() as u32;
        let added = hunk.ops.iter().filter(|o| matches!(o, Op::Add(_))).count() as u32;
        let removed = hunk
            .ops
            .iter()
            .filter(|o| matches!(o, Op::Remove(_)))
            .count() as u32;
        let (old_count, new_count) = (context + removed, context + added);
        // A side without lines names the line before the hunk, as git does.
        let old_start = if old_count == 0 { old - 1 } else { old };
        let new_start = if new_count == 0 { new - 1 } else { new };
        let range = |start: u32, count: u32| {
            if count == 1 && style.omit_one_counts {
                start.to_string()
            } else {
                format!("{start},{count}")
            }
        };
        text.push_str(&format!(
            "@@ -{} +{} @@",
            range(old_start, old_count),
            range(new_start, new_count)
        ));
        if let Some(section) = &hunk.section {
            text.push(' ');
            text.push_str(section);
        }
        text.push_str(eol);
        for op in &hunk.ops {
            match op {
                Op::Context(c) => {
                    if !(c.is_empty() && style.strip_empty_context) {
                        text.push(' ');
                    }
                    text.push_str(c);
                    new_lines.push(new);
                    old += 1;
                    new += 1;
                }
                Op::Add(c) => {
                    text.push('+');
                    text.push_str(c);
                    new_lines.push(new);
                    new += 1;
                }
                Op::Remove(c) => {
                    text.push('-');
                    text.push_str(c);
                    old += 1;
                }
            }
            text.push_str(eol);
        }
        if index + 1 == hunks.len() && style.no_newline_at_end {
            text.push_str("\\ No newline at end of file");
            text.push_str(eol);
        }
    }
    let mut ranges: Vec<(u32, u32)> = Vec::new();
    for n in new_lines {
        match ranges.last_mut() {
            Some(last) if last.1 + 1 == n => last.1 = n,
            _ => ranges.push((n, n)),
        }
    }
    ranges
}

/// What must hold of any parse, valid input or not.
fn check_invariants(text: &str) {
    let parsed = diff::parse(text);
    let line_count = text.lines().count().max(1) as u32;
    for w in &parsed.warnings {
        let line = w.line.expect("every warning is located");
        assert!(
            (1..=line_count).contains(&line),
            "warning line {line} outside 1..={line_count}: {w}"
        );
    }
    let commentable = parsed.commentable();
    for f in &commentable.files {
        for &(s, e) in &f.lines {
            assert!(1 <= s && s <= e, "bad range {s}-{e} in {}", f.path);
        }
        for pair in f.lines.windows(2) {
            assert!(
                pair[0].1.saturating_add(1) < pair[1].0,
                "ranges not sorted and merged: {:?}",
                f.lines
            );
        }
        for &(s, e) in &f.lines {
            assert!(commentable.contains(&f.path, s, e));
        }
    }
}

fn fragments() -> impl Strategy<Value = String> {
    let piece = select(vec![
        "diff --git a/x b/x\n",
        "diff --git \"a/q\\\"\" b/y\n",
        "diff --cc x\n",
        "--- a/x\n",
        "--- /dev/null\n",
        "+++ b/x\n",
        "+++ /dev/null\n",
        "@@ -1,2 +1,3 @@\n",
        "@@ -0,0 +1 @@ s\n",
        "@@ -4294967295 +4294967295,1 @@\n",
        "@@ -3 +2,0 @@\n",
        "+a\n",
        "-b\n",
        " c\n",
        "\n",
        "\r\n",
        "\r",
        "\\ No newline at end of file\n",
        "Binary files a/x and b/x differ\n",
        "GIT binary patch\n",
        "literal 3\n",
        "rename from x\n",
        "rename to \"y\\303\"\n",
        "copy to z\n",
        "new file mode 100644\n",
        "deleted file mode 100644\n",
        "old mode 100644\n",
        "similarity index 300%\n",
        "\"",
        " ",
        "\\",
    ]);
    prop::collection::vec(piece, 0..40).prop_map(|p| p.concat())
}

#[derive(Debug, Clone)]
enum Mutation {
    Truncate(usize),
    DeleteLine(usize),
    FlipByte(usize, u8),
    DuplicateLine(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<usize>().prop_map(Mutation::Truncate),
        any::<usize>().prop_map(Mutation::DeleteLine),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::FlipByte(i, b)),
        any::<usize>().prop_map(Mutation::DuplicateLine),
    ]
}

fn mutate(text: &str, mutations: &[Mutation]) -> String {
    let mut bytes = text.as_bytes().to_vec();
    for m in mutations {
        let len = bytes.len().max(1);
        match *m {
            Mutation::Truncate(i) => bytes.truncate(i % len),
            Mutation::FlipByte(i, b) => {
                if let Some(x) = bytes.get_mut(i % len) {
                    *x ^= b;
                }
            }
            Mutation::DeleteLine(i) | Mutation::DuplicateLine(i) => {
                let mut lines: Vec<Vec<u8>> =
                    bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
                let at = i % lines.len();
                if matches!(m, Mutation::DeleteLine(_)) {
                    lines.remove(at);
                } else {
                    let copy = lines[at].clone();
                    lines.insert(at, copy);
                }
                bytes = lines.join(&b'\n');
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        // A failure prints its minimal input; nothing is written into the source tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn valid_diffs_yield_the_model_lines(files in files(), style in style()) {
        let rendered = render(&files, &style);
        let parsed = diff::parse(&rendered.text);
        prop_assert!(parsed.warnings.is_empty(), "warnings {:#?}\n{}", parsed.warnings, rendered.text);
        let statuses: Vec<FileStatus> = parsed.files.iter().map(|f| f.status).collect();
        prop_assert_eq!(statuses, rendered.statuses, "\n{}", rendered.text);
        prop_assert_eq!(parsed.commentable(), rendered.expected, "\n{}", rendered.text);
    }

    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        check_invariants(&text);
    }

    #[test]
    fn diff_like_fragments_never_panic(text in fragments()) {
        check_invariants(&text);
    }

    #[test]
    fn mutated_valid_diffs_never_panic(
        files in files(),
        style in style(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let rendered = render(&files, &style);
        check_invariants(&mutate(&rendered.text, &mutations));
    }
}
