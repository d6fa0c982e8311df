//! The snapshot as grounding sees it ([`verdict_proto::grounding::Tree`]): files looked up through
//! the tools' one confinement check, and the symlink-free walk for the list of paths. Lives with
//! the tools so nothing else joins model input to the snapshot root.

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use verdict_backends::repo::Snapshot;
use verdict_proto::grounding::{FileView, Tree};

use super::path::confine;
use super::walk::{Kind, walk};

/// Files larger than this are checked by line count only (no quote matching).
const MAX_TEXT_BYTES: u64 = 4 * 1024 * 1024;
/// Files larger than this are not read at all: only their existence counts.
const MAX_COUNTED_BYTES: u64 = 64 * 1024 * 1024;
/// The path list used for corrections and hints stops here; a bigger repository gets hints from
/// its first paths only (names that match exactly are still found).
const MAX_PATHS: usize = 200_000;

/// A lazily read view of one snapshot. Blocking: call it from the blocking pool.
pub struct SnapshotTree {
    snapshot: Snapshot,
    files: Mutex<HashMap<String, Option<Arc<FileView>>>>,
    paths: OnceLock<Arc<[String]>>,
}

impl std::fmt::Debug for SnapshotTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotTree")
            .field("snapshot", &self.snapshot)
            .finish_non_exhaustive()
    }
}

impl SnapshotTree {
    pub fn new(snapshot: Snapshot) -> SnapshotTree {
        SnapshotTree {
            snapshot,
            files: Mutex::new(HashMap::new()),
            paths: OnceLock::new(),
        }
    }

    /// The commit the snapshot was taken at.
    pub fn commit(&self) -> &str {
        self.snapshot.commit()
    }

    fn load(&self, path: &str) -> Option<Arc<FileView>> {
        let resolved = confine(self.snapshot.root(), path).ok()?;
        let meta = std::fs::metadata(&resolved).ok()?;
        if !meta.is_file() {
            return None;
        }
        if meta.len() > MAX_COUNTED_BYTES {
            return Some(Arc::new(FileView {
                line_count: u32::MAX,
                lines: None,
            }));
        }
        let mut bytes = Vec::new();
        std::fs::File::open(&resolved)
            .ok()?
            .take(MAX_COUNTED_BYTES)
            .read_to_end(&mut bytes)
            .ok()?;
        Some(Arc::new(FileView::of(&bytes, meta.len() <= MAX_TEXT_BYTES)))
    }
}

impl Tree for SnapshotTree {
    fn file(&self, path: &str) -> Option<Arc<FileView>> {
        if let Some(known) = self
            .files
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(path)
        {
            return known.clone();
        }
        let view = self.load(path);
        self.files
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(path.to_owned(), view.clone());
        view
    }

    fn paths(&self) -> Arc<[String]> {
        self.paths
            .get_or_init(|| {
                let root = self.snapshot.root();
                walk(root, root, MAX_PATHS)
                    .entries
                    .into_iter()
                    .filter(|e| e.kind == Kind::File)
                    .map(|e| e.shown)
                    .collect()
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    #[test]
    fn files_are_confined_and_counted() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/a.py"), "one\ntwo\nthree").unwrap();
        std::fs::write(tmp.path().join("outside.py"), "secret\n").unwrap();
        symlink(tmp.path().join("outside.py"), root.join("src/link.py")).unwrap();
        let tree = SnapshotTree::new(Snapshot::new(&root, "c0ffee", ()).unwrap());

        let a = tree.file("src/a.py").unwrap();
        assert_eq!(a.line_count, 3);
        assert_eq!(a.lines.as_ref().unwrap()[2], "three");
        assert!(
            tree.file("src/link.py").is_none(),
            "a link out of the snapshot is no file"
        );
        assert!(tree.file("../outside.py").is_none());
        assert!(tree.file("src").is_none(), "a directory is no file");
        assert_eq!(&*tree.paths(), ["src/a.py".to_owned()]);
        assert_eq!(tree.commit(), "c0ffee");
    }
}
