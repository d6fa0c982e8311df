//! Unified diffs → the new-side lines a review may comment on inline (diff safety zone, SPEC G2).
//!
//! GitHub accepts an inline review comment only on a line that the PR diff shows on the new side:
//! an added or a context line of some hunk. Publication asks [`CommentableLines::contains`] for
//! every finding and moves the ones outside into the review body, so this parser must be exact on
//! real `git diff` output and must never fail on anything else: a malformed diff yields what could
//! be understood plus [`Diff::warnings`], never a panic or an error.
//!
//! # How the text is read
//! One pass, line by line, in linear time. Hunk bodies are consumed by the counts of their
//! `@@ -a,b +c,d @@` header, not by the look of the lines, because content lines may themselves
//! look like headers (`--- x` is the removal of a line `-- x`). An empty line inside a hunk is a
//! context line only while both counts remain (some tools strip the space of empty context lines),
//! so the final newline of the text never becomes an extra line. Content lines are never copied:
//! only the new-side line numbers are kept, as runs.
//!
//! # Decisions on ambiguous input
//! - **Paths** come from, in increasing precedence: the `diff --git` line (split by git's
//!   equal-halves rule when unquoted names contain spaces), the `---`/`+++` lines (a trailing tab
//!   and timestamp, as `diff -u` writes them, is dropped), and `rename`/`copy` `from`/`to` lines.
//!   C-quoted names are unescaped; bytes that are not UTF-8 become U+FFFD.
//! - **Prefixes**: when the two names of a `diff --git` line are identical the diff was made with
//!   `--no-prefix` and nothing is stripped; when they are equal after their first path component
//!   (`a/x b/x`, `i/x w/x`, `--src-prefix=old/ --dst-prefix=new/`) that component is stripped, the
//!   way `git apply -p1` does. Renames fall back to stripping `a/`/`b/` and are then overridden by
//!   the prefix-less `rename to` line. Plain `diff -u` pairs follow the same rule. Prefixes that do
//!   not end in `/` cannot be told from file names and are kept.
//! - **Recovery**: a hunk that ends before its counts are used up (or a stray content line after
//!   it) yields a warning; parsing resumes at the next `diff --git`, `---`/`+++` pair or hunk
//!   header. Inside a hunk, a `---`/`+++` pair followed by `@@` starts a new file unless the counts
//!   say exactly those two lines remain (the only reading under which a valid diff has them).
//! - **Skipped with a warning**: combined diffs (`diff --cc`, `diff --combined`): they describe
//!   merges, never a PR's change. **Skipped silently**: `index` and `dissimilarity index` lines,
//!   `GIT binary patch` data, and any text outside files (mail headers, commit messages, diffstat),
//!   as `git apply` does.
//! - Warnings carry the 1-based line of the diff text and, as their field, the path of the file
//!   concerned when one is known.
//!
//! Every decision above has example diffs, with the parse they must give, under
//! `proto/tests/data/diff/`.

use serde::{Deserialize, Serialize};

use crate::{Diagnostic, DiagnosticCode};

/// Parses a unified diff. Never panics and never fails: whatever cannot be understood is reported
/// in [`Diff::warnings`].
pub fn parse(diff: &str) -> Diff {
    let parser = Parser::run(diff, None);
    Diff {
        files: parser.files,
        warnings: parser.warnings,
    }
}

/// The pieces of a git diff, one per file, each starting with its `diff --git` line. Text before
/// the first such line (none in git output) is dropped.
pub fn split_by_file(text: &str) -> Vec<&str> {
    let mut starts: Vec<usize> = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.starts_with("diff --git ") {
            starts.push(offset);
        }
        offset += line.len();
    }
    starts
        .iter()
        .enumerate()
        .map(|(k, &s)| &text[s..starts.get(k + 1).copied().unwrap_or(text.len())])
        .collect()
}

/// The new-side text of lines `start..=end` of the first file in `piece` (a file's piece of a
/// diff, such as one `diff --git` section): each line as the hunks show it after its `+` or ` `
/// marker, without its line ending, joined with `\n`. `None` unless every line of the range is an
/// added or context line of that file, so a caller never mistakes a gap between hunks for code.
/// Lines are read exactly as [`parse`] reads them (the same hunk counts, the same recovery).
pub fn new_side_text(piece: &str, start: u32, end: u32) -> Option<String> {
    if start == 0 || start > end {
        return None;
    }
    // A range longer than the piece has lines cannot be in it; checked before allocating.
    let wanted = usize::try_from(end - start).ok()?.checked_add(1)?;
    if wanted > memchr::memchr_iter(b'\n', piece.as_bytes()).count() + 1 {
        return None;
    }
    let capture = Capture {
        start,
        end,
        lines: vec![None; wanted],
    };
    let parser = Parser::run(piece, Some(capture));
    let lines: Option<Vec<&str>> = parser.capture?.lines.into_iter().collect();
    Some(lines?.join("\n"))
}

/// A parsed diff: the files in diff order and what could not be understood.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diff {
    pub files: Vec<FileDiff>,
    pub warnings: Vec<Diagnostic>,
}

/// What happened to one file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileStatus {
    Added,
    Deleted,
    Modified,
    Renamed,
    Copied,
    /// Only the mode changed: no content change, no rename.
    ModeChanged,
}

/// One file of the diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDiff {
    /// `None` for an added file.
    pub old_path: Option<String>,
    /// `None` for a deleted file.
    pub new_path: Option<String>,
    pub status: FileStatus,
    pub binary: bool,
    /// From `old mode` or `deleted file mode`.
    pub old_mode: Option<String>,
    /// From `new mode` or `new file mode`.
    pub new_mode: Option<String>,
    /// Percentage from `similarity index` (renames and copies).
    pub similarity: Option<u8>,
    pub hunks: Vec<Hunk>,
}

/// One `@@` hunk. Counts are the header's; the line runs are what the body actually held, so they
/// fall short of the counts only in a malformed diff (which also yields a warning).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hunk {
    pub old_start: u32,
    pub old_count: u32,
    pub new_start: u32,
    pub new_count: u32,
    /// The text after the second `@@` (usually the enclosing function), without its leading space.
    pub section: String,
    /// New-side line numbers of added lines, as sorted inclusive runs.
    pub added: Vec<(u32, u32)>,
    /// New-side line numbers of context lines, as sorted inclusive runs.
    pub context: Vec<(u32, u32)>,
    /// A `\ No newline at end of file` marker followed the old side's last line.
    pub old_missing_newline: bool,
    /// A `\ No newline at end of file` marker followed the new side's last line.
    pub new_missing_newline: bool,
}

impl FileDiff {
    /// The new-side lines of every hunk (added and context), as sorted inclusive ranges with
    /// overlapping and adjacent ranges merged.
    pub fn commentable_ranges(&self) -> Vec<(u32, u32)> {
        let mut runs: Vec<(u32, u32)> = self
            .hunks
            .iter()
            .flat_map(|h| h.added.iter().chain(h.context.iter()).copied())
            .collect();
        runs.sort_unstable();
        let mut merged: Vec<(u32, u32)> = Vec::with_capacity(runs.len());
        for (start, end) in runs {
            match merged.last_mut() {
                Some(last) if start <= last.1.saturating_add(1) => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        merged
    }

    /// The path this file is known by in the diff: the new one, or the old one for a deletion.
    pub fn path(&self) -> Option<&str> {
        self.new_path.as_deref().or(self.old_path.as_deref())
    }
}

impl Diff {
    /// The commentable lines of every file that exists after the change, in diff order. Deleted
    /// files are absent; binary, mode-only and pure-deletion files are present with no lines.
    pub fn commentable(&self) -> CommentableLines {
        CommentableLines {
            files: self
                .files
                .iter()
                .filter(|f| f.status != FileStatus::Deleted)
                .filter_map(|f| {
                    Some(CommentableFile {
                        path: f.new_path.clone()?,
                        lines: f.commentable_ranges(),
                    })
                })
                .collect(),
        }
    }
}

/// The diff safety zone: per new-side path, the lines GitHub accepts inline comments on.
/// Serialises as `{"files":[{"path":"src/a.rs","lines":[[1,4],[10,12]]}]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommentableLines {
    pub files: Vec<CommentableFile>,
}

/// One file's commentable lines: sorted, merged, inclusive `[start, end]` ranges.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommentableFile {
    pub path: String,
    pub lines: Vec<(u32, u32)>,
}

impl CommentableLines {
    /// Whether the whole of `start..=end` lies inside one commentable range of `path`. A range
    /// that spans the gap between two hunks is not commentable (GitHub rejects it); two hunks
    /// whose new-side lines touch form one range.
    pub fn contains(&self, path: &str, start: u32, end: u32) -> bool {
        if start == 0 || start > end {
            return false;
        }
        self.files.iter().filter(|f| f.path == path).any(|f| {
            let after = f.lines.partition_point(|&(s, _)| s <= start);
            after > 0 && f.lines.get(after - 1).is_some_and(|&(_, e)| end <= e)
        })
    }

    /// The commentable ranges of `path`, if the file is in the diff.
    pub fn lines(&self, path: &str) -> Option<&[(u32, u32)]> {
        self.files
            .iter()
            .find(|f| f.path == path)
            .map(|f| f.lines.as_slice())
    }
}

/// Lines of the text with their 1-based numbers; the text after the last `\n` is a line only if
/// it is not empty, so a final newline adds no line.
struct Lines<'a> {
    text: &'a str,
    pos: usize,
    number: u32,
}

impl<'a> Lines<'a> {
    fn next(&mut self) -> Option<(&'a str, u32)> {
        let line = self.line_at(self.pos)?;
        self.pos += line.len() + 1;
        self.number = self.number.saturating_add(1);
        Some((line, self.number))
    }

    /// The `n`-th line after the current one (0 = the next), without consuming.
    fn peek(&self, n: usize) -> Option<&'a str> {
        let mut pos = self.pos;
        for _ in 0..n {
            pos += self.line_at(pos)?.len() + 1;
        }
        self.line_at(pos)
    }

    fn line_at(&self, pos: usize) -> Option<&'a str> {
        let rest = self.text.get(pos..).filter(|r| !r.is_empty())?;
        let end = memchr::memchr(b'\n', rest.as_bytes()).unwrap_or(rest.len());
        rest.get(..end)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Between files, or in a file's header.
    Top,
    /// In the body of `Parser::hunk`, which stays open after its counts are used up for a
    /// trailing `\ No newline at end of file`.
    Hunk,
    /// Inside `GIT binary patch` data.
    BinaryPatch,
    /// Inside a combined diff, until the next `diff` line.
    Combined,
}

/// How a header's names carry their `a/`-style prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strip {
    Nothing,
    FirstComponent,
}

impl Strip {
    fn apply(self, name: &str) -> &str {
        match self {
            Strip::Nothing => name,
            Strip::FirstComponent => after_first_component(name).unwrap_or(name),
        }
    }
}

/// A file being read; becomes a [`FileDiff`] when the next file starts or the text ends.
#[derive(Debug)]
struct OpenFile {
    file: FileDiff,
    /// Line of the header that opened the file.
    line: u32,
    /// Opened by `diff --git`: extended header lines belong to it.
    git: bool,
    /// Prefix rule learnt from the `diff --git` line.
    strip: Option<Strip>,
    /// No hunk yet: header lines still belong to this file.
    header_open: bool,
    saw_pair: bool,
    created: bool,
    deleted: bool,
    renamed: bool,
    copied: bool,
    /// Paths came from `rename`/`copy` lines, which outrank `---`/`+++`.
    exact_paths: bool,
    /// New-side line after which the next hunk must start.
    last_new_end: u32,
}

impl OpenFile {
    fn new(line: u32, git: bool) -> Self {
        OpenFile {
            file: FileDiff {
                old_path: None,
                new_path: None,
                status: FileStatus::Modified,
                binary: false,
                old_mode: None,
                new_mode: None,
                similarity: None,
                hunks: Vec::new(),
            },
            line,
            git,
            strip: None,
            header_open: true,
            saw_pair: false,
            created: false,
            deleted: false,
            renamed: false,
            copied: false,
            exact_paths: false,
            last_new_end: 0,
        }
    }

    /// Whether a `---`/`+++` pair names this file (and so belongs to its git header rather than
    /// starting a plain file): each name is `/dev/null`, unknown so far, or the known path with
    /// or without a prefix.
    fn names_match(&self, old_raw: &str, new_raw: &str) -> bool {
        let same = |known: &Option<String>, raw: &str| {
            raw == DEV_NULL
                || known.as_deref().is_none_or(|known| {
                    raw.strip_suffix(known)
                        .is_some_and(|prefix| prefix.is_empty() || prefix.ends_with('/'))
                })
        };
        same(&self.file.old_path, old_raw) && same(&self.file.new_path, new_raw)
    }

    /// Takes the `---`/`+++` names (raw, prefixed, possibly `/dev/null`).
    fn set_pair(&mut self, old_raw: &str, new_raw: &str) {
        self.saw_pair = true;
        let old_null = old_raw == DEV_NULL;
        let new_null = new_raw == DEV_NULL;
        self.created |= old_null && !new_null;
        self.deleted |= new_null && !old_null;
        if self.exact_paths {
            return;
        }
        let (old, new) = match (old_null, new_null, self.strip) {
            (false, false, strip) => {
                let strip = strip.unwrap_or_else(|| infer_strip(old_raw, new_raw));
                (Some(strip.apply(old_raw)), Some(strip.apply(new_raw)))
            }
            (true, false, Some(strip)) => (None, Some(strip.apply(new_raw))),
            (false, true, Some(strip)) => (Some(strip.apply(old_raw)), None),
            (true, false, None) => (None, Some(new_raw.strip_prefix("b/").unwrap_or(new_raw))),
            (false, true, None) => (Some(old_raw.strip_prefix("a/").unwrap_or(old_raw)), None),
            (true, true, _) => (None, None),
        };
        // `/dev/null` on one side keeps the path the `diff --git` line gave, if any.
        if let Some(old) = old {
            self.file.old_path = Some(old.to_owned());
        }
        if let Some(new) = new {
            self.file.new_path = Some(new.to_owned());
        }
    }

    fn into_file(mut self, warnings: &mut Vec<Diagnostic>) -> FileDiff {
        let f = &mut self.file;
        f.status = if self.deleted {
            FileStatus::Deleted
        } else if self.created {
            FileStatus::Added
        } else if self.renamed {
            FileStatus::Renamed
        } else if self.copied {
            FileStatus::Copied
        } else if f.old_mode.is_some() && f.new_mode.is_some() && f.hunks.is_empty() && !f.binary {
            FileStatus::ModeChanged
        } else {
            FileStatus::Modified
        };
        match f.status {
            FileStatus::Deleted => f.new_path = None,
            FileStatus::Added => f.old_path = None,
            _ => {}
        }
        // A name that was only a prefix (`diff --git a/ b/`) names nothing.
        f.old_path = f.old_path.take().filter(|p| !p.is_empty());
        f.new_path = f.new_path.take().filter(|p| !p.is_empty());
        let missing = match f.status {
            FileStatus::Deleted => f.old_path.is_none(),
            _ => f.new_path.is_none(),
        };
        if missing {
            warnings.push(
                Diagnostic::new(
                    DiagnosticCode::InvalidValue,
                    "could not tell the file's path from its headers; its lines are not \
                     commentable",
                )
                .at_line(self.line),
            );
        }
        self.file
    }
}

/// A hunk being read.
#[derive(Debug)]
struct OpenHunk {
    hunk: Hunk,
    line: u32,
    old_left: u32,
    new_left: u32,
    next_new: u32,
    /// First byte of the last content line, for `\ No newline at end of file`.
    last: u8,
}

enum Feed {
    Consumed,
    /// The counts were used up before this line, which belongs to whatever follows the hunk.
    Done,
    /// This line cannot be part of the hunk although the counts are not used up.
    Short,
}

impl OpenHunk {
    fn feed(&mut self, line: &str) -> Feed {
        let bytes = line.as_bytes();
        let first = bytes.first().copied();
        if first == Some(b'\\') {
            match self.last {
                b'-' => self.hunk.old_missing_newline = true,
                b'+' => self.hunk.new_missing_newline = true,
                b' ' => {
                    self.hunk.old_missing_newline = true;
                    self.hunk.new_missing_newline = true;
                }
                _ => {}
            }
            return Feed::Consumed;
        }
        if self.old_left == 0 && self.new_left == 0 {
            return Feed::Done;
        }
        let kind = match first {
            None => b' ',
            Some(b'\r') if bytes.len() == 1 => b' ',
            Some(b @ (b' ' | b'+' | b'-')) => b,
            Some(_) => return Feed::Short,
        };
        match kind {
            b'+' if self.new_left > 0 => {
                self.new_left -= 1;
                push_line(&mut self.hunk.added, self.next_new);
                self.next_new = self.next_new.saturating_add(1);
            }
            b'-' if self.old_left > 0 => self.old_left -= 1,
            b' ' if self.old_left > 0 && self.new_left > 0 => {
                self.old_left -= 1;
                self.new_left -= 1;
                push_line(&mut self.hunk.context, self.next_new);
                self.next_new = self.next_new.saturating_add(1);
            }
            _ => return Feed::Short,
        }
        self.last = kind;
        Feed::Consumed
    }
}

fn push_line(runs: &mut Vec<(u32, u32)>, n: u32) {
    match runs.last_mut() {
        Some(last) if last.1.checked_add(1) == Some(n) => last.1 = n,
        _ => runs.push((n, n)),
    }
}

const DEV_NULL: &str = "/dev/null";

struct Parser<'a> {
    lines: Lines<'a>,
    files: Vec<FileDiff>,
    warnings: Vec<Diagnostic>,
    current: Option<OpenFile>,
    hunk: Option<OpenHunk>,
    mode: Mode,
    /// New-side lines to keep the text of, for [`new_side_text`]; `None` for [`parse`].
    capture: Option<Capture<'a>>,
}

/// The new-side lines `start..=end` of the first file, by line number, as they are read.
struct Capture<'a> {
    start: u32,
    end: u32,
    lines: Vec<Option<&'a str>>,
}

impl<'a> Parser<'a> {
    fn run(text: &'a str, capture: Option<Capture<'a>>) -> Parser<'a> {
        let mut parser = Parser {
            lines: Lines {
                text,
                pos: 0,
                number: 0,
            },
            files: Vec::new(),
            warnings: Vec::new(),
            current: None,
            hunk: None,
            mode: Mode::Top,
            capture,
        };
        while let Some((line, number)) = parser.lines.next() {
            parser.line(line, number);
        }
        parser.end_of_input();
        parser
    }

    /// Keeps the text of new-side line `number` (just read from `raw`) when it is captured.
    fn keep(&mut self, raw: &'a str, number: u32) {
        // Only the first file's lines: `files` is empty until the first file is closed.
        if !self.files.is_empty() {
            return;
        }
        let Some(capture) = self.capture.as_mut() else {
            return;
        };
        if number < capture.start || number > capture.end {
            return;
        }
        let text = raw.get(1..).unwrap_or("");
        let text = text.strip_suffix('\r').unwrap_or(text);
        if let Some(slot) = usize::try_from(number - capture.start)
            .ok()
            .and_then(|i| capture.lines.get_mut(i))
        {
            *slot = Some(text);
        }
    }

    fn line(&mut self, raw: &'a str, number: u32) {
        match self.mode {
            Mode::Top => {}
            Mode::Hunk => {
                if self.hunk_line(raw, number) {
                    return;
                }
            }
            Mode::BinaryPatch => {
                if is_binary_patch_data(trim_cr(raw)) {
                    return;
                }
                self.mode = Mode::Top;
            }
            Mode::Combined => {
                let line = trim_cr(raw);
                if !(line.starts_with("diff --git ") || is_combined_header(line)) {
                    return;
                }
                self.mode = Mode::Top;
            }
        }
        self.top_line(trim_cr(raw), number);
    }

    /// Feeds a line to the open hunk; `false` when the hunk has ended and the line is still to
    /// be read as something else.
    fn hunk_line(&mut self, raw: &'a str, number: u32) -> bool {
        let Some(open) = self.hunk.as_mut() else {
            self.mode = Mode::Top;
            return false;
        };
        let new_line = open.next_new;
        // Inside a valid hunk, `---`, `+++`, `@@` can only be a removal, an addition and the
        // next hunk when exactly one old and one new line remain.
        let next_file = raw.starts_with("--- ")
            && (open.old_left, open.new_left) != (0, 0)
            && (open.old_left, open.new_left) != (1, 1)
            && self.lines.peek(0).is_some_and(|l| l.starts_with("+++ "))
            && self.lines.peek(1).is_some_and(|l| l.starts_with("@@"));
        let step = if next_file {
            Feed::Short
        } else {
            open.feed(raw)
        };
        let took_new_line = open.next_new != new_line;
        match step {
            Feed::Consumed => {
                if took_new_line {
                    self.keep(raw, new_line);
                }
                true
            }
            Feed::Done => {
                self.close_hunk();
                self.mode = Mode::Top;
                if is_content(raw) && trim_cr(raw) != "-- " && !self.at_file_pair(raw) {
                    self.warn(
                        DiagnosticCode::UnexpectedText,
                        number,
                        "a hunk line after the hunk's counts were used up; the hunk header's \
                         counts are too small (the line is ignored)",
                    );
                    return true;
                }
                false
            }
            Feed::Short => {
                let message = format!(
                    "the hunk at line {} ends here with {} old and {} new lines fewer than its \
                     header `@@ -{},{} +{},{} @@` counts",
                    open.line,
                    open.old_left,
                    open.new_left,
                    open.hunk.old_start,
                    open.hunk.old_count,
                    open.hunk.new_start,
                    open.hunk.new_count,
                );
                self.warn(DiagnosticCode::InvalidValue, number, message);
                self.close_hunk();
                self.mode = Mode::Top;
                // The rest of a broken hunk is ignored at the top level like any stray text.
                is_content(raw) && !self.at_file_pair(raw)
            }
        }
    }

    fn top_line(&mut self, line: &str, number: u32) {
        if let Some(rest) = line.strip_prefix("diff --git ") {
            self.start_git_file(rest, number);
        } else if is_combined_header(line) {
            self.close_file();
            self.warn(
                DiagnosticCode::InvalidValue,
                number,
                "combined diffs (`diff --cc`) describe merges and are not supported; this file is \
                 skipped",
            );
            self.mode = Mode::Combined;
        } else if line.starts_with("@@") {
            self.start_hunk(line, number);
        } else if self.at_file_pair(line) {
            self.file_pair(line, number);
        } else if self.in_git_header() && self.extended_header(line, number) {
            // Read into the current file.
        } else if let Some(names) = line
            .strip_prefix("Binary files ")
            .and_then(|l| l.strip_suffix(" differ"))
        {
            self.binary_files(names, number);
        } else if line == "GIT binary patch" {
            if let Some(file) = self.current.as_mut().filter(|f| f.git && f.header_open) {
                file.file.binary = true;
                file.header_open = false;
            }
            self.mode = Mode::BinaryPatch;
        }
        // Anything else (mail headers, commit messages, diffstat, stray content) carries nothing
        // about a file's lines, as for `git apply`.
    }

    /// A `---` line (given) and the `+++` line after it (consumed here).
    fn file_pair(&mut self, minus: &str, number: u32) {
        let plus = self.lines.next().map_or("", |(l, _)| trim_cr(l));
        let old_raw = header_name(minus.get(4..).unwrap_or(""));
        let new_raw = header_name(plus.get(4..).unwrap_or(""));
        let belongs_to_current = self.current.as_ref().is_some_and(|f| {
            f.git && f.header_open && !f.saw_pair && f.names_match(&old_raw, &new_raw)
        });
        if !belongs_to_current {
            self.close_file();
            self.current = Some(OpenFile::new(number, false));
        }
        if let Some(file) = self.current.as_mut() {
            file.set_pair(&old_raw, &new_raw);
        }
    }

    /// `Binary files X and Y differ`: a flag on a git file, a file of its own in plain `diff`.
    fn binary_files(&mut self, names: &str, number: u32) {
        let split = split_binary_names(names);
        let in_header = |f: &&mut OpenFile| {
            f.git
                && f.header_open
                && split
                    .as_ref()
                    .is_none_or(|(old, new)| f.names_match(old, new))
        };
        if let Some(file) = self.current.as_mut().filter(in_header) {
            file.file.binary = true;
            file.header_open = false;
        } else if let Some((old_raw, new_raw)) = split {
            self.close_file();
            let mut file = OpenFile::new(number, false);
            file.set_pair(&old_raw, &new_raw);
            file.file.binary = true;
            file.header_open = false;
            self.current = Some(file);
        }
    }

    fn at_file_pair(&self, line: &str) -> bool {
        line.starts_with("--- ") && self.lines.peek(0).is_some_and(|l| l.starts_with("+++ "))
    }

    fn in_git_header(&self) -> bool {
        self.current
            .as_ref()
            .is_some_and(|f| f.git && f.header_open)
    }

    fn start_git_file(&mut self, rest: &str, number: u32) {
        self.close_file();
        let mut file = OpenFile::new(number, true);
        if let Some((old_raw, new_raw)) = split_git_names(rest) {
            let strip = infer_strip(&old_raw, &new_raw);
            file.strip = Some(strip);
            file.file.old_path = Some(strip.apply(&old_raw).to_owned());
            file.file.new_path = Some(strip.apply(&new_raw).to_owned());
        }
        self.current = Some(file);
    }

    /// Reads a git extended header line into the current file; `false` if it is not one.
    fn extended_header(&mut self, line: &str, number: u32) -> bool {
        let Some(file) = self.current.as_mut() else {
            return false;
        };
        let f = &mut file.file;
        if let Some(mode) = line.strip_prefix("old mode ") {
            f.old_mode = Some(mode.trim().to_owned());
        } else if let Some(mode) = line.strip_prefix("new mode ") {
            f.new_mode = Some(mode.trim().to_owned());
        } else if let Some(mode) = line.strip_prefix("deleted file mode ") {
            f.old_mode = Some(mode.trim().to_owned());
            file.deleted = true;
        } else if let Some(mode) = line.strip_prefix("new file mode ") {
            f.new_mode = Some(mode.trim().to_owned());
            file.created = true;
        } else if let Some(name) = line
            .strip_prefix("rename from ")
            .or_else(|| line.strip_prefix("rename old "))
        {
            f.old_path = Some(exact_name(name));
            file.renamed = true;
            file.exact_paths = true;
        } else if let Some(name) = line
            .strip_prefix("rename to ")
            .or_else(|| line.strip_prefix("rename new "))
        {
            f.new_path = Some(exact_name(name));
            file.renamed = true;
            file.exact_paths = true;
        } else if let Some(name) = line.strip_prefix("copy from ") {
            f.old_path = Some(exact_name(name));
            file.copied = true;
            file.exact_paths = true;
        } else if let Some(name) = line.strip_prefix("copy to ") {
            f.new_path = Some(exact_name(name));
            file.copied = true;
            file.exact_paths = true;
        } else if let Some(value) = line.strip_prefix("similarity index ") {
            match parse_percent(value) {
                Some(p) => f.similarity = Some(p),
                None => {
                    let message = format!("`similarity index {value}` is not a percentage 0–100%");
                    self.warn(DiagnosticCode::InvalidValue, number, message);
                }
            }
        } else {
            // `index` and `dissimilarity index` say nothing about the new side's lines.
            return line.starts_with("index ") || line.starts_with("dissimilarity index ");
        }
        true
    }

    fn start_hunk(&mut self, line: &str, number: u32) {
        if self.current.is_none() {
            self.warn(
                DiagnosticCode::InvalidValue,
                number,
                "a hunk header before any file header (`diff --git` or `---`/`+++`); the hunk is \
                 ignored",
            );
            return;
        }
        let Some(header) = parse_hunk_header(line) else {
            self.warn(
                DiagnosticCode::InvalidValue,
                number,
                "malformed hunk header; expected `@@ -start[,count] +start[,count] @@`; the hunk \
                 is ignored",
            );
            return;
        };
        let (old_start, old_count, new_start, new_count, section) = header;
        let new_end = u64::from(new_start) + u64::from(new_count);
        if (old_start == 0 && old_count > 0) || (new_start == 0 && new_count > 0) {
            self.warn(
                DiagnosticCode::InvalidValue,
                number,
                "a hunk with lines cannot start at line 0; the hunk is ignored",
            );
            return;
        }
        if new_end > u64::from(u32::MAX) + 1 {
            self.warn(
                DiagnosticCode::InvalidValue,
                number,
                "the hunk's new-side lines run past the largest line number; the hunk is ignored",
            );
            return;
        }
        let overlaps = self
            .current
            .as_ref()
            .is_some_and(|f| new_count > 0 && new_start <= f.last_new_end);
        if overlaps {
            self.warn(
                DiagnosticCode::InvalidValue,
                number,
                "this hunk starts before the previous hunk of the file ends",
            );
        }
        if let Some(file) = self.current.as_mut() {
            file.header_open = false;
        }
        self.hunk = Some(OpenHunk {
            hunk: Hunk {
                old_start,
                old_count,
                new_start,
                new_count,
                section: section.to_owned(),
                added: Vec::new(),
                context: Vec::new(),
                old_missing_newline: false,
                new_missing_newline: false,
            },
            line: number,
            old_left: old_count,
            new_left: new_count,
            next_new: new_start,
            last: 0,
        });
        self.mode = Mode::Hunk;
    }

    fn close_hunk(&mut self) {
        if let Some(open) = self.hunk.take()
            && let Some(file) = self.current.as_mut()
        {
            if let Some(&(_, end)) = open.hunk.added.iter().chain(&open.hunk.context).max() {
                file.last_new_end = file.last_new_end.max(end);
            }
            file.file.hunks.push(open.hunk);
        }
    }

    fn close_file(&mut self) {
        self.close_hunk();
        if let Some(file) = self.current.take() {
            let file = file.into_file(&mut self.warnings);
            self.files.push(file);
        }
    }

    fn end_of_input(&mut self) {
        if self.mode == Mode::Hunk
            && let Some(open) = &self.hunk
            && (open.old_left > 0 || open.new_left > 0)
        {
            let message = format!(
                "the diff ends inside the hunk at line {}: {} old and {} new lines are missing",
                open.line, open.old_left, open.new_left
            );
            let number = self.lines.number;
            self.warn(DiagnosticCode::InvalidValue, number, message);
        }
        self.close_file();
    }

    fn warn(&mut self, code: DiagnosticCode, number: u32, message: impl Into<String>) {
        let mut diagnostic = Diagnostic::new(code, message).at_line(number);
        if let Some(path) = self.current.as_ref().and_then(|f| f.file.path()) {
            diagnostic = diagnostic.in_field(path);
        }
        self.warnings.push(diagnostic);
    }
}

fn trim_cr(line: &str) -> &str {
    line.strip_suffix('\r').unwrap_or(line)
}

/// A line that could be hunk content (what a hunk with wrong counts leaves behind).
fn is_content(raw: &str) -> bool {
    matches!(raw.as_bytes().first(), Some(b' ' | b'+' | b'-'))
}

fn is_combined_header(line: &str) -> bool {
    line.starts_with("diff --cc ") || line.starts_with("diff --combined ")
}

/// Lines of a `GIT binary patch` block: `literal N`/`delta N`, base85 data, blank separators.
fn is_binary_patch_data(line: &str) -> bool {
    line.is_empty()
        || line.starts_with("literal ")
        || line.starts_with("delta ")
        || line
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || BASE85_PUNCTUATION.contains(&b))
}

/// The non-alphanumeric characters of git's base85 alphabet (no space: a line with a space is
/// never patch data).
const BASE85_PUNCTUATION: &[u8] = b"!#$%&()*+-;<=>?@^_`{|}~";

/// `@@ -a[,b] +c[,d] @@[ section]` → (a, b, c, d, section); an omitted count is 1.
fn parse_hunk_header(line: &str) -> Option<(u32, u32, u32, u32, &str)> {
    let rest = line.strip_prefix("@@ -")?;
    let (old_start, old_count, rest) = parse_range(rest)?;
    let rest = rest.strip_prefix(" +")?;
    let (new_start, new_count, rest) = parse_range(rest)?;
    let rest = rest.strip_prefix(" @@")?;
    let section = rest.strip_prefix(' ').unwrap_or(rest);
    Some((old_start, old_count, new_start, new_count, section))
}

fn parse_range(s: &str) -> Option<(u32, u32, &str)> {
    let (start, rest) = parse_number(s)?;
    match rest.strip_prefix(',') {
        Some(rest) => {
            let (count, rest) = parse_number(rest)?;
            Some((start, count, rest))
        }
        None => Some((start, 1, rest)),
    }
}

fn parse_number(s: &str) -> Option<(u32, &str)> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let n = s.get(..digits)?.parse().ok()?;
    Some((n, s.get(digits..)?))
}

fn parse_percent(value: &str) -> Option<u8> {
    let n: u8 = value.trim().strip_suffix('%')?.parse().ok()?;
    (n <= 100).then_some(n)
}

fn after_first_component(name: &str) -> Option<&str> {
    name.split_once('/').map(|(_, rest)| rest)
}

/// How a pair of names naming the same file carries prefixes; see the module documentation.
fn infer_strip(old: &str, new: &str) -> Strip {
    if old == new {
        return Strip::Nothing;
    }
    match (after_first_component(old), after_first_component(new)) {
        (Some(a), Some(b)) if a == b && !a.is_empty() => Strip::FirstComponent,
        _ if old.starts_with("a/") && new.starts_with("b/") => Strip::FirstComponent,
        _ => Strip::Nothing,
    }
}

/// The name on a `---`/`+++` line: C-quoted, or up to the tab that precedes a timestamp (git
/// also ends names containing spaces with a tab).
fn header_name(s: &str) -> String {
    if let Some((name, _)) = unquote(s) {
        return name;
    }
    s.split('\t').next().unwrap_or(s).to_owned()
}

/// The name on a `rename`/`copy` line: C-quoted or verbatim.
fn exact_name(s: &str) -> String {
    match unquote(s) {
        Some((name, "")) => name,
        _ => s.to_owned(),
    }
}

/// Bounds the candidate split points tried on one header line, so a hostile line of thousands of
/// spaces and quotes stays linear.
const MAX_SPLIT_TRIES: usize = 16;

/// Splits the names of a `diff --git` line as git does: quoted names end at their closing quote;
/// two unquoted names are split where the halves name the same file.
fn split_git_names(rest: &str) -> Option<(String, String)> {
    if let Some((old, tail)) = unquote(rest) {
        let tail = tail.strip_prefix(' ')?;
        let new = match unquote(tail) {
            Some((new, "")) => new,
            Some(_) => return None,
            None => tail.to_owned(),
        };
        return Some((old, new));
    }
    if rest.ends_with('"') {
        for (i, _) in rest.match_indices(" \"").take(MAX_SPLIT_TRIES) {
            if let Some((new, end)) = rest.get(i + 1..).and_then(unquote)
                && end.is_empty()
            {
                return Some((rest.get(..i)?.to_owned(), new));
            }
        }
    }
    split_unquoted_pair(rest, " ").map(|(a, b)| (a.to_owned(), b.to_owned()))
}

/// Splits `a<sep>b` where both names are unquoted: at the middle when the halves name the same
/// file, else at the only separator, else before the only `b/`.
fn split_unquoted_pair<'s>(s: &'s str, sep: &str) -> Option<(&'s str, &'s str)> {
    let len = s.len();
    if len > sep.len() && (len - sep.len()).is_multiple_of(2) {
        let mid = (len - sep.len()) / 2;
        if let (Some(a), Some(between), Some(b)) = (
            s.get(..mid),
            s.get(mid..mid + sep.len()),
            s.get(mid + sep.len()..),
        ) && between == sep
            && (a == b
                || after_first_component(a)
                    .is_some_and(|x| !x.is_empty() && Some(x) == after_first_component(b)))
        {
            return Some((a, b));
        }
    }
    let mut seps = s.match_indices(sep);
    if let (Some((i, _)), None) = (seps.next(), seps.next()) {
        return Some((s.get(..i)?, s.get(i + sep.len()..)?));
    }
    let marker = format!("{sep}b/");
    let mut bs = s.match_indices(marker.as_str());
    if let (Some((i, _)), None) = (bs.next(), bs.next()) {
        return Some((s.get(..i)?, s.get(i + sep.len()..)?));
    }
    None
}

/// Splits the names of `Binary files X and Y differ` (a plain `diff` line).
fn split_binary_names(names: &str) -> Option<(String, String)> {
    if let Some((old, tail)) = unquote(names) {
        let tail = tail.strip_prefix(" and ")?;
        return Some((old, exact_name(tail)));
    }
    if names.ends_with('"') {
        for (i, _) in names.match_indices(" and \"").take(MAX_SPLIT_TRIES) {
            if let Some((new, end)) = names.get(i + 5..).and_then(unquote)
                && end.is_empty()
            {
                return Some((names.get(..i)?.to_owned(), new));
            }
        }
    }
    split_unquoted_pair(names, " and ").map(|(a, b)| (a.to_owned(), b.to_owned()))
}

/// Reads a C-quoted name at the start of `s` (git's `"a/caf\303\251 \"x\""`), returning it and the
/// text after the closing quote; `None` if `s` does not start with a well-formed quoted name.
fn unquote(s: &str) -> Option<(String, &str)> {
    let body = s.strip_prefix('"')?;
    let bytes = body.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        i += 1;
        match b {
            b'"' => {
                let name = String::from_utf8_lossy(&out).into_owned();
                return Some((name, body.get(i..)?));
            }
            b'\\' => {
                let e = *bytes.get(i)?;
                i += 1;
                let decoded = match e {
                    b'a' => 0x07,
                    b'b' => 0x08,
                    b'f' => 0x0c,
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'v' => 0x0b,
                    b'\\' | b'"' => e,
                    b'0'..=b'7' => {
                        let mut value = u32::from(e - b'0');
                        for _ in 0..2 {
                            match bytes.get(i) {
                                Some(&d @ b'0'..=b'7') => {
                                    value = value * 8 + u32::from(d - b'0');
                                    i += 1;
                                }
                                _ => break,
                            }
                        }
                        u8::try_from(value).ok()?
                    }
                    _ => return None,
                };
                out.push(decoded);
            }
            _ => out.push(b),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The safety zone's JSON is what `verdict diff-lines` prints. What the parser reads is checked
    /// by the cases under `tests/data/diff/`; this pins the shape.
    #[test]
    fn commentable_serialises_as_arrays() {
        let zone = CommentableLines {
            files: vec![CommentableFile {
                path: "src/lib.rs".to_owned(),
                lines: vec![(1, 5), (21, 22)],
            }],
        };
        let json = serde_json::to_value(&zone).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"files": [{"path": "src/lib.rs", "lines": [[1, 5], [21, 22]]}]})
        );
        let back: CommentableLines = serde_json::from_value(json).unwrap();
        assert_eq!(back, zone);
        assert_eq!(
            serde_json::to_value(FileStatus::ModeChanged).unwrap(),
            serde_json::json!("mode_changed")
        );
    }

    const PIECE: &str = "diff --git a/src/a.rs b/src/a.rs\n--- a/src/a.rs\n+++ b/src/a.rs\n\
        @@ -1,4 +1,5 @@\n fn f() {\n-    old();\n+    new();\n+\tif x {\n }\n\n\
        @@ -20,2 +21,3 @@ fn g() {\n     a();\n+    --- b();\n }\n";

    #[test]
    fn new_side_text_reads_added_and_context_lines() {
        assert_eq!(new_side_text(PIECE, 1, 1).as_deref(), Some("fn f() {"));
        assert_eq!(
            new_side_text(PIECE, 2, 5).as_deref(),
            Some("    new();\n\tif x {\n}\n"),
            "removed lines are skipped; an empty context line is an empty line"
        );
        assert_eq!(
            new_side_text(PIECE, 22, 23).as_deref(),
            Some("    --- b();\n}"),
            "content that looks like a header is content"
        );
    }

    #[test]
    fn new_side_text_refuses_lines_outside_the_hunks() {
        assert_eq!(new_side_text(PIECE, 5, 21), None, "the gap between hunks");
        assert_eq!(new_side_text(PIECE, 23, 24), None, "past the last hunk");
        assert_eq!(new_side_text(PIECE, 0, 1), None);
        assert_eq!(new_side_text(PIECE, 3, 2), None);
        assert_eq!(new_side_text(PIECE, 1, u32::MAX), None);
        assert_eq!(new_side_text("not a diff", 1, 1), None);
    }

    #[test]
    fn new_side_text_exists_exactly_where_the_zone_says_a_range_is_commentable() {
        let zone = parse(PIECE).commentable();
        for start in 0..30 {
            for end in 0..30 {
                let text = new_side_text(PIECE, start, end);
                assert_eq!(
                    text.is_some(),
                    zone.contains("src/a.rs", start, end),
                    "{start}..={end}"
                );
                if let Some(text) = text {
                    assert_eq!(text.split('\n').count(), (end - start + 1) as usize);
                }
            }
        }
    }

    #[test]
    fn new_side_text_reads_only_the_first_file_and_drops_carriage_returns() {
        let two = format!(
            "{PIECE}diff --git a/b.rs b/b.rs\n--- a/b.rs\n+++ b/b.rs\n@@ -30,0 +30,1 @@\n+other\n"
        );
        assert_eq!(
            new_side_text(&two, 30, 30),
            None,
            "line 30 is the second file's"
        );
        let crlf = "--- a/x\r\n+++ b/x\r\n@@ -1 +1,2 @@\r\n x\r\n+\ty\r\n";
        assert_eq!(new_side_text(crlf, 1, 2).as_deref(), Some("x\n\ty"));
    }
}
