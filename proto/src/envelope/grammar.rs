//! The decoding grammar of an envelope, generated from the same field table as its parser and its
//! contract text: a grammar-capable server held to it can only write an envelope with every field
//! in order, every scalar inside its domain and every text non-empty (P1 rules 1–5).
//!
//! The grammar is a strict subset of what the parser accepts: block-form texts only, no blank
//! lines, no surrounding text. Every list and text has an upper bound, so a small model cannot
//! run on until its token limit.

use super::spec::{Domain, EnvelopeSpec, Field, Kind};
use crate::diff::CommentableLines;
use crate::gbnf::{Expr, Grammar};

/// Upper bounds of a generated envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EnvelopeBounds {
    /// Blocks in one list (findings, labels).
    pub max_items: u32,
    /// Lines of one text field.
    pub max_lines: u32,
    /// Characters of one line of text.
    pub max_line_chars: u32,
}

pub(crate) fn grammar(
    spec: &EnvelopeSpec,
    bounds: EnvelopeBounds,
    lines: Option<&CommentableLines>,
) -> Grammar {
    let mut g = Grammar::default();
    let body = fields(&mut g, spec.fields, bounds, lines);
    let root = spec.root;
    g.set_root(Expr::Seq(vec![
        Expr::lit(format!("<{root}>\n")),
        body,
        Expr::lit(format!("</{root}>")),
    ]));
    g
}

fn fields(
    g: &mut Grammar,
    fields: &[Field],
    bounds: EnvelopeBounds,
    lines: Option<&CommentableLines>,
) -> Expr {
    let mut out = Vec::new();
    let mut i = 0;
    while i < fields.len() {
        if is_location(&fields[i..]) {
            out.push(location(g, lines));
            i += LOCATION.len();
        } else {
            out.push(field(g, &fields[i], bounds, lines));
            i += 1;
        }
    }
    Expr::Seq(out)
}

/// The tags the parser reads as one location (`values::location`), in their order.
const LOCATION: [&str; 3] = ["FILE", "START_LINE", "END_LINE"];

fn is_location(fields: &[Field]) -> bool {
    fields.len() >= LOCATION.len()
        && fields.iter().zip(LOCATION).all(|(f, tag)| f.tag == tag)
        && matches!(fields[0].kind, Kind::Scalar(Domain::PathOrNone))
        && fields[1..LOCATION.len()]
            .iter()
            .all(|f| matches!(f.kind, Kind::Scalar(Domain::PositiveOrNone)))
}

/// More commentable lines than this, and the location is not narrowed: the grammar would grow
/// with the diff (one rule per line).
const MAX_NARROWED_LINES: u64 = 4000;

fn location(g: &mut Grammar, lines: Option<&CommentableLines>) -> Expr {
    if g.has("location") {
        return Expr::rule("location");
    }
    let nowhere =
        Expr::lit("<FILE>NONE</FILE>\n<START_LINE>NONE</START_LINE>\n<END_LINE>NONE</END_LINE>\n");
    let total: u64 = lines
        .map(|l| {
            l.files
                .iter()
                .flat_map(|f| &f.lines)
                .map(|&(a, b)| u64::from(b.saturating_sub(a)) + 1)
                .sum()
        })
        .unwrap_or(0);
    let mut options = vec![nowhere];
    match lines {
        Some(lines) if total > 0 && total <= MAX_NARROWED_LINES => {
            for (n, file) in lines.files.iter().enumerate() {
                if !usable_path(&file.path) || file.lines.is_empty() {
                    continue;
                }
                let ranges: Vec<Expr> = file
                    .lines
                    .iter()
                    .map(|&(a, b)| line_range(g, &format!("f{n}"), a.max(1), b))
                    .collect();
                options.push(Expr::Seq(vec![
                    Expr::lit(format!("<FILE>{}</FILE>\n<START_LINE>", file.path)),
                    Expr::Alt(ranges),
                    Expr::lit("</END_LINE>\n"),
                ]));
            }
        }
        _ => {
            let path = path_rule(g);
            let positive = positive(g);
            options.push(Expr::Seq(vec![
                Expr::lit("<FILE>"),
                path,
                Expr::lit("</FILE>\n<START_LINE>"),
                positive.clone(),
                Expr::lit("</START_LINE>\n<END_LINE>"),
                positive,
                Expr::lit("</END_LINE>\n"),
            ]));
        }
    }
    g.define("location", Expr::Alt(options))
}

/// `START_LINE` in `a..=b`, `</START_LINE>`, `<END_LINE>` and an end from the start to `b`:
/// `ends-s` is `s` or `ends-(s+1)`, one rule per line, so the grammar grows linearly.
fn line_range(g: &mut Grammar, file: &str, a: u32, b: u32) -> Expr {
    let ends = |s: u32| format!("{file}-ends-{s}");
    for s in (a..=b).rev() {
        let here = Expr::lit(s.to_string());
        let rule = if s == b {
            here
        } else {
            Expr::Alt(vec![here, Expr::rule(ends(s + 1))])
        };
        g.define(&ends(s), rule);
    }
    Expr::Alt(
        (a..=b)
            .map(|s| {
                Expr::Seq(vec![
                    Expr::lit(format!("{s}</START_LINE>\n<END_LINE>")),
                    Expr::rule(ends(s)),
                ])
            })
            .collect(),
    )
}

fn positive(g: &mut Grammar) -> Expr {
    g.define(
        "positive",
        Expr::Seq(vec![
            Expr::range('1', '9'),
            Expr::range('0', '9').repeat(0, 8),
        ]),
    )
}

fn field(
    g: &mut Grammar,
    f: &Field,
    bounds: EnvelopeBounds,
    lines: Option<&CommentableLines>,
) -> Expr {
    let tag = f.tag;
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>\n"));
    match &f.kind {
        Kind::Scalar(domain) => {
            let value = domain_rule(g, tag, *domain);
            Expr::Seq(vec![Expr::lit(open), value, Expr::lit(close)])
        }
        Kind::Text => {
            let line = text_line(g, bounds);
            Expr::Seq(vec![
                Expr::lit(format!("{open}\n")),
                line.repeat(1, bounds.max_lines.max(1)),
                Expr::lit(close),
            ])
        }
        Kind::Record(children) => {
            let name = format!("{}-block", tag.to_ascii_lowercase());
            let body = fields(g, children, bounds, lines);
            g.define(
                &name,
                Expr::Seq(vec![Expr::lit(format!("{open}\n")), body, Expr::lit(close)]),
            )
        }
        Kind::List(item) => {
            let item = field(g, item, bounds, lines);
            Expr::Seq(vec![
                Expr::lit(format!("{open}\n")),
                item.repeat(0, bounds.max_items),
                Expr::lit(close),
            ])
        }
    }
}

/// One content line of a text: optional indentation, then a first character that cannot start a
/// tag, so no content line is ever read as structure (P1 rule 5).
fn text_line(g: &mut Grammar, bounds: EnvelopeBounds) -> Expr {
    g.define(
        "text-line",
        Expr::Seq(vec![
            Expr::Class {
                negated: false,
                ranges: vec![(' ', ' '), ('\t', '\t')],
            }
            .repeat(0, 8),
            Expr::none_of("< \t\r\n"),
            Expr::none_of("\r\n").repeat(0, bounds.max_line_chars.saturating_sub(1)),
            Expr::lit("\n"),
        ]),
    )
}

fn domain_rule(g: &mut Grammar, tag: &str, domain: Domain) -> Expr {
    let none = || Expr::lit("NONE");
    match domain {
        Domain::Exactly(value) => Expr::lit(value),
        // Every domain in the tables is narrow (1-10, 0-100): spelled out, the range is exact.
        Domain::Int(min, max) => Expr::Alt((min..=max).map(|n| Expr::lit(n.to_string())).collect()),
        Domain::PositiveOrNone => Expr::Alt(vec![none(), positive(g)]),
        Domain::PathOrNone => Expr::Alt(vec![none(), path_rule(g)]),
        Domain::OneOf(names) => {
            let names = names();
            let name = format!("{}-value", tag.to_ascii_lowercase());
            g.define(&name, Expr::Alt(names.into_iter().map(Expr::lit).collect()))
        }
        Domain::Fraction => Expr::Alt(vec![
            Expr::Seq(vec![Expr::lit("0."), Expr::range('0', '9').repeat(1, 3)]),
            Expr::lit("1.0"),
            Expr::lit("0"),
            Expr::lit("1"),
        ]),
        Domain::Word => Expr::none_of("<> \t\r\n").repeat(1, 64),
        Domain::Line => g.define(
            "line-value",
            Expr::Seq(vec![
                Expr::none_of("<> \t\r\n"),
                Expr::Seq(vec![
                    Expr::none_of("<>\r\n").repeat(0, 118),
                    Expr::none_of("<> \t\r\n"),
                ])
                .optional(),
            ]),
        ),
    }
}

/// A path the envelope can carry as a scalar value: one line, no `<` or `>`, no surrounding
/// whitespace.
fn usable_path(p: &str) -> bool {
    !p.is_empty()
        && p.trim() == p
        && !p.contains(['<', '>', '\n', '\r'])
        && crate::location::repository_path_problem(p).is_none()
}

/// A repository-relative path: segments of path characters, none of them `.` or `..`.
fn path_rule(g: &mut Grammar) -> Expr {
    if g.has("path") {
        return Expr::rule("path");
    }
    let plain = || Expr::Class {
        negated: false,
        ranges: vec![('a', 'z'), ('A', 'Z'), ('0', '9'), ('_', '_'), ('-', '-')],
    };
    let tail = || {
        Expr::Class {
            negated: false,
            ranges: vec![
                ('a', 'z'),
                ('A', 'Z'),
                ('0', '9'),
                ('_', '_'),
                ('-', '-'),
                ('.', '.'),
            ],
        }
        .repeat(0, 63)
    };
    let segment = g.define(
        "path-segment",
        Expr::Alt(vec![
            Expr::Seq(vec![plain(), tail()]),
            Expr::Seq(vec![Expr::lit("."), plain(), tail()]),
        ]),
    );
    g.define(
        "path",
        Expr::Seq(vec![
            segment.clone(),
            Expr::Seq(vec![Expr::lit("/"), segment]).repeat(0, 15),
        ]),
    )
}
