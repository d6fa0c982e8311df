//! The production repository source: the `git` CLI (no libgit2/gix, to keep the build lean and
//! behave exactly like the git operators know), a bare mirror per repository, and snapshots
//! extracted with `git archive | tar -x` into the size-bounded cache.
//!
//! # What a request may name
//! `repo.url` is anything `git fetch` accepts: an `https://`/`ssh://`/`git@host:` URL, a
//! `file://` URL or an absolute local path. `repo.commit` is a revision as a person types it
//! ([`verdict_proto::revision`]: a full or abbreviated commit SHA, a branch, a tag, `HEAD`,
//! `origin/<branch>`, each optionally followed by `~n`/`^n` steps), checked before any process
//! runs. A SHA (with its steps) that already resolves in the mirror is used without fetching
//! (commits never change); anything else is resolved after fetching every ref of the remote
//! (`+refs/*:refs/*`, so GitHub's `refs/pull/*` heads are included) — by a fetch that began
//! after the request was made: one this request runs, or one another request ran meanwhile
//! (decision 166), so a review's two names and concurrent intakes share fetches:
//! - as typed first;
//! - `HEAD` is the *remote's* HEAD (its default branch), not the mirror's own: it is fetched into
//!   the private ref `refs/verdict/remote-head` only when a revision starts with `HEAD`, so a
//!   remote without a HEAD breaks nothing else;
//! - `origin/<branch>` (and `refs/remotes/origin/<branch>`), when the remote has no such ref, is
//!   the remote's `<branch>`: the mirror holds the remote's branches as its own;
//! - a full SHA that is still unknown is fetched by itself, which most hosts allow for reachable
//!   commits.
//!
//! What a name resolved to is remembered until the mirror's next fetch, and the change between
//! two commits (merge base and diff) for as long as it fits in `max_change_cache_bytes`
//! ([`super::memo`], decision 168): a review of commits already seen runs no git process.
//!
//! The snapshot is keyed by the resolved full SHA, so every name of a commit shares one cache
//! entry.
//!
//! # On disk, under `cache_dir`
//! - `.lock`: held (an exclusive OS file lock) by the one process that has the directory open.
//!   Git gives no guarantee when two processes fetch into and archive from one bare repository at
//!   once, so a second process is refused instead of sharing the mirrors
//!   ([`RepoError::CacheInUse`]); the lock vanishes with the process, however it ends.
//! - `mirrors/<sha256 of the URL>`: a bare repository. The URL is passed on every fetch and never
//!   stored, so a token in it is not written to disk; credentials are redacted before hashing, so
//!   a rotated token reuses the mirror. Mirrors are not counted in `max_snapshot_bytes`: they are
//!   compact (packed history), shared by every commit of a repository, and costly to rebuild;
//!   bound them with the volume they live on. Partial clones (`--filter`) are not used: local and
//!   `file://` remotes ignore them, and `git archive` on a partial clone fetches blobs one by one.
//! - `snapshots/<sha256 of the URL>-<full SHA>`: the extracted trees (see the cache module).
//!   `export-ignore` and `export-subst` attributes are neutralised in the mirror, so a snapshot
//!   holds every file of the commit exactly as committed. Submodules appear as empty
//!   directories; Git LFS files as their pointer files.
//!
//! # Git's environment
//! Git never prompts (`GIT_TERMINAL_PROMPT=0`, empty `GIT_ASKPASS`/`SSH_ASKPASS`, stdin closed,
//! no credential helper), never reads the system config (`GIT_CONFIG_NOSYSTEM=1`), refuses the
//! `ext::` transport, ignores `GIT_DIR`-style variables inherited from the worker, speaks English
//! (`LC_ALL=C`, so its messages can be classified) and is killed when the request is cancelled.
//! The `fd::` transport is refused like `ext::`: it reads from a file descriptor of the process
//! and would wait forever.
//!
//! # Time limits
//! Every git process runs under a limit and is killed when it expires (SPEC R5), reported as
//! [`RepoError::Timeout`] naming the operation and the setting to raise: processes that talk to
//! the remote get [`GitSourceConfig::fetch_timeout`], those that only read the mirror
//! [`GitSourceConfig::local_timeout`] (`git archive` into `tar` counts as one). A fetch also
//! tells curl to give up on a transfer that stalls slightly longer than the fetch limit, so the
//! HTTP helper git starts ends by itself after git is killed.
//! The global config is read (that is where `url.<base>.insteadOf` and `http.extraHeader` live);
//! tests isolate it through [`GitSourceConfig::env`].
//!
//! # Credentials
//! With [`GitSourceConfig::credentials`] set, every command that talks to the remote (the
//! fetches) first asks them for the remote URL's HTTP headers (a GitHub installation token as
//! `Authorization: Basic …`) and gets them as `http.extraHeader` through its own environment
//! (`GIT_CONFIG_COUNT`/`GIT_CONFIG_KEY_n`/`GIT_CONFIG_VALUE_n`): not on the command line, where
//! `ps` shows it, not in the URL, and never in the mirror's config or any other file. Commands
//! that only read the mirror get nothing. Tokens expire within the hour, so they are asked for
//! per command, not once per mirror.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Instant;

use sha2::{Digest, Sha256};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;
use verdict_proto::revision::{Revision, is_full_sha};
use verdict_proto::wire::RepositoryRef;

use super::cache::{self, CacheStats, SnapshotCache};
use super::memo::{Changes, Resolved};
use super::scratch::ScratchDir;
use super::{Change, GitCredentials, RepoError, RepoFile, RepositorySource, Snapshot, redact_url};
use crate::BoxFuture;

/// Git variables a worker may inherit that would point git at another repository.
const INHERITED_GIT_VARIABLES: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_COMMON_DIR",
    "GIT_CEILING_DIRECTORIES",
];

/// Where the remote's HEAD is fetched to when a revision names it. Outside `refs/heads` and
/// `refs/tags`, so no typed name finds it by accident; pruned by the next fetch of every ref.
const REMOTE_HEAD_REF: &str = "refs/verdict/remote-head";

/// The remote name people prefix branches with; the mirror has no remotes of its own.
const CONVENTIONAL_REMOTE: &str = "origin/";

/// How long a re-open by the same process may wait for its own earlier lock to be released.
const OWN_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Cache directories held by live sources of this process.
static HELD_HERE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// The exclusive hold on a cache directory; released when dropped (or when the process ends).
#[derive(Debug)]
struct DirectoryLock {
    _file: std::fs::File,
    dir: PathBuf,
}

impl Drop for DirectoryLock {
    fn drop(&mut self) {
        let mut held = HELD_HERE.lock().unwrap_or_else(PoisonError::into_inner);
        held.retain(|d| d != &self.dir);
    }
}

/// Takes the exclusive lock of `dir` (its `.lock` file, which then holds this process's id).
///
/// Held by another process, or by a live source of this one: refused at once. Held, as far as
/// the file says, by this process although no source of it holds the directory: that is a
/// source just dropped, whose lock a `git` child forked in that instant still shares until it
/// execs (an OS file lock belongs to the open file, and a fork copies it), so the lock is retried
/// briefly.
fn lock_directory(dir: &Path) -> Result<DirectoryLock, RepoError> {
    use std::io::{Read, Seek, Write};
    let dir = std::fs::canonicalize(dir).map_err(RepoError::io("resolve", dir))?;
    let in_use = || RepoError::CacheInUse { dir: dir.clone() };
    let path = dir.join(".lock");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(RepoError::io("open the lock file", &path))?;
    let me = std::process::id().to_string();
    let give_up = std::time::Instant::now() + OWN_LOCK_WAIT;
    loop {
        let mut held = HELD_HERE.lock().unwrap_or_else(PoisonError::into_inner);
        if held.contains(&dir) {
            return Err(in_use());
        }
        match file.try_lock() {
            Ok(()) => {
                held.push(dir.clone());
                drop(held);
                // The id only tells a later open of this process what it is waiting for.
                let _ = file
                    .set_len(0)
                    .and_then(|()| file.rewind())
                    .and_then(|()| file.write_all(me.as_bytes()));
                return Ok(DirectoryLock { _file: file, dir });
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                drop(held);
                let mut holder = String::new();
                let _ = file.rewind().and_then(|_| file.read_to_string(&mut holder));
                if holder.trim() != me || std::time::Instant::now() >= give_up {
                    return Err(in_use());
                }
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(RepoError::Io {
                    action: "lock",
                    path,
                    source: e,
                });
            }
        }
    }
}

/// How long a git message may be when quoted in an error.
const MAX_STDERR_CHARS: usize = 600;

/// The configuration keys of the two time limits, named in [`RepoError::Timeout`].
pub const FETCH_TIMEOUT_SETTING: &str = "repositories.fetch_timeout_seconds";
pub const LOCAL_TIMEOUT_SETTING: &str = "repositories.local_timeout_seconds";

/// How much longer than the fetch limit curl waits on a stalled transfer: git's own limit
/// expires first (and names the setting), the helper it leaves behind ends soon after.
const STALL_MARGIN: std::time::Duration = std::time::Duration::from_secs(2);

/// What a git process does: its name in errors, and whether it talks to the remote (and so runs
/// under the fetch limit) or only reads the mirror (the local limit).
#[derive(Debug, Clone, Copy)]
struct Step {
    action: &'static str,
    remote: bool,
}

const INIT: Step = Step {
    action: "git init",
    remote: false,
};
const FETCH: Step = Step {
    action: "git fetch",
    remote: true,
};
const REV_PARSE: Step = Step {
    action: "git rev-parse",
    remote: false,
};
const MERGE_BASE: Step = Step {
    action: "git merge-base",
    remote: false,
};
const DIFF: Step = Step {
    action: "git diff",
    remote: false,
};
const LS_TREE: Step = Step {
    action: "git ls-tree",
    remote: false,
};
const NUMSTAT: Step = Step {
    action: "git diff --numstat",
    remote: false,
};
const ARCHIVE: Step = Step {
    action: "git archive",
    remote: false,
};

/// Configuration of [`GitRepositorySource`].
#[derive(Debug, Clone)]
pub struct GitSourceConfig {
    /// Where mirrors and snapshots live. One worker process per directory (see the cache docs).
    pub cache_dir: PathBuf,
    /// Upper bound for all snapshots together (sum of file sizes). Default 10 GiB.
    pub max_snapshot_bytes: u64,
    /// The git program. Default `git` (looked up on `PATH`).
    pub git_program: PathBuf,
    /// The tar program that extracts `git archive`'s output. Default `tar`.
    pub tar_program: PathBuf,
    /// Extra environment for every git process, applied last (tests set `HOME` and
    /// `GIT_CONFIG_GLOBAL` here so the developer's config does not leak in). Default none.
    pub env: Vec<(String, String)>,
    /// HTTP headers for fetches (see the module documentation). Default none: git fetches with
    /// whatever the URL and the global config give it.
    pub credentials: Option<Arc<dyn GitCredentials>>,
    /// The longest a git process that talks to the remote (a fetch) may run. Default 600 s.
    pub fetch_timeout: std::time::Duration,
    /// The longest a git process that only reads the mirror may run (`rev-parse`, `diff`,
    /// `archive` with its `tar`). Default 300 s.
    pub local_timeout: std::time::Duration,
    /// Upper bound for the changes between commit pairs kept in memory (their diff text), so a
    /// change reviewed again is not diffed again. Default 64 MiB.
    pub max_change_cache_bytes: usize,
}

impl GitSourceConfig {
    /// The defaults, caching under `cache_dir`.
    pub fn new(cache_dir: impl Into<PathBuf>) -> GitSourceConfig {
        GitSourceConfig {
            cache_dir: cache_dir.into(),
            max_snapshot_bytes: 10 << 30,
            git_program: PathBuf::from("git"),
            tar_program: PathBuf::from("tar"),
            env: Vec::new(),
            credentials: None,
            fetch_timeout: std::time::Duration::from_secs(600),
            local_timeout: std::time::Duration::from_secs(300),
            max_change_cache_bytes: 64 << 20,
        }
    }
}

/// Repository snapshots made with the `git` CLI (see the module documentation).
#[derive(Debug)]
pub struct GitRepositorySource {
    config: GitSourceConfig,
    mirrors_dir: PathBuf,
    cache: SnapshotCache,
    locks: KeyedLocks,
    /// Per mirror, when its last fetch of every ref began (a name asked for after that moment
    /// is answered without fetching again) and what names resolved to since.
    resolved: Resolved,
    /// Changes between commit pairs already diffed.
    changes: Changes,
    /// Holds the directory's `.lock` for as long as this source lives.
    _owner: DirectoryLock,
}

impl GitRepositorySource {
    /// Opens the cache directory (creating it), registering the snapshots a previous run left
    /// there. Blocking: call it at start-up or from a blocking task.
    /// Fails with [`RepoError::CacheInUse`] when another live process has it open.
    pub fn open(config: GitSourceConfig) -> Result<GitRepositorySource, RepoError> {
        let mirrors_dir = config.cache_dir.join("mirrors");
        std::fs::create_dir_all(&mirrors_dir)
            .map_err(RepoError::io("create directory", &mirrors_dir))?;
        let owner = lock_directory(&config.cache_dir)?;
        let cache = SnapshotCache::open(&config.cache_dir, config.max_snapshot_bytes)?;
        Ok(GitRepositorySource {
            resolved: Resolved::default(),
            changes: Changes::new(config.max_change_cache_bytes),
            config,
            mirrors_dir,
            cache,
            locks: KeyedLocks::default(),
            _owner: owner,
        })
    }

    /// What the snapshot cache holds and has done since [`Self::open`].
    pub fn stats(&self) -> CacheStats {
        self.cache.stats()
    }

    async fn take_snapshot(
        &self,
        repo: &RepositoryRef,
        cancel: &CancellationToken,
    ) -> Result<Snapshot, RepoError> {
        if cancel.is_cancelled() {
            return Err(RepoError::Cancelled);
        }
        let revision = validate(&repo.url, &repo.commit)?;
        let remote = Remote {
            url: &repo.url,
            shown: redact_url(&repo.url),
        };
        let url_key = sha256_hex(&remote.shown);

        // Fast path: a full SHA already on disk needs neither the mirror nor a git process.
        if revision.is_full_sha() {
            let key = format!("{url_key}-{}", repo.commit.to_ascii_lowercase());
            if let Some(lease) = self.cache.acquire(&key) {
                return self.leased_snapshot(&key, &repo.commit.to_ascii_lowercase(), lease);
            }
        }

        let mirror = self.mirrors_dir.join(&url_key);
        let asked = Instant::now();
        let sha = {
            let lock = self.locks.get(&format!("mirror {url_key}"));
            let _held = cancellable(cancel, lock.lock()).await?;
            self.ensure_mirror(&mirror, &remote, cancel).await?;
            self.resolve(&mirror, &remote, revision, asked, cancel)
                .await?
        };

        let key = format!("{url_key}-{sha}");
        let lock = self.locks.get(&format!("snapshot {key}"));
        let _held = cancellable(cancel, lock.lock()).await?;
        if let Some(lease) = self.cache.acquire(&key) {
            return self.leased_snapshot(&key, &sha, lease);
        }
        let path = self.cache.path_for(&key);
        let built_here = !path.is_dir();
        if built_here {
            self.materialise(&mirror, &remote, &sha, &key, cancel)
                .await?;
        }
        let lease = match self.cache.acquire(&key) {
            Some(lease) => lease,
            None => {
                // Built by this call just now, or by another process sharing the directory.
                let measured = path.clone();
                let bytes = tokio::task::spawn_blocking(move || cache::tree_bytes(&measured))
                    .await
                    .map_err(|e| RepoError::Io {
                        action: "measure snapshot",
                        path: path.clone(),
                        source: std::io::Error::other(e),
                    })?
                    .map_err(RepoError::io("measure snapshot", &path))?;
                self.cache.insert(&key, bytes, built_here)
            }
        };
        self.leased_snapshot(&key, &sha, lease)
    }

    fn leased_snapshot(
        &self,
        key: &str,
        sha: &str,
        lease: cache::Lease,
    ) -> Result<Snapshot, RepoError> {
        let path = self.cache.path_for(key);
        Snapshot::new(&path, sha, lease).map_err(RepoError::io("open snapshot", &path))
    }

    /// Makes sure a bare repository exists at `mirror`. Built aside and renamed into place, so a
    /// crash or a concurrent worker never leaves a half-initialised mirror.
    async fn ensure_mirror(
        &self,
        mirror: &Path,
        remote: &Remote<'_>,
        cancel: &CancellationToken,
    ) -> Result<(), RepoError> {
        if mirror.join("HEAD").is_file() {
            return Ok(());
        }
        let scratch = ScratchDir::create_in(self.cache.tmp_dir(), "mirror-")
            .map_err(RepoError::io("create directory in", self.cache.tmp_dir()))?;
        let mut init = self.git(None);
        init.args(["init", "--bare", "--quiet"]).arg(scratch.path());
        let out = self.run(init, INIT, remote, cancel).await?;
        if !out.status.success() {
            return Err(git_failed("git init", remote, &out));
        }
        // Snapshots must show every file exactly as committed, whatever the tree's
        // .gitattributes asks of `git archive`; info/attributes takes precedence over it.
        let attributes = scratch.path().join("info").join("attributes");
        std::fs::create_dir_all(scratch.path().join("info"))
            .and_then(|()| std::fs::write(&attributes, "* -export-ignore -export-subst\n"))
            .map_err(RepoError::io("write", &attributes))?;
        match std::fs::rename(scratch.path(), mirror) {
            Ok(()) => {
                scratch.keep();
                Ok(())
            }
            Err(_) if mirror.join("HEAD").is_file() => Ok(()),
            Err(e) => Err(RepoError::io("create mirror", mirror)(e)),
        }
    }

    /// The full SHA `revision` names, fetching only when the mirror cannot answer on its own
    /// (the order of attempts is in the module documentation) and no fetch of every ref began
    /// since `asked` — when the caller's request was made, before it waited for the lock. The
    /// caller holds the mirror's lock.
    async fn resolve(
        &self,
        mirror: &Path,
        remote: &Remote<'_>,
        revision: Revision<'_>,
        asked: Instant,
        cancel: &CancellationToken,
    ) -> Result<String, RepoError> {
        let typed = revision.as_str();
        if revision.names_sha() {
            if let Some(sha) = self.resolved.name(mirror, typed) {
                return Ok(sha);
            }
            if let Some(sha) = self.rev_parse(mirror, remote, typed, cancel).await? {
                self.resolved.remember(mirror, typed, &sha);
                return Ok(sha);
            }
        }
        if !self.resolved.fetched_since(mirror, asked) {
            let began = Instant::now();
            let mut fetch = self.remote_git(mirror, remote, cancel).await?;
            fetch
                .args(["fetch", "--quiet", "--prune", "--no-write-fetch-head", "--"])
                .arg(remote.url)
                .arg("+refs/*:refs/*");
            let out = self.run(fetch, FETCH, remote, cancel).await?;
            if !out.status.success() {
                return Err(classify_remote_failure(remote, &out));
            }
            self.resolved.record_fetch(mirror, began);
        }
        if let Some(sha) = self.resolved.name(mirror, typed) {
            return Ok(sha);
        }
        let sha = self
            .resolve_after_fetch(mirror, remote, revision, cancel)
            .await?;
        self.resolved.remember(mirror, typed, &sha);
        Ok(sha)
    }

    /// [`Self::resolve`] once the mirror is fresh enough and its names memo had no answer.
    async fn resolve_after_fetch(
        &self,
        mirror: &Path,
        remote: &Remote<'_>,
        revision: Revision<'_>,
        cancel: &CancellationToken,
    ) -> Result<String, RepoError> {
        let not_found = || RepoError::CommitNotFound {
            url: remote.shown.clone(),
            revision: revision.as_str().to_owned(),
        };
        if revision.names_head() {
            // After the fetch of every ref, which prunes the private ref.
            if !self.fetch_remote_head(mirror, remote, cancel).await? {
                return Err(not_found());
            }
            let typed = format!("{REMOTE_HEAD_REF}{}", revision.suffix());
            return self
                .rev_parse(mirror, remote, &typed, cancel)
                .await?
                .ok_or_else(not_found);
        }
        if let Some(sha) = self
            .rev_parse(mirror, remote, revision.as_str(), cancel)
            .await?
        {
            return Ok(sha);
        }
        if let Some(branch) = remote_branch(revision.name()) {
            let typed = format!("refs/heads/{branch}{}", revision.suffix());
            if let Some(sha) = self.rev_parse(mirror, remote, &typed, cancel).await? {
                return Ok(sha);
            }
        }
        if is_full_sha(revision.name()) {
            // Not under any ref (a force-pushed PR head, say): ask for the object itself. Hosts
            // that refuse answer with an error, which only means "not found" here.
            let mut fetch_one = self.remote_git(mirror, remote, cancel).await?;
            fetch_one
                .args(["fetch", "--quiet", "--no-write-fetch-head", "--"])
                .arg(remote.url)
                .arg(revision.name());
            self.run(fetch_one, FETCH, remote, cancel).await?;
            if let Some(sha) = self
                .rev_parse(mirror, remote, revision.as_str(), cancel)
                .await?
            {
                return Ok(sha);
            }
        }
        Err(not_found())
    }

    /// Fetches the remote's HEAD into [`REMOTE_HEAD_REF`]; `false` when the remote has none (an
    /// empty repository, or a HEAD naming a branch that does not exist).
    async fn fetch_remote_head(
        &self,
        mirror: &Path,
        remote: &Remote<'_>,
        cancel: &CancellationToken,
    ) -> Result<bool, RepoError> {
        let mut fetch = self.remote_git(mirror, remote, cancel).await?;
        fetch
            .args(["fetch", "--quiet", "--no-write-fetch-head", "--"])
            .arg(remote.url)
            .arg(format!("+HEAD:{REMOTE_HEAD_REF}"));
        let out = self.run(fetch, FETCH, remote, cancel).await?;
        if out.status.success() {
            return Ok(true);
        }
        let stderr = String::from_utf8_lossy(&out.stderr).to_ascii_lowercase();
        if stderr.contains("couldn't find remote ref") {
            Ok(false)
        } else {
            Err(classify_remote_failure(remote, &out))
        }
    }

    async fn rev_parse(
        &self,
        mirror: &Path,
        remote: &Remote<'_>,
        commit: &str,
        cancel: &CancellationToken,
    ) -> Result<Option<String>, RepoError> {
        let mut cmd = self.git(Some(mirror));
        cmd.args(["rev-parse", "--verify", "--quiet"])
            .arg(format!("{commit}^{{commit}}"));
        let out = self.run(cmd, REV_PARSE, remote, cancel).await?;
        let sha = String::from_utf8_lossy(&out.stdout)
            .trim()
            .to_ascii_lowercase();
        Ok((out.status.success() && is_full_sha(&sha)).then_some(sha))
    }

    /// Extracts the tree of `sha` into `tmp/`, then renames it to its place in `snapshots/`.
    async fn materialise(
        &self,
        mirror: &Path,
        remote: &Remote<'_>,
        sha: &str,
        key: &str,
        cancel: &CancellationToken,
    ) -> Result<(), RepoError> {
        let scratch = ScratchDir::create_in(self.cache.tmp_dir(), &format!("{key}-"))
            .map_err(RepoError::io("create directory in", self.cache.tmp_dir()))?;

        let mut archive = self.git(Some(mirror));
        archive
            .args(["archive", "--format=tar", sha])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut archive = self.spawn(archive, &self.config.git_program)?;
        let tar_input: Stdio = archive
            .stdout
            .take()
            .ok_or_else(|| RepoError::GitFailed {
                action: "git archive",
                url: remote.shown.clone(),
                stderr: "its output could not be captured".to_owned(),
            })?
            .try_into()
            .map_err(RepoError::io(
                "pipe git archive into tar for",
                scratch.path(),
            ))?;
        let mut extract = Command::new(&self.config.tar_program);
        extract
            .args(["-x", "-f", "-", "-C"])
            .arg(scratch.path())
            .env("LC_ALL", "C")
            .stdin(tar_input)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let extract = self.spawn(extract, &self.config.tar_program)?;

        // Both processes are dropped, and so killed, when the limit expires.
        let both = async { tokio::join!(archive.wait_with_output(), extract.wait_with_output()) };
        let (archived, extracted) = self.limited(ARCHIVE, remote, cancel, both).await?;
        let archived = archived.map_err(RepoError::io("run git archive for", scratch.path()))?;
        let extracted = extracted.map_err(RepoError::io("run tar for", scratch.path()))?;
        if !archived.status.success() {
            return Err(git_failed("git archive", remote, &archived));
        }
        if !extracted.status.success() {
            return Err(git_failed(
                "extracting git archive with tar",
                remote,
                &extracted,
            ));
        }

        let path = self.cache.path_for(key);
        match std::fs::rename(scratch.path(), &path) {
            Ok(()) => {
                scratch.keep();
                Ok(())
            }
            // Another process sharing the directory finished first: its tree is identical.
            Err(_) if path.is_dir() => Ok(()),
            Err(e) => Err(RepoError::io("move snapshot into", &path)(e)),
        }
    }

    /// A git command with the isolation described in the module documentation.
    fn git(&self, git_dir: Option<&Path>) -> Command {
        let mut cmd = Command::new(&self.config.git_program);
        for variable in INHERITED_GIT_VARIABLES {
            cmd.env_remove(variable);
        }
        cmd.env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_ASKPASS", "")
            .env("SSH_ASKPASS", "")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("LC_ALL", "C")
            .envs(self.config.env.iter().map(|(k, v)| (k, v)))
            .args(["-c", "credential.helper=", "-c", "core.askPass="])
            .args([
                "-c",
                "protocol.ext.allow=never",
                "-c",
                "protocol.fd.allow=never",
            ])
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Some(dir) = git_dir {
            let mut arg = OsString::from("--git-dir=");
            arg.push(dir);
            cmd.arg(arg);
        }
        cmd
    }

    /// A git command in `mirror` that talks to `remote`: [`Self::git`] plus the credentials'
    /// headers for the remote's URL, in this command's environment only.
    async fn remote_git(
        &self,
        mirror: &Path,
        remote: &Remote<'_>,
        cancel: &CancellationToken,
    ) -> Result<Command, RepoError> {
        let mut cmd = self.git(Some(mirror));
        // A transfer stalled (under 1 byte/s) for longer than the fetch limit is given up by curl
        // itself, so the helper process does not outlive git's kill by more than the margin.
        let stall = (self.config.fetch_timeout + STALL_MARGIN).as_secs().max(1);
        cmd.args(["-c", "http.lowSpeedLimit=1", "-c"])
            .arg(format!("http.lowSpeedTime={stall}"));
        let Some(credentials) = &self.config.credentials else {
            return Ok(cmd);
        };
        let headers = cancellable(cancel, credentials.http_headers(remote.url)).await??;
        if headers.is_empty() {
            return Ok(cmd);
        }
        // Entries the configured environment already numbers come first.
        let first = self
            .config
            .env
            .iter()
            .rev()
            .find(|(name, _)| name == "GIT_CONFIG_COUNT")
            .and_then(|(_, count)| count.trim().parse::<usize>().ok())
            .unwrap_or(0);
        for (i, header) in headers.iter().enumerate() {
            cmd.env(format!("GIT_CONFIG_KEY_{}", first + i), "http.extraHeader")
                .env(format!("GIT_CONFIG_VALUE_{}", first + i), header.expose());
        }
        cmd.env("GIT_CONFIG_COUNT", (first + headers.len()).to_string());
        Ok(cmd)
    }

    fn spawn(&self, mut cmd: Command, program: &Path) -> Result<tokio::process::Child, RepoError> {
        cmd.spawn().map_err(|e| RepoError::GitNotInstalled {
            program: program.display().to_string(),
            reason: e.to_string(),
        })
    }

    /// Runs one git process for `step` to its end, within the step's time limit.
    async fn run(
        &self,
        mut cmd: Command,
        step: Step,
        remote: &Remote<'_>,
        cancel: &CancellationToken,
    ) -> Result<Output, RepoError> {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let child = self.spawn(cmd, &self.config.git_program)?;
        // Dropping the child on cancellation or expiry kills it (`kill_on_drop`).
        self.limited(step, remote, cancel, child.wait_with_output())
            .await?
            .map_err(RepoError::io("wait for git in", &self.config.cache_dir))
    }

    /// `work` (which owns the processes of `step`) unless `cancel` fires or the step's limit
    /// expires first; either way `work` is dropped, killing its processes.
    async fn limited<T>(
        &self,
        step: Step,
        remote: &Remote<'_>,
        cancel: &CancellationToken,
        work: impl Future<Output = T>,
    ) -> Result<T, RepoError> {
        let (limit, setting) = if step.remote {
            (self.config.fetch_timeout, FETCH_TIMEOUT_SETTING)
        } else {
            (self.config.local_timeout, LOCAL_TIMEOUT_SETTING)
        };
        cancellable(cancel, tokio::time::timeout(limit, work))
            .await?
            .map_err(|_| RepoError::Timeout {
                action: step.action,
                url: remote.shown.clone(),
                seconds: u64::try_from(limit.as_millis().div_ceil(1000)).unwrap_or(u64::MAX),
                setting,
            })
    }
}

impl GitRepositorySource {
    async fn take_change(
        &self,
        url: &str,
        base: &str,
        head: &str,
        cancel: &CancellationToken,
    ) -> Result<Change, RepoError> {
        if cancel.is_cancelled() {
            return Err(RepoError::Cancelled);
        }
        let base = validate(url, base)?;
        let head = validate(url, head)?;
        let remote = Remote {
            url,
            shown: redact_url(url),
        };
        let mirror = self.mirrors_dir.join(sha256_hex(&remote.shown));
        let asked = Instant::now();
        let lock = self
            .locks
            .get(&format!("mirror {}", sha256_hex(&remote.shown)));
        let _held = cancellable(cancel, lock.lock()).await?;
        self.ensure_mirror(&mirror, &remote, cancel).await?;
        // One fetch serves both names: the head's resolution finds the base's fetch fresh.
        let base = self.resolve(&mirror, &remote, base, asked, cancel).await?;
        let head = self.resolve(&mirror, &remote, head, asked, cancel).await?;
        if let Some(change) = self.changes.get(&mirror, &base, &head) {
            return Ok(change);
        }
        let change = self
            .diff_commits(&mirror, &remote, base.clone(), head.clone(), cancel)
            .await?;
        self.changes.put(&mirror, &base, &head, &change);
        Ok(change)
    }

    /// The change from commit `base` to commit `head`, from their merge base; the caller holds
    /// the mirror's lock.
    async fn diff_commits(
        &self,
        mirror: &Path,
        remote: &Remote<'_>,
        base: String,
        head: String,
        cancel: &CancellationToken,
    ) -> Result<Change, RepoError> {
        // A pull request shows what its head adds to the history it shares with the base, not
        // the base's own later changes undone: the diff starts at the merge base. Histories
        // without a common commit are compared directly.
        let mut merge_base = self.git(Some(mirror));
        merge_base.args(["merge-base", &base, &head]);
        let out = self.run(merge_base, MERGE_BASE, remote, cancel).await?;
        let found = String::from_utf8_lossy(&out.stdout)
            .trim()
            .to_ascii_lowercase();
        let base = if out.status.success() && is_full_sha(&found) {
            found
        } else {
            base
        };
        let mut diff = self.git(Some(mirror));
        diff.args([
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "-M",
            &base,
            &head,
            "--",
        ]);
        let out = self.run(diff, DIFF, remote, cancel).await?;
        if !out.status.success() {
            return Err(git_failed("git diff", remote, &out));
        }
        Ok(Change {
            base,
            head,
            diff: String::from_utf8_lossy(&out.stdout).into_owned(),
        })
    }
}

/// Git's empty tree: what a numstat of a whole commit is taken against.
const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

impl GitRepositorySource {
    /// `git ls-tree -r -l` for paths and sizes, then `git diff --numstat` from the empty tree
    /// for git's binary test (`-` counts), both on the mirror under the local time limit.
    async fn list_files(
        &self,
        url: &str,
        commit: &str,
        cancel: &CancellationToken,
    ) -> Result<Vec<RepoFile>, RepoError> {
        if cancel.is_cancelled() {
            return Err(RepoError::Cancelled);
        }
        let revision = validate(url, commit)?;
        let remote = Remote {
            url,
            shown: redact_url(url),
        };
        let url_key = sha256_hex(&remote.shown);
        let mirror = self.mirrors_dir.join(&url_key);
        let asked = Instant::now();
        let lock = self.locks.get(&format!("mirror {url_key}"));
        let _held = cancellable(cancel, lock.lock()).await?;
        self.ensure_mirror(&mirror, &remote, cancel).await?;
        let sha = self
            .resolve(&mirror, &remote, revision, asked, cancel)
            .await?;

        let mut ls = self.git(Some(&mirror));
        ls.args(["ls-tree", "-r", "-l", "-z", "--full-tree", &sha]);
        let out = self.run(ls, LS_TREE, &remote, cancel).await?;
        if !out.status.success() {
            return Err(git_failed("git ls-tree", &remote, &out));
        }
        let mut files = parse_ls_tree(&out.stdout);

        let mut numstat = self.git(Some(&mirror));
        numstat.args([
            "diff",
            "--numstat",
            "-z",
            "--no-renames",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            EMPTY_TREE,
            &sha,
            "--",
        ]);
        let out = self.run(numstat, NUMSTAT, &remote, cancel).await?;
        if !out.status.success() {
            return Err(git_failed("git diff --numstat", &remote, &out));
        }
        let binary = parse_binary_numstat(&out.stdout);
        for file in &mut files {
            file.binary = !file.symlink && binary.contains(file.path.as_str());
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(files)
    }

    async fn resolve_revision(
        &self,
        url: &str,
        revision: &str,
        cancel: &CancellationToken,
    ) -> Result<String, RepoError> {
        if cancel.is_cancelled() {
            return Err(RepoError::Cancelled);
        }
        let revision = validate(url, revision)?;
        let remote = Remote {
            url,
            shown: redact_url(url),
        };
        let url_key = sha256_hex(&remote.shown);
        let mirror = self.mirrors_dir.join(&url_key);
        let asked = Instant::now();
        let lock = self.locks.get(&format!("mirror {url_key}"));
        let _held = cancellable(cancel, lock.lock()).await?;
        self.ensure_mirror(&mirror, &remote, cancel).await?;
        self.resolve(&mirror, &remote, revision, asked, cancel)
            .await
    }
}

impl RepositorySource for GitRepositorySource {
    fn snapshot<'a>(
        &'a self,
        repo: &'a RepositoryRef,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Snapshot, RepoError>> {
        Box::pin(self.take_snapshot(repo, cancel))
    }

    fn resolve<'a>(
        &'a self,
        url: &'a str,
        revision: &'a str,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<String, RepoError>> {
        Box::pin(self.resolve_revision(url, revision, cancel))
    }

    fn change<'a>(
        &'a self,
        url: &'a str,
        base: &'a str,
        head: &'a str,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Change, RepoError>> {
        Box::pin(self.take_change(url, base, head, cancel))
    }

    fn files<'a>(
        &'a self,
        url: &'a str,
        commit: &'a str,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Vec<RepoFile>, RepoError>> {
        Box::pin(self.list_files(url, commit, cancel))
    }
}

/// `git ls-tree -r -l -z` records (`<mode> <type> <object> <size>\t<path>\0`): blobs, regular
/// or symbolic links; submodules (`commit`) are left out. Paths that are not UTF-8 are replaced
/// lossily, as diffs are.
fn parse_ls_tree(stdout: &[u8]) -> Vec<RepoFile> {
    stdout
        .split(|&b| b == 0)
        .filter(|record| !record.is_empty())
        .filter_map(|record| {
            let tab = record.iter().position(|&b| b == b'\t')?;
            let (meta, path) = (&record[..tab], &record[tab + 1..]);
            let meta = String::from_utf8_lossy(meta);
            let mut parts = meta.split_ascii_whitespace();
            let mode = parts.next()?;
            let kind = parts.next()?;
            let _object = parts.next()?;
            let size = parts.next()?;
            if kind != "blob" {
                return None;
            }
            Some(RepoFile {
                path: String::from_utf8_lossy(path).into_owned(),
                bytes: size.parse().unwrap_or(0),
                binary: false,
                symlink: mode == "120000",
            })
        })
        .collect()
}

/// The paths `git diff --numstat -z` reports with `-` counts: git's binary files.
fn parse_binary_numstat(stdout: &[u8]) -> std::collections::HashSet<String> {
    stdout
        .split(|&b| b == 0)
        .filter_map(|record| {
            let record = String::from_utf8_lossy(record);
            let rest = record.strip_prefix("-\t-\t")?;
            Some(rest.to_owned())
        })
        .collect()
}

/// The URL to give git, and the one to show people.
struct Remote<'a> {
    url: &'a str,
    shown: String,
}

/// One async mutex per key (a mirror, a snapshot), so concurrent requests for the same thing do
/// the work once. Entries disappear when nobody holds or waits for them.
#[derive(Debug, Default)]
struct KeyedLocks {
    map: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl KeyedLocks {
    fn get(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(lock) = map.get(key).and_then(Weak::upgrade) {
            return lock;
        }
        map.retain(|_, lock| lock.strong_count() > 0);
        let lock = Arc::new(tokio::sync::Mutex::new(()));
        map.insert(key.to_owned(), Arc::downgrade(&lock));
        lock
    }
}

/// Runs `work` unless `cancel` fires first (then `work` is dropped, killing its processes).
async fn cancellable<T>(
    cancel: &CancellationToken,
    work: impl Future<Output = T>,
) -> Result<T, RepoError> {
    tokio::select! {
        biased;
        () = cancel.cancelled() => Err(RepoError::Cancelled),
        value = work => Ok(value),
    }
}

/// Rejects references git could mistake for options or rev expressions before any process runs:
/// the URL here, the revision by [`verdict_proto::revision`]'s rule (the one the API applies).
fn validate<'a>(url: &str, revision: &'a str) -> Result<Revision<'a>, RepoError> {
    let url_problem = if url.trim().is_empty() {
        Some("it is empty")
    } else if url.starts_with('-') {
        Some("it starts with `-`")
    } else if url.chars().any(char::is_control) {
        Some("it contains control characters")
    } else if url.len() > 4096 {
        Some("it is longer than 4096 bytes")
    } else {
        None
    };
    if let Some(reason) = url_problem {
        return Err(RepoError::InvalidReference {
            field: "url",
            value: redact_url(&verdict_proto::redact::safe_preview(url, 200)),
            reason,
        });
    }
    Ok(Revision::parse(revision)?)
}

/// The branch an `origin/<branch>` or `refs/remotes/origin/<branch>` name means in the remote.
fn remote_branch(name: &str) -> Option<&str> {
    let tracking = name.strip_prefix("refs/remotes/").unwrap_or(name);
    tracking
        .strip_prefix(CONVENTIONAL_REMOTE)
        .filter(|branch| !branch.is_empty())
}

fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Git's message, made safe to show: credentials redacted, one line, bounded.
fn clean_stderr(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let one_line = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ");
    let shown = verdict_proto::redact::safe_preview(&redact_url(&one_line), MAX_STDERR_CHARS);
    if shown.is_empty() {
        "no message".to_owned()
    } else {
        shown
    }
}

fn git_failed(action: &'static str, remote: &Remote<'_>, out: &Output) -> RepoError {
    RepoError::GitFailed {
        action,
        url: remote.shown.clone(),
        stderr: format!("{} ({})", clean_stderr(&out.stderr), out.status),
    }
}

/// Network trouble is worth retrying; a repository that does not exist (or that we may not
/// read: hosts answer "not found" for both) is not. Unrecognised failures count as network
/// trouble, because retrying a deterministic failure costs little and giving up on a transient
/// one loses a review.
fn classify_remote_failure(remote: &Remote<'_>, out: &Output) -> RepoError {
    const UNREACHABLE: &[&str] = &[
        "could not resolve host",
        "couldn't connect",
        "failed to connect",
        "connection refused",
        "connection reset",
        "timed out",
        "network is unreachable",
        "no route to host",
        "temporary failure in name resolution",
        "returned error: 5",
        "returned error: 429",
        "rpc failed",
        "early eof",
    ];
    const NOT_FOUND: &[&str] = &[
        "does not exist",
        "does not appear to be a git repository",
        "not a git repository",
        "not found",
        "invalid gitfile",
        "does not look like",
        "authentication failed",
        "could not read username",
        "could not read password",
        "terminal prompts disabled",
        "permission denied",
        "access denied",
        "returned error: 401",
        "returned error: 403",
        "returned error: 404",
    ];
    let reason = clean_stderr(&out.stderr);
    let lower = String::from_utf8_lossy(&out.stderr).to_ascii_lowercase();
    let url = remote.shown.clone();
    if UNREACHABLE.iter().any(|p| lower.contains(p)) {
        RepoError::Unreachable { url, reason }
    } else if NOT_FOUND.iter().any(|p| lower.contains(p)) {
        RepoError::RepositoryNotFound { url, reason }
    } else {
        RepoError::Unreachable { url, reason }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use verdict_proto::outcome::FailureKind;

    use super::*;

    fn reference(url: &str, commit: &str) -> RepositoryRef {
        RepositoryRef {
            url: url.to_owned(),
            commit: commit.to_owned(),
            base: None,
        }
    }

    fn failure(stderr: &str) -> Output {
        Output {
            status: std::process::ExitStatus::from_raw(128 << 8),
            stdout: Vec::new(),
            stderr: stderr.as_bytes().to_vec(),
        }
    }

    #[test]
    fn references_that_look_like_options_are_refused() {
        for url in ["", "--upload-pack=x", "/r\n"] {
            let err = validate(url, "abc").unwrap_err();
            assert!(
                matches!(err, RepoError::InvalidReference { field: "url", .. }),
                "{url:?}: {err}"
            );
            assert!(!err.is_retryable());
        }
        for revision in [
            "",
            "--output=x",
            "-x",
            "a..b",
            "main:secret",
            "a b",
            "@{-1}",
        ] {
            let err = validate("/r", revision).unwrap_err();
            assert!(
                matches!(err, RepoError::InvalidRevision(_)),
                "{revision:?}: {err}"
            );
            assert_eq!(err.failure_kind(), FailureKind::InvalidRequest);
        }
        for revision in [
            "0123abc",
            "main",
            "release/1.2",
            "v1.0.0-rc_1",
            "HEAD",
            "HEAD~1",
            "HEAD^",
            "origin/main",
            "feature~1",
        ] {
            assert_eq!(
                validate("https://h/r.git", revision).unwrap().as_str(),
                revision
            );
        }
    }

    #[test]
    fn origin_names_the_remotes_own_branches() {
        assert_eq!(remote_branch("origin/main"), Some("main"));
        assert_eq!(remote_branch("origin/feature/x"), Some("feature/x"));
        assert_eq!(remote_branch("refs/remotes/origin/main"), Some("main"));
        assert_eq!(remote_branch("upstream/main"), None);
        assert_eq!(remote_branch("feature/x"), None);
        assert_eq!(remote_branch("main"), None);
    }

    #[test]
    fn invalid_urls_are_shown_redacted() {
        let err = validate("https://u:tok@h/r\n", "a").unwrap_err();
        assert!(!err.to_string().contains("tok"), "{err}");
    }

    #[test]
    fn remote_failures_are_classified() {
        let remote = Remote {
            url: "https://u:s3cret@h/r",
            shown: redact_url("https://u:s3cret@h/r"),
        };
        let cases = [
            ("fatal: '/x' does not appear to be a git repository", false),
            ("fatal: repository 'https://h/r/' not found", false),
            (
                "fatal: could not read Username for 'https://h': terminal prompts disabled",
                false,
            ),
            (
                "fatal: unable to access 'https://h/r/': Could not resolve host: h",
                true,
            ),
            (
                "fatal: unable to access 'https://h/': Failed to connect to h port 443",
                true,
            ),
            (
                "error: RPC failed; HTTP 502 curl 22 The requested URL returned error: 502",
                true,
            ),
            ("something new and strange", true),
        ];
        for (stderr, retryable) in cases {
            let err = classify_remote_failure(&remote, &failure(stderr));
            assert_eq!(err.is_retryable(), retryable, "{stderr}: {err}");
            assert!(!err.to_string().contains("s3cret"));
        }
        let leaky = failure("fatal: unable to access 'https://u:s3cret@h/r/': timed out");
        let err = classify_remote_failure(&remote, &leaky);
        assert!(!err.to_string().contains("s3cret"), "{err}");
    }

    #[test]
    fn url_keys_are_sha256_hex() {
        assert_eq!(sha256_hex("").len(), 64);
        assert!(is_full_sha(&sha256_hex("/r")));
    }

    #[tokio::test]
    async fn keyed_locks_are_shared_while_in_use() {
        let locks = KeyedLocks::default();
        let a = locks.get("k");
        let b = locks.get("k");
        assert!(Arc::ptr_eq(&a, &b));
        let held = a.lock().await;
        assert!(b.try_lock().is_err());
        drop(held);
        drop((a, b));
        let _c = locks.get("other");
        assert_eq!(
            locks.map.lock().unwrap().len(),
            1,
            "unused keys are forgotten"
        );
    }

    #[tokio::test]
    async fn a_missing_git_is_reported_as_such() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = GitSourceConfig::new(dir.path());
        config.git_program = dir.path().join("no-such-git");
        let source = GitRepositorySource::open(config).unwrap();
        let err = source
            .snapshot(&reference("/r", "main"), &CancellationToken::new())
            .await
            .unwrap_err();
        assert!(matches!(err, RepoError::GitNotInstalled { .. }), "{err}");
        assert!(!err.is_retryable());
    }

    #[tokio::test]
    async fn a_cancelled_request_does_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let source = GitRepositorySource::open(GitSourceConfig::new(dir.path())).unwrap();
        let cancel = CancellationToken::new();
        cancel.cancel();
        let err = source
            .snapshot(&reference("/r", "main"), &cancel)
            .await
            .unwrap_err();
        assert!(matches!(err, RepoError::Cancelled));
    }

    /// Issue 8, item 3: a remote that accepts the connection and never answers. The fetch is
    /// killed at its limit and reported with the setting to raise; the HTTP helper git left
    /// behind lets the connection go by itself soon after. Loopback only.
    #[tokio::test]
    async fn a_remote_that_never_answers_is_given_up_at_the_fetch_limit() {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/x.git", listener.local_addr().unwrap());
        let silent = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            while let Ok(n) = socket.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let mut config = GitSourceConfig::new(dir.path().join("cache"));
        config.env = vec![
            ("GIT_CONFIG_GLOBAL".into(), "/dev/null".into()),
            ("HOME".into(), dir.path().display().to_string()),
        ];
        config.fetch_timeout = std::time::Duration::from_millis(1500);
        let source = GitRepositorySource::open(config).unwrap();
        let started = tokio::time::Instant::now();

        let cancel = CancellationToken::new();
        let resolving = RepositorySource::resolve(&source, &url, "main", &cancel);
        let err = tokio::time::timeout(std::time::Duration::from_secs(30), resolving)
            .await
            .expect("the fetch limit ends the request")
            .unwrap_err();

        assert!(started.elapsed() >= std::time::Duration::from_millis(1500));
        assert!(
            matches!(
                err,
                RepoError::Timeout {
                    action: "git fetch",
                    setting: FETCH_TIMEOUT_SETTING,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(err.failure_kind(), FailureKind::RepositoryUnavailable);
        let message = err.to_string();
        assert!(
            message.starts_with(&format!(
                "git fetch for repository {url} did not finish within 2 s"
            )),
            "{message}"
        );
        assert!(
            message.contains("raise `repositories.fetch_timeout_seconds`"),
            "{message}"
        );
        tokio::time::timeout(std::time::Duration::from_secs(30), silent)
            .await
            .expect("the connection is let go, no git process is left waiting on it")
            .unwrap();
    }

    #[test]
    fn one_process_at_a_time_owns_a_cache_directory() {
        let dir = tempfile::tempdir().unwrap();
        let first = GitRepositorySource::open(GitSourceConfig::new(dir.path())).unwrap();
        let err = GitRepositorySource::open(GitSourceConfig::new(dir.path())).unwrap_err();
        assert!(matches!(err, RepoError::CacheInUse { .. }), "{err}");
        assert!(err.to_string().contains("its own cache directory"), "{err}");
        drop(first);
        GitRepositorySource::open(GitSourceConfig::new(dir.path())).unwrap();
    }
}
