//! Evidence fitted to the model's context window before the first call: a stage whose inputs
//! would not leave room for an answer is shown what fits — small inputs whole, a diff by whole
//! files and then whole hunks — and told, in a trusted note, what it was not shown; the stage
//! result says the same ([`EvidenceCut`]), so the review's coverage can list those files.

use verdict_backends::store::ResolvedInput;
use verdict_proto::wire::{CutInput, EvidenceCut, input_name};
use verdict_proto::{Language, diff};

/// The bytes the coverage note may take in the prompt, held back before evidence is fitted.
pub(super) const NOTE_BYTES: usize = 1024;

/// Inputs at most this large are kept whole before any large one is considered: titles,
/// descriptions, summaries and candidate lists are what a stage cannot work without.
const SMALL_INPUT_BYTES: usize = 2048;

/// The inputs as they fit in `budget_bytes`, and what was cut (`None` when everything fits).
pub(super) fn fit(
    inputs: Vec<ResolvedInput>,
    budget_bytes: usize,
    context_window: u32,
) -> (Vec<ResolvedInput>, Option<EvidenceCut>) {
    let total: usize = inputs.iter().map(|i| i.text.len()).sum();
    if total <= budget_bytes {
        return (inputs, None);
    }
    let small: usize = inputs
        .iter()
        .map(|i| i.text.len())
        .filter(|&n| n <= SMALL_INPUT_BYTES)
        .sum();
    let mut left = budget_bytes.saturating_sub(small);
    let mut cut = Vec::new();
    let mut out = Vec::with_capacity(inputs.len());
    for input in inputs {
        let len = input.text.len();
        if len <= SMALL_INPUT_BYTES || len <= left {
            if len > SMALL_INPUT_BYTES {
                left -= len;
            }
            out.push(input);
            continue;
        }
        let (text, record) = if is_diff(&input.name) {
            cut_diff(&input.text, left)
        } else {
            cut_text(&input.text, left)
        };
        left = left.saturating_sub(text.len());
        cut.push(CutInput {
            name: input.name.clone(),
            shown_bytes: text.len() as u64,
            total_bytes: len as u64,
            files_not_shown: record.not_shown,
            files_partly_shown: record.partly_shown,
        });
        if !text.is_empty() {
            out.push(ResolvedInput {
                name: input.name,
                text,
            });
        }
    }
    let cut = (!cut.is_empty()).then_some(EvidenceCut {
        context_window,
        inputs: cut,
    });
    (out, cut)
}

fn is_diff(name: &str) -> bool {
    name == input_name::DIFF || name.starts_with(input_name::DIFF_OF_FILE)
}

#[derive(Default)]
struct DiffCut {
    not_shown: Vec<String>,
    partly_shown: Vec<String>,
}

/// A prefix of `text` of at most `budget` bytes, ending at a line break.
fn cut_text(text: &str, budget: usize) -> (String, DiffCut) {
    let mut end = budget.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let end = text[..end].rfind('\n').map_or(0, |i| i + 1);
    (text[..end].to_owned(), DiffCut::default())
}

/// One file's section of a unified diff: its header lines and its hunks.
struct Section<'a> {
    path: String,
    header: &'a str,
    hunks: Vec<&'a str>,
}

/// Whole files while they fit, then whole hunks of the next files (with their headers); a file
/// none of whose hunks fits is named as not shown.
fn cut_diff(text: &str, budget: usize) -> (String, DiffCut) {
    let mut out = String::new();
    let mut record = DiffCut::default();
    for section in sections(text) {
        let whole = section.header.len() + section.hunks.iter().map(|h| h.len()).sum::<usize>();
        if out.len() + whole <= budget {
            out.push_str(section.header);
            section.hunks.iter().for_each(|h| out.push_str(h));
            continue;
        }
        let mut shown = 0;
        if out.len() + section.header.len() < budget {
            let mark = out.len();
            out.push_str(section.header);
            for hunk in &section.hunks {
                if out.len() + hunk.len() <= budget {
                    out.push_str(hunk);
                    shown += 1;
                }
            }
            if shown == 0 {
                out.truncate(mark);
            }
        }
        match shown {
            0 => record.not_shown.push(section.path),
            _ => record.partly_shown.push(section.path),
        }
    }
    (out, record)
}

/// The file sections of a unified diff, split where the scheduler splits it
/// ([`diff::split_by_file`]); a diff without `diff --git` lines is one section.
fn sections(text: &str) -> Vec<Section<'_>> {
    let pieces = diff::split_by_file(text);
    let pieces = if pieces.is_empty() {
        vec![text]
    } else {
        pieces
    };
    pieces.into_iter().map(section).collect()
}

/// One file's piece as a header and its hunks (each from its `@@` line), named as the diff
/// parser names the file.
fn section(piece: &str) -> Section<'_> {
    let hunk_starts: Vec<usize> = line_starts(piece)
        .filter(|&i| piece[i..].starts_with("@@"))
        .collect();
    let header_end = hunk_starts.first().copied().unwrap_or(piece.len());
    let mut bounds = hunk_starts;
    bounds.push(piece.len());
    let parsed = diff::parse(piece);
    let path = parsed
        .files
        .first()
        .and_then(|f| f.path())
        .unwrap_or("(diff)")
        .to_owned();
    Section {
        path,
        header: &piece[..header_end],
        hunks: bounds.windows(2).map(|w| &piece[w[0]..w[1]]).collect(),
    }
}

fn line_starts(text: &str) -> impl Iterator<Item = usize> + '_ {
    std::iter::once(0).chain(
        text.match_indices('\n')
            .map(|(i, _)| i + 1)
            .filter(move |&i| i < text.len()),
    )
}

/// The trusted note the user message carries after the evidence: what the model was not shown
/// and that it must not claim to have reviewed it.
pub(super) fn coverage_note(cut: &EvidenceCut, language: Language) -> String {
    let mut parts = Vec::new();
    for input in &cut.inputs {
        let mut part = match language {
            Language::En => format!(
                "\"{}\" is shown in part ({} of {} bytes)",
                input.name, input.shown_bytes, input.total_bytes
            ),
            Language::ZhCn => format!(
                "“{}”只展示了一部分（{} / {} 字节）",
                input.name, input.shown_bytes, input.total_bytes
            ),
        };
        if !input.files_not_shown.is_empty() {
            part.push_str(&match language {
                Language::En => format!("; not shown: {}", listed(&input.files_not_shown, ", ")),
                Language::ZhCn => format!("；未展示：{}", listed(&input.files_not_shown, "、")),
            });
        }
        if !input.files_partly_shown.is_empty() {
            part.push_str(&match language {
                Language::En => format!(
                    "; shown without some hunks: {}",
                    listed(&input.files_partly_shown, ", ")
                ),
                Language::ZhCn => format!(
                    "；部分变更块未展示：{}",
                    listed(&input.files_partly_shown, "、")
                ),
            });
        }
        parts.push(part);
    }
    match language {
        Language::En => format!(
            "Coverage note: the material was cut to fit the model's context window of {} tokens. {}. Review only what is shown; do not report findings about, or claim to have reviewed, what is not shown.",
            cut.context_window,
            parts.join(". ")
        ),
        Language::ZhCn => format!(
            "覆盖说明：为适应模型 {} 个 token 的上下文窗口，材料已被截断。{}。只评审已展示的内容；不要对未展示的内容报告问题，也不要声称已评审它们。",
            cut.context_window,
            parts.join("。")
        ),
    }
}

/// At most [`NOTE_FILES`] names, then how many more: the note must stay within [`NOTE_BYTES`]
/// however many files a diff has.
fn listed(files: &[String], separator: &str) -> String {
    let mut out = files
        .iter()
        .take(NOTE_FILES)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(separator);
    if files.len() > NOTE_FILES {
        out.push_str(&format!("{separator}+{}", files.len() - NOTE_FILES));
    }
    out
}

const NOTE_FILES: usize = 8;

#[cfg(test)]
mod tests {
    use super::*;

    fn input(name: &str, text: &str) -> ResolvedInput {
        ResolvedInput {
            name: name.to_owned(),
            text: text.to_owned(),
        }
    }

    fn file_diff(path: &str, hunks: usize, hunk_bytes: usize) -> String {
        let mut s = format!("diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n");
        for h in 0..hunks {
            s.push_str(&format!("@@ -{0},1 +{0},2 @@\n", h * 10 + 1));
            s.push_str(&format!("+{}\n", "x".repeat(hunk_bytes)));
        }
        s
    }

    #[test]
    fn inputs_that_fit_are_left_alone() {
        let inputs = vec![
            input("title", "t"),
            input(input_name::DIFF, &file_diff("a.rs", 2, 10)),
        ];
        let (out, cut) = fit(inputs.clone(), 10_000, 8192);
        assert_eq!(out, inputs);
        assert!(cut.is_none());
    }

    #[test]
    fn a_diff_is_cut_by_whole_files_then_whole_hunks_and_the_cut_names_them() {
        let diff = [
            file_diff("a.rs", 1, 1000),
            file_diff("b.rs", 3, 1000),
            file_diff("c.rs", 1, 1000),
        ]
        .concat();
        let title = input("pull request title", "Fix the stack");
        let a = file_diff("a.rs", 1, 1000).len();
        let b_header = "diff --git a/b.rs b/b.rs\n--- a/b.rs\n+++ b/b.rs\n".len();
        let hunk = "@@ -1,1 +1,2 @@\n".len() + 1002;
        // Room for a.rs, b.rs's header and one of its hunks, not more.
        let budget = title.text.len() + a + b_header + hunk + 20;
        let (out, cut) = fit(
            vec![title.clone(), input(input_name::DIFF, &diff)],
            budget,
            4096,
        );
        let cut = cut.expect("a cut");
        assert_eq!(cut.context_window, 4096);
        assert_eq!(out[0], title);
        let shown = &out[1].text;
        assert!(shown.starts_with(&file_diff("a.rs", 1, 1000)), "{shown}");
        assert_eq!(shown.matches("@@").count(), 2 * 2, "{shown}");
        assert!(!shown.contains("c.rs"), "{shown}");
        assert!(verdict_proto::diff::parse(shown).files.len() == 2);
        let [one] = cut.inputs.as_slice() else {
            panic!("{cut:?}")
        };
        assert_eq!(one.files_partly_shown, ["b.rs"]);
        assert_eq!(one.files_not_shown, ["c.rs"]);
        assert_eq!(one.shown_bytes as usize, shown.len());
        assert_eq!(one.total_bytes as usize, diff.len());
        let note = coverage_note(&cut, Language::En);
        assert!(note.contains("context window of 4096 tokens"), "{note}");
        assert!(note.contains("not shown: c.rs"), "{note}");
        assert!(note.contains("without some hunks: b.rs"), "{note}");
    }

    #[test]
    fn other_large_inputs_are_cut_at_a_line_and_small_ones_are_never_cut() {
        let body = "line\n".repeat(1000);
        let small = input("summary (from the summary stage)", &"s".repeat(1500));
        let (out, cut) = fit(
            vec![input("file src/a.rs", &body), small.clone()],
            1500 + 102,
            2048,
        );
        assert_eq!(out[0].text, "line\n".repeat(20));
        assert_eq!(out[1], small);
        assert_eq!(cut.expect("a cut").inputs[0].shown_bytes, 100);
    }

    #[test]
    fn an_input_nothing_of_which_fits_is_left_out_and_named() {
        let (out, cut) = fit(
            vec![input(input_name::DIFF, &file_diff("a.rs", 1, 5000))],
            100,
            2048,
        );
        assert!(out.is_empty());
        let cut = cut.expect("a cut");
        assert_eq!(cut.inputs[0].files_not_shown, ["a.rs"]);
        assert_eq!(cut.inputs[0].shown_bytes, 0);
    }
}
