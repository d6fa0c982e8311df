//! Repository snapshots at a commit (SPEC E1): what the read-only tools and `exec` agents see.
//!
//! A [`Snapshot`] is a plain directory tree of the repository at one commit, with no `.git`
//! inside, so neither tools nor agents can read history, other branches or remote URLs. It is
//! read-only by convention: nothing in verdict writes into it, and a snapshot is shared by every
//! stage that asks for the same (repository, commit).
//!
//! # Layout
//! - [`RepositorySource`]: the one small trait every backend implements.
//! - [`RepoFile`]: one entry of a commit's file listing (path, size, binary), what a scan's
//!   intake classifies and packs into shards (SPEC S4, X4).
//! - [`GitCredentials`]: what git sends to a host when fetching over HTTPS (a header for that one
//!   command, never stored), implemented by the GitHub code host.
//! - [`git`]: [`GitRepositorySource`], the production backend (the `git` CLI, a bare mirror per
//!   repository, snapshots extracted with `git archive`).
//! - `cache`: the size-bounded, least-recently-used snapshot cache behind the git backend; a
//!   snapshot in use is never evicted.
//! - [`memory`]: [`MemoryRepositorySource`], files from a map, for unit tests and `verdict dev`.
//! - `scratch`: a directory that removes itself, for half-built snapshots and in-memory trees.

use std::any::Any;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
pub use verdict_proto::files::RepoFile;

use tokio_util::sync::CancellationToken;
use verdict_proto::outcome::FailureKind;
use verdict_proto::revision::InvalidRevision;
use verdict_proto::wire::RepositoryRef;

use crate::BoxFuture;
use crate::secret::Secret;

mod cache;
pub mod git;
mod memo;
pub mod memory;
mod scratch;

pub use cache::CacheStats;
pub use git::{GitRepositorySource, GitSourceConfig};
pub use memory::{MemoryRepositorySource, MemoryTree};

/// A backend that can materialise a repository at a commit. Implementations honour `cancel`
/// promptly (returning [`RepoError::Cancelled`]) and never put credentials in errors or logs.
pub trait RepositorySource: Send + Sync + fmt::Debug {
    /// The tree of `repo.url` at `repo.commit`. Concurrent calls for the same repository and
    /// commit may share one materialisation; the snapshot stays on disk while any clone of the
    /// returned value is alive.
    fn snapshot<'a>(
        &'a self,
        repo: &'a RepositoryRef,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Snapshot, RepoError>>;

    /// The full commit id `revision` names in the repository at `url` now. `revision` is what a
    /// person types (see [`verdict_proto::revision`]): a full or abbreviated SHA, a branch, a
    /// tag, `HEAD` (the repository's default branch), `origin/<branch>`, each optionally with
    /// `~n`/`^n` steps. A revision breaking that syntax is refused before any I/O
    /// ([`RepoError::InvalidReference`]); one that names nothing is
    /// [`RepoError::CommitNotFound`].
    fn resolve<'a>(
        &'a self,
        url: &'a str,
        revision: &'a str,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<String, RepoError>>;

    /// The change from `base` to `head` of the repository at `url`, as a pull request shows it:
    /// both revisions resolved to full commit ids as [`RepositorySource::resolve`] does, and the
    /// unified diff from their merge base to `head` (`git diff -M`, no colour, no external diff
    /// drivers), so changes the base gained after the head branched off are not shown undone.
    /// [`Change::base`] is that merge base (the base itself when it is an ancestor of the head,
    /// or when the histories share no commit). Non-UTF-8 content is replaced with U+FFFD.
    fn change<'a>(
        &'a self,
        url: &'a str,
        base: &'a str,
        head: &'a str,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Change, RepoError>>;

    /// Every file of the repository at `url` at `commit` (a full commit id that
    /// [`RepositorySource::resolve`] gave), sorted by path: regular files and symbolic links
    /// with their sizes in bytes and whether their content is binary (git's own test: a NUL in
    /// the first 8000 bytes). Submodules are not files of the repository and are not listed.
    fn files<'a>(
        &'a self,
        url: &'a str,
        commit: &'a str,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Vec<RepoFile>, RepoError>>;
}

/// How many leading bytes git looks at to call content binary.
pub const BINARY_PROBE_BYTES: usize = 8000;

/// Whether `content` is binary by git's rule (a NUL within [`BINARY_PROBE_BYTES`]).
pub fn looks_binary(content: &[u8]) -> bool {
    content.iter().take(BINARY_PROBE_BYTES).any(|&b| b == 0)
}

/// Credentials for fetching from remote repositories: the HTTP headers git sends for one URL.
/// The git source asks before every command that talks to the remote and hands the headers to
/// that command alone, through its environment, so they are never on a command line, in a URL or
/// on disk.
pub trait GitCredentials: Send + Sync + fmt::Debug {
    /// HTTP headers (`Name: value`, secret) git sends when fetching `url`; none for URLs these
    /// credentials do not serve.
    fn http_headers<'a>(&'a self, url: &'a str) -> BoxFuture<'a, Result<Vec<Secret>, RepoError>>;
}

/// A change between two revisions: what a pull-request review looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The commit the diff starts from: the merge base of the requested base and head.
    pub base: String,
    pub head: String,
    pub diff: String,
}

/// A directory tree of one repository at one commit. Cloning shares the lease: the backend keeps
/// the tree on disk until the last clone is dropped.
#[derive(Clone)]
pub struct Snapshot {
    root: Arc<Path>,
    commit: Arc<str>,
    _lease: Arc<dyn Any + Send + Sync>,
}

impl Snapshot {
    /// A snapshot of the tree at `root` (canonicalised here, so confinement checks compare
    /// canonical paths). `lease` is whatever keeps the tree alive; it is dropped with the last
    /// clone of the snapshot. Fails when `root` cannot be canonicalised (it does not exist).
    pub fn new(
        root: &Path,
        commit: impl Into<String>,
        lease: impl Any + Send + Sync,
    ) -> io::Result<Snapshot> {
        let root = root.canonicalize()?;
        Ok(Snapshot {
            root: Arc::from(root),
            commit: Arc::from(commit.into()),
            _lease: Arc::new(lease),
        })
    }

    /// The canonical path of the tree's top directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The commit the tree was taken at: the full SHA for git sources (whatever the request
    /// named), the requested name for in-memory ones.
    pub fn commit(&self) -> &str {
        &self.commit
    }
}

impl fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Snapshot")
            .field("root", &self.root)
            .field("commit", &self.commit)
            .finish_non_exhaustive()
    }
}

/// Why a snapshot could not be made. URLs in these messages are already redacted
/// ([`redact_url`]); git's own messages are redacted and shortened.
#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    #[error(
        "repository {url} was not found or access was denied: {reason}; check the repository URL and the worker's credentials"
    )]
    RepositoryNotFound { url: String, reason: String },

    #[error(
        "repository {url} is unreachable: {reason}; check the network and the git host, the request can be retried"
    )]
    Unreachable { url: String, reason: String },

    #[error(
        "revision `{revision}` was not found in repository {url}; check the branch, tag or commit name, that it was pushed, and that the request names the right repository"
    )]
    CommitNotFound { url: String, revision: String },

    /// A revision breaking [`verdict_proto::revision`]'s rule; refused before any I/O.
    #[error(transparent)]
    InvalidRevision(#[from] InvalidRevision),

    #[error("invalid {field} `{value}` in the repository reference: {reason}")]
    InvalidReference {
        field: &'static str,
        value: String,
        reason: &'static str,
    },

    #[error(
        "`{program}` could not be started: {reason}; install it in the worker image or set its path in the repository source configuration"
    )]
    GitNotInstalled { program: String, reason: String },

    #[error("{action} failed for repository {url}: {stderr}")]
    GitFailed {
        action: &'static str,
        url: String,
        stderr: String,
    },

    #[error("cannot {action} {}: {source}; check the cache directory's permissions and free space", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error(
        "the repository cache {} is in use by another process; give each process its own cache directory",
        dir.display()
    )]
    CacheInUse { dir: PathBuf },

    /// The credentials for a fetch could not be had (the code host's token exchange failed).
    #[error(
        "cannot get credentials to fetch from {host}: {reason}; {}",
        if *retryable { "the request can be retried" } else { "check verdict's GitHub App installation on the repository, or its token (docs/github.md)" }
    )]
    Credentials {
        host: String,
        reason: String,
        retryable: bool,
    },

    /// A git process ran past its time limit and was killed (SPEC R5).
    #[error(
        "{action} for repository {url} did not finish within {seconds} s and was stopped; check that the host answers and that the URL is right, or raise `{setting}` for a large repository or a slow host"
    )]
    Timeout {
        action: &'static str,
        url: String,
        seconds: u64,
        /// The configuration key of the limit that expired.
        setting: &'static str,
    },

    #[error("the snapshot was cancelled")]
    Cancelled,
}

impl RepoError {
    /// The one classification of repository errors, used by scheduler intake and by the worker
    /// alike: a repository or revision that does not exist is the request's mistake
    /// (`not_found`), so is a malformed reference (`invalid_request`); network trouble,
    /// unexpected git failures and local I/O (a full disk frees up as snapshots are evicted) are
    /// `repository_unavailable` and worth another attempt, and so is a git process that ran out of
    /// time (a host that never answers, or a clone slower than its limit); a missing `git` or a cache directory
    /// shared by two processes is a deployment fault (`internal`). Credentials that could not be
    /// had are `repository_unavailable` when the host may answer later, else `not_found`, as
    /// git's own "access denied" is.
    pub fn failure_kind(&self) -> FailureKind {
        match self {
            RepoError::RepositoryNotFound { .. } | RepoError::CommitNotFound { .. } => {
                FailureKind::NotFound
            }
            RepoError::InvalidRevision(_) | RepoError::InvalidReference { .. } => {
                FailureKind::InvalidRequest
            }
            RepoError::Unreachable { .. }
            | RepoError::GitFailed { .. }
            | RepoError::Io { .. }
            | RepoError::Timeout { .. } => FailureKind::RepositoryUnavailable,
            // As git's own refusals are: a host that will not let us in is "not found".
            RepoError::Credentials { retryable, .. } => {
                if *retryable {
                    FailureKind::RepositoryUnavailable
                } else {
                    FailureKind::NotFound
                }
            }
            RepoError::GitNotInstalled { .. } | RepoError::CacheInUse { .. } => {
                FailureKind::Internal
            }
            RepoError::Cancelled => FailureKind::Cancelled,
        }
    }

    /// Whether the same request may succeed later: exactly when its
    /// [`failure kind`](Self::failure_kind) is retryable.
    pub fn is_retryable(&self) -> bool {
        self.failure_kind().is_retryable()
    }

    fn io(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> RepoError {
        let path = path.to_path_buf();
        move |source| RepoError::Io {
            action,
            path,
            source,
        }
    }
}

/// Hides the credentials of every URL in `text` (HTTPS remotes often carry a token:
/// `https://x-access-token:ghs_…@github.com`); see [`verdict_proto::redact::redact_urls`].
pub fn redact_url(text: &str) -> String {
    verdict_proto::redact::redact_urls(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_redacted_everywhere() {
        assert_eq!(
            redact_url("https://user:token@host/a.git"),
            "https://user:[REDACTED]@host/a.git"
        );
        assert_eq!(
            redact_url("fatal: 'https://tok@h.example/x' and http://a:b@c:8080?x failed"),
            "fatal: 'https://[REDACTED]@h.example/x' and http://a:[REDACTED]@c:8080?x failed"
        );
        assert_eq!(
            redact_url("https://host/path@v1"),
            "https://host/path@v1",
            "an @ after the authority is part of the path"
        );
        assert_eq!(
            redact_url("git@github.com:o/r.git"),
            "git@github.com:o/r.git"
        );
        assert_eq!(redact_url("/srv/repos/r"), "/srv/repos/r");
        assert_eq!(redact_url("file:///srv/r"), "file:///srv/r");
        assert_eq!(redact_url("https://a:b@"), "https://a:[REDACTED]@");
    }

    #[test]
    fn retryability_follows_the_kind() {
        let url = || "u".to_owned();
        assert!(
            RepoError::Unreachable {
                url: url(),
                reason: String::new()
            }
            .is_retryable()
        );
        assert!(
            !RepoError::RepositoryNotFound {
                url: url(),
                reason: String::new()
            }
            .is_retryable()
        );
        assert!(
            !RepoError::CommitNotFound {
                url: url(),
                revision: "abc".into()
            }
            .is_retryable()
        );
        assert!(!RepoError::Cancelled.is_retryable());
        assert!(
            !RepoError::GitNotInstalled {
                program: "git".into(),
                reason: String::new()
            }
            .is_retryable()
        );
    }

    #[test]
    fn a_missing_or_malformed_revision_is_the_requests_mistake() {
        let url = || "u".to_owned();
        let cases = [
            (
                RepoError::CommitNotFound {
                    url: url(),
                    revision: "no-such-branch".into(),
                },
                FailureKind::NotFound,
            ),
            (
                RepoError::RepositoryNotFound {
                    url: url(),
                    reason: String::new(),
                },
                FailureKind::NotFound,
            ),
            (
                RepoError::from(verdict_proto::revision::Revision::parse("-x").unwrap_err()),
                FailureKind::InvalidRequest,
            ),
            (
                RepoError::Unreachable {
                    url: url(),
                    reason: String::new(),
                },
                FailureKind::RepositoryUnavailable,
            ),
            (
                RepoError::GitFailed {
                    action: "git diff",
                    url: url(),
                    stderr: String::new(),
                },
                FailureKind::RepositoryUnavailable,
            ),
            (
                RepoError::CacheInUse { dir: "/c".into() },
                FailureKind::Internal,
            ),
            (RepoError::Cancelled, FailureKind::Cancelled),
            (
                RepoError::Timeout {
                    action: "git fetch",
                    url: url(),
                    seconds: 600,
                    setting: "repositories.fetch_timeout_seconds",
                },
                FailureKind::RepositoryUnavailable,
            ),
            (
                RepoError::Credentials {
                    host: "github.com".into(),
                    reason: String::new(),
                    retryable: true,
                },
                FailureKind::RepositoryUnavailable,
            ),
            (
                RepoError::Credentials {
                    host: "github.com".into(),
                    reason: String::new(),
                    retryable: false,
                },
                FailureKind::NotFound,
            ),
        ];
        for (err, kind) in cases {
            assert_eq!(err.failure_kind(), kind, "{err}");
            assert_eq!(err.is_retryable(), kind.is_retryable(), "{err}");
        }
        let missing = RepoError::CommitNotFound {
            url: url(),
            revision: "no-such-branch".into(),
        };
        assert!(
            missing
                .to_string()
                .starts_with("revision `no-such-branch` was not found in repository u; check the branch, tag or commit name"),
            "{missing}"
        );
    }

    #[test]
    fn snapshot_root_is_canonical() {
        let dir = std::env::temp_dir();
        let snap = Snapshot::new(&dir.join("."), "c", ()).unwrap();
        assert_eq!(snap.root(), dir.canonicalize().unwrap());
        assert_eq!(snap.commit(), "c");
        assert!(Snapshot::new(Path::new("/definitely/not/here"), "c", ()).is_err());
    }
}
