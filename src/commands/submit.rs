//! `verdict submit review | issue-analysis | scan`: hand a task to the scheduler's API and print
//! its id; with `--wait`, follow its progress (milestones on standard error) and print the
//! result, exiting 0 for completed/skipped/degraded and 1 for incomplete/aborted.

use std::process::ExitCode;

use anyhow::Context;
use verdict_api::document::PublicationState;
use verdict_api::document::TaskDocument;
use verdict_api::submission::{
    IssueAnalysisSubmission, IssueInput, ReviewSubmission, ScanSubmission, SubmissionOptions,
};
use verdict_client::client::ApiClient;
use verdict_client::milestone;
use verdict_proto::wire::Priority;

use super::tail::{self, Sink};
use super::{ChangeArgs, ServerArgs};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(subcommand)]
    kind: Kind,
}

#[derive(Debug, clap::Subcommand)]
enum Kind {
    /// Review a change of a repository (its base and head revisions), or a pull request by its
    /// URL (`--pr`).
    Review(ReviewArgs),
    /// Analyse an issue: category, priority, labels, assignees, duplicates.
    IssueAnalysis(IssueArgs),
    /// Scan a repository at a revision.
    Scan(ScanArgs),
}

#[derive(Debug, clap::Args)]
struct ReviewArgs {
    #[command(flatten)]
    change: ChangeArgs,
    /// `multi` (triage, summary, reviewers, validator) or `single` (one agentic review).
    #[arg(long, value_parser = ["multi", "single"])]
    pipeline: Option<String>,
    /// The change's title (the PR title).
    #[arg(long)]
    title: Option<String>,
    /// The change's description (the PR body).
    #[arg(long)]
    body: Option<String>,
    /// Number of reviewers in a multi-stage review.
    #[arg(long)]
    reviewers: Option<u8>,
    #[command(flatten)]
    options: OptionArgs,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Debug, clap::Args)]
struct IssueArgs {
    /// The issue's title.
    #[arg(long, required_unless_present = "issue", conflicts_with = "issue")]
    title: Option<String>,
    /// The issue's body.
    #[arg(long, default_value = "", conflicts_with = "issue")]
    body: String,
    /// The issue's number.
    #[arg(long, conflicts_with = "issue")]
    number: Option<u64>,
    /// The issue's current labels (comma-separated).
    #[arg(long, value_delimiter = ',', conflicts_with = "issue")]
    labels: Vec<String>,
    /// An issue's URL (`https://github.com/OWNER/REPO/issues/N`) instead of --title, --body,
    /// --number and --labels: the issue and its repository are read from GitHub.
    #[arg(long, value_name = "URL")]
    issue: Option<String>,
    /// Post the analysis to the issue (with --issue).
    #[arg(long, requires = "issue")]
    publish: bool,
    /// The repository the issue belongs to, so the analysis can look at its code.
    #[arg(long, value_name = "URL_OR_PATH")]
    repo: Option<String>,
    /// The revision to analyse against (default: `HEAD`, the repository's default branch).
    #[arg(long, value_name = "REV")]
    revision: Option<String>,
    /// The categories the analysis must choose from (comma-separated; default: configured).
    #[arg(long, value_delimiter = ',')]
    categories: Option<Vec<String>>,
    #[command(flatten)]
    options: OptionArgs,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    server: ServerArgs,
}

#[derive(Debug, clap::Args)]
struct ScanArgs {
    /// The repository: a git URL or a path the scheduler can read.
    #[arg(long, value_name = "URL_OR_PATH")]
    repo: String,
    /// The revision to scan: a SHA, a branch, a tag, `HEAD`, `origin/main`, `feature~1`…
    #[arg(long, value_name = "REV")]
    revision: String,
    #[command(flatten)]
    options: OptionArgs,
    #[command(flatten)]
    output: OutputArgs,
    #[command(flatten)]
    server: ServerArgs,
}

/// Per-task overrides of the configured defaults.
#[derive(Debug, clap::Args)]
struct OptionArgs {
    /// Output language: `en` or `zh-CN` (anything else falls back to zh-CN).
    #[arg(long)]
    language: Option<String>,
    /// Queue priority (scans default to bulk, everything else to interactive).
    #[arg(long, value_parser = ["interactive", "bulk"])]
    priority: Option<String>,
    /// The task's soft deadline in seconds (overrides `review_timeout_seconds`).
    #[arg(long, value_name = "SECONDS")]
    timeout_seconds: Option<u64>,
}

impl OptionArgs {
    fn into_options(self, reviewers: Option<u8>) -> anyhow::Result<SubmissionOptions> {
        let priority = self
            .priority
            .map(|p| serde_json::from_value::<Priority>(serde_json::Value::String(p)))
            .transpose()
            .context("parse --priority")?;
        Ok(SubmissionOptions {
            language: self.language,
            priority,
            timeout_seconds: self.timeout_seconds,
            reviewers,
            idempotency_key: None,
            organisation: None,
            past_backlog: false,
        })
    }
}

#[derive(Debug, clap::Args)]
struct OutputArgs {
    /// Follow the task until it ends (milestones on standard error), print the result and exit
    /// 0 (completed, skipped, degraded) or 1 (incomplete, aborted).
    #[arg(long)]
    wait: bool,
    /// Print JSON: `{"id": ...}`, or with --wait the whole task document.
    #[arg(long)]
    json: bool,
}

/// A submission ready to send.
enum Submission {
    Review(ReviewSubmission),
    IssueAnalysis(IssueAnalysisSubmission),
    Scan(ScanSubmission),
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (submission, output, server) = match args.kind {
        Kind::Review(a) => (
            Submission::Review(ReviewSubmission {
                pipeline: a.pipeline,
                title: a.title,
                body: a.body,
                options: a.options.into_options(a.reviewers)?,
                ..a.change.into_submission(|repo| repo)
            }),
            a.output,
            a.server,
        ),
        Kind::IssueAnalysis(a) => (
            Submission::IssueAnalysis(IssueAnalysisSubmission {
                repository: a.repo,
                revision: a.revision,
                issue: IssueInput {
                    number: a.number,
                    title: a.title.unwrap_or_default(),
                    body: a.body,
                    labels: a.labels,
                },
                issue_url: a.issue,
                publish: a.publish,
                categories: a.categories,
                options: a.options.into_options(None)?,
                ..Default::default()
            }),
            a.output,
            a.server,
        ),
        Kind::Scan(a) => (
            Submission::Scan(ScanSubmission {
                repository: a.repo,
                revision: a.revision,
                options: a.options.into_options(None)?,
            }),
            a.output,
            a.server,
        ),
    };
    let client = server.client()?;
    super::runtime()?.block_on(submit(&client, submission, output))
}

/// How long `--wait` waits for a publication to GitHub after the task ended.
const PUBLICATION_WAIT: std::time::Duration = std::time::Duration::from_secs(120);

/// The task's document once its publication (if it has one) has settled, or after
/// [`PUBLICATION_WAIT`]: publication runs after the end, so the final document says whether the
/// review was posted and where.
async fn settled(client: &ApiClient, id: &str) -> anyhow::Result<TaskDocument> {
    let deadline = tokio::time::Instant::now() + PUBLICATION_WAIT;
    loop {
        let doc = client
            .task(id)
            .await
            .with_context(|| format!("fetch the result of task {id}"))?;
        let pending = doc
            .publication
            .as_ref()
            .is_some_and(|p| p.state == PublicationState::Pending);
        if !pending || tokio::time::Instant::now() >= deadline {
            return Ok(doc);
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

async fn submit(
    client: &ApiClient,
    submission: Submission,
    output: OutputArgs,
) -> anyhow::Result<ExitCode> {
    let submitted = match &submission {
        Submission::Review(s) => client.submit_review(s).await,
        Submission::IssueAnalysis(s) => client.submit_issue_analysis(s).await,
        Submission::Scan(s) => client.submit_scan(s).await,
    }
    .context("submit the task")?;
    let id = submitted.id;
    if !output.wait {
        if output.json {
            super::print(&format!("{}\n", serde_json::json!({ "id": id })))?;
        } else {
            super::print(&format!("{id}\n"))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("Submitted task {id}");
    let end = tail::follow(client, &id, None, Sink::Stderr).await?;
    let doc = settled(client, &id).await?;
    if output.json {
        super::print(&format!("{}\n", serde_json::to_string_pretty(&doc)?))?;
    } else {
        super::print(&milestone::summary(&doc))?;
    }
    let state = if doc.state.is_terminal() {
        doc.state
    } else {
        end.state
    };
    Ok(super::exit_for_state(state))
}
