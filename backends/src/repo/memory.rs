//! The in-memory repository source, for unit tests and `verdict dev`: trees are declared as
//! maps (path → bytes, plus symlinks) and written to a temporary directory the first time they
//! are asked for, because the tools work on real files. Small trees only: files are written on
//! the calling thread.

use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use tokio_util::sync::CancellationToken;
use verdict_proto::revision::Revision;
use verdict_proto::wire::RepositoryRef;

use super::scratch::ScratchDir;
use super::{Change, RepoError, RepoFile, RepositorySource, Snapshot, looks_binary, redact_url};
use crate::BoxFuture;

/// The files of one repository at one commit. Paths are relative, `/`-separated, without `..`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryTree {
    files: BTreeMap<String, Vec<u8>>,
    symlinks: BTreeMap<String, String>,
}

impl MemoryTree {
    pub fn new() -> MemoryTree {
        MemoryTree::default()
    }

    /// Adds a file (parent directories are implied).
    pub fn file(mut self, path: impl Into<String>, content: impl Into<Vec<u8>>) -> MemoryTree {
        self.files.insert(path.into(), content.into());
        self
    }

    /// Adds a symbolic link at `path` whose target is `target`, verbatim (it may point anywhere,
    /// which is how tests build hostile trees).
    pub fn symlink(mut self, path: impl Into<String>, target: impl Into<String>) -> MemoryTree {
        self.symlinks.insert(path.into(), target.into());
        self
    }

    fn write_to(&self, root: &Path) -> Result<(), RepoError> {
        for (path, content) in &self.files {
            let full = root.join(checked_relative(path)?);
            if let Some(parent) = full.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(RepoError::io("create directory", parent))?;
            }
            std::fs::write(&full, content).map_err(RepoError::io("write", &full))?;
        }
        for (path, target) in &self.symlinks {
            let full = root.join(checked_relative(path)?);
            if let Some(parent) = full.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(RepoError::io("create directory", parent))?;
            }
            make_symlink(target, &full)?;
        }
        Ok(())
    }
}

#[cfg(unix)]
fn make_symlink(target: &str, at: &Path) -> Result<(), RepoError> {
    std::os::unix::fs::symlink(target, at).map_err(RepoError::io("create symlink", at))
}

#[cfg(not(unix))]
fn make_symlink(_target: &str, at: &Path) -> Result<(), RepoError> {
    Err(RepoError::io("create symlink", at)(std::io::Error::other(
        "symbolic links in in-memory trees need a unix system",
    )))
}

fn checked_relative(path: &str) -> Result<PathBuf, RepoError> {
    let relative = Path::new(path);
    let fine = !path.is_empty()
        && relative
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if fine {
        Ok(relative.to_path_buf())
    } else {
        Err(RepoError::InvalidReference {
            field: "path",
            value: path.to_owned(),
            reason: "in-memory tree paths must be relative and free of `..`",
        })
    }
}

type TreeKey = (String, String);

/// Repositories served from memory (see the module documentation). Snapshots keep the temporary
/// directory alive, so they stay valid even if the source is dropped first.
#[derive(Debug, Default)]
pub struct MemoryRepositorySource {
    state: Mutex<MemoryState>,
}

#[derive(Debug, Default)]
struct MemoryState {
    trees: HashMap<TreeKey, MemoryTree>,
    /// Declared changes: (url, base, head) → diff text.
    changes: HashMap<(String, String, String), String>,
    /// Declared names of commits: (url, revision) → commit.
    revisions: HashMap<TreeKey, String>,
    /// Where trees are written, created on first use.
    scratch: Option<Arc<ScratchDir>>,
    written: HashMap<TreeKey, PathBuf>,
    next_dir: u64,
}

impl MemoryRepositorySource {
    pub fn new() -> MemoryRepositorySource {
        MemoryRepositorySource::default()
    }

    /// Declares (or replaces) the tree of `url` at `commit`.
    pub fn insert(&self, url: impl Into<String>, commit: impl Into<String>, tree: MemoryTree) {
        let key = (url.into(), commit.into());
        let mut state = self.lock();
        state.written.remove(&key);
        state.trees.insert(key, tree);
    }

    /// [`Self::insert`], for building a source in one expression.
    pub fn with(self, url: impl Into<String>, commit: impl Into<String>, tree: MemoryTree) -> Self {
        self.insert(url, commit, tree);
        self
    }

    /// Declares the diff between `base` and `head` of `url` (the in-memory source does not
    /// compute diffs; tests and `verdict dev` fixtures state them).
    pub fn insert_change(
        &self,
        url: impl Into<String>,
        base: impl Into<String>,
        head: impl Into<String>,
        diff: impl Into<String>,
    ) {
        self.lock()
            .changes
            .insert((url.into(), base.into(), head.into()), diff.into());
    }

    /// Declares that `revision` (a branch, a tag, `HEAD`…) of `url` names `commit`, the way a
    /// git repository's refs do. Undeclared revisions name themselves when a tree or a change
    /// uses them.
    pub fn insert_revision(
        &self,
        url: impl Into<String>,
        revision: impl Into<String>,
        commit: impl Into<String>,
    ) {
        self.lock()
            .revisions
            .insert((url.into(), revision.into()), commit.into());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What `revision` of `url` names: a declared revision's commit, or the revision itself
    /// when a tree or a change of `url` uses it. Checked by the same syntax rule as git's.
    fn resolve_now(&self, url: &str, revision: &str) -> Result<String, RepoError> {
        Revision::parse(revision)?;
        let state = self.lock();
        let key = (url.to_owned(), revision.to_owned());
        if let Some(commit) = state.revisions.get(&key) {
            return Ok(commit.clone());
        }
        let used = state.trees.contains_key(&key)
            || state
                .changes
                .keys()
                .any(|(u, b, h)| u == url && (b == revision || h == revision));
        if used {
            return Ok(revision.to_owned());
        }
        let known = state.trees.keys().any(|(u, _)| u == url)
            || state.changes.keys().any(|(u, _, _)| u == url)
            || state.revisions.keys().any(|(u, _)| u == url);
        Err(if known {
            RepoError::CommitNotFound {
                url: redact_url(url),
                revision: revision.to_owned(),
            }
        } else {
            RepoError::RepositoryNotFound {
                url: redact_url(url),
                reason: "the in-memory source has no such repository".to_owned(),
            }
        })
    }

    fn take_snapshot(&self, repo: &RepositoryRef) -> Result<Snapshot, RepoError> {
        let key = (repo.url.clone(), repo.commit.clone());
        let mut state = self.lock();
        let Some(tree) = state.trees.get(&key).cloned() else {
            let url = redact_url(&repo.url);
            return Err(if state.trees.keys().any(|(u, _)| *u == repo.url) {
                RepoError::CommitNotFound {
                    url,
                    revision: repo.commit.clone(),
                }
            } else {
                RepoError::RepositoryNotFound {
                    url,
                    reason: "the in-memory source has no such repository".to_owned(),
                }
            });
        };
        let scratch = match &state.scratch {
            Some(scratch) => Arc::clone(scratch),
            None => {
                let tmp = std::env::temp_dir();
                let scratch = Arc::new(
                    ScratchDir::create_in(&tmp, "verdict-memory-repo-")
                        .map_err(RepoError::io("create directory in", &tmp))?,
                );
                state.scratch = Some(Arc::clone(&scratch));
                scratch
            }
        };
        let root = match state.written.get(&key) {
            Some(root) => root.clone(),
            None => {
                state.next_dir += 1;
                let root = scratch.path().join(state.next_dir.to_string());
                std::fs::create_dir(&root).map_err(RepoError::io("create directory", &root))?;
                tree.write_to(&root)?;
                state.written.insert(key, root.clone());
                root
            }
        };
        Snapshot::new(&root, repo.commit.clone(), scratch)
            .map_err(RepoError::io("open snapshot", &root))
    }
}

impl RepositorySource for MemoryRepositorySource {
    fn snapshot<'a>(
        &'a self,
        repo: &'a RepositoryRef,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Snapshot, RepoError>> {
        Box::pin(async move {
            if cancel.is_cancelled() {
                return Err(RepoError::Cancelled);
            }
            self.take_snapshot(repo)
        })
    }

    fn resolve<'a>(
        &'a self,
        url: &'a str,
        revision: &'a str,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<String, RepoError>> {
        Box::pin(async move {
            if cancel.is_cancelled() {
                return Err(RepoError::Cancelled);
            }
            self.resolve_now(url, revision)
        })
    }

    fn change<'a>(
        &'a self,
        url: &'a str,
        base: &'a str,
        head: &'a str,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Change, RepoError>> {
        Box::pin(async move {
            if cancel.is_cancelled() {
                return Err(RepoError::Cancelled);
            }
            let base = self.resolve_now(url, base)?;
            let head = self.resolve_now(url, head)?;
            let found = self
                .lock()
                .changes
                .get(&(url.to_owned(), base.clone(), head.clone()))
                .cloned();
            match found {
                Some(diff) => Ok(Change { base, head, diff }),
                None => Err(RepoError::CommitNotFound {
                    url: redact_url(url),
                    revision: format!("{base}...{head}"),
                }),
            }
        })
    }

    fn files<'a>(
        &'a self,
        url: &'a str,
        commit: &'a str,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Vec<RepoFile>, RepoError>> {
        Box::pin(async move {
            if cancel.is_cancelled() {
                return Err(RepoError::Cancelled);
            }
            let key = (url.to_owned(), commit.to_owned());
            let state = self.lock();
            let Some(tree) = state.trees.get(&key) else {
                return Err(RepoError::CommitNotFound {
                    url: redact_url(url),
                    revision: commit.to_owned(),
                });
            };
            let files = tree.files.iter().map(|(path, content)| RepoFile {
                path: path.clone(),
                bytes: content.len() as u64,
                binary: looks_binary(content),
                symlink: false,
            });
            let links = tree.symlinks.iter().map(|(path, target)| RepoFile {
                path: path.clone(),
                bytes: target.len() as u64,
                binary: false,
                symlink: true,
            });
            let mut all: Vec<RepoFile> = files.chain(links).collect();
            all.sort_by(|a, b| a.path.cmp(&b.path));
            Ok(all)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(url: &str, commit: &str) -> RepositoryRef {
        RepositoryRef {
            url: url.to_owned(),
            commit: commit.to_owned(),
            base: None,
        }
    }

    #[tokio::test]
    async fn trees_become_real_files() {
        let source = MemoryRepositorySource::new()
            .with(
                "mem://r",
                "c1",
                MemoryTree::new()
                    .file("a.txt", "one")
                    .file("src/lib.rs", "fn f() {}")
                    .symlink("link", "a.txt"),
            )
            .with("mem://r", "c2", MemoryTree::new().file("a.txt", "two"));
        let cancel = CancellationToken::new();
        let one = source
            .snapshot(&reference("mem://r", "c1"), &cancel)
            .await
            .unwrap();
        let two = source
            .snapshot(&reference("mem://r", "c2"), &cancel)
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(one.root().join("link")).unwrap(),
            "one"
        );
        assert_eq!(
            std::fs::read_to_string(one.root().join("src/lib.rs")).unwrap(),
            "fn f() {}"
        );
        assert_eq!(
            std::fs::read_to_string(two.root().join("a.txt")).unwrap(),
            "two"
        );
        assert_eq!(two.commit(), "c2");

        let again = source
            .snapshot(&reference("mem://r", "c1"), &cancel)
            .await
            .unwrap();
        assert_eq!(again.root(), one.root(), "materialised once");

        let root = one.root().to_path_buf();
        drop(source);
        assert!(root.is_dir(), "snapshots outlive the source");
        drop((one, two, again));
        assert!(!root.exists(), "the last snapshot removes the files");
    }

    #[tokio::test]
    async fn unknown_repositories_and_commits_are_told_apart() {
        let source =
            MemoryRepositorySource::new().with("mem://r", "c1", MemoryTree::new().file("a", "1"));
        let cancel = CancellationToken::new();
        let err = source
            .snapshot(&reference("mem://x", "c1"), &cancel)
            .await
            .unwrap_err();
        assert!(matches!(err, RepoError::RepositoryNotFound { .. }), "{err}");
        let err = source
            .snapshot(&reference("mem://r", "c9"), &cancel)
            .await
            .unwrap_err();
        assert!(matches!(err, RepoError::CommitNotFound { .. }), "{err}");
        cancel.cancel();
        let err = source
            .snapshot(&reference("mem://r", "c1"), &cancel)
            .await
            .unwrap_err();
        assert!(matches!(err, RepoError::Cancelled));
    }

    #[tokio::test]
    async fn revisions_resolve_to_declared_commits_and_changes_use_them() {
        let source =
            MemoryRepositorySource::new().with("mem://r", "c1", MemoryTree::new().file("a", "1"));
        source.insert_revision("mem://r", "HEAD", "c2");
        source.insert_revision("mem://r", "main", "c1");
        source.insert_change("mem://r", "c1", "c2", "diff");
        let cancel = CancellationToken::new();
        let resolve = |revision: &'static str| source.resolve("mem://r", revision, &cancel);
        assert_eq!(resolve("HEAD").await.unwrap(), "c2");
        assert_eq!(resolve("c1").await.unwrap(), "c1", "a tree's own name");
        assert_eq!(resolve("c2").await.unwrap(), "c2", "a change's own name");
        let err = resolve("no-such-branch").await.unwrap_err();
        assert!(matches!(err, RepoError::CommitNotFound { .. }), "{err}");
        let err = resolve("--upload-pack=x").await.unwrap_err();
        assert!(matches!(err, RepoError::InvalidRevision(_)), "{err}");
        let err = source.resolve("mem://x", "c1", &cancel).await.unwrap_err();
        assert!(matches!(err, RepoError::RepositoryNotFound { .. }), "{err}");

        let change = source
            .change("mem://r", "main", "HEAD", &cancel)
            .await
            .unwrap();
        assert_eq!((change.base.as_str(), change.head.as_str()), ("c1", "c2"));
        assert_eq!(change.diff, "diff");
    }

    #[tokio::test]
    async fn escaping_tree_paths_are_refused() {
        let source = MemoryRepositorySource::new().with(
            "mem://r",
            "c",
            MemoryTree::new().file("../evil", "x"),
        );
        let err = source
            .snapshot(&reference("mem://r", "c"), &CancellationToken::new())
            .await
            .unwrap_err();
        assert!(matches!(err, RepoError::InvalidReference { .. }), "{err}");
    }
}
