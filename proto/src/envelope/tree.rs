//! Builds the field tree inside one envelope and checks its structure (P1 rules 1 and 5).
//!
//! The walk never stops at the first problem: it reports, recovers at the next recognisable tag
//! line and goes on, so one repair round can show the model everything that is wrong.

use super::lexer::{Line, Tags};
use super::path::Path;
use super::spec::{EnvelopeSpec, Field, Kind};
use crate::diagnostic::{Collector, Diagnostic, DiagnosticCode as Code};

/// One field as written.
#[derive(Debug)]
pub(crate) struct Node<'s, 'a> {
    pub field: &'static Field,
    /// 1-based line of the opening (or only) tag line.
    pub line: u32,
    pub value: Value<'s, 'a>,
}

#[derive(Debug)]
pub(crate) enum Value<'s, 'a> {
    /// The untrimmed value of `<TAG>value</TAG>`.
    Scalar(&'a str),
    /// Single-line text (untrimmed).
    InlineText(&'a str),
    /// The content lines between the tag lines of a block text field, and the indentation of the
    /// opening tag line: content indentation counts from the tag, so an indented envelope keeps
    /// its code's relative indentation without gaining the envelope's.
    BlockText { lines: &'s [&'a str], indent: usize },
    /// A record or list block.
    Block { children: Vec<Node<'s, 'a>> },
    /// Present but structurally broken; the reason is already a diagnostic.
    Broken,
}

pub(crate) struct TreeParser<'s, 'a, 'c> {
    lines: &'s [&'a str],
    kinds: &'s [Line<'a>],
    tags: &'s Tags,
    c: &'c mut Collector,
    /// Diagnostics are dropped while skipping a misplaced block, so one mistake is one message.
    muted: bool,
    /// Allowed child tags of every enclosing block, innermost last: a tag that belongs to an
    /// ancestor means the current block was never closed.
    ancestors: Vec<&'static [Field]>,
}

impl<'s, 'a, 'c> TreeParser<'s, 'a, 'c> {
    pub(super) fn new(
        lines: &'s [&'a str],
        kinds: &'s [Line<'a>],
        tags: &'s Tags,
        c: &'c mut Collector,
    ) -> Self {
        TreeParser {
            lines,
            kinds,
            tags,
            c,
            muted: false,
            ancestors: Vec::new(),
        }
    }

    fn report(&mut self, d: Diagnostic) {
        if !self.muted {
            self.c.push(d);
        }
    }

    /// Parses the root's fields on lines `start..end` (exclusive of the envelope's own tag lines)
    /// and checks their order; `end` is the index of the closing envelope line.
    pub(super) fn root(
        &mut self,
        spec: &EnvelopeSpec,
        start: usize,
        end: usize,
    ) -> Vec<Node<'s, 'a>> {
        let path = Path::root(spec.root);
        let mut pos = start;
        let children = self.block_children(
            Tags::ROOT,
            spec.fields,
            false,
            start as u32,
            &mut pos,
            end,
            true,
            &path,
        );
        check_record(self, spec.fields, &children, end as u32 + 1, &path);
        children
    }

    /// Reads the children of a block until its closing tag (or `end`). Returns the children; the
    /// position is left after the closing tag when there is one.
    #[allow(clippy::too_many_arguments)]
    fn block_children(
        &mut self,
        own_tag: usize,
        allowed: &'static [Field],
        repeated: bool,
        open_line: u32,
        pos: &mut usize,
        end: usize,
        closed_by_end: bool,
        path: &Path<'_>,
    ) -> Vec<Node<'s, 'a>> {
        let mut nodes: Vec<Node<'s, 'a>> = Vec::new();
        let own_name = self.tags.name(own_tag);
        loop {
            if *pos >= end {
                if !closed_by_end {
                    self.report(
                        Diagnostic::new(
                            Code::UnclosedBlock,
                            format!(
                                "<{own_name}> opened at line {open_line} is never closed; add a line </{own_name}> after its last field"
                            ),
                        )
                        .at_line(open_line)
                        .in_field(path.render()),
                    );
                }
                return nodes;
            }
            let i = *pos;
            let line_no = i as u32 + 1;
            match self.kinds[i] {
                Line::Blank => *pos += 1,
                Line::Close(t) if t == own_tag => {
                    *pos += 1;
                    return nodes;
                }
                Line::Close(t) => {
                    if self.belongs_to_ancestor(t) {
                        self.report_unclosed(own_name, open_line, line_no, path);
                        return nodes;
                    }
                    let name = self.tags.name(t);
                    self.report(
                        Diagnostic::new(
                            Code::UnmatchedClose,
                            format!(
                                "</{name}> has no matching <{name}> before it; remove it or open the field first"
                            ),
                        )
                        .at_line(line_no)
                        .in_field(path.render()),
                    );
                    *pos += 1;
                }
                Line::Open(t) | Line::Inline(t, _) | Line::OpenWithText(t) => {
                    let Some(field) = self.tags.field(t) else {
                        // A second envelope opening inside the first: counted and reported by the
                        // envelope locator; skip the line here.
                        *pos += 1;
                        continue;
                    };
                    if let Some(child) = allowed.iter().find(|f| f.tag == field.tag) {
                        // A list allows only its item field, so every node so far is an item.
                        let child_path = if repeated {
                            path.item(child.tag, nodes.len() + 1)
                        } else {
                            path.child(child.tag)
                        };
                        self.ancestors.push(allowed);
                        let node = self.field(child, pos, end, &child_path);
                        self.ancestors.pop();
                        nodes.push(node);
                    } else if self.belongs_to_ancestor(t) {
                        self.report_unclosed(own_name, open_line, line_no, path);
                        return nodes;
                    } else {
                        let tag = field.tag;
                        let expected = if repeated {
                            format!("only <{}> blocks", allowed.first().map_or("?", |f| f.tag))
                        } else {
                            format!("only {}", EnvelopeSpec::order_list(allowed))
                        };
                        self.report(
                            Diagnostic::new(
                                Code::MisplacedField,
                                format!(
                                    "<{tag}> does not belong directly inside <{own_name}>, which holds {expected}; move it to its own block"
                                ),
                            )
                            .at_line(line_no)
                            .in_field(path.child(tag).render()),
                        );
                        self.skip_field(field, pos, end, path);
                    }
                }
                Line::Unknown(text) => {
                    let message = unknown_tag_message(text, self.tags, allowed, own_name);
                    self.report(
                        Diagnostic::new(Code::UnknownTag, message)
                            .at_line(line_no)
                            .in_field(path.render()),
                    );
                    *pos = self.skip_unknown_block(text, i, end);
                }
                Line::Text => {
                    let first = i;
                    while *pos < end && self.kinds[*pos] == Line::Text {
                        *pos += 1;
                    }
                    let last = *pos - 1;
                    let lines = if last > first {
                        format!("lines {}–{}", first + 1, last + 1)
                    } else {
                        format!("line {}", first + 1)
                    };
                    self.report(
                        Diagnostic::new(
                            Code::UnexpectedText,
                            format!(
                                "text outside any field ({lines}: \"{}\"); every line inside <{own_name}> must belong to a field — move it into one or remove it",
                                preview(self.lines[first])
                            ),
                        )
                        .at_line(first as u32 + 1)
                        .in_field(path.render()),
                    );
                }
            }
        }
    }

    /// Parses one field starting at its tag line.
    fn field(
        &mut self,
        field: &'static Field,
        pos: &mut usize,
        end: usize,
        path: &Path<'_>,
    ) -> Node<'s, 'a> {
        let i = *pos;
        let line = i as u32 + 1;
        let tag = field.tag;
        let kind = self.kinds[i];
        let value = match (&field.kind, kind) {
            (Kind::Scalar(_), Line::Inline(_, v)) => {
                *pos += 1;
                Value::Scalar(v)
            }
            (Kind::Scalar(_), _) => {
                self.report(
                    Diagnostic::new(
                        Code::NotSingleLine,
                        format!("<{tag}> must be written on one line, as <{tag}>value</{tag}>"),
                    )
                    .at_line(line)
                    .in_field(path.render()),
                );
                *pos += 1;
                // Swallow a `value` / `</TAG>` pair written over the next lines.
                if matches!(self.kinds.get(*pos), Some(Line::Text))
                    && matches!(self.kinds.get(*pos + 1), Some(Line::Close(t)) if self.tags.name(*t) == tag)
                {
                    *pos += 2;
                } else if matches!(self.kinds.get(*pos), Some(Line::Close(t)) if self.tags.name(*t) == tag)
                {
                    *pos += 1;
                }
                Value::Broken
            }
            (Kind::Text, Line::Inline(_, v)) => {
                *pos += 1;
                Value::InlineText(v)
            }
            (Kind::Text, Line::Open(t)) => self.text_block(t, tag, i, pos, end, path),
            (Kind::Text, _) => {
                self.report(
                    Diagnostic::new(
                        Code::MalformedTagLine,
                        format!(
                            "<{tag}> has text on the same line; put <{tag}> alone on its line with the text on the following lines and </{tag}> alone after them, or write <{tag}>text</{tag}> on one line"
                        ),
                    )
                    .at_line(line)
                    .in_field(path.render()),
                );
                let t = self.tags.index(tag).unwrap_or(Tags::ROOT);
                let muted = std::mem::replace(&mut self.muted, true);
                self.text_block(t, tag, i, pos, end, path);
                self.muted = muted;
                Value::Broken
            }
            (Kind::Record(_) | Kind::List(_), Line::Open(t)) => {
                *pos += 1;
                self.container(field, t, line, pos, end, path)
            }
            (Kind::Record(_) | Kind::List(_), Line::Inline(_, v)) if v.trim().is_empty() => {
                *pos += 1;
                if let Some(children) = field.children()
                    && matches!(field.kind, Kind::Record(_))
                {
                    check_record(self, children, &[], line, path);
                }
                Value::Block {
                    children: Vec::new(),
                }
            }
            (Kind::Record(_) | Kind::List(_), _) => {
                self.report(
                    Diagnostic::new(
                        Code::MalformedTagLine,
                        format!(
                            "<{tag}> must be alone on its line, with its fields on the following lines and </{tag}> alone after them"
                        ),
                    )
                    .at_line(line)
                    .in_field(path.render()),
                );
                *pos += 1;
                if matches!(kind, Line::OpenWithText(_)) {
                    let t = self.tags.index(tag).unwrap_or(Tags::ROOT);
                    let _ = self.container(field, t, line, pos, end, path);
                }
                Value::Broken
            }
        };
        Node { field, line, value }
    }

    fn container(
        &mut self,
        field: &'static Field,
        own_tag: usize,
        open_line: u32,
        pos: &mut usize,
        end: usize,
        path: &Path<'_>,
    ) -> Value<'s, 'a> {
        let Some(children) = field.children() else {
            return Value::Broken;
        };
        let repeated = matches!(field.kind, Kind::List(_));
        let nodes = self.block_children(
            own_tag, children, repeated, open_line, pos, end, false, path,
        );
        // The closing tag is the line before `pos` when the block was closed properly.
        let close_line = if *pos > 0
            && matches!(self.kinds.get(*pos - 1), Some(Line::Close(t)) if *t == own_tag)
        {
            *pos as u32
        } else {
            (*pos).min(self.lines.len()) as u32
        };
        if !repeated {
            check_record(self, children, &nodes, close_line, path);
        }
        Value::Block { children: nodes }
    }

    fn text_block(
        &mut self,
        own_tag: usize,
        tag: &'static str,
        open: usize,
        pos: &mut usize,
        end: usize,
        path: &Path<'_>,
    ) -> Value<'s, 'a> {
        let open_line = open as u32 + 1;
        let mut j = open + 1;
        let mut ends_with_close: Option<usize> = None;
        while j < end {
            match self.kinds[j] {
                Line::Close(t) if t == own_tag => {
                    *pos = j + 1;
                    let opening = self.lines[open];
                    let indent = opening.len() - opening.trim_start().len();
                    return Value::BlockText {
                        lines: &self.lines[open + 1..j],
                        indent,
                    };
                }
                Line::Open(t) | Line::Close(t) | Line::Inline(t, _) => {
                    let name = self.tags.name(t);
                    let closing = format!("</{tag}>");
                    let hint = close_hint(ends_with_close, &closing);
                    self.report(
                        Diagnostic::new(
                            Code::TagInText,
                            format!(
                                "the tag line of <{name}> at line {} is inside the text of <{tag}> opened at line {open_line}; close <{tag}> with a line {closing} before it{hint}",
                                j + 1
                            ),
                        )
                        .at_line(j as u32 + 1)
                        .in_field(path.render()),
                    );
                    *pos = j;
                    return Value::Broken;
                }
                _ => {
                    if ends_with_close.is_none() && ends_with_close_tag(self.lines[j], tag) {
                        ends_with_close = Some(j);
                    }
                }
            }
            j += 1;
        }
        let closing = format!("</{tag}>");
        let hint = close_hint(ends_with_close, &closing);
        self.report(
            Diagnostic::new(
                Code::UnclosedBlock,
                format!(
                    "<{tag}> opened at line {open_line} is never closed; add a line {closing} after its text{hint}"
                ),
            )
            .at_line(open_line)
            .in_field(path.render()),
        );
        *pos = end;
        Value::Broken
    }

    fn belongs_to_ancestor(&self, tag_index: usize) -> bool {
        if tag_index == Tags::ROOT {
            return true;
        }
        let name = self.tags.name(tag_index);
        self.ancestors
            .iter()
            .any(|allowed| allowed.iter().any(|f| f.tag == name))
    }

    fn report_unclosed(&mut self, own: &str, open_line: u32, at: u32, path: &Path<'_>) {
        self.report(
            Diagnostic::new(
                Code::UnclosedBlock,
                format!(
                    "<{own}> opened at line {open_line} is not closed before line {at}; add a line </{own}> after its last field"
                ),
            )
            .at_line(at)
            .in_field(path.render()),
        );
    }

    /// Consumes a field that was reported as misplaced without reporting what is inside it.
    fn skip_field(&mut self, field: &'static Field, pos: &mut usize, end: usize, path: &Path<'_>) {
        let muted = std::mem::replace(&mut self.muted, true);
        let child = path.child(field.tag);
        self.ancestors.push(&[]);
        let _ = self.field(field, pos, end, &child);
        self.ancestors.pop();
        self.muted = muted;
    }

    /// After an unknown `<NAME>` line, skips to its `</NAME>` when that comes before any protocol
    /// tag line, so an invented block is one diagnostic rather than one per line.
    fn skip_unknown_block(&self, text: &str, at: usize, end: usize) -> usize {
        if text.starts_with("</") || text.contains("</") {
            return at + 1;
        }
        let closing = format!("</{}", &text[1..]);
        for j in at + 1..end {
            match self.kinds[j] {
                Line::Unknown(t) if t == closing => return j + 1,
                Line::Open(_) | Line::Close(_) | Line::Inline(..) | Line::OpenWithText(_) => {
                    return at + 1;
                }
                _ => {}
            }
        }
        at + 1
    }
}

/// Whether a content line ends with `</tag>`: a closing tag that is not alone on its line.
fn ends_with_close_tag(line: &str, tag: &str) -> bool {
    line.trim_end()
        .strip_suffix('>')
        .and_then(|s| s.strip_suffix(tag))
        .is_some_and(|s| s.ends_with("</"))
}

fn close_hint(ends_with_close: Option<usize>, closing: &str) -> String {
    match ends_with_close {
        Some(j) => format!(
            " (line {} ends with {closing}, but a closing tag must be alone on its line)",
            j + 1
        ),
        None => String::new(),
    }
}

fn unknown_tag_message(text: &str, tags: &Tags, allowed: &[Field], own: &str) -> String {
    let name: String = text
        .trim_start_matches('<')
        .trim_start_matches('/')
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let upper = name.to_ascii_uppercase();
    if upper != name && tags.index(&upper).is_some() {
        return format!("unknown tag <{name}>; protocol tags are uppercase: write <{upper}>");
    }
    format!(
        "unknown tag <{name}>; the protocol has no such field — remove it (<{own}> holds: {})",
        EnvelopeSpec::order_list(allowed)
    )
}

/// The most fields one record of any protocol has (a test keeps the specs within it).
pub(crate) const MAX_RECORD_FIELDS: usize = 16;

/// Checks order, uniqueness and presence of a record's fields (P1 rule 1). Values are checked
/// by the protocol.
fn check_record(
    p: &mut TreeParser<'_, '_, '_>,
    fields: &'static [Field],
    nodes: &[Node<'_, '_>],
    close_line: u32,
    path: &Path<'_>,
) {
    let index_of = |n: &Node<'_, '_>| fields.iter().position(|f| f.tag == n.field.tag);
    // Records are small and checked once per block; fixed arrays keep this allocation-free.
    let mut first_line = [None::<u32>; MAX_RECORD_FIELDS];
    if fields.len() > MAX_RECORD_FIELDS {
        return;
    }
    for n in nodes {
        let Some(i) = index_of(n) else { continue };
        match first_line[i] {
            None => first_line[i] = Some(n.line),
            Some(first) => p.report(
                Diagnostic::new(
                    Code::DuplicateField,
                    format!(
                        "<{tag}> appears again (first at line {first}); each field must appear exactly once — merge them into one <{tag}>",
                        tag = n.field.tag
                    ),
                )
                .at_line(n.line)
                .in_field(path.child(n.field.tag).render()),
            ),
        }
    }
    // Order among the fields that are present: the next expected is the earliest present field
    // not yet seen, so a missing field is reported as missing, not as out of order.
    let mut consumed = [false; MAX_RECORD_FIELDS];
    let mut seen_once = [false; MAX_RECORD_FIELDS];
    for n in nodes {
        let Some(i) = index_of(n) else { continue };
        if seen_once[i] {
            continue;
        }
        seen_once[i] = true;
        let expected = (0..fields.len()).find(|&k| first_line[k].is_some() && !consumed[k]);
        if let Some(e) = expected
            && e != i
        {
            p.report(
                    Diagnostic::new(
                        Code::FieldOrder,
                        format!(
                            "expected <{}> next but found <{}>; each field must appear exactly once, in this order: {}",
                            fields[e].tag,
                            fields[i].tag,
                            EnvelopeSpec::order_list(fields)
                        ),
                    )
                    .at_line(n.line)
                    .in_field(path.child(fields[i].tag).render()),
                );
            break;
        }
        consumed[i] = true;
    }
    for (i, f) in fields.iter().enumerate() {
        if first_line[i].is_some() {
            continue;
        }
        let after = fields[..i].last().map(|f| f.tag);
        let next_present = (i + 1..fields.len()).find_map(|k| first_line[k]);
        let place = match after {
            Some(prev) => format!("add it after <{prev}>"),
            None => format!("add it as the first field of <{}>", path.tag()),
        };
        p.report(
            Diagnostic::new(
                Code::MissingField,
                format!(
                    "missing <{tag}>; {place} (fields in order: {})",
                    EnvelopeSpec::order_list(fields),
                    tag = f.tag
                ),
            )
            .at_line(next_present.unwrap_or(close_line))
            .in_field(path.child(f.tag).render()),
        );
    }
}

/// A short, single-line, control-character-free quote of model text for a diagnostic.
pub(crate) fn preview(text: &str) -> String {
    const MAX: usize = 60;
    let clean: String = text
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if clean.chars().count() > MAX {
        let cut: String = clean.chars().take(MAX).collect();
        format!("{cut}…")
    } else {
        clean
    }
}
