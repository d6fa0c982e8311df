//! One module per CLI subcommand; each turns parsed arguments into an exit code.

pub(crate) mod contract;
pub(crate) mod dev;
pub(crate) mod diff_lines;
pub(crate) mod report;
pub(crate) mod scan;
pub(crate) mod scheduler;
pub(crate) mod submit;
pub(crate) mod tail;
pub(crate) mod transcript;
pub(crate) mod validate;
pub(crate) mod worker;

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use verdict_api::document::TaskState;
use verdict_client::client::ApiClient;

/// Exit code for usage errors (unknown protocol, unreadable input), as clap uses for bad flags.
pub(crate) fn exit_usage() -> ExitCode {
    ExitCode::from(2)
}

/// Reads `FILE`, or standard input for `-` or no argument, as UTF-8.
pub(crate) fn read_input(file: Option<&PathBuf>) -> anyhow::Result<String> {
    let (bytes, name) = match file {
        Some(p) if p.as_os_str() != "-" => (
            std::fs::read(p).with_context(|| {
                format!(
                    "read {}: check the path and that the file is readable",
                    p.display()
                )
            })?,
            p.display().to_string(),
        ),
        _ => {
            let mut buf = Vec::new();
            io::stdin()
                .read_to_end(&mut buf)
                .context("read standard input")?;
            (buf, "standard input".to_owned())
        }
    };
    match String::from_utf8(bytes) {
        Ok(s) => Ok(s),
        Err(e) => bail!(
            "{name} is not valid UTF-8 (first invalid byte at offset {}); convert it to UTF-8 first",
            e.utf8_error().valid_up_to()
        ),
    }
}

/// Writes `text` to standard output; a closed pipe is not an error worth a panic.
pub(crate) fn print(text: &str) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e).context("write standard output"),
        _ => Ok(()),
    }
}

/// What a review looks at, shared by `verdict submit review` and `verdict dev review`: a change
/// given by its repository and revisions, or a pull request given by its URL.
#[derive(Debug, clap::Args)]
pub(crate) struct ChangeArgs {
    /// The repository: a git URL or a path the scheduler can read.
    #[arg(
        long,
        value_name = "URL_OR_PATH",
        required_unless_present = "pr",
        conflicts_with = "pr"
    )]
    pub repo: Option<String>,
    /// The base revision of the change: a SHA, a branch, a tag, `HEAD`, `origin/main`,
    /// `feature~1`…
    #[arg(
        long,
        value_name = "REV",
        required_unless_present = "pr",
        conflicts_with = "pr"
    )]
    pub base: Option<String>,
    /// The head revision of the change.
    #[arg(
        long,
        value_name = "REV",
        required_unless_present = "pr",
        conflicts_with = "pr"
    )]
    pub head: Option<String>,
    /// A pull request's URL (`https://github.com/OWNER/REPO/pull/N`) instead of --repo, --base
    /// and --head: its head is reviewed against its base (needs `[github]` in the configuration).
    #[arg(long, value_name = "URL")]
    pub pr: Option<String>,
    /// Post the result to the pull request (with --pr).
    #[arg(long, requires = "pr")]
    pub publish: bool,
}

impl ChangeArgs {
    /// The submission's repository, base, head, pull request and publish fields; `repo` is
    /// mapped first (e.g. a local path made absolute).
    pub(crate) fn into_submission(
        self,
        repo: impl FnOnce(String) -> String,
    ) -> verdict_api::submission::ReviewSubmission {
        verdict_api::submission::ReviewSubmission {
            repository: self.repo.map(repo).unwrap_or_default(),
            base: self.base.unwrap_or_default(),
            head: self.head.unwrap_or_default(),
            pull_request: self.pr,
            publish: self.publish,
            ..Default::default()
        }
    }
}

/// Where the scheduler's API is and how to authenticate, shared by the commands that talk to it.
#[derive(Debug, clap::Args)]
pub(crate) struct ServerArgs {
    /// The scheduler's base URL.
    #[arg(
        long,
        env = "VERDICT_SERVER",
        default_value = "http://127.0.0.1:8080",
        value_name = "URL"
    )]
    server: String,
    /// The environment variable holding the API token (tokens never go on the command line,
    /// where other users could read them).
    #[arg(long, default_value = "VERDICT_API_TOKEN", value_name = "NAME")]
    token_env: String,
}

impl ServerArgs {
    /// A client of the server, with the token read from the named variable.
    pub(crate) fn client(&self) -> anyhow::Result<ApiClient> {
        let name = &self.token_env;
        let token = match std::env::var(name) {
            Ok(t) if !t.trim().is_empty() => t.trim().to_owned(),
            Ok(_) => bail!(
                "{name} is empty: set it to the scheduler's API token (or name another variable with --token-env)"
            ),
            Err(std::env::VarError::NotPresent) => bail!(
                "{name} is not set: set it to the scheduler's API token (or name another variable with --token-env)"
            ),
            Err(std::env::VarError::NotUnicode(_)) => bail!("{name} is not valid UTF-8"),
        };
        Ok(ApiClient::new(&self.server, Some(token))?)
    }
}

/// A runtime for the commands that talk to the API (one thread: they wait on the network).
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start the async runtime")
}

/// The exit code of a task that ended in `state`: 0 when it reached a decision or an explained
/// non-decision (completed, skipped, degraded), 1 when it did not (incomplete, aborted).
pub(crate) fn exit_for_state(state: TaskState) -> ExitCode {
    match state {
        TaskState::Completed | TaskState::Skipped | TaskState::Degraded => ExitCode::SUCCESS,
        TaskState::Incomplete | TaskState::Aborted | TaskState::Queued | TaskState::Running => {
            ExitCode::FAILURE
        }
    }
}
