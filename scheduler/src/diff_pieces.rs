//! Turning a submission's repository change into stage inputs: the diff stored once by content
//! hash, cut into per-file pieces for reviewer shards, with honest coverage (SPEC X4): every file
//! left out is listed with the reason.

use verdict_backends::store::InputStore;
use verdict_proto::diff;
use verdict_proto::wire::{InputContent, InputRef, input_name};

use verdict_api::document::{Coverage, NotReviewed};
use verdict_policy::ignore::{self, IgnoredPaths};
use verdict_policy::task::DiffFile;

/// The review inputs derived from one diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedDiff {
    pub files: Vec<DiffFile>,
    pub diffstat: String,
    pub coverage: Coverage,
}

/// Splits `text` into per-file pieces at each `diff --git` line (git's own output always has
/// them), stores every piece by content hash, and decides which files reviewers see. Stages only
/// ever receive pieces, so the whole diff is not stored.
pub async fn prepare(
    store: &dyn InputStore,
    text: &str,
    max_diff_bytes: usize,
    ignore: &IgnoredPaths,
) -> Result<PreparedDiff, verdict_backends::store::InputError> {
    let mut files = Vec::new();
    let mut stat = String::new();
    let mut budget_left = max_diff_bytes;
    for piece in split_by_file(text) {
        let parsed = diff::parse(piece);
        let Some(file) = parsed.files.first() else {
            continue;
        };
        let path = file
            .new_path
            .clone()
            .or_else(|| file.old_path.clone())
            .unwrap_or_else(|| "(unknown)".to_owned());
        let (added, removed) = count_changes(piece);
        stat.push_str(&format!("{path} (+{added} -{removed})\n"));
        let excluded = if let Some(pattern) = ignore.matching(&path) {
            Some(ignore::reason(pattern))
        } else if file.binary {
            Some("binary file".to_owned())
        } else if file.hunks.is_empty() {
            Some("no text change (mode change or rename only)".to_owned())
        } else if piece.len() > budget_left {
            Some(format!(
                "left out: the diff exceeds the review budget of {max_diff_bytes} bytes (pipeline.max_diff_bytes)"
            ))
        } else {
            budget_left -= piece.len();
            None
        };
        let hash = store.put(piece.as_bytes()).await?;
        files.push(DiffFile {
            path,
            bytes: piece.len(),
            input: InputRef {
                name: input_name::DIFF.to_owned(),
                content: InputContent::Stored {
                    sha256: hash,
                    bytes: piece.len() as u64,
                },
            },
            excluded,
        });
    }
    let coverage = Coverage {
        files_total: files.len(),
        files_reviewed: files
            .iter()
            .filter(|f| f.excluded.is_none())
            .map(|f| f.path.clone())
            .collect(),
        files_not_reviewed: files
            .iter()
            .filter_map(|f| {
                f.excluded.as_ref().map(|reason| NotReviewed {
                    path: f.path.clone(),
                    reason: reason.clone(),
                    kind: None,
                })
            })
            .collect(),
        shards_failed: Vec::new(),
    };
    Ok(PreparedDiff {
        files,
        diffstat: stat,
        coverage,
    })
}

pub use diff::split_by_file;

fn count_changes(piece: &str) -> (usize, usize) {
    let mut added = 0;
    let mut removed = 0;
    for line in piece.lines() {
        if line.starts_with("+++") || line.starts_with("---") {
            continue;
        }
        if line.starts_with('+') {
            added += 1;
        } else if line.starts_with('-') {
            removed += 1;
        }
    }
    (added, removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_backends::store::memory::MemoryStore;

    const DIFF: &str = "diff --git a/src/a.rs b/src/a.rs\n--- a/src/a.rs\n+++ b/src/a.rs\n@@ -1,2 +1,3 @@\n x\n+y\n z\ndiff --git a/logo.png b/logo.png\nBinary files a/logo.png and b/logo.png differ\ndiff --git a/big.rs b/big.rs\n--- a/big.rs\n+++ b/big.rs\n@@ -1 +1 @@\n-old line that is long enough to go over the tiny budget\n+new line that is long enough to go over the tiny budget\n";

    #[tokio::test]
    async fn ignored_paths_are_left_out_naming_their_pattern() {
        let store = MemoryStore::new();
        let ignore = IgnoredPaths::new(&["*.png".to_owned(), "src/**/*.rs".to_owned()]).unwrap();
        let p = prepare(&store, DIFF, 10_000, &ignore).await.unwrap();
        let reasons: Vec<(&str, &str)> = p
            .coverage
            .files_not_reviewed
            .iter()
            .map(|n| (n.path.as_str(), n.reason.as_str()))
            .collect();
        assert_eq!(
            reasons,
            [
                (
                    "src/a.rs",
                    "ignored: matches `src/**/*.rs` (pipeline.ignore_paths)"
                ),
                (
                    "logo.png",
                    "ignored: matches `*.png` (pipeline.ignore_paths)"
                ),
            ]
        );
        assert_eq!(p.coverage.files_reviewed, vec!["big.rs"]);
        assert_eq!(
            IgnoredPaths::new(&["a/{b".to_owned()])
                .unwrap_err()
                .split(':')
                .next(),
            Some("`a/{b` is not a glob")
        );
    }

    #[tokio::test]
    async fn files_are_stored_and_left_out_with_reasons() {
        let store = MemoryStore::new();
        let p = prepare(&store, DIFF, 150, &IgnoredPaths::default())
            .await
            .unwrap();
        assert_eq!(p.files.len(), 3);
        assert_eq!(p.coverage.files_reviewed, vec!["src/a.rs"]);
        let reasons: Vec<&str> = p
            .coverage
            .files_not_reviewed
            .iter()
            .map(|n| n.reason.as_str())
            .collect();
        assert_eq!(reasons[0], "binary file");
        assert!(reasons[1].contains("review budget"), "{reasons:?}");
        assert!(p.diffstat.starts_with("src/a.rs (+1 -0)\n"));
        let InputContent::Stored { sha256, .. } = &p.files[0].input.content else {
            panic!()
        };
        assert!(store.get(sha256).await.unwrap().is_some());
    }

    #[test]
    fn splitting_keeps_every_byte_of_every_file() {
        let pieces = split_by_file(DIFF);
        assert_eq!(pieces.len(), 3);
        assert_eq!(pieces.concat(), DIFF);
    }
}
