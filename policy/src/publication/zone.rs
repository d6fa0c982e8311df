//! Where a finding can be posted (SPEC G2): inline on the diff, only when its file maps to one
//! changed file and its whole line range lies inside one commentable range of that file (the diff
//! safety zone from `verdict_proto::diff`); in the review body otherwise, with the place the
//! reader should look.
//!
//! Models name paths slightly wrong (an extra or a missing leading folder, `./`, letter case), so
//! a path that is not exactly a changed file's is mapped to one only when exactly one changed file
//! matches loosely; two candidates are as good as none, because a comment on the wrong file is
//! worse than a comment in the body.

use verdict_proto::diff::{self, CommentableLines};
use verdict_proto::grounding::{LocationStatus, ReportedLocation};

use super::ChangedFile;
use crate::result::ResultFinding;

/// The changed files of a pull request with their safety zones, parsed once per plan.
#[derive(Debug)]
pub(super) struct Zone<'a> {
    files: Vec<ZoneFile<'a>>,
}

/// One changed file: its path, its piece of the diff and its commentable lines.
#[derive(Debug)]
pub(super) struct ZoneFile<'a> {
    pub path: &'a str,
    pub piece: &'a str,
    lines: CommentableLines,
}

/// Where one finding goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Place<'z> {
    /// On the diff: `start..=end` of `path` are all commentable.
    Inline {
        path: &'z str,
        piece: &'z str,
        start: u32,
        end: u32,
    },
    /// In the body, shown at `location`.
    Body(Location),
}

/// How a finding in the body says where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Location {
    /// Lines of a file (outside the zone, or refused inline by the host).
    Lines { path: String, start: u32, end: u32 },
    /// A whole file.
    File(String),
    /// Grounding found no such place; what the model wrote, if anything.
    NotFound(Option<ReportedLocation>),
    /// The finding names no file.
    Nowhere,
}

impl<'a> Zone<'a> {
    pub(super) fn new(files: &'a [ChangedFile]) -> Zone<'a> {
        Zone {
            files: files
                .iter()
                .map(|f| ZoneFile {
                    path: &f.path,
                    piece: &f.diff,
                    lines: diff::parse(&f.diff).commentable(),
                })
                .collect(),
        }
    }

    /// The changed file `file` names: the one with exactly that path, else the only one that
    /// matches loosely ([`loosely_same`]).
    pub(super) fn file(&self, file: &str) -> Option<&ZoneFile<'a>> {
        if let Some(exact) = self.files.iter().find(|f| f.path == file) {
            return Some(exact);
        }
        let mut matches = self.files.iter().filter(|f| loosely_same(file, f.path));
        let first = matches.next()?;
        // Several files with the same path count once.
        if matches.all(|f| f.path == first.path) {
            Some(first)
        } else {
            None
        }
    }

    /// Where `finding` goes: inline when it names lines that all lie in one commentable range of
    /// the one changed file its path maps to, the body otherwise.
    pub(super) fn place<'z>(&'z self, finding: &ResultFinding) -> Place<'z> {
        let note = finding.grounding.as_ref();
        if note.is_some_and(|n| n.status == LocationStatus::Unlocated) {
            return Place::Body(Location::NotFound(note.and_then(|n| n.reported.clone())));
        }
        let f = &finding.finding;
        let Some(named) = f.file.as_deref() else {
            return Place::Body(Location::Nowhere);
        };
        let mapped = self.file(named);
        let path = mapped.map_or(named, |m| m.path).to_owned();
        let (start, end) = match (f.start_line, f.end_line) {
            (Some(s), Some(e)) => (s, e),
            (Some(n), None) | (None, Some(n)) => (n, n),
            (None, None) => return Place::Body(Location::File(path)),
        };
        match mapped {
            Some(m) if m.lines.contains(m.path, start, end) => Place::Inline {
                path: m.path,
                piece: m.piece,
                start,
                end,
            },
            _ => Place::Body(Location::Lines { path, start, end }),
        }
    }
}

/// Whether a finding's path and a diff path name the same file up to the slips models make: a
/// `./` prefix, letter case, an extra leading folder in the finding (the diff path is a suffix of
/// it at a `/` boundary) or a missing one (the finding is a suffix of the diff path at a `/`).
fn loosely_same(finding: &str, diff_path: &str) -> bool {
    let (f, d) = (normalise(finding), normalise(diff_path));
    if f.is_empty() || d.is_empty() {
        return false;
    }
    f == d || f.ends_with(&format!("/{d}")) || d.ends_with(&format!("/{f}"))
}

fn normalise(path: &str) -> String {
    let mut p = path.trim();
    while let Some(rest) = p.strip_prefix("./") {
        p = rest;
    }
    p.to_lowercase()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use verdict_proto::grounding::LocationNote;
    use verdict_proto::review::Finding;
    use verdict_proto::severity::Severity;

    use super::*;

    fn piece(path: &str, hunks: &str) -> ChangedFile {
        ChangedFile {
            path: path.to_owned(),
            diff: format!("diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n{hunks}"),
        }
    }

    /// `src/app/main.rs` lines 1–4 and 10–12 commentable; `tests/main.rs` line 1; `lib/util.rs`
    /// 1–2.
    fn files() -> Vec<ChangedFile> {
        vec![
            piece(
                "src/app/main.rs",
                "@@ -1,3 +1,4 @@\n a\n+b\n c\n d\n@@ -8,2 +10,3 @@\n x\n+y\n z\n",
            ),
            piece("tests/main.rs", "@@ -1 +1 @@\n-a\n+b\n"),
            piece("lib/util.rs", "@@ -1,2 +1,2 @@\n a\n-b\n+c\n"),
        ]
    }

    fn at(file: Option<&str>, start: Option<u32>, end: Option<u32>) -> ResultFinding {
        ResultFinding {
            finding: Finding {
                severity: Severity::Minor,
                file: file.map(str::to_owned),
                start_line: start,
                end_line: end,
                title: "t".to_owned(),
                description: "d".to_owned(),
                suggestion: None,
            },
            grounding: None,
            raised_by: Vec::new(),
            confidence: None,
        }
    }

    #[test]
    fn paths_map_exactly_or_to_the_only_loose_match() {
        let files = files();
        let zone = Zone::new(&files);
        let mapped = |p: &str| zone.file(p).map(|f| f.path);
        assert_eq!(mapped("tests/main.rs"), Some("tests/main.rs"), "exact");
        assert_eq!(
            mapped("repo/src/app/main.rs"),
            Some("src/app/main.rs"),
            "extra leading folder"
        );
        assert_eq!(
            mapped("app/main.rs"),
            Some("src/app/main.rs"),
            "missing leading folder"
        );
        assert_eq!(mapped("./lib/util.rs"), Some("lib/util.rs"), "./ prefix");
        assert_eq!(mapped("Lib/Util.RS"), Some("lib/util.rs"), "letter case");
        assert_eq!(
            mapped("main.rs"),
            None,
            "two files end in main.rs: ambiguous"
        );
        assert_eq!(mapped("pp/main.rs"), None, "suffixes only at a / boundary");
        assert_eq!(mapped("src/other.rs"), None, "no match");
        assert_eq!(mapped(""), None);
    }

    #[test]
    fn inline_only_when_the_whole_range_is_in_one_commentable_range() {
        let files = files();
        let zone = Zone::new(&files);
        let place = |f: ResultFinding| zone.place(&f);
        assert!(matches!(
            place(at(Some("src/app/main.rs"), Some(2), Some(4))),
            Place::Inline {
                path: "src/app/main.rs",
                start: 2,
                end: 4,
                ..
            }
        ));
        assert!(
            matches!(
                place(at(Some("app/main.rs"), Some(11), None)),
                Place::Inline {
                    path: "src/app/main.rs",
                    start: 11,
                    end: 11,
                    ..
                }
            ),
            "a unique loose match lands on the right file"
        );
        assert_eq!(
            place(at(Some("src/app/main.rs"), Some(3), Some(11))),
            Place::Body(Location::Lines {
                path: "src/app/main.rs".to_owned(),
                start: 3,
                end: 11
            }),
            "a range spanning two hunks"
        );
        assert_eq!(
            place(at(Some("app/main.rs"), Some(6), Some(6))),
            Place::Body(Location::Lines {
                path: "src/app/main.rs".to_owned(),
                start: 6,
                end: 6
            }),
            "outside the zone, shown at the mapped path"
        );
        assert_eq!(
            place(at(Some("main.rs"), Some(1), Some(1))),
            Place::Body(Location::Lines {
                path: "main.rs".to_owned(),
                start: 1,
                end: 1
            }),
            "ambiguous path: the body, as the model wrote it"
        );
        assert_eq!(
            place(at(Some("lib/util.rs"), None, None)),
            Place::Body(Location::File("lib/util.rs".to_owned()))
        );
        assert_eq!(place(at(None, None, None)), Place::Body(Location::Nowhere));
        assert_eq!(
            place(at(Some("lib/util.rs"), Some(2), Some(1))),
            Place::Body(Location::Lines {
                path: "lib/util.rs".to_owned(),
                start: 2,
                end: 1
            }),
            "a reversed range is never inline"
        );
    }

    #[test]
    fn an_unlocated_finding_goes_to_the_body_with_what_was_reported() {
        let files = files();
        let zone = Zone::new(&files);
        let mut f = at(None, None, None);
        let reported = ReportedLocation {
            file: "src/gone.rs".to_owned(),
            start_line: Some(3),
            end_line: Some(4),
        };
        f.grounding = Some(LocationNote {
            status: LocationStatus::Unlocated,
            reported: Some(reported.clone()),
            in_change: None,
            reason: None,
            fingerprint: None,
        });
        assert_eq!(
            zone.place(&f),
            Place::Body(Location::NotFound(Some(reported)))
        );
    }
}
