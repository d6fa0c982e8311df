//! A finding's suggestion as a GitHub suggestion block (```` ```suggestion ````), which a reader
//! can commit with one click: it replaces the commented lines with the block's text. Prose in such
//! a block would replace code with prose, so a suggestion becomes a block only when it plainly is
//! replacement code (decision 101):
//!
//! - the whole suggestion, apart from blank lines around it, is exactly one fenced code block
//!   (backticks or tildes, three or more), with nothing before or after it and no second fence
//!   inside;
//! - the block holds at least one non-blank line;
//! - its info string does not say it is something other than code (`diff`, `patch`, `text`,
//!   `markdown`, `console`, `output`, …), and its lines do not read as a diff (every non-blank
//!   line starting with `+` or `-`, both present);
//! - it does not contain a marker's beginning (`<!-- verdict:`): code is posted unchanged, so it
//!   could not be neutralised without changing what would be committed.
//!
//! Everything else is shown as text under a "Suggestion" label. A block is realigned to the lines
//! it replaces ([`realign`]) and fenced with more backticks than it contains, so it cannot break
//! out.

use super::markdown;

/// Info strings that name something other than replacement code.
const NOT_CODE: &[&str] = &[
    "diff",
    "patch",
    "udiff",
    "text",
    "txt",
    "plaintext",
    "plain",
    "markdown",
    "md",
    "console",
    "output",
    "log",
    "shell-session",
];

/// The code of `suggestion` when it is one fenced code block of replacement code (see the module
/// documentation); `None` when it must be shown as text.
pub(super) fn code_of(suggestion: &str) -> Option<String> {
    let text = suggestion.trim_matches(|c: char| c == '\n' || c == '\r' || c == ' ' || c == '\t');
    let lines: Vec<&str> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let (first, rest) = lines.split_first()?;
    let (last, inner) = rest.split_last()?;
    let (ch, count, info) = markdown::fence_line(first)?;
    let closes = |line: &str| {
        markdown::fence_line(line)
            .is_some_and(|(c, n, tail)| c == ch && n >= count && tail.trim().is_empty())
    };
    if !closes(last) || inner.iter().any(|l| closes(l)) {
        return None;
    }
    let language = info.split_whitespace().next().unwrap_or("").to_lowercase();
    if NOT_CODE.contains(&language.as_str()) {
        return None;
    }
    let non_blank: Vec<&&str> = inner.iter().filter(|l| !l.trim().is_empty()).collect();
    if non_blank.is_empty() {
        return None;
    }
    let reads_as_diff = non_blank
        .iter()
        .all(|l| l.starts_with('+') || l.starts_with('-'))
        && non_blank.iter().any(|l| l.starts_with('+'))
        && non_blank.iter().any(|l| l.starts_with('-'));
    let code = inner.join("\n");
    if reads_as_diff || markdown::has_marker(&code) {
        return None;
    }
    Some(code)
}

/// A suggestion block holding `code`, fenced by more backticks than `code` contains.
pub(super) fn block(code: &str) -> String {
    let fence = markdown::fence(code, '`');
    format!("{fence}suggestion\n{code}\n{fence}")
}

/// `code` re-indented for the lines it replaces (`replaced`, their new-side text): the code's
/// common leading indentation is removed and the first non-blank replaced line's is added, so
/// relative indentation is kept. When the replaced lines are indented with tabs and the code's
/// relative indentation uses spaces (or the other way round), the relative indentation is
/// converted to the replaced lines' kind: one level of the code's is its smallest relative
/// indentation, one level of the file's is the smallest step between its lines' indentations
/// (four spaces when they are all alike). Blank lines become empty.
pub(super) fn realign(code: &str, replaced: &str) -> String {
    let base = replaced
        .split('\n')
        .find(|l| !l.trim().is_empty())
        .map_or("", indentation);
    let kind = Kind::of(replaced);
    let lines: Vec<&str> = code.split('\n').collect();
    let common = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| indentation(l))
        .reduce(common_prefix)
        .unwrap_or("");
    let relative: Vec<&str> = lines
        .iter()
        .map(|l| l.get(common.len()..).map_or("", indentation))
        .collect();
    let code_level = relative
        .iter()
        .map(|r| r.trim_start_matches('\t').len())
        .filter(|&n| n > 0)
        .min()
        .unwrap_or(0);
    let file_level = space_level(replaced);
    lines
        .iter()
        .zip(&relative)
        .map(|(line, rel)| {
            if line.trim().is_empty() {
                return String::new();
            }
            let body = line.get(common.len() + rel.len()..).unwrap_or("");
            let rel = match kind {
                Kind::Tabs => to_tabs(rel, code_level),
                Kind::Spaces => to_spaces(rel, file_level),
                Kind::Unknown => (*rel).to_owned(),
            };
            format!("{base}{rel}{body}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// How the replaced lines are indented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tabs,
    Spaces,
    /// Not indented at all: the code's indentation is kept as written.
    Unknown,
}

impl Kind {
    /// The kind of the first non-blank line's indentation, or of the first indented line when
    /// that one is not indented.
    fn of(replaced: &str) -> Kind {
        let first_indented = replaced
            .split('\n')
            .filter(|l| !l.trim().is_empty())
            .map(indentation)
            .find(|i| !i.is_empty());
        match first_indented {
            Some(i) if i.contains('\t') => Kind::Tabs,
            Some(_) => Kind::Spaces,
            None => Kind::Unknown,
        }
    }
}

/// Leading tabs and spaces.
fn indentation(line: &str) -> &str {
    let body = line.trim_start_matches([' ', '\t']);
    line.get(..line.len() - body.len()).unwrap_or("")
}

fn common_prefix<'s>(a: &'s str, b: &'s str) -> &'s str {
    let n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    a.get(..n).unwrap_or("")
}

/// Relative indentation `rel` (tabs, then spaces) with each `level` spaces as one tab; kept as
/// written when there is no level of at least two spaces or it mixes in another order.
fn to_tabs(rel: &str, level: usize) -> String {
    let tabs = rel.len() - rel.trim_start_matches('\t').len();
    let spaces = rel.len() - tabs;
    if spaces == 0 || level < 2 || rel.get(tabs..).is_some_and(|s| s.contains('\t')) {
        return rel.to_owned();
    }
    format!(
        "{}{}",
        "\t".repeat(tabs + spaces / level),
        " ".repeat(spaces % level)
    )
}

/// Relative indentation `rel` with each leading tab as `level` spaces.
fn to_spaces(rel: &str, level: usize) -> String {
    let tabs = rel.len() - rel.trim_start_matches('\t').len();
    if tabs == 0 {
        return rel.to_owned();
    }
    format!(
        "{}{}",
        " ".repeat(tabs * level),
        rel.get(tabs..).unwrap_or("")
    )
}

/// One indentation level of space-indented `text`: the smallest step between two of its lines'
/// indentations, four when they are all alike.
fn space_level(text: &str) -> usize {
    let mut widths: Vec<usize> = text
        .split('\n')
        .filter(|l| !l.trim().is_empty())
        .map(indentation)
        .filter(|i| !i.contains('\t'))
        .map(str::len)
        .collect();
    widths.sort_unstable();
    widths.dedup();
    widths
        .windows(2)
        .filter_map(|w| w.get(1).zip(w.first()).map(|(b, a)| b - a))
        .min()
        .unwrap_or(4)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn one_fenced_block_of_code_is_a_suggestion() {
        assert_eq!(
            code_of("```rust\nlet x = 1;\nlet y = 2;\n```").as_deref(),
            Some("let x = 1;\nlet y = 2;")
        );
        assert_eq!(
            code_of("\n\n~~~\n    indented()\n~~~\n").as_deref(),
            Some("    indented()"),
            "tildes, blank lines around, indentation inside kept"
        );
        assert_eq!(
            code_of("````\nlet s = \"```\";\n````").as_deref(),
            Some("let s = \"```\";"),
            "a shorter fence inside is content"
        );
        assert_eq!(
            code_of("```rust\r\nx();\r\n```\r\n").as_deref(),
            Some("x();")
        );
    }

    #[test]
    fn prose_is_never_a_suggestion() {
        for text in [
            "Check the index before using it.",
            "Use `get` instead:\n```rust\nv.get(i)\n```",
            "```rust\nv.get(i)\n```\nThis avoids the panic.",
            "```rust\na()\n```\n```rust\nb()\n```",
            "```diff\n-a()\n+b()\n```",
            "```rust\n-    a();\n+    b();\n```",
            "```text\nValidate the input first.\n```",
            "```markdown\n**do this**\n```",
            "```\n\n```",
            "```rust\nlet a = 1;",
            "let a = 1;\n```",
            "```rust\nx(); // <!-- verdict:task=other -->\n```",
        ] {
            assert_eq!(code_of(text), None, "{text:?}");
        }
    }

    #[test]
    fn a_block_cannot_be_broken_out_of() {
        let code = "let fence = \"```\";\nlet longer = \"````\";";
        let b = block(code);
        assert!(b.starts_with("`````suggestion\n"), "{b}");
        assert!(b.ends_with("\n`````"), "{b}");
        assert_eq!(block("x()"), "```suggestion\nx()\n```");
    }

    #[test]
    fn code_is_realigned_to_the_replaced_lines_with_spaces() {
        let replaced = "        if x {\n            y();\n        }";
        let code = "if x.is_some() {\n    y();\n}";
        assert_eq!(
            realign(code, replaced),
            "        if x.is_some() {\n            y();\n        }"
        );
        let over_indented = "            a();\n\n              b();";
        assert_eq!(
            realign(over_indented, "    old();"),
            "    a();\n\n      b();",
            "the common indentation is removed, relative indentation kept"
        );
        assert_eq!(
            realign("a()", "\n    old();"),
            "    a()",
            "the first non-blank replaced line decides"
        );
    }

    #[test]
    fn code_follows_the_replaced_lines_tabs_or_spaces() {
        let go = "\tif err != nil {\n\t\treturn err\n\t}";
        let spaces = "if err != nil {\n    return fmt.Errorf(\"x: %w\", err)\n}";
        assert_eq!(
            realign(spaces, go),
            "\tif err != nil {\n\t\treturn fmt.Errorf(\"x: %w\", err)\n\t}",
            "spaces become tabs in a tab-indented file"
        );
        let two = "a {\n  b {\n    c\n   d\n  }\n}";
        assert_eq!(
            realign(two, "\tx"),
            "\ta {\n\t\tb {\n\t\t\tc\n\t\t d\n\t\t}\n\t}",
            "two-space levels; a leftover space stays a space"
        );
        let py = "    def f():\n        return 1";
        assert_eq!(
            realign("if x:\n\treturn 2", py),
            "    if x:\n        return 2",
            "tabs become the file's four-space level"
        );
        assert_eq!(
            realign("if x:\n\treturn 2", "  a\n    b"),
            "  if x:\n    return 2",
            "the file's level is the step between its lines"
        );
        assert_eq!(
            realign("a\n  b", "a"),
            "a\n  b",
            "unindented replaced lines: the code's own indentation"
        );
    }
}
