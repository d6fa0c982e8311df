//! Grounding: whether a finding's location exists in the snapshot the task looked at, and what
//! was done about it when it does not. A report that points at code that is not there loses a
//! team's trust faster than a missed problem, so every location is checked before anyone sees it.
//!
//! The checks themselves live here and do no I/O: the worker hands in a [`Tree`] over its snapshot.
//! After grounding, every finding that named a file carries a [`LocationNote`] under the key
//! [`NOTE_KEY`] in the stage's canonical value; the model's own contract never contains that key.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::names::string_enum;
use crate::{Diagnostic, DiagnosticCode, Diagnostics, ProtocolFamily, ProtocolId};

/// The property each grounded finding carries its note under.
pub const NOTE_KEY: &str = "grounding";

/// What grounding concluded about one finding's location.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LocationStatus {
    /// The file and lines exist as the model gave them.
    Located,
    /// The location resolved to exactly one real place after a correction (a leading folder,
    /// `./`, letter case, or the lines where the quoted code really is); `reported` keeps what the
    /// model wrote.
    Corrected,
    /// The location does not exist in the snapshot: the finding's file and lines were removed and
    /// `reported` keeps them. The finding is kept, never dropped, and never shown as located.
    Unlocated,
}

string_enum!(LocationStatus {
    Located => "located",
    Corrected => "corrected",
    Unlocated => "unlocated",
});

/// A location as the model wrote it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ReportedLocation {
    pub file: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_line: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_line: Option<u32>,
}

/// The note a grounded finding carries (under [`NOTE_KEY`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocationNote {
    pub status: LocationStatus,
    /// What the model wrote, when it differs from the finding's location (corrected, unlocated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<ReportedLocation>,
    /// For reviews: whether the file is one the change touches. `None` for scans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_change: Option<bool>,
    /// Why the location was corrected or could not be found, in plain words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A stable identity of the finding (SPEC X2): the file, the normalised title and the code
    /// of its lines, hashed, so the same finding on a later head of a pull request is recognised
    /// even when its lines moved. Unlocated findings use the reported file and no code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
}

impl LocationNote {
    /// The note of finding `finding` (an object of a grounded value), if it has one.
    pub fn of(finding: &Value) -> Option<LocationNote> {
        serde_json::from_value(finding.get(NOTE_KEY)?.clone()).ok()
    }
}

/// Removes the notes from a grounded value's `findings`, returning them by finding index, so the
/// value can be read back as the model's contract type (which does not know the key).
pub fn take_notes(value: &mut Value) -> Vec<Option<LocationNote>> {
    let Some(findings) = value.get_mut("findings").and_then(Value::as_array_mut) else {
        return Vec::new();
    };
    findings
        .iter_mut()
        .map(|f| {
            let note = f.as_object_mut()?.remove(NOTE_KEY)?;
            serde_json::from_value(note).ok()
        })
        .collect()
}

/// The snapshot's files, as grounding needs them. The worker implements it over the snapshot
/// directory (confined like the tools); tests over a map.
pub trait Tree {
    /// The regular file at `path` (repository-relative, `/`-separated), or `None` when there is
    /// none: missing, a directory, outside the snapshot.
    fn file(&self, path: &str) -> Option<Arc<FileView>>;
    /// Every regular file's path, sorted; asked for only when a path does not match exactly.
    fn paths(&self) -> Arc<[String]>;
}

/// What grounding needs of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileView {
    /// Lines in the file (a last line without a newline counts).
    pub line_count: u32,
    /// The lines' text, for checking quotes; `None` for files too large or not text.
    pub lines: Option<Vec<String>>,
}

impl FileView {
    /// The view of a file's bytes; `keep_text` false keeps only the count.
    pub fn of(bytes: &[u8], keep_text: bool) -> FileView {
        let newlines = bytes.iter().filter(|&&b| b == b'\n').count();
        let unterminated = usize::from(bytes.last().is_some_and(|&b| b != b'\n'));
        let line_count = u32::try_from(newlines + unterminated).unwrap_or(u32::MAX);
        let text = keep_text && !bytes.iter().take(8192).any(|&b| b == 0);
        let lines = text.then(|| {
            String::from_utf8_lossy(bytes)
                .lines()
                .map(str::to_owned)
                .collect()
        });
        FileView { line_count, lines }
    }
}

/// Whether answers of `protocol` carry findings with locations that grounding checks.
pub fn applies_to(protocol: ProtocolId) -> bool {
    matches!(
        protocol,
        ProtocolId::Review | ProtocolId::Scan | ProtocolId::Reviewer
    )
}

/// What grounding checks a finding against besides the snapshot.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scope<'a> {
    /// For reviews: the paths the change touches.
    pub changed_files: Option<&'a [String]>,
    /// The commit the snapshot was taken at, for messages.
    pub commit: Option<&'a str>,
}

/// The conclusion about one finding that named a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// The finding's index in the value's `findings`.
    pub index: usize,
    pub reported: ReportedLocation,
    pub verdict: Verdict,
    /// See [`LocationNote::fingerprint`].
    pub fingerprint: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Exists as written.
    Located { in_change: Option<bool> },
    /// Exists after a correction to exactly one real place.
    Corrected {
        file: String,
        start_line: u32,
        end_line: u32,
        in_change: Option<bool>,
        reason: String,
    },
    /// Does not resolve. `problem` says what is wrong in one clause; `hint` is what the model is
    /// told to do (paths that exist near the one it named); `part` is the field at fault.
    Unresolved {
        part: Part,
        problem: String,
        hint: String,
    },
}

/// Which part of a location did not resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    File,
    Lines,
    Quote,
}

/// Counts of one grounding, for metrics and transcripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tally {
    pub located: u32,
    pub corrected: u32,
    pub unlocated: u32,
}

/// Checks every finding of `value` (a canonical value of a protocol that [`applies_to`]) that
/// names a file.
pub fn check(value: &Value, tree: &dyn Tree, scope: Scope<'_>) -> Vec<Check> {
    let Some(findings) = value.get("findings").and_then(Value::as_array) else {
        return Vec::new();
    };
    findings
        .iter()
        .enumerate()
        .filter_map(|(index, finding)| {
            let file = finding.get("file")?.as_str()?;
            let line = |key: &str| {
                finding
                    .get(key)
                    .and_then(Value::as_u64)
                    .and_then(|n| u32::try_from(n).ok())
            };
            let reported = ReportedLocation {
                file: file.to_owned(),
                start_line: line("start_line"),
                end_line: line("end_line"),
            };
            let quote = finding.get("quote").and_then(Value::as_str);
            let verdict = check_one(&reported, quote, tree, scope);
            let title = finding.get("title").and_then(Value::as_str).unwrap_or("");
            let fingerprint = match &verdict {
                Verdict::Located { .. } => {
                    let (s, e) = (reported.start_line, reported.end_line);
                    fingerprint(&reported.file, title, code_at(tree, &reported.file, s, e))
                }
                Verdict::Corrected {
                    file,
                    start_line,
                    end_line,
                    ..
                } => fingerprint(
                    file,
                    title,
                    code_at(tree, file, Some(*start_line), Some(*end_line)),
                ),
                Verdict::Unresolved { .. } => fingerprint(&reported.file, title, None),
            };
            Some(Check {
                index,
                reported,
                verdict,
                fingerprint,
            })
        })
        .collect()
}

/// The findings that did not resolve, as diagnostics a repair round can quote; `None` when every
/// location resolved.
pub fn diagnostics(protocol: ProtocolId, checks: &[Check]) -> Option<Diagnostics> {
    let list: Vec<Diagnostic> = checks
        .iter()
        .filter_map(|c| match &c.verdict {
            Verdict::Unresolved {
                part,
                problem,
                hint,
            } => {
                let envelope = protocol.family() == ProtocolFamily::Envelope;
                let field = match (part, envelope) {
                    (Part::File, true) => "FILE",
                    (Part::Lines, true) => "END_LINE",
                    (Part::Quote, true) => "FILE",
                    (Part::File, false) => "file",
                    (Part::Lines, false) => "end_line",
                    (Part::Quote, false) => "quote",
                };
                let at = if envelope {
                    format!("FINDINGS/FINDING[{}]/{field}", c.index + 1)
                } else {
                    format!("$.findings[{}].{field}", c.index)
                };
                Some(
                    Diagnostic::new(
                        DiagnosticCode::UngroundedLocation,
                        format!("{problem}; {hint}"),
                    )
                    .in_field(at),
                )
            }
            _ => None,
        })
        .collect();
    (!list.is_empty()).then(|| Diagnostics::new(list))
}

/// Writes the conclusions into `value`: corrected locations replace the model's, unresolved
/// ones are removed (the finding is kept, unlocated), and every checked finding gets its note.
pub fn apply(value: &mut Value, checks: &[Check]) -> Tally {
    let mut tally = Tally::default();
    let Some(findings) = value.get_mut("findings").and_then(Value::as_array_mut) else {
        return tally;
    };
    for c in checks {
        let Some(finding) = findings.get_mut(c.index).and_then(Value::as_object_mut) else {
            continue;
        };
        let note = match &c.verdict {
            Verdict::Located { in_change } => {
                tally.located += 1;
                LocationNote {
                    status: LocationStatus::Located,
                    reported: None,
                    in_change: *in_change,
                    reason: None,
                    fingerprint: Some(c.fingerprint.clone()),
                }
            }
            Verdict::Corrected {
                file,
                start_line,
                end_line,
                in_change,
                reason,
            } => {
                tally.corrected += 1;
                finding.insert("file".into(), Value::from(file.clone()));
                finding.insert("start_line".into(), Value::from(*start_line));
                finding.insert("end_line".into(), Value::from(*end_line));
                LocationNote {
                    status: LocationStatus::Corrected,
                    reported: Some(c.reported.clone()),
                    in_change: *in_change,
                    reason: Some(reason.clone()),
                    fingerprint: Some(c.fingerprint.clone()),
                }
            }
            Verdict::Unresolved { problem, .. } => {
                tally.unlocated += 1;
                for key in ["file", "start_line", "end_line"] {
                    finding.insert(key.into(), Value::Null);
                }
                if finding.contains_key("quote") {
                    finding.insert("quote".into(), Value::Null);
                }
                LocationNote {
                    status: LocationStatus::Unlocated,
                    reported: Some(c.reported.clone()),
                    in_change: None,
                    reason: Some(problem.clone()),
                    fingerprint: Some(c.fingerprint.clone()),
                }
            }
        };
        if let Ok(note) = serde_json::to_value(note) {
            finding.insert(NOTE_KEY.into(), note);
        }
    }
    tally
}

/// The fingerprint of a finding about `file` titled `title`, over the code it points at (when
/// known): 16 hex digits of SHA-256 over the file, the title as lowercase words, and the code's
/// non-blank lines trimmed — so re-indenting or moving the code keeps the identity.
pub fn fingerprint(file: &str, title: &str, code: Option<String>) -> String {
    use sha2::{Digest, Sha256};
    let words: Vec<String> = title
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let mut hash = Sha256::new();
    hash.update(file.as_bytes());
    hash.update([0]);
    hash.update(words.join(" ").as_bytes());
    hash.update([0]);
    hash.update(code.unwrap_or_default().as_bytes());
    hash.finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The non-blank lines `start..=end` of `file`, trimmed and joined, when the tree has the text.
fn code_at(tree: &dyn Tree, file: &str, start: Option<u32>, end: Option<u32>) -> Option<String> {
    let view = tree.file(file)?;
    let lines = view.lines.as_ref()?;
    let start = usize::try_from(start?).ok()?.checked_sub(1)?;
    let end = usize::try_from(end?).ok()?;
    let code: Vec<&str> = lines
        .get(start..end.min(lines.len()))?
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect();
    Some(code.join("\n"))
}

/// How many paths a hint lists.
const HINT_PATHS: usize = 8;

fn check_one(
    reported: &ReportedLocation,
    quote: Option<&str>,
    tree: &dyn Tree,
    scope: Scope<'_>,
) -> Verdict {
    let at = match scope.commit {
        Some(c) => format!(" at commit {}", c.get(..12).unwrap_or(c)),
        None => String::new(),
    };
    let named = &reported.file;
    let (path, path_fix) = match resolve_path(named, tree) {
        PathMatch::Exact(p) => (p, None),
        PathMatch::Corrected(p, why) => {
            let reason = format!("the file `{named}` is `{p}` in the repository ({why})");
            (p, Some(reason))
        }
        PathMatch::Ambiguous(candidates) => {
            return Verdict::Unresolved {
                part: Part::File,
                problem: format!("`{named}` matches several files of the repository{at}"),
                hint: format!(
                    "give the full path of the one you mean: {}",
                    list(&candidates)
                ),
            };
        }
        PathMatch::Missing => {
            let near = nearby(named, tree, scope.changed_files);
            let hint = if near.is_empty() {
                "give the path of the file the problem is in, exactly as it appears in the repository, or no file if the finding is not about one file".to_owned()
            } else {
                format!(
                    "paths that exist near it: {}; give the path of the file the problem is in, exactly as it appears in the repository, or no file if the finding is not about one file",
                    list(&near)
                )
            };
            return Verdict::Unresolved {
                part: Part::File,
                problem: format!("`{named}` does not exist in the repository{at}"),
                hint,
            };
        }
    };
    let Some(view) = tree.file(&path) else {
        return Verdict::Unresolved {
            part: Part::File,
            problem: format!("`{named}` cannot be read in the repository{at}"),
            hint: "give the path of a file".to_owned(),
        };
    };
    let in_change = scope
        .changed_files
        .map(|changed| changed.iter().any(|c| c == &path));
    let (start, end) = match (reported.start_line, reported.end_line) {
        (Some(s), Some(e)) => (s, e),
        // The contracts require both lines with a file; a value without them has nothing to
        // check beyond the path.
        _ => (1, 1),
    };
    let shown = |s: u32, e: u32| {
        if s == e {
            format!("line {s}")
        } else {
            format!("lines {s}–{e}")
        }
    };
    let (start_line, end_line, line_fix) = match quote.and_then(|q| quoted_lines(q, &view)) {
        Some(QuoteMatch::Missing) => {
            return Verdict::Unresolved {
                part: Part::Quote,
                problem: format!("the quoted code is not in `{path}`{at}"),
                hint: format!(
                    "quote the code exactly as it is in `{path}` (whole lines), with the lines it is on, or no file if you cannot"
                ),
            };
        }
        Some(QuoteMatch::At(ranges)) => {
            if let Some(&(s, e)) = ranges.iter().find(|&&(s, e)| s <= end && start <= e) {
                if end > view.line_count {
                    // Overlapping the quote, yet running past the file's end: the quote's own
                    // lines are the ones that exist.
                    let why = format!(
                        "{} of `{path}` run past its last line ({}); the quoted code is at {}",
                        shown(start, end),
                        view.line_count,
                        shown(s, e)
                    );
                    (s, e, Some(why))
                } else {
                    (start, end, None)
                }
            } else if let [(s, e)] = ranges[..] {
                let why = format!(
                    "the quoted code is at {} of `{path}`, not {}",
                    shown(s, e),
                    shown(start, end)
                );
                (s, e, Some(why))
            } else {
                let places: Vec<String> = ranges.iter().map(|&(s, e)| shown(s, e)).collect();
                return Verdict::Unresolved {
                    part: Part::Lines,
                    problem: format!(
                        "{} of `{path}` do not hold the quoted code, which is at {} instead",
                        shown(start, end),
                        places.join(", ")
                    ),
                    hint: "give the lines of the one place the finding is about".to_owned(),
                };
            }
        }
        None if view.line_count == 0 => {
            return Verdict::Unresolved {
                part: Part::Lines,
                problem: format!("`{path}` is empty{at}, so it has no {}", shown(start, end)),
                hint: "give no lines (or no file) for a finding about an empty file".to_owned(),
            };
        }
        None if end > view.line_count => {
            let lines = view.line_count;
            return Verdict::Unresolved {
                part: Part::Lines,
                problem: format!(
                    "`{path}` has {lines} line{}{at}, so {} {} past its end",
                    if lines == 1 { "" } else { "s" },
                    shown(start, end),
                    if start == end { "is" } else { "are" },
                ),
                hint: format!(
                    "give the lines where the problem is, between 1 and {lines}, as they are numbered in the file"
                ),
            };
        }
        None => (start, end, None),
    };
    match (path_fix, line_fix) {
        (None, None) => Verdict::Located { in_change },
        (a, b) => Verdict::Corrected {
            reason: [a, b].into_iter().flatten().collect::<Vec<_>>().join("; "),
            file: path,
            start_line,
            end_line,
            in_change,
        },
    }
}

/// One way a real path may match a name that did not match exactly.
type PathRule<'a> = dyn Fn(&str) -> bool + 'a;

enum PathMatch {
    Exact(String),
    Corrected(String, &'static str),
    Ambiguous(Vec<String>),
    Missing,
}

/// The one real path `named` means: as written; after normalising (`./`, `\`, doubled `/`);
/// otherwise the unique path that equals it ignoring letter case, or that it names with leading
/// folders missing or extra. A rule that matches several paths ends the search as ambiguous.
fn resolve_path(named: &str, tree: &dyn Tree) -> PathMatch {
    if tree.file(named).is_some() {
        return PathMatch::Exact(named.to_owned());
    }
    let normal = normalise(named);
    if normal.is_empty() {
        return PathMatch::Missing;
    }
    if normal != named && tree.file(&normal).is_some() {
        return PathMatch::Corrected(normal, "written with `./`, `\\` or a doubled `/`");
    }
    let paths = tree.paths();
    let lower = normal.to_lowercase();
    let rules: [(&'static str, &PathRule); 4] = [
        ("different letter case", &|p: &str| {
            p.to_lowercase() == lower
        }),
        ("leading folders missing", &|p: &str| {
            p.ends_with(&format!("/{normal}"))
        }),
        ("extra leading folders", &|p: &str| {
            normal.ends_with(&format!("/{p}"))
        }),
        ("leading folders and letter case differ", &|p: &str| {
            let p = p.to_lowercase();
            p.ends_with(&format!("/{lower}")) || lower.ends_with(&format!("/{p}"))
        }),
    ];
    for (why, rule) in rules {
        let found: Vec<String> = paths.iter().filter(|p| rule(p)).cloned().collect();
        match found.len() {
            0 => {}
            1 => {
                return found
                    .into_iter()
                    .next()
                    .map_or(PathMatch::Missing, |p| PathMatch::Corrected(p, why));
            }
            _ => {
                // "Extra leading folders" prefers the longest real path that is a tail of the
                // name: `repo/src/a.rs` means `src/a.rs` even when a top-level `a.rs` exists.
                if why == "extra leading folders" {
                    let longest = found.iter().map(String::len).max().unwrap_or(0);
                    let best: Vec<&String> = found.iter().filter(|p| p.len() == longest).collect();
                    if let [one] = best[..] {
                        return PathMatch::Corrected(one.clone(), why);
                    }
                }
                return PathMatch::Ambiguous(found.into_iter().take(HINT_PATHS).collect());
            }
        }
    }
    PathMatch::Missing
}

fn normalise(path: &str) -> String {
    let slashed = path.trim().replace('\\', "/");
    slashed
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// Paths worth showing a model that named `named`: the same file name anywhere, then the
/// changed files (reviews), then the named folder's files; at most [`HINT_PATHS`].
fn nearby(named: &str, tree: &dyn Tree, changed: Option<&[String]>) -> Vec<String> {
    let normal = normalise(named);
    let name = normal.rsplit('/').next().unwrap_or(&normal).to_lowercase();
    let folder = normal.rsplit_once('/').map(|(d, _)| format!("{d}/"));
    let paths = tree.paths();
    let mut out: Vec<String> = Vec::new();
    let mut push = |p: &String| {
        if out.len() < HINT_PATHS && !out.contains(p) {
            out.push(p.clone());
        }
    };
    for p in paths.iter() {
        if p.rsplit('/')
            .next()
            .is_some_and(|n| n.to_lowercase() == name)
        {
            push(p);
        }
    }
    for p in changed.unwrap_or_default() {
        if tree.file(p).is_some() {
            push(p);
        }
    }
    if let Some(folder) = folder {
        for p in paths.iter().filter(|p| p.starts_with(&folder)) {
            push(p);
        }
    }
    out
}

fn list(paths: &[String]) -> String {
    paths
        .iter()
        .map(|p| format!("`{p}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

enum QuoteMatch {
    Missing,
    /// Every place (first line, last line; 1-based) the quote is found.
    At(Vec<(u32, u32)>),
}

/// Where `quote` is in the file. Lines are compared trimmed with inner whitespace collapsed; a
/// quote line may be part of its file line (models quote fragments); blank lines and `...`
/// elisions in the quote are skipped. `None` when there is nothing to compare (no text kept, an
/// empty quote).
fn quoted_lines(quote: &str, view: &FileView) -> Option<QuoteMatch> {
    let lines = view.lines.as_ref()?;
    let wanted: Vec<String> = quote
        .lines()
        .map(squash)
        .filter(|l| !l.is_empty() && l != "..." && l != "…")
        .collect();
    let first = wanted.first()?;
    let file: Vec<String> = lines.iter().map(|l| squash(l)).collect();
    let mut found = Vec::new();
    for start in 0..file.len() {
        if !file[start].contains(first.as_str()) {
            continue;
        }
        // The rest of the quote must follow in order, skipping blank file lines.
        let mut at = start;
        let mut ok = true;
        for want in &wanted[1..] {
            at += 1;
            while at < file.len() && file[at].is_empty() {
                at += 1;
            }
            if at >= file.len() || !file[at].contains(want.as_str()) {
                ok = false;
                break;
            }
        }
        if ok {
            let s = u32::try_from(start + 1).unwrap_or(u32::MAX);
            let e = u32::try_from(at + 1).unwrap_or(u32::MAX);
            found.push((s, e));
        }
    }
    Some(if found.is_empty() {
        QuoteMatch::Missing
    } else {
        QuoteMatch::At(found)
    })
}

fn squash(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A [`Tree`] over files held in memory: for tests and for callers that already have the files.
#[derive(Debug, Clone, Default)]
pub struct MemoryTree {
    files: std::collections::BTreeMap<String, Arc<FileView>>,
}

impl MemoryTree {
    pub fn new<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> MemoryTree {
        MemoryTree {
            files: files
                .into_iter()
                .map(|(p, text)| (p.to_owned(), Arc::new(FileView::of(text.as_bytes(), true))))
                .collect(),
        }
    }
}

impl Tree for MemoryTree {
    fn file(&self, path: &str) -> Option<Arc<FileView>> {
        self.files.get(path).cloned()
    }

    fn paths(&self) -> Arc<[String]> {
        self.files.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finding_keeps_its_fingerprint_when_its_code_moves_or_is_reindented() {
        let before = MemoryTree::new([("src/a.py", "x = 1\ndef f(v):\n    return 1 / v\n")]);
        let after = MemoryTree::new([(
            "src/a.py",
            "import os\n\nx = 1\ndef f(v):\n        return 1 / v\n",
        )]);
        let finding = |start: u32, end: u32, title: &str| {
            serde_json::json!({"findings": [{"file": "src/a.py", "start_line": start,
                "end_line": end, "title": title}]})
        };
        let print = |tree: &MemoryTree, value: &Value| {
            check(value, tree, Scope::default())[0].fingerprint.clone()
        };
        let first = print(&before, &finding(2, 3, "Division by zero"));
        assert_eq!(first, print(&after, &finding(4, 5, "division by  ZERO!")));
        assert_ne!(first, print(&after, &finding(4, 5, "Unchecked input")));
        assert_ne!(first, print(&after, &finding(1, 1, "Division by zero")));
        assert_eq!(first.len(), 16);
    }

    #[test]
    fn notes_are_taken_out_by_index() {
        let mut value = serde_json::json!({"findings": [
            {"file": "src/a.rs", "grounding": {"status": "corrected", "reported": {"file": "repo/src/a.rs", "start_line": 1, "end_line": 2}, "reason": "r"}},
            {"file": null},
        ]});
        let notes = take_notes(&mut value);
        assert_eq!(notes.len(), 2);
        let first = notes[0].as_ref().unwrap();
        assert_eq!(first.status, LocationStatus::Corrected);
        assert_eq!(first.reported.as_ref().unwrap().file, "repo/src/a.rs");
        assert!(notes[1].is_none());
        assert!(value["findings"][0].get(NOTE_KEY).is_none());
    }
}
