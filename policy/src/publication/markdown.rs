//! Text from elsewhere made safe to post as GitHub Markdown. Titles, descriptions, suggestions
//! and summaries come from a model, paths from a pull request's author: none of it may forge the
//! hidden markers that make publication idempotent, open or close an HTML comment, swallow the
//! text after it in an unclosed code fence, or push a body over GitHub's length limit.

use verdict_proto::publication::MARKER_PREFIX;

/// The most a review body, an inline comment or an issue comment may hold on GitHub ("body is too
/// long (maximum is 65536 characters)").
pub const MAX_BODY: usize = 65_536;

/// Zero-width space: breaks `<!--` and `-->` without changing what a reader sees, in prose and in
/// code alike (an HTML entity would show literally inside code).
const BREAK: char = '\u{200B}';

/// A text's length as GitHub's limit counts it, measured in UTF-16 code units: never less than
/// the number of characters, so a body that fits here fits there.
pub(super) fn length(text: &str) -> usize {
    text.encode_utf16().count()
}

/// `text` with every `<!--` and `-->` broken, so it can neither forge a marker ([`MARKER_PREFIX`]
/// starts with `<!--`) nor open or close an HTML comment. A trailing `<`, `<!` or `<!-` is broken
/// too, so no text that follows can complete it.
pub(super) fn untrusted(text: &str) -> String {
    let mut out = text
        .replace("<!--", "<\u{200B}!--")
        .replace("-->", "--\u{200B}>");
    if out.ends_with('<') || out.ends_with("<!") || out.ends_with("<!-") {
        out.push(BREAK);
    }
    out
}

/// Whether `text` contains a marker's beginning (checked on code that is posted unchanged).
pub(super) fn has_marker(text: &str) -> bool {
    text.contains(MARKER_PREFIX)
}

/// `text` on one line: line breaks and other control characters become spaces, runs of
/// whitespace one space.
pub(super) fn one_line(text: &str) -> String {
    text.split(|c: char| c.is_whitespace() || c.is_control())
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// An inline code span showing `text` (one line, untrusted) literally: fenced by one backtick
/// more than its longest run of backticks, padded when it starts or ends with one.
pub(super) fn code(text: &str) -> String {
    let text = untrusted(&one_line(text));
    let fence = "`".repeat(longest_run(&text, '`') + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// Untrusted Markdown prose, cut to `max` units: neutralised ([`untrusted`]), and a code fence it
/// leaves open is closed, so it cannot turn the rest of the body into code.
pub(super) fn prose(text: &str, max: usize) -> String {
    close_fences(&cut(&untrusted(text.trim_matches('\n')), max))
}

/// A fence of `ch` (backtick or tilde) longer than any run of it in `text`, at least three long,
/// so `text` cannot close the block early.
pub(super) fn fence(text: &str, ch: char) -> String {
    ch.to_string().repeat((longest_run(text, ch) + 1).max(3))
}

/// `text` cut to at most `max` units ([`length`]) on a character boundary, ending in `…` when
/// cut.
pub(super) fn cut(text: &str, max: usize) -> String {
    if length(text) <= max {
        return text.to_owned();
    }
    let mut used = 0;
    let mut end = 0;
    for (i, c) in text.char_indices() {
        used += c.len_utf16();
        // One unit is kept for the ellipsis.
        if used + 1 > max {
            break;
        }
        end = i + c.len_utf8();
    }
    let mut out = text.get(..end).unwrap_or_default().to_owned();
    out.push('…');
    out
}

/// The longest run of `ch` in `text`.
fn longest_run(text: &str, ch: char) -> usize {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == ch {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    longest
}

/// A fence line's character and length (CommonMark: at most three spaces of indentation, three
/// or more backticks or tildes), and whether anything follows the fence.
pub(super) fn fence_line(line: &str) -> Option<(char, usize, &str)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = line.get(indent..)?;
    let ch = rest.chars().next().filter(|c| matches!(c, '`' | '~'))?;
    let count = rest.chars().take_while(|&c| c == ch).count();
    if count < 3 {
        return None;
    }
    let info = rest.get(count..)?;
    // A backtick fence's info string may not contain backticks.
    if ch == '`' && info.contains('`') {
        return None;
    }
    Some((ch, count, info))
}

/// `text` with a closing fence appended when it ends inside a fenced code block.
fn close_fences(text: &str) -> String {
    let mut open: Option<(char, usize)> = None;
    for line in text.lines() {
        let Some((ch, count, info)) = fence_line(line) else {
            continue;
        };
        match open {
            None => open = Some((ch, count)),
            Some((o, n)) if o == ch && count >= n && info.trim().is_empty() => open = None,
            Some(_) => {}
        }
    }
    match open {
        Some((ch, count)) => format!("{text}\n{}", ch.to_string().repeat(count)),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use verdict_proto::publication::{fingerprint_marker, marker, markers_in};

    use super::*;

    #[test]
    fn forged_markers_and_html_comments_are_broken() {
        let forged = format!(
            "Looks fine {} and {} <!-- hide the rest",
            marker("other-task"),
            fingerprint_marker("abcd")
        );
        let safe = untrusted(&forged);
        assert_eq!(markers_in(&safe), (vec![], vec![]));
        assert!(!safe.contains("<!--") && !safe.contains("-->"), "{safe}");
        assert_eq!(
            safe.replace(BREAK, ""),
            forged,
            "a reader sees the same text"
        );
        for tail in ["a <", "a <!", "a <!-"] {
            let joined = format!("{}-- verdict:task=x -->", untrusted(tail));
            assert!(!joined.contains(MARKER_PREFIX), "{joined}");
        }
        assert!(has_marker(&marker("t")) && !has_marker("<!-- other"));
    }

    #[test]
    fn code_spans_outlast_the_backticks_inside() {
        assert_eq!(code("src/a.rs"), "`src/a.rs`");
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`x`"), "`` `x` ``");
        assert_eq!(code("a\nb"), "`a b`");
        assert!(!code("<!-- verdict:task=x -->").contains(MARKER_PREFIX));
    }

    #[test]
    fn an_unclosed_fence_is_closed_and_a_closed_one_left_alone() {
        assert_eq!(
            prose("see\n```rust\nfn x()", 100),
            "see\n```rust\nfn x()\n```"
        );
        assert_eq!(prose("````\n```\n", 100), "````\n```\n````");
        let closed = "a\n~~~\nb\n~~~\nc";
        assert_eq!(prose(closed, 100), closed);
        assert_eq!(fence("a ``` b ```` c", '`'), "`````");
        assert_eq!(fence("plain", '`'), "```");
    }

    #[test]
    fn text_is_cut_on_a_character_boundary_within_the_limit() {
        assert_eq!(cut("abcdef", 6), "abcdef");
        assert_eq!(cut("abcdef", 4), "abc…");
        let zh = "评审结果很长";
        assert_eq!(cut(zh, 3), "评审…");
        let emoji = "😀😀😀";
        assert_eq!(length(emoji), 6, "two UTF-16 units each");
        assert_eq!(cut(emoji, 5), "😀😀…");
        assert!(length(&cut(emoji, 5)) <= 5);
        assert_eq!(one_line(" a\n\tb\r\n c "), "a b c");
    }
}
