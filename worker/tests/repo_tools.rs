//! Repository snapshots from real git repositories, and the read-only tools over them
//! (SPEC E1, R2): what a stage sees of a repository, and what it can never see.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use tempfile::TempDir;
use tokio_util::sync::CancellationToken;
use verdict_backends::repo::{
    GitRepositorySource, GitSourceConfig, RepoError, RepositorySource, Snapshot,
};
use verdict_proto::wire::{RepositoryRef, Tool};
use verdict_worker::tools::{ToolBox, ToolLimits, ToolOutput};

/// A throwaway git repository, isolated from the developer's git configuration.
struct Fixture {
    dir: TempDir,
    commits: Vec<String>,
}

impl Fixture {
    /// A repository with one commit per entry of `trees` (each a list of path → content; a
    /// content starting with `->` makes a symlink to the rest).
    fn new(trees: &[&[(&str, &str)]]) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let fixture = Fixture {
            dir,
            commits: Vec::new(),
        };
        std::fs::create_dir(fixture.repo()).unwrap();
        fixture.git(&["init", "--quiet", "--initial-branch=main"]);
        let mut fixture = fixture;
        for tree in trees {
            for entry in std::fs::read_dir(fixture.repo()).unwrap() {
                let entry = entry.unwrap();
                if entry.file_name() != ".git" {
                    let path = entry.path();
                    if path.is_dir() && !path.is_symlink() {
                        std::fs::remove_dir_all(path).unwrap();
                    } else {
                        std::fs::remove_file(path).unwrap();
                    }
                }
            }
            for (path, content) in *tree {
                let full = fixture.repo().join(path);
                std::fs::create_dir_all(full.parent().unwrap()).unwrap();
                match content.strip_prefix("->") {
                    Some(target) => std::os::unix::fs::symlink(target, &full).unwrap(),
                    None => std::fs::write(&full, content).unwrap(),
                }
            }
            fixture.git(&["add", "--all"]);
            fixture.git(&["commit", "--quiet", "--allow-empty", "-m", "commit"]);
            let sha = fixture.git(&["rev-parse", "HEAD"]);
            fixture.commits.push(sha);
        }
        fixture
    }

    fn two_commits() -> Fixture {
        Fixture::new(&[
            &[("a.txt", "first\n"), ("src/lib.rs", "fn one() {}\n")],
            &[
                ("a.txt", "second\n"),
                ("src/lib.rs", "fn two() {}\n"),
                ("docs/guide.md", "# Guide\n"),
            ],
        ])
    }

    fn repo(&self) -> PathBuf {
        self.dir.path().join("repo")
    }

    fn cache_dir(&self) -> PathBuf {
        self.dir.path().join("cache")
    }

    fn file_url(&self) -> String {
        format!("file://{}", self.repo().display())
    }

    fn local(&self) -> String {
        self.repo().display().to_string()
    }

    fn git(&self, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args([
                "-c",
                "commit.gpgsign=false",
                "-c",
                "core.hooksPath=/dev/null",
            ])
            .args(args)
            .current_dir(self.repo())
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("HOME", self.dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    }

    fn config(&self, max_bytes: u64) -> GitSourceConfig {
        let mut config = GitSourceConfig::new(self.cache_dir());
        config.max_snapshot_bytes = max_bytes;
        config.env = vec![
            ("HOME".into(), self.dir.path().display().to_string()),
            ("GIT_CONFIG_GLOBAL".into(), "/dev/null".into()),
        ];
        config
    }

    fn source(&self, max_bytes: u64) -> GitRepositorySource {
        GitRepositorySource::open(self.config(max_bytes)).unwrap()
    }

    fn snapshot_dirs(&self) -> usize {
        std::fs::read_dir(self.cache_dir().join("snapshots"))
            .unwrap()
            .count()
    }
}

fn reference(url: &str, commit: &str) -> RepositoryRef {
    RepositoryRef {
        url: url.to_owned(),
        commit: commit.to_owned(),
        base: None,
    }
}

async fn snapshot(
    source: &dyn RepositorySource,
    url: &str,
    commit: &str,
) -> Result<Snapshot, RepoError> {
    source
        .snapshot(&reference(url, commit), &CancellationToken::new())
        .await
}

fn read(snapshot: &Snapshot, path: &str) -> String {
    std::fs::read_to_string(snapshot.root().join(path)).unwrap()
}

fn has_git_dir(root: &Path) -> bool {
    walkdir::WalkDir::new(root)
        .into_iter()
        .any(|e| e.unwrap().file_name() == ".git")
}

// ---------------------------------------------------------------------------------------------
// Snapshots

#[tokio::test]
async fn each_commit_has_its_own_tree_and_no_history() {
    let fx = Fixture::two_commits();
    let source = fx.source(u64::MAX);
    for url in [fx.local(), fx.file_url()] {
        let one = snapshot(&source, &url, &fx.commits[0]).await.unwrap();
        let two = snapshot(&source, &url, &fx.commits[1]).await.unwrap();
        assert_eq!(read(&one, "a.txt"), "first\n");
        assert_eq!(read(&two, "a.txt"), "second\n");
        assert_eq!(read(&two, "docs/guide.md"), "# Guide\n");
        assert!(!one.root().join("docs").exists());
        assert_eq!(one.commit(), fx.commits[0]);
        assert!(!has_git_dir(one.root()) && !has_git_dir(two.root()));
        assert_eq!(one.root(), one.root().canonicalize().unwrap());
    }
    // Two URLs for the same repository are two cache keys: two trees per commit.
    assert_eq!(fx.snapshot_dirs(), 4);
}

/// A scan's intake lists a commit's files with sizes and git's binary test (SPEC S4, X4).
#[tokio::test]
async fn a_commit_lists_its_files_with_sizes_and_binaries() {
    let f = Fixture::new(&[&[
        ("src/lib.rs", "fn one() {}\n"),
        ("img/logo.png", "PNG\u{0}\u{1}\u{2}"),
        ("link", "->src/lib.rs"),
        ("vendor/x/y.go", "package y\n"),
    ]]);
    let source = f.source(u64::MAX);
    let cancel = CancellationToken::new();
    let files = source.files(&f.local(), "main", &cancel).await.unwrap();
    let listed: Vec<(&str, u64, bool, bool)> = files
        .iter()
        .map(|x| (x.path.as_str(), x.bytes, x.binary, x.symlink))
        .collect();
    assert_eq!(
        listed,
        [
            ("img/logo.png", 6, true, false),
            ("link", 10, false, true),
            ("src/lib.rs", 12, false, false),
            ("vendor/x/y.go", 10, false, false),
        ]
    );
    let missing = source
        .files(
            &f.local(),
            "0000000000000000000000000000000000000000",
            &cancel,
        )
        .await;
    assert!(
        matches!(missing, Err(RepoError::CommitNotFound { .. })),
        "{missing:?}"
    );
}

#[tokio::test]
async fn the_change_between_two_revisions_is_their_git_diff() {
    let f = Fixture::two_commits();
    let source = f.source(u64::MAX);
    let cancel = CancellationToken::new();
    let base_short = &f.commits[0][..10];
    let change = source
        .change(&f.local(), base_short, "main", &cancel)
        .await
        .unwrap();
    assert_eq!(change.base, f.commits[0], "revisions come back as full ids");
    assert_eq!(change.head, f.commits[1]);
    assert!(
        change.diff.contains("diff --git a/a.txt b/a.txt"),
        "{}",
        change.diff
    );
    assert!(
        change.diff.contains("-first\n+second") || change.diff.contains("-first\n+second\n"),
        "{}",
        change.diff
    );
    assert!(
        change.diff.contains("new file mode"),
        "docs/guide.md is added"
    );
    let parsed = verdict_proto::diff::parse(&change.diff);
    assert!(parsed.warnings.is_empty());
    assert_eq!(parsed.files.len(), 3);

    let missing = source
        .change(
            &f.local(),
            "0000000000000000000000000000000000000000",
            "main",
            &cancel,
        )
        .await;
    assert!(
        matches!(missing, Err(RepoError::CommitNotFound { .. })),
        "{missing:?}"
    );
}

#[tokio::test]
async fn a_change_starts_at_the_merge_base_as_a_pull_request_shows_it() {
    let f = Fixture::two_commits();
    // `feature` branches off the first commit and changes only src/lib.rs; `main` (the second
    // commit) changed a.txt meanwhile, which the feature must not appear to undo.
    f.git(&["checkout", "--quiet", "-b", "feature", &f.commits[0]]);
    std::fs::write(f.repo().join("src/lib.rs"), "fn feature() {}\n").unwrap();
    f.git(&["commit", "--quiet", "-am", "feature"]);
    let feature = f.git(&["rev-parse", "HEAD"]);
    let source = f.source(u64::MAX);

    let change = source
        .change(&f.local(), "main", "feature", &CancellationToken::new())
        .await
        .unwrap();

    assert_eq!(change.base, f.commits[0], "the merge base, not main's tip");
    assert_eq!(change.head, feature);
    let files: Vec<String> = verdict_proto::diff::parse(&change.diff)
        .files
        .iter()
        .filter_map(|file| file.path().map(str::to_owned))
        .collect();
    assert_eq!(files, ["src/lib.rs"], "{}", change.diff);
    assert!(change.diff.contains("+fn feature() {}"), "{}", change.diff);
}

#[tokio::test]
async fn abbreviated_shas_and_branches_share_the_cache_entry() {
    let fx = Fixture::two_commits();
    let source = fx.source(u64::MAX);
    let url = fx.file_url();
    let full = snapshot(&source, &url, &fx.commits[0]).await.unwrap();
    let short = snapshot(&source, &url, &fx.commits[0][..7]).await.unwrap();
    let upper = snapshot(&source, &url, &fx.commits[0].to_uppercase())
        .await
        .unwrap();
    assert_eq!(full.root(), short.root());
    assert_eq!(full.root(), upper.root());
    assert_eq!(short.commit(), fx.commits[0], "the commit is the full SHA");

    let main = snapshot(&source, &url, "main").await.unwrap();
    assert_eq!(main.commit(), fx.commits[1]);
    let stats = source.stats();
    assert_eq!((stats.materialised, stats.hits, stats.snapshots), (2, 2, 2));
    assert_eq!(fx.snapshot_dirs(), 2);
}

#[tokio::test]
async fn a_branch_is_fetched_again_when_it_moves() {
    let fx = Fixture::two_commits();
    let source = fx.source(u64::MAX);
    let url = fx.local();
    assert_eq!(
        snapshot(&source, &url, "main").await.unwrap().commit(),
        fx.commits[1]
    );
    std::fs::write(fx.repo().join("a.txt"), "third\n").unwrap();
    fx.git(&["commit", "--quiet", "-am", "third"]);
    let head = fx.git(&["rev-parse", "HEAD"]);
    let moved = snapshot(&source, &url, "main").await.unwrap();
    assert_eq!(moved.commit(), head);
    assert_eq!(read(&moved, "a.txt"), "third\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_for_one_commit_materialise_once() {
    let fx = Fixture::two_commits();
    let source = Arc::new(fx.source(u64::MAX));
    let url = fx.file_url();
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let source = Arc::clone(&source);
            let url = url.clone();
            // Half ask by full SHA, half by an abbreviation: still one tree.
            let commit = if i % 2 == 0 {
                fx.commits[0].clone()
            } else {
                fx.commits[0][..10].to_owned()
            };
            tokio::spawn(async move { snapshot(source.as_ref(), &url, &commit).await })
        })
        .collect();
    let mut roots = Vec::new();
    for task in tasks {
        roots.push(task.await.unwrap().unwrap().root().to_path_buf());
    }
    roots.dedup();
    assert_eq!(roots.len(), 1);
    assert_eq!(source.stats().materialised, 1);
    assert_eq!(fx.snapshot_dirs(), 1);
    let leftovers = std::fs::read_dir(fx.cache_dir().join("tmp"))
        .unwrap()
        .count();
    assert_eq!(leftovers, 0, "no half-built trees are left behind");
}

#[tokio::test]
async fn a_missing_commit_is_not_retryable() {
    let fx = Fixture::two_commits();
    let source = fx.source(u64::MAX);
    for commit in [
        "0".repeat(40),
        "deadbeef".to_owned(),
        "no-such-branch".to_owned(),
    ] {
        let err = snapshot(&source, &fx.file_url(), &commit)
            .await
            .unwrap_err();
        assert!(
            matches!(err, RepoError::CommitNotFound { .. }),
            "{commit}: {err}"
        );
        assert!(!err.is_retryable());
    }
    let err = snapshot(&source, &fx.local(), "main..HEAD")
        .await
        .unwrap_err();
    assert!(matches!(err, RepoError::InvalidRevision(_)), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Revisions as people type them

async fn resolve(
    source: &dyn RepositorySource,
    url: &str,
    revision: &str,
) -> Result<String, RepoError> {
    source
        .resolve(url, revision, &CancellationToken::new())
        .await
}

#[tokio::test]
async fn revisions_resolve_as_people_type_them() {
    let fx = Fixture::two_commits();
    let (first, second) = (fx.commits[0].clone(), fx.commits[1].clone());
    fx.git(&["tag", "--annotate", "v1.0", "--message", "v1.0", &first]);
    fx.git(&["tag", "light", &second]);
    fx.git(&["branch", "feature", &second]);
    let source = fx.source(u64::MAX);
    let url = fx.local();
    for (revision, expected) in [
        ("HEAD", &second),
        ("HEAD~1", &first),
        ("HEAD^", &first),
        ("main", &second),
        ("origin/main", &second),
        ("refs/remotes/origin/main", &second),
        ("origin/feature~1", &first),
        ("feature~1", &first),
        ("feature^1", &first),
        ("v1.0", &first),
        ("light", &second),
        ("refs/tags/v1.0", &first),
        (&first[..7], &first),
        (&second[..12], &second),
        (&second, &second),
        (&format!("{second}~1"), &first),
    ] {
        assert_eq!(
            &resolve(&source, &url, revision).await.unwrap(),
            expected,
            "{revision}"
        );
    }
    for revision in [
        "no-such-branch",
        "origin/no-such-branch",
        "HEAD~5",
        "v9",
        "upstream/main",
    ] {
        let err = resolve(&source, &url, revision).await.unwrap_err();
        assert!(
            matches!(err, RepoError::CommitNotFound { .. }),
            "{revision}: {err}"
        );
        assert!(
            err.to_string()
                .contains(&format!("revision `{revision}` was not found")),
            "{err}"
        );
    }

    // The same syntax for both ends of a change.
    let change = source
        .change(&url, "v1.0", "HEAD", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!((change.base, change.head), (first.clone(), second.clone()));
}

#[tokio::test]
async fn head_is_the_remotes_default_branch_as_it_is_now() {
    let fx = Fixture::two_commits();
    let source = fx.source(u64::MAX);
    let url = fx.file_url();
    assert_eq!(resolve(&source, &url, "HEAD").await.unwrap(), fx.commits[1]);
    // The remote's HEAD moves to another branch: the mirror follows, whatever its own HEAD.
    fx.git(&["checkout", "--quiet", "-b", "older", &fx.commits[0]]);
    assert_eq!(resolve(&source, &url, "HEAD").await.unwrap(), fx.commits[0]);
    let snap = snapshot(&source, &url, "HEAD").await.unwrap();
    assert_eq!(snap.commit(), fx.commits[0]);
    assert_eq!(read(&snap, "a.txt"), "first\n");
}

#[tokio::test]
async fn a_remote_without_a_head_still_serves_its_branches() {
    let fx = Fixture::two_commits();
    let bare = fx.dir.path().join("bare.git");
    fx.git(&["init", "--quiet", "--bare", bare.to_str().unwrap()]);
    fx.git(&["push", "--quiet", bare.to_str().unwrap(), "main"]);
    fx.git(&[
        "--git-dir",
        bare.to_str().unwrap(),
        "symbolic-ref",
        "HEAD",
        "refs/heads/gone",
    ]);
    let source = fx.source(u64::MAX);
    let url = bare.display().to_string();
    let err = resolve(&source, &url, "HEAD").await.unwrap_err();
    assert!(matches!(err, RepoError::CommitNotFound { .. }), "{err}");
    assert!(!err.is_retryable());
    assert_eq!(resolve(&source, &url, "main").await.unwrap(), fx.commits[1]);
    assert_eq!(
        resolve(&source, &url, "main~1").await.unwrap(),
        fx.commits[0]
    );
}

#[tokio::test]
async fn option_like_revisions_are_refused_before_any_process_runs() {
    let fx = Fixture::two_commits();
    let mut config = fx.config(u64::MAX);
    // Any git process would fail with GitNotInstalled; a refusal must come first.
    config.git_program = fx.dir.path().join("no-such-git");
    let source = GitRepositorySource::open(config).unwrap();
    for revision in [
        "--upload-pack=touch /tmp/pwned",
        "-x",
        "main..feature",
        "main@{1}",
        "main:secret",
        "a b",
        "feat*",
        "a\\b",
        "v1.0^{commit}",
    ] {
        let err = resolve(&source, &fx.local(), revision).await.unwrap_err();
        assert!(
            matches!(err, RepoError::InvalidRevision(_)),
            "{revision}: {err}"
        );
        let err = source
            .change(&fx.local(), "main", revision, &CancellationToken::new())
            .await
            .unwrap_err();
        assert!(
            matches!(err, RepoError::InvalidRevision(_)),
            "{revision}: {err}"
        );
    }
    let err = resolve(&source, &fx.local(), "main").await.unwrap_err();
    assert!(matches!(err, RepoError::GitNotInstalled { .. }), "{err}");
}

#[tokio::test]
async fn a_missing_repository_is_not_retryable() {
    let fx = Fixture::two_commits();
    let source = fx.source(u64::MAX);
    let missing = fx.dir.path().join("nowhere");
    for url in [
        missing.display().to_string(),
        format!("file://{}", missing.display()),
        fx.repo().join("a.txt").display().to_string(),
    ] {
        let err = snapshot(&source, &url, "main").await.unwrap_err();
        assert!(
            matches!(err, RepoError::RepositoryNotFound { .. }),
            "{url}: {err}"
        );
        assert!(!err.is_retryable());
    }
}

#[tokio::test]
async fn an_unreachable_host_is_retryable_and_its_credentials_stay_secret() {
    let fx = Fixture::two_commits();
    let source = fx.source(u64::MAX);
    // Port 1 on loopback refuses at once: no network needed.
    let url = "https://user:s3cr3t-token@127.0.0.1:1/o/r.git";
    let err = snapshot(&source, url, "main").await.unwrap_err();
    assert!(matches!(err, RepoError::Unreachable { .. }), "{err}");
    assert!(err.is_retryable());
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("s3cr3t"), "{shown}");
    assert!(
        shown.contains("https://user:[REDACTED]@127.0.0.1:1/o/r.git"),
        "{shown}"
    );
    // Nothing on disk holds the token either.
    for entry in walkdir::WalkDir::new(fx.cache_dir()) {
        let entry = entry.unwrap();
        if entry.file_type().is_file() {
            let bytes = std::fs::read(entry.path()).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains("s3cr3t"),
                "{}",
                entry.path().display()
            );
        }
    }
}

#[tokio::test]
async fn export_attributes_do_not_hide_or_rewrite_files() {
    let fx = Fixture::new(&[&[
        (
            ".gitattributes",
            "hidden.txt export-ignore\nsubst.txt export-subst\n",
        ),
        ("hidden.txt", "still here\n"),
        ("subst.txt", "$Format:%H$\n"),
    ]]);
    let source = fx.source(u64::MAX);
    let snap = snapshot(&source, &fx.local(), "main").await.unwrap();
    assert_eq!(read(&snap, "hidden.txt"), "still here\n");
    assert_eq!(read(&snap, "subst.txt"), "$Format:%H$\n");
}

/// Three commits whose trees are each 1000 bytes of `big.txt`.
fn three_sized_commits() -> Fixture {
    let a = "a".repeat(1000);
    let b = "b".repeat(1000);
    let c = "c".repeat(1000);
    Fixture::new(&[&[("big.txt", &a)], &[("big.txt", &b)], &[("big.txt", &c)]])
}

#[tokio::test]
async fn the_cache_evicts_least_recently_used_snapshots_nobody_holds() {
    let fx = three_sized_commits();
    let source = fx.source(2500);
    let url = fx.local();
    let held = snapshot(&source, &url, &fx.commits[0]).await.unwrap();
    let second = snapshot(&source, &url, &fx.commits[1]).await.unwrap();
    let second_root = second.root().to_path_buf();
    drop(second);
    let third = snapshot(&source, &url, &fx.commits[2]).await.unwrap();
    assert!(held.root().is_dir(), "a held snapshot is never evicted");
    assert!(!second_root.exists(), "the unheld LRU snapshot was evicted");
    assert!(third.root().is_dir());
    assert_eq!(source.stats().bytes, 2000);
    assert_eq!(source.stats().evicted, 1);

    // Released first is least recently used now.
    let first_root = held.root().to_path_buf();
    drop(held);
    drop(third);
    let again = snapshot(&source, &url, &fx.commits[1]).await.unwrap();
    assert_eq!(read(&again, "big.txt"), "b".repeat(1000));
    assert!(!first_root.exists());
    assert_eq!(source.stats().snapshots, 2);
}

#[tokio::test]
async fn a_snapshot_larger_than_the_budget_is_served_then_evicted() {
    let fx = three_sized_commits();
    let source = fx.source(100);
    let big = snapshot(&source, &fx.local(), &fx.commits[0])
        .await
        .unwrap();
    assert_eq!(read(&big, "big.txt").len(), 1000);
    let copy = big.clone();
    let root = big.root().to_path_buf();
    drop(big);
    assert!(root.is_dir(), "a clone still holds it");
    drop(copy);
    assert!(!root.exists());
    assert_eq!(source.stats().bytes, 0);
}

#[tokio::test]
async fn a_restarted_source_finds_the_snapshots_already_there() {
    let fx = Fixture::two_commits();
    let url = fx.file_url();
    let first_roots = {
        let source = fx.source(u64::MAX);
        let one = snapshot(&source, &url, &fx.commits[0]).await.unwrap();
        let two = snapshot(&source, &url, &fx.commits[1]).await.unwrap();
        (one.root().to_path_buf(), two.root().to_path_buf())
    };
    let restarted = fx.source(u64::MAX);
    let stats = restarted.stats();
    assert_eq!(stats.snapshots, 2);
    assert!(stats.bytes > 0);
    let one = snapshot(&restarted, &url, &fx.commits[0]).await.unwrap();
    let two = snapshot(&restarted, &url, &fx.commits[1][..8])
        .await
        .unwrap();
    assert_eq!(
        (one.root().to_path_buf(), two.root().to_path_buf()),
        first_roots
    );
    let stats = restarted.stats();
    assert_eq!((stats.materialised, stats.hits), (0, 2));

    // A smaller bound on restart evicts down to it, least recently used first (the mtime order:
    // `two` was released last).
    let total = restarted.stats().bytes;
    drop((one, two));
    drop(restarted);
    let tight = fx.source(total - 1);
    assert_eq!(tight.stats().snapshots, 1);
    assert!(!first_roots.0.exists());
    assert!(first_roots.1.is_dir());
}

// ---------------------------------------------------------------------------------------------
// Tools over a snapshot

const SECRET: &str = "TOP SECRET OUTSIDE";

/// A snapshot of a repository with inside and outside symlinks, big files and a big directory;
/// files named `outside.txt` holding [`SECRET`] sit where the escaping symlinks point.
struct ToolFixture {
    fx: Fixture,
    _source: GitRepositorySource,
    tools: ToolBox,
}

impl ToolFixture {
    async fn new(allowed: &[Tool]) -> ToolFixture {
        let lib = "pub fn parse() {}\n// TODO: tests\npub fn render() {}\n".to_owned();
        let big: String = (1..=3000).map(|i| format!("needle {i}\n")).collect();
        let many: Vec<(String, String)> = (0..1200)
            .map(|i| (format!("many/f{i:04}.txt"), "x\n".to_owned()))
            .collect();
        let mut tree: Vec<(&str, &str)> = vec![
            ("src/lib.rs", lib.as_str()),
            ("docs/guide.md", "# Guide\nTODO: write\n"),
            ("big.txt", big.as_str()),
            ("link_in", "->src/lib.rs"),
            ("src/link_dir_in", "->../docs"),
            ("link_abs", "->/etc/passwd"),
            ("link_up", "->../../outside.txt"),
            ("src/link_up_deep", "->../../../../outside.txt"),
            ("link_dir_out", "->../../.."),
        ];
        tree.extend(many.iter().map(|(p, c)| (p.as_str(), c.as_str())));
        let fx = Fixture::new(&[&tree]);
        let source = fx.source(u64::MAX);
        let snap = snapshot(&source, &fx.local(), "main").await.unwrap();
        // Make every escape target exist, so a leak would show.
        let root = snap.root().to_path_buf();
        std::fs::write(root.join("../../outside.txt"), SECRET).unwrap();
        std::fs::write(root.join("../../../outside.txt"), SECRET).unwrap();
        std::fs::write(fx.dir.path().join("outside.txt"), SECRET).unwrap();
        let tools = ToolBox::new(snap, allowed, ToolLimits::default());
        ToolFixture {
            fx,
            _source: source,
            tools,
        }
    }

    async fn call(&self, name: &str, arguments: serde_json::Value) -> ToolOutput {
        let output = self.tools.call(name, &arguments.to_string()).await;
        assert!(
            !output.content.contains(SECRET),
            "{name} {arguments}: leaked"
        );
        let root = self.tools.snapshot().root().display().to_string();
        assert!(
            !output.content.contains(&root),
            "{name} {arguments}: the snapshot path leaked"
        );
        assert!(
            !output
                .content
                .contains(&self.fx.dir.path().display().to_string())
        );
        output
    }
}

fn assert_refused(output: &ToolOutput, what: &str) {
    assert!(output.is_error, "{what}: {}", output.content);
}

#[tokio::test]
async fn the_tools_refuse_every_way_out_of_the_snapshot() {
    let t = ToolFixture::new(&Tool::READ_ONLY).await;
    let hostile = [
        "../x",
        "../../outside.txt",
        "src/../../outside.txt",
        "/etc/passwd",
        "link_abs",
        "link_up",
        "src/link_up_deep",
        "link_dir_out",
        "link_dir_out/outside.txt",
        "src/lib.rs\u{0}",
    ];
    for path in hostile {
        let read = t.call("read", serde_json::json!({ "path": path })).await;
        assert_refused(&read, &format!("read {path}"));
        let ls = t.call("ls", serde_json::json!({ "path": path })).await;
        assert_refused(&ls, &format!("ls {path}"));
        let find = t
            .call("find", serde_json::json!({ "glob": "*", "path": path }))
            .await;
        assert_refused(&find, &format!("find {path}"));
        let grep = t
            .call("grep", serde_json::json!({ "pattern": ".", "path": path }))
            .await;
        assert_refused(&grep, &format!("grep {path}"));
    }

    // Outside-and-existing reads exactly like missing.
    let outside = t
        .call("read", serde_json::json!({ "path": "link_up" }))
        .await;
    let missing = t.call("read", serde_json::json!({ "path": "nope" })).await;
    assert_eq!(
        outside.content.replace("link_up", "P"),
        missing.content.replace("nope", "P")
    );
    let absolute = t
        .call("read", serde_json::json!({ "path": "/etc/passwd" }))
        .await;
    assert!(
        absolute.content.contains("absolute path"),
        "{}",
        absolute.content
    );
    let dotdot = t.call("read", serde_json::json!({ "path": "../x" })).await;
    assert!(dotdot.content.contains("`..`"), "{}", dotdot.content);

    // Walks list links as names and never enter or read through them.
    let everything = t
        .call("grep", serde_json::json!({ "pattern": "SECRET|root:" }))
        .await;
    assert!(
        everything.content.starts_with("no matches"),
        "{}",
        everything.content
    );
    let links = t
        .call("find", serde_json::json!({ "glob": "*link*" }))
        .await;
    assert_eq!(
        links.content,
        "link_abs\nlink_dir_out\nlink_in\nlink_up\nsrc/link_dir_in\nsrc/link_up_deep"
    );
    let through = t
        .call("find", serde_json::json!({ "glob": "**/outside.txt" }))
        .await;
    assert!(
        through.content.starts_with("no paths match"),
        "{}",
        through.content
    );
}

#[tokio::test]
async fn the_tools_work_inside_the_snapshot() {
    let t = ToolFixture::new(&Tool::READ_ONLY).await;
    let read = t
        .call("read", serde_json::json!({ "path": "src/lib.rs" }))
        .await;
    assert_eq!(
        read.content,
        "1\tpub fn parse() {}\n2\t// TODO: tests\n3\tpub fn render() {}"
    );
    let via_link = t
        .call(
            "read",
            serde_json::json!({ "path": "link_in", "offset": 2, "limit": 1 }),
        )
        .await;
    assert_eq!(
        via_link.content,
        "2\t// TODO: tests\n[lines 2-2 of 3 shown; call read with offset=3 to see more]"
    );
    let via_dir_link = t
        .call(
            "read",
            serde_json::json!({ "path": "src/link_dir_in/guide.md" }),
        )
        .await;
    assert_eq!(via_dir_link.content, "1\t# Guide\n2\tTODO: write");

    let grep = t
        .call(
            "grep",
            serde_json::json!({ "pattern": "todo", "case_insensitive": true, "glob": "*.{rs,md}" }),
        )
        .await;
    assert_eq!(
        grep.content,
        "docs/guide.md:2:TODO: write\nsrc/lib.rs:2:// TODO: tests"
    );
    let grep_dir = t
        .call(
            "grep",
            serde_json::json!({ "pattern": "^pub fn \\w+", "path": "src" }),
        )
        .await;
    assert_eq!(
        grep_dir.content,
        "src/lib.rs:1:pub fn parse() {}\nsrc/lib.rs:3:pub fn render() {}"
    );

    let find = t.call("find", serde_json::json!({ "glob": "*.md" })).await;
    assert_eq!(find.content, "docs/guide.md");
    let find_src = t
        .call("find", serde_json::json!({ "glob": "**", "path": "src" }))
        .await;
    assert_eq!(
        find_src.content,
        "src/lib.rs\nsrc/link_dir_in\nsrc/link_up_deep"
    );

    let ls = t.call("ls", serde_json::json!({})).await;
    assert_eq!(
        ls.content,
        "big.txt\ndocs/\nlink_abs@\nlink_dir_out@\nlink_in@\nlink_up@\nmany/\nsrc/"
    );
    let ls_src = t.call("ls", serde_json::json!({ "path": "src/" })).await;
    assert_eq!(ls_src.content, "lib.rs\nlink_dir_in@\nlink_up_deep@");
    let ls_via_link = t
        .call("ls", serde_json::json!({ "path": "src/link_dir_in" }))
        .await;
    assert_eq!(ls_via_link.content, "guide.md");
    for output in [read, grep, find, ls] {
        assert!(!output.is_error && !output.truncated);
    }
}

#[tokio::test]
async fn every_tool_says_when_and_how_it_truncated() {
    let t = ToolFixture::new(&Tool::READ_ONLY).await;
    let read = t
        .call("read", serde_json::json!({ "path": "big.txt" }))
        .await;
    assert!(read.truncated && !read.is_error);
    assert_eq!(read.content.lines().count(), 2001);
    assert!(
        read.content.ends_with(
            "[truncated: lines 1-2000 of 3000 shown (at most 2000 lines per call); call read with offset=2001 to continue]"
        ),
        "{}",
        read.content.lines().last().unwrap()
    );
    let rest = t
        .call(
            "read",
            serde_json::json!({ "path": "big.txt", "offset": 2001 }),
        )
        .await;
    assert!(!rest.truncated);
    assert!(rest.content.starts_with("2001\tneedle 2001\n"));
    assert!(rest.content.ends_with("3000\tneedle 3000"));

    let grep = t
        .call("grep", serde_json::json!({ "pattern": "needle" }))
        .await;
    assert!(grep.truncated);
    assert_eq!(grep.content.lines().count(), 201);
    assert!(grep.content.starts_with("big.txt:1:needle 1\n"));
    assert!(grep.content.ends_with(
        "[truncated: 200 of 3000 matches shown (at most 200 per call); narrow the pattern, the glob or the path]"
    ));

    let find = t.call("find", serde_json::json!({ "glob": "*.txt" })).await;
    assert!(find.truncated);
    assert!(find.content.ends_with(
        "[truncated: 1000 of 1201 paths shown (at most 1000 per call); narrow the glob or the path]"
    ), "{}", find.content.lines().last().unwrap());

    let ls = t.call("ls", serde_json::json!({ "path": "many" })).await;
    assert!(ls.truncated);
    assert_eq!(ls.content.lines().count(), 1001);
    assert!(ls.content.ends_with(
        "[truncated: 1000 of 1200 entries shown; use find with a glob to narrow the listing]"
    ));
    for output in [&read, &grep, &find, &ls] {
        assert!(output.content.len() <= ToolLimits::default().max_output_bytes);
    }
}

#[tokio::test]
async fn the_allowlist_decides_what_exists() {
    let t = ToolFixture::new(&[Tool::Read, Tool::Ls]).await;
    let names: Vec<_> = t.tools.definitions().into_iter().map(|d| d.name).collect();
    assert_eq!(names, ["read", "ls"]);
    let grep = t.call("grep", serde_json::json!({ "pattern": "x" })).await;
    assert!(grep.is_error);
    assert!(
        grep.content
            .contains("not available in this stage; the available tools are: read, ls"),
        "{}",
        grep.content
    );
}
