//! P5 output-tag extraction: the final answer of an agent that first works in free form is one
//! `<output>…</output>` block at the very end of its response, holding one JSON object.
//!
//! Decisions (each has a data case under `tests/data/comments/`):
//! - The block is anchored on the **last** `<output>` opening: everything before it is the agent's
//!   free-form work and is allowed, including a bare mention of `<output>` in prose.
//! - A *second complete* `<output>…</output>` pair anywhere before it is
//!   [`MultipleOutputBlocks`](crate::DiagnosticCode::MultipleOutputBlocks): which one is the
//!   answer would be a guess.
//! - Only whitespace may follow `</output>`; anything else is
//!   [`TextAfterOutputBlock`](crate::DiagnosticCode::TextAfterOutputBlock).
//! - An `<output>` never closed is [`UnclosedOutputBlock`](crate::DiagnosticCode::UnclosedOutputBlock)
//!   (a truncated answer), unless a complete block came before it, in which case the later text
//!   is text after that block.
//! - No `<output>` at all is [`NoOutputBlock`](crate::DiagnosticCode::NoOutputBlock). Tags are
//!   lowercase and exact (`<output>`, `</output>`).
//! - The body is one JSON object, plain or in one ```` ```json ```` or bare ```` ``` ```` fence
//!   (stripped), with the P4 rules inside the block. A contract may tolerate known aliases and
//!   missing arrays ([`Tolerance`]); the parsed value is always in the canonical shape.
//!
//! The extraction is generic ([`parse`] works with any [`JsonContract`]); [`comments`] is the
//! concrete contract behind [`ProtocolId::Comments`](crate::ProtocolId::Comments).

pub mod comments;

use memchr::memmem;
use serde_json::Value;

use crate::contracts::extract::{self, Frame, preview};
use crate::contracts::locate::Lines;
use crate::contracts::tolerance::Tolerance;
use crate::contracts::{self, JsonContract};
use crate::diagnostic::Collector;
use crate::{Diagnostic, DiagnosticCode, Diagnostics, Language};

const OPEN: &str = "<output>";
const CLOSE: &str = "</output>";

/// Where the answer block is in a response (byte offsets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// The `<` of `<output>`.
    pub open: usize,
    /// Just after `<output>`.
    pub body_start: usize,
    /// The `<` of `</output>`.
    pub body_end: usize,
    /// Just after `</output>`.
    pub close_end: usize,
}

/// Finds the answer block, or says why there is no single final one. Also returns the
/// diagnostics of a block that was found but is not alone or not last, so the body can still
/// be checked in the same round.
fn find_block(response: &str, lines: &Lines) -> (Option<Block>, Vec<Diagnostic>) {
    let bytes = response.as_bytes();
    let opens: Vec<usize> = memmem::find_iter(bytes, OPEN).collect();
    let closes: Vec<usize> = memmem::find_iter(bytes, CLOSE).collect();
    let Some(&anchor) = opens.last() else {
        let hint = if response.to_ascii_lowercase().contains(OPEN) {
            " (the tags are lowercase: <output> and </output>)"
        } else {
            ""
        };
        return (
            None,
            vec![
                Diagnostic::new(
                    DiagnosticCode::NoOutputBlock,
                    format!(
                        "no <output>…</output> block found{hint}; end the response with exactly one <output> block holding the JSON object"
                    ),
                )
                .at_line(1)
                .in_field("$"),
            ],
        );
    };

    // The first complete block before the anchor, if any: the first close after the first
    // open, with the last open before it (both lists are sorted; no pairwise scan, so a response
    // full of tags stays linear).
    let earlier = opens.first().and_then(|&first_open| {
        let close = *closes.get(closes.partition_point(|&c| c < first_open))?;
        let open = *opens.get(opens.partition_point(|&o| o < close).checked_sub(1)?)?;
        (close < anchor).then_some((open, close))
    });

    let Some(close) = closes.iter().copied().find(|&c| c > anchor) else {
        return match earlier {
            Some((_, earlier_close)) => {
                // A complete block, then more text that opens another: the text after it.
                let after = earlier_close + CLOSE.len();
                let rest = &response[after..];
                let trailing = rest.trim_start();
                let at = after + (rest.len() - trailing.len());
                (None, vec![text_after(lines, after, at, trailing)])
            }
            None => (
                None,
                vec![
                    Diagnostic::new(
                        DiagnosticCode::UnclosedOutputBlock,
                        format!(
                            "the <output> block opened at line {} is never closed with </output>; the output looks truncated — emit the complete block",
                            lines.line(anchor)
                        ),
                    )
                    .at_line(lines.last())
                    .in_field("$"),
                ],
            ),
        };
    };

    let block = Block {
        open: anchor,
        body_start: anchor + OPEN.len(),
        body_end: close,
        close_end: close + CLOSE.len(),
    };
    let mut problems = Vec::new();
    if let Some((earlier_open, _)) = earlier {
        problems.push(
            Diagnostic::new(
                DiagnosticCode::MultipleOutputBlocks,
                format!(
                    "found more than one <output>…</output> block ({}); emit exactly one, as the last thing in the response, and do not write the tag pair anywhere else",
                    match (lines.line(earlier_open), lines.line(anchor)) {
                        (first, last) if first == last => format!("several on line {first}"),
                        (first, last) => format!("at lines {first} and {last}"),
                    }
                ),
            )
            .at_line(lines.line(earlier_open))
            .in_field("$"),
        );
    }
    let rest = &response[block.close_end..];
    let trailing = rest.trim_start();
    if !trailing.is_empty() {
        let at = block.close_end + (rest.len() - trailing.len());
        problems.push(text_after(lines, block.close_end, at, trailing));
    }
    (Some(block), problems)
}

fn text_after(lines: &Lines, close_end: usize, at: usize, trailing: &str) -> Diagnostic {
    Diagnostic::new(
        DiagnosticCode::TextAfterOutputBlock,
        format!(
            "the <output> block must be the last thing in the response, but text follows its </output> (line {}) at line {}: \"{}\"",
            lines.line(close_end.saturating_sub(1)),
            lines.line(at),
            preview(trailing, 60)
        ),
    )
    .at_line(lines.line(at))
    .in_field("$")
}

/// The block of `response` without checking its body (for callers that only need where it is).
pub fn locate_block(response: &str) -> Result<Block, Diagnostics> {
    let lines = Lines::new(response);
    match find_block(response, &lines) {
        (Some(block), problems) if problems.is_empty() => Ok(block),
        (_, problems) => Err(Diagnostics::new(problems)),
    }
}

/// Parses the final `<output>` block of `response` into `T`, applying `tolerance` (use
/// [`Tolerance::STRICT`] for none). Every diagnostic on failure, located in the whole response.
pub fn parse<T: JsonContract>(response: &str, tolerance: &Tolerance) -> Result<T, Diagnostics> {
    let lines = Lines::new(response);
    let (block, problems) = find_block(response, &lines);
    let Some(block) = block else {
        return Err(Diagnostics::new(problems));
    };
    let parsed = extract::json_body(
        response,
        block.body_start,
        block.body_end,
        Frame::OutputBlock,
    )
    .map_err(Diagnostics::one)
    .and_then(|body| {
        if tolerance.is_strict() {
            contracts::parse_body::<T>(response, body)
        } else {
            contracts::validate_value::<T>(response, body, tolerance)
        }
    });
    if problems.is_empty() {
        return parsed;
    }
    let mut collector = Collector::default();
    for d in problems
        .into_iter()
        .chain(parsed.err().into_iter().flat_map(Diagnostics::into_vec))
    {
        collector.push(d);
    }
    collector.finish::<T>(None)
}

/// The canonical value of a [`ProtocolId::Comments`](crate::ProtocolId::Comments) response.
pub fn validate_canonical(response: &str) -> Result<Value, Diagnostics> {
    comments::parse(response).and_then(|v| crate::validate::canonical(&v))
}

/// The contract text of [`ProtocolId::Comments`](crate::ProtocolId::Comments) in `language`.
pub fn contract_text(language: Language) -> String {
    render::<comments::Comments>(language)
}

/// The contract text of any output-tag contract: the block rules, the schema, one example block.
pub fn render<T: JsonContract>(language: Language) -> String {
    let schema = contracts::contract_text::schema_json(T::schema());
    let example = serde_json::to_string_pretty(&T::example(language)).unwrap_or_default();
    let name = T::PROTOCOL.as_str();
    let (header, intro, rules_title, common, schema_title, example_title) = match language {
        Language::En => (
            format!("# Output contract: {name} (final <output> block)"),
            "Work in free form first if you need to. Your final answer is one <output>…</output> block holding exactly one JSON object that conforms to the JSON Schema below.",
            "Rules:",
            COMMON_EN,
            "JSON Schema:",
            "Example of a final block (the values only illustrate the shape):",
        ),
        Language::ZhCn => (
            format!("# 输出约定：{name}（结尾的 <output> 块）"),
            "如有需要，可以先自由分析。最终答案是一个 <output>…</output> 块，块内恰好是一个符合下方 JSON Schema 的 JSON 对象。",
            "规则：",
            COMMON_ZH,
            "JSON Schema：",
            "结尾块示例（取值仅作示意）：",
        ),
    };
    let mut out = format!("{header}\n\n{intro}\n\n{rules_title}\n");
    for rule in common.iter().chain(T::rules(language)) {
        out.push_str("- ");
        out.push_str(rule);
        out.push('\n');
    }
    out.push_str(&format!(
        "\n{schema_title}\n```json\n{schema}\n```\n\n{example_title}\n<output>\n{example}\n</output>\n"
    ));
    out
}

const COMMON_EN: &[&str] = &[
    "The block is the last thing in your response: nothing but whitespace may follow </output>.",
    "Write exactly one <output>…</output> block. Do not write the tag pair anywhere else, not even in notes or quotations.",
    "Inside the block put only the JSON object (plain, or in one ```json fence), with no text before or after it.",
    "Use exactly the property names of the schema. Use an empty array [] when there is nothing of a kind.",
    "Text values must not be empty. Write natural-language text in English; JSON keys are never translated.",
];

const COMMON_ZH: &[&str] = &[
    "这个块必须是回复的最后内容：</output> 之后只能有空白。",
    "只写一个 <output>…</output> 块。不要在其他任何地方写出这对标签，笔记或引用中也不行。",
    "块内只放这个 JSON 对象（直接写出，或放在一个 ```json 代码块中），对象前后不能有文字。",
    "属性名必须与 schema 完全一致。某一类内容为空时使用空数组 []。",
    "文本值不能为空。自然语言内容用简体中文书写；JSON 键名一律不翻译。",
];
