//! A directory that removes itself when dropped: half-built snapshots vanish when a
//! materialisation fails or is cancelled, and in-memory trees vanish with their last user.
//! (`tempfile` is only a dev-dependency; this is the few lines the worker needs.)

use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub(crate) struct ScratchDir {
    path: PathBuf,
    keep: bool,
}

impl ScratchDir {
    /// Creates a new, empty, uniquely named directory `<parent>/<prefix><random>`.
    pub(crate) fn create_in(parent: &Path, prefix: &str) -> io::Result<ScratchDir> {
        let mut last_error = None;
        for _ in 0..16 {
            let path = parent.join(format!("{prefix}{:016x}", rand::random::<u64>()));
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(ScratchDir { path, keep: false }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last_error = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("no unique directory name found")))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Disarms the removal: the directory now belongs to the caller (usually just renamed away).
    pub(crate) fn keep(mut self) {
        self.keep = true;
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if !self.keep {
            // Best effort: a leftover is cleaned by the cache's start-up scan.
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removes_itself_unless_kept() {
        let parent = tempfile::tempdir().unwrap();
        let gone = ScratchDir::create_in(parent.path(), "x-").unwrap();
        let gone_path = gone.path().to_path_buf();
        std::fs::write(gone_path.join("f"), b"1").unwrap();
        drop(gone);
        assert!(!gone_path.exists());

        let kept = ScratchDir::create_in(parent.path(), "x-").unwrap();
        let kept_path = kept.path().to_path_buf();
        kept.keep();
        assert!(kept_path.is_dir());
    }
}
