//! The engine shared by the tagged envelopes P1–P3: locate exactly one envelope, tolerate one
//! outer fence and a short presentation preamble, build the field tree, and hand it to the
//! protocol to type its values.
//!
//! Lexical rules live here once, so review, issue analysis and scan cannot drift apart.

mod contract;
pub(crate) mod grammar;
mod lexer;
mod path;
mod render;
mod spec;
mod tree;
mod values;

pub(crate) use contract::{ContractText, contract_text};
pub(crate) use path::Path;
pub(crate) use render::Writer;
pub(crate) use spec::{Domain, EnvelopeSpec, Field, Kind, names};
pub(crate) use tree::{Node, preview};
pub(crate) use values::*;

use crate::diagnostic::{Collector, Diagnostic, DiagnosticCode as Code, Diagnostics};
use lexer::{Line, Tags};

/// At most this many non-empty lines of presentation text may surround the envelope (P1 rule 6).
pub(crate) const MAX_SURROUNDING_LINES: usize = 3;
/// At most this many characters (of the trimmed non-empty lines) may surround the envelope.
pub(crate) const MAX_SURROUNDING_CHARS: usize = 500;
/// Info strings accepted on one outer Markdown fence (case-insensitive).
pub(crate) const ACCEPTED_FENCES: [&str; 4] = ["", "xml", "text", "plaintext"];

/// Parses `response` as one envelope of `spec`; `build` types the root fields. Every problem is
/// collected; the value is returned only when there is none.
pub(crate) fn parse<T>(
    spec: &'static EnvelopeSpec,
    response: &str,
    build: impl for<'n, 's, 'a> FnOnce(&'n [Node<'s, 'a>], &Path<'_>, &mut Collector) -> Option<T>,
) -> Result<T, Diagnostics> {
    let lines = lexer::split_lines(response);
    let tags = Tags::new(spec.root, spec.tags());
    let kinds: Vec<Line<'_>> = lines.iter().map(|l| tags.classify(l)).collect();
    let root = Path::root(spec.root);
    let root_field = root.render();
    let mut c = Collector::default();

    let (open, close) = match locate(spec.root, &lines, &kinds) {
        Ok(span) => span,
        Err(d) => return Err(Diagnostics::one(d.in_field(root_field))),
    };
    check_surroundings(spec.root, &lines, &kinds, &tags, open, close, &mut c);

    let nodes = tree::TreeParser::new(&lines, &kinds, &tags, &mut c).root(spec, open + 1, close);
    let value = build(&nodes, &root, &mut c);
    c.finish(value)
}

/// Finds the one envelope: indices of its opening and closing tag lines.
fn locate(root: &str, lines: &[&str], kinds: &[Line<'_>]) -> Result<(usize, usize), Diagnostic> {
    let opens: Vec<usize> = (0..kinds.len())
        .filter(|&i| kinds[i] == Line::Open(Tags::ROOT))
        .collect();
    match opens.as_slice() {
        [] => Err(no_envelope(root, lines, kinds)),
        [open] => {
            let close = (open + 1..kinds.len()).find(|&i| kinds[i] == Line::Close(Tags::ROOT));
            close.map(|c| (*open, c)).ok_or_else(|| {
                Diagnostic::new(
                    Code::UnclosedEnvelope,
                    format!(
                        "<{root}> opened at line {} is never closed (the response ends at line {}, so it looks truncated); end the envelope with a line </{root}>",
                        open + 1,
                        lines.len()
                    ),
                )
                .at_line(*open as u32 + 1)
            })
        }
        [_, second, ..] => Err(Diagnostic::new(
            Code::MultipleEnvelopes,
            format!(
                "found {} <{root}> envelopes (at lines {}); return exactly one envelope",
                opens.len(),
                opens
                    .iter()
                    .map(|i| (i + 1).to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
        .at_line(*second as u32 + 1)),
    }
}

fn no_envelope(root: &str, lines: &[&str], kinds: &[Line<'_>]) -> Diagnostic {
    let opening = format!("<{root}>");
    if lines.iter().all(|l| l.trim().is_empty()) {
        return Diagnostic::new(
            Code::NoEnvelope,
            format!("the response is empty; answer with exactly one <{root}> envelope"),
        )
        .at_line(1);
    }
    if let Some(i) = kinds.iter().position(|k| *k == Line::Close(Tags::ROOT)) {
        return Diagnostic::new(
            Code::NoEnvelope,
            format!(
                "found </{root}> at line {} but no opening line {opening} before it; the envelope must start with a line {opening}",
                i + 1
            ),
        )
        .at_line(i as u32 + 1);
    }
    if let Some(i) = lines.iter().position(|l| l.contains(&opening)) {
        return Diagnostic::new(
            Code::NoEnvelope,
            format!(
                "no envelope: line {} mentions {opening}, but the envelope must start with {opening} alone on its line and end with </{root}> alone on its line",
                i + 1
            ),
        )
        .at_line(i as u32 + 1);
    }
    Diagnostic::new(
        Code::NoEnvelope,
        format!(
            "no <{root}> envelope found; answer with exactly one envelope — a line {opening}, the fields, and a line </{root}> — and nothing else (findings described in prose are not read)"
        ),
    )
    .at_line(1)
}

/// Checks what is outside the envelope: one balanced outer fence and a short presentation text
/// are tolerated; anything else is reported (P1 rule 6). Nothing outside is ever interpreted.
fn check_surroundings(
    root: &'static str,
    lines: &[&str],
    kinds: &[Line<'_>],
    tags: &Tags,
    open: usize,
    close: usize,
    c: &mut Collector,
) {
    let outside = || (0..open).chain(close + 1..lines.len());
    let non_blank = |i: &usize| !lines[*i].trim().is_empty();
    let before_last = (0..open).rev().find(non_blank);
    let after_first = (close + 1..lines.len()).find(non_blank);

    let mut fence_lines = [None, None];
    if let (Some(b), Some(a)) = (before_last, after_first)
        && let Some(info) = fence_info(lines[b])
        && lines[a].trim() == "```"
    {
        if ACCEPTED_FENCES.iter().any(|f| f.eq_ignore_ascii_case(info)) {
            fence_lines = [Some(b), Some(a)];
        } else {
            c.push(
                        Diagnostic::new(
                            Code::UnbalancedFence,
                            format!(
                                "the outer fence ```{info} is not accepted; return the envelope without a fence, or inside ```, ```xml, ```text or ```plaintext"
                            ),
                        )
                        .at_line(b as u32 + 1)
                        .in_field(root),
                    );
            fence_lines = [Some(b), Some(a)];
        }
    }

    let mut text_lines = Vec::new();
    for i in outside() {
        if !non_blank(&i) || fence_lines.contains(&Some(i)) {
            continue;
        }
        let line_no = i as u32 + 1;
        if fence_info(lines[i]).is_some() {
            c.push(
                Diagnostic::new(
                    Code::UnbalancedFence,
                    format!(
                        "the Markdown fence at line {line_no} does not enclose the envelope; use at most one fence, opening right before <{root}> and closing right after </{root}>, or none"
                    ),
                )
                .at_line(line_no)
                .in_field(root),
            );
            continue;
        }
        match kinds[i] {
            Line::Close(Tags::ROOT) => c.push(
                Diagnostic::new(
                    Code::UnmatchedClose,
                    format!(
                        "</{root}> at line {line_no} closes no envelope; the envelope is lines {}–{}, remove this line",
                        open + 1,
                        close + 1
                    ),
                )
                .at_line(line_no)
                .in_field(root),
            ),
            Line::Open(t) | Line::Close(t) | Line::Inline(t, _) | Line::OpenWithText(t) => c.push(
                Diagnostic::new(
                    Code::MisplacedField,
                    format!(
                        "<{}> at line {line_no} is outside the envelope; every field belongs between <{root}> and </{root}>",
                        tags.name(t)
                    ),
                )
                .at_line(line_no)
                .in_field(root),
            ),
            _ => text_lines.push(i),
        }
    }

    let chars: usize = text_lines
        .iter()
        .map(|&i| lines[i].trim().chars().count())
        .sum();
    if text_lines.len() > MAX_SURROUNDING_LINES || chars > MAX_SURROUNDING_CHARS {
        let first = text_lines[0];
        c.push(
            Diagnostic::new(
                Code::SurroundingText,
                format!(
                    "{} lines ({chars} characters) of text outside the envelope, starting at line {} (\"{}\"); at most {MAX_SURROUNDING_LINES} short lines ({MAX_SURROUNDING_CHARS} characters) are tolerated — return only the envelope, with your analysis inside its fields",
                    text_lines.len(),
                    first + 1,
                    preview(lines[first])
                ),
            )
            .at_line(first as u32 + 1)
            .in_field(root),
        );
    }
}

/// The info string of a fence line (```` ```xml ```` → `xml`), or `None` if not a fence line.
fn fence_info(line: &str) -> Option<&str> {
    line.trim().strip_prefix("```").map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::spec::Kind;
    use super::tree::MAX_RECORD_FIELDS;

    #[test]
    fn every_record_fits_the_structure_check() {
        for spec in [
            &crate::review::SPEC,
            &crate::issue_analysis::SPEC,
            &crate::scan::SPEC,
        ] {
            assert!(spec.fields.len() <= MAX_RECORD_FIELDS, "{}", spec.root);
            for f in spec.tags() {
                if let Kind::Record(fields) = f.kind {
                    assert!(fields.len() <= MAX_RECORD_FIELDS, "{}", f.tag);
                }
            }
        }
    }
}
