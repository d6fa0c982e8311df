//! The one directory walk `grep` and `find` share, and the one glob rule they share. The walk
//! never follows symlinks (a link is listed as itself, never entered or read through), stops at a
//! bounded number of entries, and returns paths sorted as strings so outputs are stable.

use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};

use super::path::display;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Dir,
    Symlink,
    /// Sockets, FIFOs, devices: listed, never opened.
    Other,
}

#[derive(Debug)]
pub(crate) struct Entry {
    /// The path shown to the model: from the repository root, `/`-separated.
    pub(crate) shown: String,
    /// The same path from the directory the walk started at.
    pub(crate) from_start: String,
    pub(crate) path: PathBuf,
    pub(crate) kind: Kind,
    /// File size (0 for anything but files).
    pub(crate) bytes: u64,
}

#[derive(Debug)]
pub(crate) struct Walk {
    pub(crate) entries: Vec<Entry>,
    /// The walk stopped at its entry limit: `entries` is not the whole tree.
    pub(crate) capped: bool,
}

/// Every entry under `start` (not `start` itself), at most `max_entries`, sorted by path.
/// `root` and `start` are canonical, `start` under `root`.
pub(crate) fn walk(root: &Path, start: &Path, max_entries: usize) -> Walk {
    let mut entries = Vec::new();
    let mut capped = false;
    let walker = walkdir::WalkDir::new(start)
        .follow_links(false)
        .min_depth(1)
        .sort_by_file_name();
    // Unreadable entries are skipped: they are as invisible to the model as to the walk.
    for dirent in walker.into_iter().flatten() {
        if entries.len() == max_entries {
            capped = true;
            break;
        }
        let file_type = dirent.file_type();
        let kind = if file_type.is_symlink() {
            Kind::Symlink
        } else if file_type.is_dir() {
            Kind::Dir
        } else if file_type.is_file() {
            Kind::File
        } else {
            Kind::Other
        };
        let bytes = match kind {
            Kind::File => dirent.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        };
        let path = dirent.into_path();
        entries.push(Entry {
            shown: display(root, &path),
            from_start: display(start, &path),
            path,
            kind,
            bytes,
        });
    }
    entries.sort_by(|a, b| a.shown.cmp(&b.shown));
    Walk { entries, capped }
}

/// The glob rule of `grep` and `find`: `*` and `?` stay within one path component, `**` crosses
/// them, `{a,b}` is either. A glob without `/` matches entry names at any depth (`*.rs`); a glob
/// with `/` matches the path from the repository root or from the searched directory
/// (`src/**/*.rs`).
#[derive(Debug)]
pub(crate) struct GlobFilter {
    matcher: GlobMatcher,
    by_name: bool,
}

impl GlobFilter {
    /// The filter, or a message the model can act on.
    pub(crate) fn new(glob: &str) -> Result<GlobFilter, String> {
        let trimmed = glob.strip_prefix("./").unwrap_or(glob);
        if trimmed.is_empty() {
            return Err("the glob is empty; use e.g. `*.rs` or `src/**/*.rs`".to_owned());
        }
        if trimmed.starts_with('/') || trimmed.split('/').any(|part| part == "..") {
            return Err(format!(
                "{} must be relative to the repository and cannot contain `..`",
                super::path::quote(glob)
            ));
        }
        let by_name = !trimmed.trim_end_matches('/').contains('/');
        let matcher = GlobBuilder::new(trimmed.trim_end_matches('/'))
            .literal_separator(true)
            .build()
            .map_err(|e| format!("invalid glob {}: {e}", super::path::quote(glob)))?
            .compile_matcher();
        Ok(GlobFilter { matcher, by_name })
    }

    pub(crate) fn matches(&self, entry: &Entry) -> bool {
        if self.by_name {
            let name = entry.shown.rsplit('/').next().unwrap_or(&entry.shown);
            self.matcher.is_match(name)
        } else {
            self.matcher.is_match(&entry.shown) || self.matcher.is_match(&entry.from_start)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(shown: &str, from_start: &str) -> Entry {
        Entry {
            shown: shown.to_owned(),
            from_start: from_start.to_owned(),
            path: PathBuf::new(),
            kind: Kind::File,
            bytes: 0,
        }
    }

    #[test]
    fn globs_without_a_slash_match_names_at_any_depth() {
        let rs = GlobFilter::new("*.rs").unwrap();
        assert!(rs.matches(&entry("src/a/b.rs", "a/b.rs")));
        assert!(!rs.matches(&entry("src/a/b.rsx", "a/b.rsx")));
        let either = GlobFilter::new("*.{rs,toml}").unwrap();
        assert!(either.matches(&entry("Cargo.toml", "Cargo.toml")));
    }

    #[test]
    fn globs_with_a_slash_match_paths() {
        let deep = GlobFilter::new("src/**/*.rs").unwrap();
        assert!(deep.matches(&entry("src/a/b.rs", "a/b.rs")));
        assert!(deep.matches(&entry("src/b.rs", "b.rs")));
        let shallow = GlobFilter::new("src/*.rs").unwrap();
        assert!(
            !shallow.matches(&entry("src/a/b.rs", "a/b.rs")),
            "* stays in one component"
        );
        let from_start = GlobFilter::new("a/*.rs").unwrap();
        assert!(
            from_start.matches(&entry("src/a/b.rs", "a/b.rs")),
            "relative to the searched dir"
        );
        assert!(
            GlobFilter::new("./src/*.rs")
                .unwrap()
                .matches(&entry("src/x.rs", "x.rs"))
        );
    }

    #[test]
    fn bad_globs_say_why() {
        assert!(GlobFilter::new("").unwrap_err().contains("empty"));
        assert!(GlobFilter::new("/etc/*").unwrap_err().contains("relative"));
        assert!(GlobFilter::new("../*").unwrap_err().contains(".."));
        assert!(
            GlobFilter::new("src/[")
                .unwrap_err()
                .contains("invalid glob")
        );
    }

    #[test]
    fn the_walk_lists_links_without_entering_them() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("r");
        std::fs::create_dir_all(root.join("b/c")).unwrap();
        std::fs::write(root.join("b/c/f"), "12345").unwrap();
        std::fs::write(root.join("a.txt"), "1").unwrap();
        std::os::unix::fs::symlink("/etc", root.join("etc")).unwrap();
        let root = root.canonicalize().unwrap();
        let walk = walk(&root, &root, 100);
        let shown: Vec<_> = walk
            .entries
            .iter()
            .map(|e| (e.shown.as_str(), e.kind))
            .collect();
        assert_eq!(
            shown,
            [
                ("a.txt", Kind::File),
                ("b", Kind::Dir),
                ("b/c", Kind::Dir),
                ("b/c/f", Kind::File),
                ("etc", Kind::Symlink)
            ]
        );
        assert!(!walk.capped);
        assert_eq!(walk.entries[3].bytes, 5);
        let capped = super::walk(&root, &root.join("b"), 1);
        assert!(capped.capped);
        assert_eq!(capped.entries.len(), 1);
        assert_eq!(capped.entries[0].from_start, "c");
    }
}
