//! `read`: lines of one text file, numbered, a page at a time.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use serde::Deserialize;
use serde_json::json;

use super::output::{Body, cut_chars, decode_line, human_bytes, looks_binary};
use super::path::{confine, quote};
use super::{ToolLimits, ToolOutput, Usage, positive_number};
use crate::provider::ToolDefinition;

/// Files up to this size are read to the end to report their line count; beyond it the count
/// would cost more than it helps.
const COUNT_LINES_UP_TO: u64 = 16 << 20;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReadArgs {
    path: String,
    #[serde(default, deserialize_with = "positive_number")]
    offset: Option<u64>,
    #[serde(default, deserialize_with = "positive_number")]
    limit: Option<u64>,
}

impl Usage for ReadArgs {
    const USAGE: &'static str = r#"{"path": "<file relative to the repository root>", "offset"?: <first line, from 1>, "limit"?: <number of lines>}"#;
}

pub(crate) fn definition(limits: &ToolLimits) -> ToolDefinition {
    ToolDefinition {
        name: "read".to_owned(),
        description: format!(
            "Read a text file of the repository at the commit under review. Output: one line per \
             file line, prefixed with its 1-based line number and a tab. At most {lines} lines \
             and {bytes} per call, and lines longer than {chars} characters are cut; when the \
             output is cut, its last line says so and gives the `offset` to continue from. Bytes \
             that are not valid UTF-8 are shown as U+FFFD (a note says so). Binary files are \
             refused. Paths are relative to the repository root (`src/main.rs`); absolute paths, \
             `..` and links leading outside the repository are refused.",
            lines = limits.read_max_lines,
            bytes = human_bytes(limits.max_output_bytes as u64),
            chars = limits.max_line_chars,
        ),
        parameters: json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The file, relative to the repository root, e.g. `src/main.rs`."
                },
                "offset": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "The first line to show, counting from 1. Default 1."
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": limits.read_max_lines,
                    "description": format!("How many lines to show. Default and maximum {}.", limits.read_max_lines)
                }
            },
            "required": ["path"],
            "additionalProperties": false
        }),
    }
}

/// Why the page ended before the file did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// The caller's own `limit` was reached: not a truncation.
    Requested,
    /// `read_max_lines` was reached.
    MaxLines,
    /// `max_output_bytes` was reached.
    MaxOutput,
}

pub(crate) fn run(root: &Path, limits: &ToolLimits, args: &ReadArgs) -> ToolOutput {
    let path = match confine(root, &args.path) {
        Ok(path) => path,
        Err(e) => return ToolOutput::error(e.message(&args.path)),
    };
    let shown = quote(&args.path);
    let meta = match std::fs::metadata(&path) {
        Ok(meta) => meta,
        Err(_) => return ToolOutput::error(format!("{shown} cannot be read")),
    };
    if meta.is_dir() {
        return ToolOutput::error(format!(
            "{shown} is a directory; use ls to list it, or find to search it"
        ));
    }
    if !meta.is_file() {
        return ToolOutput::error(format!("{shown} is not a regular file"));
    }
    read_page(&path, &shown, meta.len(), limits, args)
        .unwrap_or_else(|e| ToolOutput::error(format!("{shown} cannot be read: {e}")))
}

/// The page of `path` (`shown` to the model) that `args` asks for.
fn read_page(
    path: &Path,
    shown: &str,
    file_bytes: u64,
    limits: &ToolLimits,
    args: &ReadArgs,
) -> io::Result<ToolOutput> {
    let mut reader = BufReader::with_capacity(64 << 10, File::open(path)?);
    if looks_binary(reader.fill_buf()?) {
        return Ok(ToolOutput::error(format!(
            "{shown} looks like a binary file (it contains NUL bytes); read shows text files only"
        )));
    }
    let offset = args.offset.unwrap_or(1);
    let max_lines = limits.read_max_lines.max(1) as u64;
    let (wanted, explicit) = match args.limit {
        Some(limit) if limit <= max_lines => (limit, true),
        _ => (max_lines, false),
    };
    // Bytes kept per line: enough for `max_line_chars` characters of any width.
    let keep = limits.max_line_chars.saturating_mul(4).saturating_add(4);
    let can_count = file_bytes <= COUNT_LINES_UP_TO;

    let mut body = Body::new(limits.max_output_bytes);
    let mut line = Vec::new();
    let mut line_no: u64 = 0;
    let mut shown_lines: u64 = 0;
    let mut last_shown: u64 = 0;
    let mut stop = None;
    let mut invalid_utf8 = false;
    let mut cut_lines: u64 = 0;
    let mut at_eof = false;
    loop {
        let next = line_no + 1;
        let keep_now = if stop.is_none() && next >= offset {
            keep
        } else {
            0
        };
        let Some(cut) = next_line(&mut reader, keep_now, &mut line)? else {
            at_eof = true;
            break;
        };
        line_no = next;
        if line_no < offset || stop.is_some() {
            continue;
        }
        if shown_lines == wanted {
            stop = Some(if explicit {
                Stop::Requested
            } else {
                Stop::MaxLines
            });
            if !can_count {
                break;
            }
            continue;
        }
        let (text, invalid) = decode_line(&line, cut);
        invalid_utf8 |= invalid;
        let (text, cut_here) = cut_chars(&text, limits.max_line_chars);
        let cut_here = cut || cut_here;
        let formatted = if cut_here {
            cut_lines += 1;
            format!("{line_no}\t{text}… [line cut]")
        } else {
            format!("{line_no}\t{text}")
        };
        if !body.push_line(&formatted) {
            stop = Some(Stop::MaxOutput);
            if !can_count {
                break;
            }
            continue;
        }
        shown_lines += 1;
        last_shown = line_no;
        if body.is_full() {
            // The line was cut to fit; nothing more fits after it.
            cut_lines += u64::from(!cut_here);
            stop = Some(Stop::MaxOutput);
            if !can_count {
                break;
            }
        }
    }

    if line_no == 0 {
        return Ok(ToolOutput::text("[the file is empty]".to_owned(), false));
    }
    if shown_lines == 0 {
        return Ok(ToolOutput::error(format!(
            "offset {offset} is past the end of {shown}, which has {line_no} lines"
        )));
    }

    let mut notes = Vec::new();
    let mut truncated = false;
    if invalid_utf8 {
        notes.push(
            "[note: the file is not valid UTF-8; invalid bytes are shown as U+FFFD]".to_owned(),
        );
    }
    if cut_lines > 0 {
        truncated = true;
        notes.push(format!(
            "[truncated: {cut_lines} line(s) longer than {} characters were cut; grep for the part you need]",
            limits.max_line_chars
        ));
    }
    if let Some(stop) = stop {
        let total = if at_eof {
            format!("{line_no}")
        } else {
            format!("more (the file has {})", human_bytes(file_bytes))
        };
        let range = format!("lines {offset}-{last_shown} of {total} shown");
        let next = last_shown + 1;
        notes.push(match stop {
            Stop::Requested => format!("[{range}; call read with offset={next} to see more]"),
            Stop::MaxLines => {
                truncated = true;
                format!(
                    "[truncated: {range} (at most {max_lines} lines per call); call read with offset={next} to continue]"
                )
            }
            Stop::MaxOutput => {
                truncated = true;
                format!(
                    "[truncated: {range} (output limit {}); call read with offset={next} to continue]",
                    human_bytes(limits.max_output_bytes as u64)
                )
            }
        });
    }
    Ok(ToolOutput::text(body.finish(&notes), truncated))
}

/// Reads one line (without its `\n`) into `line`, keeping at most `keep` bytes of it so one huge
/// line cannot exhaust memory. `None` at the end of the file; otherwise whether bytes were dropped.
fn next_line(
    reader: &mut impl BufRead,
    keep: usize,
    line: &mut Vec<u8>,
) -> io::Result<Option<bool>> {
    line.clear();
    let mut cut = false;
    let mut any = false;
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok(any.then_some(cut));
        }
        any = true;
        let newline = buffer.iter().position(|&b| b == b'\n');
        let chunk = &buffer[..newline.unwrap_or(buffer.len())];
        let room = keep.saturating_sub(line.len());
        if chunk.len() > room {
            cut = true;
            line.extend_from_slice(&chunk[..room]);
        } else {
            line.extend_from_slice(chunk);
        }
        let consumed = newline.map_or(buffer.len(), |i| i + 1);
        reader.consume(consumed);
        if newline.is_some() {
            return Ok(Some(cut));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(path: &str, offset: Option<u64>, limit: Option<u64>) -> ReadArgs {
        ReadArgs {
            path: path.to_owned(),
            offset,
            limit,
        }
    }

    fn tree(files: &[(&str, &[u8])]) -> (tempfile::TempDir, std::path::PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        for (path, content) in files {
            let full = tmp.path().join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, content).unwrap();
        }
        let root = tmp.path().canonicalize().unwrap();
        (tmp, root)
    }

    fn numbered(n: u64) -> Vec<u8> {
        (1..=n)
            .map(|i| format!("line {i}\n"))
            .collect::<String>()
            .into_bytes()
    }

    #[test]
    fn lines_are_numbered_from_one() {
        let (_tmp, root) = tree(&[("a.txt", b"alpha\r\nbeta\ngamma")]);
        let out = run(&root, &ToolLimits::default(), &args("a.txt", None, None));
        assert_eq!(
            out,
            ToolOutput::text("1\talpha\n2\tbeta\n3\tgamma".to_owned(), false)
        );
    }

    #[test]
    fn offset_and_limit_page_through() {
        let (_tmp, root) = tree(&[("a.txt", &numbered(10))]);
        let out = run(
            &root,
            &ToolLimits::default(),
            &args("a.txt", Some(4), Some(2)),
        );
        assert_eq!(
            out.content,
            "4\tline 4\n5\tline 5\n[lines 4-5 of 10 shown; call read with offset=6 to see more]"
        );
        assert!(!out.truncated, "the caller asked for two lines");
        let tail = run(
            &root,
            &ToolLimits::default(),
            &args("a.txt", Some(9), Some(5)),
        );
        assert_eq!(tail.content, "9\tline 9\n10\tline 10");
        let past = run(
            &root,
            &ToolLimits::default(),
            &args("a.txt", Some(11), None),
        );
        assert!(past.is_error);
        assert_eq!(
            past.content,
            "offset 11 is past the end of `a.txt`, which has 10 lines"
        );
    }

    #[test]
    fn the_line_limit_truncates_and_says_how_to_continue() {
        let (_tmp, root) = tree(&[("a.txt", &numbered(50))]);
        let limits = ToolLimits {
            read_max_lines: 20,
            ..ToolLimits::default()
        };
        let out = run(&root, &limits, &args("a.txt", None, Some(1000)));
        assert!(out.truncated);
        assert!(out.content.starts_with("1\tline 1\n"));
        assert!(out.content.contains("\n20\tline 20\n"));
        assert!(
            out.content.ends_with(
                "[truncated: lines 1-20 of 50 shown (at most 20 lines per call); call read with offset=21 to continue]"
            ),
            "{}",
            out.content
        );
    }

    #[test]
    fn the_output_limit_truncates_and_says_how_to_continue() {
        let (_tmp, root) = tree(&[("a.txt", &numbered(5000))]);
        let limits = ToolLimits {
            max_output_bytes: 2048,
            ..ToolLimits::default()
        };
        let out = run(&root, &limits, &args("a.txt", None, None));
        assert!(out.truncated);
        assert!(out.content.len() <= 2048, "{}", out.content.len());
        let note = out.content.lines().last().unwrap();
        assert!(note.starts_with("[truncated: lines 1-"), "{note}");
        assert!(
            note.contains("of 5000 shown (output limit 2 KiB)"),
            "{note}"
        );
        let last_line: u64 = out
            .content
            .lines()
            .rev()
            .nth(1)
            .unwrap()
            .split('\t')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(note.ends_with(&format!("offset={} to continue]", last_line + 1)));
    }

    #[test]
    fn long_lines_are_cut() {
        let long = format!("{}\nshort\n", "é".repeat(50));
        let (_tmp, root) = tree(&[("min.js", long.as_bytes())]);
        let limits = ToolLimits {
            max_line_chars: 10,
            ..ToolLimits::default()
        };
        let out = run(&root, &limits, &args("min.js", None, None));
        assert!(out.truncated);
        assert_eq!(
            out.content,
            format!(
                "1\t{}… [line cut]\n2\tshort\n[truncated: 1 line(s) longer than 10 characters were cut; grep for the part you need]",
                "é".repeat(10)
            )
        );
    }

    #[test]
    fn invalid_utf8_is_replaced_and_noted() {
        let (_tmp, root) = tree(&[("latin1.txt", b"caf\xe9\n")]);
        let out = run(
            &root,
            &ToolLimits::default(),
            &args("latin1.txt", None, None),
        );
        assert_eq!(
            out.content,
            "1\tcaf\u{fffd}\n[note: the file is not valid UTF-8; invalid bytes are shown as U+FFFD]"
        );
        assert!(!out.is_error && !out.truncated);
    }

    #[test]
    fn binary_directories_and_empty_files() {
        let (_tmp, root) = tree(&[("bin", b"\x7fELF\0\0\x01"), ("dir/x", b"1"), ("empty", b"")]);
        let binary = run(&root, &ToolLimits::default(), &args("bin", None, None));
        assert!(binary.is_error);
        assert!(binary.content.contains("binary"), "{}", binary.content);
        let dir = run(&root, &ToolLimits::default(), &args("dir", None, None));
        assert!(
            dir.is_error && dir.content.contains("use ls"),
            "{}",
            dir.content
        );
        let empty = run(&root, &ToolLimits::default(), &args("empty", None, None));
        assert_eq!(empty.content, "[the file is empty]");
    }

    #[test]
    fn next_line_keeps_a_bounded_prefix() {
        let mut reader = BufReader::with_capacity(4, &b"abcdefgh\nij"[..]);
        let mut line = Vec::new();
        assert_eq!(next_line(&mut reader, 3, &mut line).unwrap(), Some(true));
        assert_eq!(line, b"abc");
        assert_eq!(next_line(&mut reader, 3, &mut line).unwrap(), Some(false));
        assert_eq!(line, b"ij");
        assert_eq!(next_line(&mut reader, 3, &mut line).unwrap(), None);
    }
}
