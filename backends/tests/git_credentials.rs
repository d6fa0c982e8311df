//! Git credentials for fetches over HTTPS, end to end through the real `git`: a fetch of
//! `https://git.example.test/acme/shop.git` (rewritten by `url.<base>.insteadOf` in a private
//! global config to a local repository, so no network is involved) gets the GitHub code host's
//! `Authorization` header through its environment, never through its argv; commands that do not
//! talk to the remote get nothing; no file under the cache directory holds the token; and a
//! credential lookup that fails is an error naming the host, retryable when the host may answer
//! later. A wrapper `git_program` logs what each git process was given.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use base64::Engine as _;
use tokio_util::sync::CancellationToken;
use verdict_backends::code_host::github::{GitHubAuth, GitHubCodeHost, GitHubConfig};
use verdict_backends::repo::{
    GitCredentials, GitRepositorySource, GitSourceConfig, RepoError, RepositorySource,
};
use verdict_backends::secret::Secret;
use verdict_proto::outcome::FailureKind;
use verdict_proto::wire::RepositoryRef;

const HOST: &str = "git.example.test";
const URL: &str = "https://git.example.test/acme/shop.git";
const TOKEN: &str = "test-token-for-git-fetches-0123";

/// A temporary world: the remote repository, a global git config rewriting the HTTPS host to it,
/// the wrapper that logs each git process, and the cache directory.
struct World {
    _dir: tempfile::TempDir,
    root: PathBuf,
    log: PathBuf,
    head: String,
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.test"])
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

impl World {
    fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let remote = root.join("repos/acme/shop.git");
        std::fs::create_dir_all(&remote).unwrap();
        git(&remote, &["init", "--quiet"]);
        std::fs::write(remote.join("README.md"), "shop\n").unwrap();
        git(&remote, &["add", "README.md"]);
        git(&remote, &["commit", "--quiet", "-m", "first"]);
        let head = git(&remote, &["rev-parse", "HEAD"]);

        std::fs::write(
            root.join("gitconfig"),
            format!(
                "[url \"{}/\"]\n\tinsteadOf = https://{HOST}/\n",
                root.join("repos").display()
            ),
        )
        .unwrap();
        let log = root.join("git.log");
        let wrapper = root.join("logging-git");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\n\
                 {{ printf 'argv:'; for a in \"$@\"; do printf ' %s' \"$a\"; done\n\
                 if [ -n \"${{GIT_CONFIG_VALUE_0+set}}\" ]; then\n\
                 printf ' | count=%s key=%s value=%s\\n' \"$GIT_CONFIG_COUNT\" \"$GIT_CONFIG_KEY_0\" \"$GIT_CONFIG_VALUE_0\"\n\
                 else printf ' | no header\\n'; fi; }} >> '{}'\n\
                 exec git \"$@\"\n",
                log.display()
            ),
        )
        .unwrap();
        Command::new("chmod")
            .arg("+x")
            .arg(&wrapper)
            .status()
            .unwrap();
        World {
            _dir: dir,
            root,
            log,
            head,
        }
    }

    fn config(&self, credentials: Arc<dyn GitCredentials>) -> GitSourceConfig {
        let mut config = GitSourceConfig::new(self.root.join("cache"));
        config.git_program = self.root.join("logging-git");
        config.env = vec![
            (
                "GIT_CONFIG_GLOBAL".to_owned(),
                self.root.join("gitconfig").display().to_string(),
            ),
            ("HOME".to_owned(), self.root.display().to_string()),
        ];
        config.credentials = Some(credentials);
        config
    }

    /// Each git process's argv and what it had in `GIT_CONFIG_*`, in order.
    fn processes(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

fn expected_header() -> String {
    format!(
        "Authorization: Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{TOKEN}"))
    )
}

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in walkdir::WalkDir::new(dir) {
        let entry = entry.unwrap();
        if entry.file_type().is_file() {
            let bytes = std::fs::read(entry.path()).unwrap();
            if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                found.push(entry.path().to_path_buf());
            }
        }
    }
    found
}

#[tokio::test]
async fn fetches_get_the_token_in_their_environment_only_and_nothing_is_stored() {
    let world = World::new();
    let code_host = GitHubCodeHost::new(GitHubConfig::new(
        format!("https://{HOST}/api/v3"),
        GitHubAuth::Token(Secret::new(TOKEN)),
    ))
    .unwrap();
    assert_eq!(code_host.git_hosts(), [HOST], "derived from the API URL");
    let config = world.config(Arc::new(code_host));
    let cache = config.cache_dir.clone();
    let source = tokio::task::spawn_blocking(move || GitRepositorySource::open(config))
        .await
        .unwrap()
        .unwrap();
    let cancel = CancellationToken::new();

    let sha = source.resolve(URL, "main", &cancel).await.unwrap();
    assert_eq!(
        sha, world.head,
        "the HTTPS URL reached the local repository"
    );
    let snapshot = source
        .snapshot(
            &RepositoryRef {
                url: URL.to_owned(),
                commit: "HEAD".to_owned(),
                base: None,
            },
            &cancel,
        )
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(snapshot.root().join("README.md")).unwrap(),
        "shop\n"
    );

    let processes = world.processes();
    let fetches: Vec<&String> = processes.iter().filter(|p| p.contains(" fetch ")).collect();
    assert!(
        fetches.len() >= 2,
        "every ref, then the remote HEAD: {processes:#?}"
    );
    let header = expected_header();
    for fetch in &fetches {
        assert!(
            fetch.ends_with(&format!(" | count=1 key=http.extraHeader value={header}")),
            "the header is in the fetch's environment: {fetch}"
        );
        let argv = fetch.split(" | ").next().unwrap();
        assert!(argv.contains(URL), "the URL is passed as typed: {argv}");
        assert!(
            !argv.contains(TOKEN)
                && !argv.contains(header.trim_start_matches("Authorization: Basic ")),
            "not on the command line: {argv}"
        );
    }
    let others: Vec<&String> = processes
        .iter()
        .filter(|p| !p.contains(" fetch "))
        .collect();
    assert!(
        others.iter().any(|p| p.contains(" rev-parse ")),
        "{processes:#?}"
    );
    assert!(
        others.iter().any(|p| p.contains(" archive ")),
        "{processes:#?}"
    );
    for other in others {
        assert!(
            other.ends_with(" | no header"),
            "only commands that talk to the remote get the header: {other}"
        );
    }

    let basic = header
        .trim_start_matches("Authorization: Basic ")
        .to_owned();
    for needle in [TOKEN, basic.as_str()] {
        assert_eq!(
            files_containing(&cache, needle),
            Vec::<PathBuf>::new(),
            "no file under the cache directory holds the credential"
        );
    }
}

#[tokio::test]
async fn a_failed_credential_lookup_names_the_host_and_runs_no_fetch() {
    let world = World::new();
    // An App whose API does not answer: the installation token cannot be had.
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let code_host = GitHubCodeHost::new(GitHubConfig {
        git_hosts: vec![HOST.to_owned()],
        timeout: std::time::Duration::from_secs(5),
        ..GitHubConfig::new(
            format!("http://127.0.0.1:{closed}/api/v3"),
            GitHubAuth::App {
                app_id: 7,
                private_key_pem: Secret::new(include_str!(
                    "../src/code_host/github/test-key-pkcs1.pem"
                )),
            },
        )
    })
    .unwrap();
    let config = world.config(Arc::new(code_host));
    let source = tokio::task::spawn_blocking(move || GitRepositorySource::open(config))
        .await
        .unwrap()
        .unwrap();

    let err = source
        .resolve(URL, "main", &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(err, RepoError::Credentials { .. }), "{err}");
    assert_eq!(
        err.failure_kind(),
        FailureKind::RepositoryUnavailable,
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains(HOST), "{text}");
    assert!(text.contains("can be retried"), "{text}");
    assert!(
        !world.processes().iter().any(|p| p.contains(" fetch ")),
        "no fetch without its credentials: {:#?}",
        world.processes()
    );
}

#[tokio::test]
async fn urls_the_credentials_do_not_serve_are_fetched_without_a_header() {
    let world = World::new();
    let code_host = GitHubCodeHost::new(GitHubConfig::new(
        "https://api.github.com",
        GitHubAuth::Token(Secret::new(TOKEN)),
    ))
    .unwrap();
    let config = world.config(Arc::new(code_host));
    let source = tokio::task::spawn_blocking(move || GitRepositorySource::open(config))
        .await
        .unwrap()
        .unwrap();
    let sha = source
        .resolve(URL, "main", &CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(sha, world.head);
    let processes = world.processes();
    assert!(processes.iter().any(|p| p.contains(" fetch ")));
    for process in processes {
        assert!(process.ends_with(" | no header"), "{process}");
    }
}

/// Issue 11: a fetch that began after a request was made answers it. A change between two
/// branch names fetches once, not once per name; a request made after that fetch fetches again
/// (a branch may have moved), and sees the branch where it moved to. A change already diffed is
/// not diffed again.
#[tokio::test]
async fn a_change_between_two_branch_names_fetches_once_and_a_later_request_fetches_again() {
    let world = World::new();
    let remote = world.root.join("repos/acme/shop.git");
    git(&remote, &["checkout", "--quiet", "-b", "feature"]);
    std::fs::write(remote.join("README.md"), "shop, with coupons\n").unwrap();
    git(&remote, &["commit", "--quiet", "-am", "coupons"]);
    let mut config = GitSourceConfig::new(world.root.join("cache"));
    config.git_program = world.root.join("logging-git");
    config.env = vec![
        (
            "GIT_CONFIG_GLOBAL".to_owned(),
            world.root.join("gitconfig").display().to_string(),
        ),
        ("HOME".to_owned(), world.root.display().to_string()),
    ];
    let source = GitRepositorySource::open(config).unwrap();
    let cancel = CancellationToken::new();
    let fetches = |world: &World| {
        world
            .processes()
            .iter()
            .filter(|p| p.contains(" fetch "))
            .count()
    };

    let change = source
        .change(URL, "main", "feature", &cancel)
        .await
        .unwrap();
    assert_eq!(change.base, world.head);
    assert!(
        change.diff.contains("+shop, with coupons"),
        "{}",
        change.diff
    );
    assert_eq!(
        fetches(&world),
        1,
        "one fetch for both names: {:#?}",
        world.processes()
    );

    std::fs::write(remote.join("README.md"), "shop, with coupons and tax\n").unwrap();
    git(&remote, &["commit", "--quiet", "-am", "tax"]);
    let moved = git(&remote, &["rev-parse", "HEAD"]);
    let again = source
        .change(URL, "main", "feature", &cancel)
        .await
        .unwrap();
    assert_eq!(
        again.head, moved,
        "the later request sees the branch where it moved"
    );
    assert_eq!(fetches(&world), 2);

    // The same change named by its commits: nothing is fetched or diffed again; the names are
    // checked once, and after that a review of the pair runs no git process at all.
    let by_commits = source
        .change(URL, &world.head, &moved, &cancel)
        .await
        .unwrap();
    assert_eq!(by_commits, again);
    let before = world.processes().len();
    let once_more = source
        .change(URL, &world.head, &moved, &cancel)
        .await
        .unwrap();
    assert_eq!(once_more, again);
    assert_eq!(
        world.processes().len(),
        before,
        "a change already diffed, between commits already checked, runs no git: {:#?}",
        &world.processes()[before..]
    );
    assert_eq!(fetches(&world), 2);
}
