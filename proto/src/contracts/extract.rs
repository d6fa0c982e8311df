//! P4 extraction: where the one JSON object of a response is, without ever guessing.
//!
//! The response (or the body of an `<output>` block, P5) must be one JSON object, plain or as one
//! complete Markdown fence, with only whitespace around it. This module decides that from the
//! first non-blank characters alone: it never searches prose for braces, so text that happens to
//! contain an object (a quoted diff, a PR description, an injected instruction) can never be
//! taken for the answer. It only finds the frame; whether the JSON inside is complete and valid is
//! the parser's job.

use serde_json::Value;

use crate::{Diagnostic, DiagnosticCode};

use super::locate::Lines;

/// What holds the JSON: it decides which fences are accepted and how diagnostics word the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// A whole P4 response: plain, or one fence whose opening line is ```` ```json ````
    /// (any case). A bare ```` ``` ```` fence is not accepted: P4 names the `json` fence.
    Response,
    /// The body of an `<output>` block (P5): plain, or one ```` ```json ```` or bare
    /// ```` ``` ```` fence, which is stripped.
    OutputBlock,
}

impl Frame {
    /// The rule, as the first half of every framing diagnostic.
    pub(crate) fn rule(self) -> &'static str {
        match self {
            Frame::Response => {
                "the response must be exactly one JSON object (plain, or inside one ```json fence) with nothing before or after it"
            }
            Frame::OutputBlock => {
                "the <output> block must hold exactly one JSON object (plain, or inside one ```json or ``` fence) with nothing before or after it"
            }
        }
    }

    fn accepts_fence(self, info: &str) -> bool {
        info.eq_ignore_ascii_case("json") || (self == Frame::OutputBlock && info.is_empty())
    }
}

/// The text that must be exactly one JSON object, and where it sits in the whole response.
#[derive(Debug, Clone, Copy)]
pub struct Body<'a> {
    /// From the first byte of the JSON (or the line after the opening fence) to the end of the
    /// region (or the line of the closing fence). Trailing text is still in it: the parser reports
    /// it, after it knows where the object ends.
    pub text: &'a str,
    /// Byte offset of `text` in the response, so every line is reported as the model wrote it.
    pub offset: usize,
    pub frame: Frame,
}

/// Finds the JSON text in `response[start..end]`. `start..end` must lie on character
/// boundaries (the whole response, or the inside of an `<output>` block).
pub(crate) fn json_body(
    response: &str,
    start: usize,
    end: usize,
    frame: Frame,
) -> Result<Body<'_>, Diagnostic> {
    let region = response.get(start..end).unwrap_or("");
    let content = region.trim_start_matches(|c: char| c.is_whitespace() || c == '\u{feff}');
    let content_start = start + (region.len() - content.len());
    let content = content.trim_end();

    if content.is_empty() {
        let what = match frame {
            Frame::Response => "the response is empty",
            Frame::OutputBlock => "the <output> block is empty",
        };
        let lines = Lines::new(response);
        return Err(Diagnostic::new(
            DiagnosticCode::InvalidJson,
            format!("{}; {what}", frame.rule()),
        )
        .at_line(lines.line(start))
        .in_field("$"));
    }
    if content.starts_with("```") {
        return fenced(response, content_start, end, frame);
    }
    if content.starts_with('{') {
        return Ok(Body {
            text: &response[content_start..end],
            offset: content_start,
            frame,
        });
    }
    Err(not_an_object(response, content_start, content, frame))
}

/// The response starts with something other than `{` or a fence: a JSON value of another type,
/// or prose. Which one only changes the wording; nothing after the first characters is used.
fn not_an_object(response: &str, at: usize, content: &str, frame: Frame) -> Diagnostic {
    let lines = Lines::new(response);
    let line = lines.line(at);
    let mut values = serde_json::Deserializer::from_str(content).into_iter::<Value>();
    if let Some(Ok(value)) = values.next() {
        let rest = content.get(values.byte_offset()..).unwrap_or("");
        if rest.trim().is_empty() {
            return Diagnostic::new(
                DiagnosticCode::NotAnObject,
                format!(
                    "{}; found {} instead — put the answer in one object with the properties the schema requires",
                    frame.rule(),
                    describe_value(&value)
                ),
            )
            .at_line(line)
            .in_field("$");
        }
    }
    // Only the wording depends on whether an object or fence seems to follow; it is never used.
    let later_json = content.contains('{') || content.contains("```");
    let found = if later_json {
        "found text before it"
    } else {
        "found text instead of a JSON object"
    };
    Diagnostic::new(
        DiagnosticCode::TextAroundJson,
        format!(
            "{}; {found} at line {line}: \"{}\"",
            frame.rule(),
            preview(content, 60)
        ),
    )
    .at_line(line)
    .in_field("$")
}

fn fenced(response: &str, at: usize, end: usize, frame: Frame) -> Result<Body<'_>, Diagnostic> {
    // Line numbers are only needed for a diagnostic; the happy path never counts lines.
    let lines = || Lines::new(response);
    let rest = &response[at..end];
    let (opening, after_opening) = match rest.find('\n') {
        Some(i) => (&rest[..i], at + i + 1),
        None => (rest, end),
    };
    let ticks = opening.bytes().take_while(|&b| b == b'`').count();
    let info = opening[ticks..].trim();
    if !frame.accepts_fence(info) {
        let open_line = lines().line(at);
        let found = if info.is_empty() {
            "found a bare ``` fence (without json)".to_owned()
        } else {
            format!("found a fence opening with \"{}\"", preview(opening, 40))
        };
        let fix = match frame {
            Frame::Response => {
                "open the fence with a line containing only ```json, or send the plain object"
            }
            Frame::OutputBlock => {
                "open the fence with a line containing only ```json or ```, or put the plain object in the block"
            }
        };
        return Err(Diagnostic::new(
            DiagnosticCode::TextAroundJson,
            format!("{}; {found} at line {open_line} — {fix}", frame.rule()),
        )
        .at_line(open_line)
        .in_field("$"));
    }

    // The fence closes at the first line made only of at least as many backticks. A JSON string
    // cannot hold a raw line break, so such a line is never inside a valid object.
    let mut line_start = after_opening;
    let mut close = None;
    while line_start < end {
        let line_end = response[line_start..end]
            .find('\n')
            .map_or(end, |i| line_start + i);
        let line = response[line_start..line_end].trim();
        if line.len() >= ticks && line.bytes().all(|b| b == b'`') {
            close = Some((line_start, line_end));
            break;
        }
        line_start = line_end + 1;
    }

    let Some((close_start, close_end)) = close else {
        let lines = lines();
        let open_line = lines.line(at);
        let inside = response.get(after_opening..end).unwrap_or("");
        let truncated = matches!(
            serde_json::Deserializer::from_str(inside)
                .into_iter::<Value>()
                .next(),
            None | Some(Err(_))
        );
        let fence = opening.trim();
        let close = "`".repeat(ticks);
        let message = if truncated {
            format!(
                "the text ends inside the {fence} fence opened at line {open_line}, before the fence is closed; the output looks truncated — emit the complete object and close the fence with a line containing only {close}"
            )
        } else {
            format!(
                "the {fence} fence opened at line {open_line} is never closed; end it with a line containing only {close}"
            )
        };
        return Err(Diagnostic::new(DiagnosticCode::InvalidJson, message)
            .at_line(lines.last())
            .in_field("$"));
    };

    let after = response.get(close_end..end).unwrap_or("");
    let trailing = after.trim_start();
    if !trailing.is_empty() {
        let offset = end - after.len() + (after.len() - trailing.len());
        return Err(text_after(&lines(), offset, trailing, frame));
    }
    Ok(Body {
        text: &response[after_opening..close_start],
        offset: after_opening,
        frame,
    })
}

/// Text after the object or its fence: an explanation, a second object, a second fence.
pub(crate) fn text_after(lines: &Lines, offset: usize, trailing: &str, frame: Frame) -> Diagnostic {
    let line = lines.line(offset);
    let what = if trailing.starts_with('{') || trailing.starts_with("```") {
        "found a second JSON object or fence after it"
    } else {
        "found text after it"
    };
    Diagnostic::new(
        DiagnosticCode::TextAroundJson,
        format!(
            "{}; {what} at line {line}: \"{}\"",
            frame.rule(),
            preview(trailing, 60)
        ),
    )
    .at_line(line)
    .in_field("$")
}

/// A short, safe quotation of model text for a diagnostic: its first line, control characters
/// removed, cut at `max_chars` with an ellipsis.
pub(crate) fn preview(text: &str, max_chars: usize) -> String {
    let first_line = text.trim_start().lines().next().unwrap_or("");
    let clean: String = first_line.chars().filter(|c| !c.is_control()).collect();
    let clean = clean.trim();
    let mut out: String = clean.chars().take(max_chars).collect();
    if clean.chars().count() > max_chars || text.trim().lines().nth(1).is_some() {
        out = out.trim_end().to_owned();
        out.push('…');
    }
    out
}

/// `the string "yes"`, `the number 3`, `an array`: how a diagnostic names a value it rejects.
pub(crate) fn describe_value(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.is_empty() => "an empty string".to_owned(),
        Value::String(s) => format!("the string \"{}\"", preview(s, 40)),
        Value::Array(a) if a.is_empty() => "an empty array".to_owned(),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(response: &str) -> Result<&str, Diagnostic> {
        json_body(response, 0, response.len(), Frame::Response).map(|b| b.text)
    }

    #[test]
    fn plain_and_fenced_objects_are_found() {
        assert_eq!(body("  {\"a\": 1}\n").unwrap(), "{\"a\": 1}\n");
        assert_eq!(body("```json\n{\"a\": 1}\n```").unwrap(), "{\"a\": 1}\n");
        assert_eq!(body("\n```JSON\r\n{}\r\n```\r\n").unwrap(), "{}\r\n");
        assert_eq!(body("````json\n{}\n````").unwrap(), "{}\n");
    }

    #[test]
    fn bare_fence_is_a_p4_error_but_fine_inside_output() {
        let e = body("```\n{}\n```").unwrap_err();
        assert_eq!(e.code, DiagnosticCode::TextAroundJson);
        assert!(e.message.contains("bare ``` fence"), "{}", e.message);
        let text = "```\n{}\n```";
        assert!(json_body(text, 0, text.len(), Frame::OutputBlock).is_ok());
    }

    #[test]
    fn prose_is_never_searched() {
        let e = body("Looking at the diff, here it is:\n{\"review\": true}").unwrap_err();
        assert_eq!(e.code, DiagnosticCode::TextAroundJson);
        assert!(
            e.message
                .contains("found text before it at line 1: \"Looking at the diff, here it is:…\""),
            "{}",
            e.message
        );
        let e = body("I think this PR needs review.").unwrap_err();
        assert!(
            e.message.contains("found text instead of a JSON object"),
            "{}",
            e.message
        );
    }

    #[test]
    fn other_json_values_are_not_objects() {
        assert_eq!(
            body("[1, 2]").unwrap_err().code,
            DiagnosticCode::NotAnObject
        );
        assert_eq!(body("true").unwrap_err().code, DiagnosticCode::NotAnObject);
        assert_eq!(body("null").unwrap_err().code, DiagnosticCode::NotAnObject);
        assert_eq!(body("no").unwrap_err().code, DiagnosticCode::TextAroundJson);
    }

    #[test]
    fn unclosed_fence_says_truncated() {
        let e = body("```json\n{\"review\": tr").unwrap_err();
        assert_eq!(e.code, DiagnosticCode::InvalidJson);
        assert!(e.message.contains("truncated"), "{}", e.message);
        assert_eq!(e.line, Some(2));
    }

    #[test]
    fn text_after_the_fence_is_reported_where_it_starts() {
        let e = body("```json\n{}\n```\n\nHope this helps!").unwrap_err();
        assert_eq!(e.line, Some(5));
        assert!(e.message.contains("\"Hope this helps!\""), "{}", e.message);
    }

    #[test]
    fn previews_are_short_and_clean() {
        assert_eq!(preview("a\u{7}b", 10), "ab");
        assert_eq!(preview("abcdef", 3), "abc…");
        assert_eq!(preview("one\ntwo", 10), "one…");
    }
}
