//! Typed readers over the field tree: scalars, texts, enumerations and locations, each reporting
//! a precise diagnostic instead of failing silently.

use super::path::Path;
use super::tree::{Node, Value};
use crate::diagnostic::{Collector, Diagnostic, DiagnosticCode as Code};
use crate::names::WireName;

/// The first node of `tag` among `nodes` (duplicates are reported by the structure check).
pub(crate) fn get<'n, 's, 'a>(nodes: &'n [Node<'s, 'a>], tag: &str) -> Option<&'n Node<'s, 'a>> {
    nodes.iter().find(|n| n.field.tag == tag)
}

/// Reads a scalar and converts it with `convert`, which returns the reason on failure.
pub(crate) fn scalar<T>(
    nodes: &[Node<'_, '_>],
    tag: &'static str,
    path: &Path<'_>,
    c: &mut Collector,
    convert: impl FnOnce(&str) -> Result<T, String>,
) -> Option<T> {
    let node = get(nodes, tag)?;
    let Value::Scalar(raw) = node.value else {
        return None;
    };
    let v = raw.trim();
    let result = if v.contains(['<', '>']) {
        Err(format!(
            "the value of <{tag}> must not contain < or >, found \"{}\"",
            super::preview(v)
        ))
    } else {
        convert(v)
    };
    result
        .map_err(|reason| {
            c.push(
                Diagnostic::new(Code::InvalidValue, reason)
                    .at_line(node.line)
                    .in_field(path.child(tag).render()),
            );
        })
        .ok()
}

/// Reads a text field. `Some(None)` is `NONE` where `allow_none`; an empty text is reported.
pub(crate) fn text(
    nodes: &[Node<'_, '_>],
    tag: &'static str,
    path: &Path<'_>,
    c: &mut Collector,
    allow_none: bool,
) -> Option<Option<String>> {
    let node = get(nodes, tag)?;
    let content = match node.value {
        Value::InlineText(v) => v.trim().to_owned(),
        Value::BlockText { lines, indent } => block_text(lines, indent),
        _ => return None,
    };
    if allow_none && content.trim() == "NONE" {
        return Some(None);
    }
    if content.trim().is_empty() {
        let or_none = if allow_none { ", or NONE" } else { "" };
        c.push(
            Diagnostic::new(
                Code::EmptyText,
                format!("<{tag}> is empty; write its text between <{tag}> and </{tag}>{or_none}"),
            )
            .at_line(node.line)
            .in_field(path.child(tag).render()),
        );
        return None;
    }
    Some(Some(content))
}

/// A required (non-`NONE`) text.
pub(crate) fn required_text(
    nodes: &[Node<'_, '_>],
    tag: &'static str,
    path: &Path<'_>,
    c: &mut Collector,
) -> Option<String> {
    text(nodes, tag, path, c, false).flatten()
}

/// The content lines of a block, without leading and trailing blank lines; inner indentation is
/// kept because suggestions are code (P1 rule 3). Each line loses at most `indent` leading
/// whitespace characters: the indentation of its opening tag line.
fn block_text(lines: &[&str], indent: usize) -> String {
    let first = lines.iter().position(|l| !l.trim().is_empty());
    let last = lines.iter().rposition(|l| !l.trim().is_empty());
    match (first, last) {
        (Some(f), Some(l)) => {
            let kept = &lines[f..=l];
            let mut out = String::with_capacity(kept.iter().map(|s| s.len() + 1).sum());
            for (i, line) in kept.iter().enumerate() {
                if i > 0 {
                    out.push('\n');
                }
                out.push_str(strip_indent(line, indent));
            }
            out
        }
        _ => String::new(),
    }
}

fn strip_indent(line: &str, indent: usize) -> &str {
    if indent == 0 {
        return line;
    }
    let strip = line
        .bytes()
        .take(indent)
        .take_while(|b| *b == b' ' || *b == b'\t')
        .count();
    &line[strip..]
}

/// The children of a record or list block field, with the block's path.
pub(crate) fn children<'n, 's, 'a>(
    nodes: &'n [Node<'s, 'a>],
    tag: &str,
) -> Option<&'n [Node<'s, 'a>]> {
    match &get(nodes, tag)?.value {
        Value::Block { children, .. } => Some(children),
        _ => None,
    }
}

/// Types every item block of a list field with `item`; `None` if the list is absent or broken,
/// or if any item is invalid (each item still reports its own diagnostics).
pub(crate) fn list_items<T>(
    nodes: &[Node<'_, '_>],
    parent: &Path<'_>,
    c: &mut Collector,
    list_tag: &'static str,
    item_tag: &'static str,
    mut item: impl FnMut(&[Node<'_, '_>], &Path<'_>, &mut Collector) -> Option<T>,
) -> Option<Vec<T>> {
    let list = children(nodes, list_tag)?;
    let path = parent.child(list_tag);
    let mut out = Vec::with_capacity(list.len());
    let mut complete = true;
    for (i, node) in list.iter().enumerate() {
        let at = path.item(item_tag, i + 1);
        match record(node).and_then(|fields| item(fields, &at, c)) {
            Some(v) => out.push(v),
            None => complete = false,
        }
    }
    complete.then_some(out)
}

/// The children of one record node (an item of a list).
pub(crate) fn record<'n, 's, 'a>(node: &'n Node<'s, 'a>) -> Option<&'n [Node<'s, 'a>]> {
    match &node.value {
        Value::Block { children, .. } => Some(children),
        _ => None,
    }
}

pub(crate) fn version(v: &str) -> Result<u8, String> {
    if v == "1" {
        Ok(1)
    } else {
        Err(format!(
            "VERSION must be 1, found \"{}\"",
            super::preview(v)
        ))
    }
}

/// An unsigned integer within `min..=max` written as plain digits.
pub(crate) fn int_in(tag: &str, v: &str, min: u64, max: u64) -> Result<u64, String> {
    let found = super::preview(v);
    let n = parse_digits(v).ok_or_else(|| {
        format!("{tag} must be an integer from {min} to {max}, found \"{found}\"")
    })?;
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "{tag} must be an integer from {min} to {max}, found {n}"
        ))
    }
}

/// A positive integer or `NONE`.
pub(crate) fn positive_or_none(tag: &str, v: &str) -> Result<Option<u32>, String> {
    if v == "NONE" {
        return Ok(None);
    }
    match parse_digits(v) {
        Some(n) if n >= 1 && n <= u64::from(u32::MAX) => Ok(Some(n as u32)),
        _ => Err(format!(
            "{tag} must be a positive integer or NONE, found \"{}\"",
            super::preview(v)
        )),
    }
}

fn parse_digits(v: &str) -> Option<u64> {
    if v.is_empty() || v.len() > 18 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

/// One of the listed lowercase values.
pub(crate) fn one_of<T: WireName>(tag: &str, v: &str) -> Result<T, String> {
    T::ALL
        .iter()
        .find(|t| t.as_str() == v)
        .copied()
        .ok_or_else(|| {
            let names: Vec<&str> = T::ALL.iter().map(|t| t.as_str()).collect();
            let hint = if names.iter().any(|n| n.eq_ignore_ascii_case(v)) {
                " (values are lowercase)"
            } else {
                ""
            };
            format!(
                "{tag} must be one of {}, found \"{}\"{hint}",
                names.join(", "),
                super::preview(v)
            )
        })
}

/// A repository-relative path or `NONE`.
pub(crate) fn file_or_none(v: &str) -> Result<Option<String>, String> {
    if v == "NONE" {
        return Ok(None);
    }
    if v.is_empty() {
        return Err("FILE must be a repository-relative path or NONE, found nothing".into());
    }
    if let Some(problem) = crate::location::repository_path_problem(v) {
        return Err(format!("FILE must be {problem}"));
    }
    Ok(Some(v.to_owned()))
}

/// A finding's place in the repository, after P1 rule 4.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Location {
    pub file: Option<String>,
    pub start_line: Option<u32>,
    pub end_line: Option<u32>,
}

/// Reads FILE, START_LINE and END_LINE of one finding and checks P1 rule 4 across them.
pub(crate) fn location(
    nodes: &[Node<'_, '_>],
    path: &Path<'_>,
    c: &mut Collector,
) -> Option<Location> {
    let file = scalar(nodes, "FILE", path, c, file_or_none);
    let start = scalar(nodes, "START_LINE", path, c, |v| {
        positive_or_none("START_LINE", v)
    });
    let end = scalar(nodes, "END_LINE", path, c, |v| {
        positive_or_none("END_LINE", v)
    });
    let (file, start, end) = (file?, start?, end?);
    let line_of = |tag| get(nodes, tag).map(|n| n.line);
    let problem = match (&file, start, end) {
        (None, None, None) => None,
        (None, _, _) => Some((
            "START_LINE",
            "FILE is NONE, so START_LINE and END_LINE must both be NONE; name the file, or drop the line numbers".to_owned(),
        )),
        (Some(_), Some(s), Some(e)) if s > e => Some((
            "START_LINE",
            format!("START_LINE {s} is after END_LINE {e}; START_LINE must be less than or equal to END_LINE"),
        )),
        (Some(_), Some(_), Some(_)) => None,
        (Some(_), _, _) => Some((
            if start.is_none() { "START_LINE" } else { "END_LINE" },
            "a finding on a file needs START_LINE and END_LINE as positive integers; use FILE NONE (with both lines NONE) for a finding about no particular lines".to_owned(),
        )),
    };
    if let Some((tag, message)) = problem {
        c.push(
            Diagnostic::new(Code::InvalidLocation, message)
                .at_line_opt(line_of(tag))
                .in_field(path.child(tag).render()),
        );
        return None;
    }
    Some(Location {
        file,
        start_line: start,
        end_line: end,
    })
}
