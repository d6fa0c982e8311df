//! `verdict scan`: scans at organisation scale (issue 10). `--org` scans an organisation's
//! repositories, `--manifest` the repositories a file lists, `--resume` drives an interrupted
//! batch on; `--repo` keeps the single-repository scan. The batch id is printed first, so the
//! scan can be resumed; then the batch is followed through the API (`GET /v1/scans/{id}`) with a
//! progress bar on standard error (done / running / failed / ETA), or, with `--json`, one JSON
//! event per line on standard output. Ctrl-C stops following only: the batch runs on in the
//! scheduler.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Deserialize;
use serde_json::json;
use verdict_api::batch::{BatchState, MemberState, ScanBatchDocument};
use verdict_api::submission::{
    ManifestEntry, ScanBatchSubmission, ScanSubmission, SubmissionOptions,
};
use verdict_client::client::ApiClient;

use super::ServerArgs;
use super::tail::{self, Sink};

#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("source").required(true).args(["org", "manifest", "resume", "repo"]))]
pub(crate) struct Args {
    /// Scan the repositories of this organisation (or user) on the configured GitHub.
    #[arg(long, value_name = "NAME")]
    org: Option<String>,
    /// Scan the repositories this file lists: JSON lines (`{"repository": URL, "ref": REV}`),
    /// or TOML (`[[repositories]]` tables with `repository` and `ref`) for a `.toml` file.
    #[arg(long, value_name = "FILE")]
    manifest: Option<PathBuf>,
    /// Follow (and drive on) the batch with this id, never scanning a finished repository again.
    #[arg(long, value_name = "ID")]
    resume: Option<String>,
    /// Scan one repository (a git URL or a path the scheduler can read), as `submit scan` does.
    #[arg(long, value_name = "URL_OR_PATH")]
    repo: Option<String>,
    /// Only repositories whose name matches one of these globs (`OWNER/NAME` when the pattern
    /// has a `/`). Repeatable.
    #[arg(long, value_name = "PAT", requires = "org")]
    include: Vec<String>,
    /// Leave out repositories whose name matches. Repeatable.
    #[arg(long, value_name = "PAT", requires = "org")]
    exclude: Vec<String>,
    /// Scan forks too (left out by default).
    #[arg(long, requires = "org")]
    forks: bool,
    /// Scan archived repositories too (left out by default).
    #[arg(long, requires = "org")]
    archived: bool,
    /// The revision to scan in every repository; by default each one's default branch.
    #[arg(long = "ref", value_name = "REV")]
    reference: Option<String>,
    /// `en` or `zh-CN`.
    #[arg(long)]
    language: Option<String>,
    /// Per-repository time limit, overriding `review_timeout_seconds`.
    #[arg(long, value_name = "SECONDS")]
    timeout_seconds: Option<u64>,
    /// Names the batch: the same key answers with the same batch.
    #[arg(long, value_name = "KEY")]
    idempotency_key: Option<String>,
    /// One JSON event per line on standard output instead of the progress bar.
    #[arg(long)]
    json: bool,
    /// When the batch has finished, write its organisation report (`report.json`,
    /// `report.html`) into this directory, as `verdict report --scan ID` does.
    #[arg(long, value_name = "DIR", conflicts_with = "repo")]
    report: Option<PathBuf>,
    /// How often the batch is read, in milliseconds.
    #[arg(long, default_value_t = 500, value_name = "MS")]
    poll_ms: u64,
    #[command(flatten)]
    server: ServerArgs,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let client = args.server.client()?;
    super::runtime()?.block_on(async move {
        tokio::select! {
            code = scan(&client, &args) => code,
            interrupted = tokio::signal::ctrl_c() => {
                interrupted.context("wait for Ctrl-C")?;
                eprintln!("\ninterrupted: the scan goes on in the scheduler; follow it again with `verdict scan --resume ID`");
                Ok(ExitCode::from(130))
            }
        }
    })
}

async fn scan(client: &ApiClient, args: &Args) -> anyhow::Result<ExitCode> {
    let options = SubmissionOptions {
        language: args.language.clone(),
        timeout_seconds: args.timeout_seconds,
        idempotency_key: args.idempotency_key.clone(),
        ..SubmissionOptions::default()
    };
    if let Some(repo) = &args.repo {
        return single(client, repo, args, options).await;
    }
    let id = match &args.resume {
        Some(id) => {
            client
                .resume_scan_batch(id)
                .await
                .with_context(|| format!("resume scan batch {id}"))?;
            id.clone()
        }
        None => {
            let submission = ScanBatchSubmission {
                organisation: args.org.clone(),
                manifest: args.manifest.as_ref().map(read_manifest).transpose()?,
                include: args.include.clone(),
                exclude: args.exclude.clone(),
                forks: args.forks,
                archived: args.archived,
                reference: args.reference.clone(),
                options,
            };
            client
                .submit_scan_batch(&submission)
                .await
                .context("submit the scan")?
                .id
        }
    };
    let mut out = Output::new(args.json);
    out.batch(&id)?;
    let (code, doc) = follow(
        client,
        &id,
        Duration::from_millis(args.poll_ms.max(50)),
        &mut out,
    )
    .await?;
    if let Some(dir) = &args.report {
        let tasks: Vec<String> = doc.task_ids().into_iter().map(str::to_owned).collect();
        let written = super::report::write(client, &tasks, doc.organisation.clone(), dir).await?;
        // Standard output carries the JSON events with --json; the report's paths go beside them.
        eprint!("report: {}", written.summary());
    }
    Ok(code)
}

/// The single-repository scan: one task, followed to its end like `submit scan --wait`.
async fn single(
    client: &ApiClient,
    repo: &str,
    args: &Args,
    options: SubmissionOptions,
) -> anyhow::Result<ExitCode> {
    let submission = ScanSubmission {
        repository: repo.to_owned(),
        revision: args.reference.clone().unwrap_or_else(|| "HEAD".to_owned()),
        options,
    };
    let id = client
        .submit_scan(&submission)
        .await
        .context("submit the scan")?
        .id;
    super::print(&format!("{id}\n"))?;
    tail::follow(client, &id, None, Sink::Stderr).await?;
    let doc = client
        .task(&id)
        .await
        .with_context(|| format!("fetch the result of task {id}"))?;
    if args.json {
        super::print(&format!("{}\n", serde_json::to_string(&doc)?))?;
    }
    Ok(super::exit_for_state(doc.state))
}

/// Reads a manifest: TOML for a `.toml` file, else JSON lines (blank lines and `#` comments
/// skipped).
fn read_manifest(path: &PathBuf) -> anyhow::Result<Vec<ManifestEntry>> {
    let text = super::read_input(Some(path))?;
    parse_manifest(&text, path.extension().is_some_and(|e| e == "toml"))
        .with_context(|| format!("read manifest {}", path.display()))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlManifest {
    repositories: Vec<ManifestEntry>,
}

fn parse_manifest(text: &str, toml: bool) -> anyhow::Result<Vec<ManifestEntry>> {
    let entries = if toml {
        toml::from_str::<TomlManifest>(text)
            .context("expected `[[repositories]]` tables with `repository` and optional `ref`")?
            .repositories
    } else {
        let mut entries = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let entry: ManifestEntry = serde_json::from_str(line).with_context(|| {
                format!(
                    "line {}: expected {{\"repository\": URL, \"ref\": REV}} (ref optional)",
                    n + 1
                )
            })?;
            entries.push(entry);
        }
        entries
    };
    if entries.is_empty() {
        bail!("the manifest lists no repository");
    }
    Ok(entries)
}

/// Polls the batch until it settles, showing each change.
async fn follow(
    client: &ApiClient,
    id: &str,
    every: Duration,
    out: &mut Output,
) -> anyhow::Result<(ExitCode, ScanBatchDocument)> {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let doc = client
            .scan_batch(id)
            .await
            .with_context(|| format!("read scan batch {id}"))?;
        out.update(&doc)?;
        if doc.is_settled() {
            out.finish(&doc)?;
            let clean = doc.state == BatchState::Finished && doc.counts.failed == 0;
            let code = if clean {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            };
            return Ok((code, doc));
        }
    }
}

/// The progress bar, or the JSON events.
struct Output {
    json: bool,
    bar: Option<ProgressBar>,
    /// What was last shown of each member (JSON: only changes are printed).
    members: BTreeMap<String, MemberState>,
    enumerated: bool,
    last_counts: Option<verdict_api::batch::Counts>,
}

impl Output {
    fn new(json: bool) -> Output {
        Output {
            json,
            bar: None,
            members: BTreeMap::new(),
            enumerated: false,
            last_counts: None,
        }
    }

    fn event(&self, value: serde_json::Value) -> anyhow::Result<()> {
        super::print(&format!("{value}\n"))
    }

    /// The batch id, first of all, so that an interrupted scan can be resumed.
    fn batch(&mut self, id: &str) -> anyhow::Result<()> {
        if self.json {
            return self.event(json!({"event": "batch", "id": id}));
        }
        super::print(&format!("{id}\n"))?;
        eprintln!("scan batch {id} (resume with `verdict scan --resume {id}`)");
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_message("enumerating repositories…");
        bar.enable_steady_tick(Duration::from_millis(120));
        self.bar = Some(bar);
        Ok(())
    }

    fn update(&mut self, doc: &ScanBatchDocument) -> anyhow::Result<()> {
        let enumerated = doc.state != BatchState::Enumerating;
        if enumerated && !self.enumerated {
            self.enumerated = true;
            if self.json {
                self.event(json!({
                    "event": "enumerated",
                    "total": doc.counts.total,
                    "skipped": doc.skipped,
                }))?;
            } else if let Some(bar) = &self.bar {
                bar.set_length(u64::try_from(doc.counts.total).unwrap_or(u64::MAX));
                bar.set_style(
                    ProgressStyle::with_template(
                        "[{elapsed_precise}] {bar:30} {pos}/{len} {msg} ETA {eta}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
                bar.reset_eta();
            }
        }
        for m in &doc.members {
            if self.members.get(&m.task_id) != Some(&m.state) {
                self.members.insert(m.task_id.clone(), m.state);
                if self.json {
                    self.event(json!({
                        "event": "member",
                        "repository": m.repository,
                        "task_id": m.task_id,
                        "state": m.state,
                        "task_state": m.task_state,
                        "reason": m.reason,
                    }))?;
                }
            }
        }
        let c = doc.counts;
        if self.last_counts != Some(c) {
            self.last_counts = Some(c);
            if self.json {
                self.event(json!({"event": "progress", "state": doc.state, "counts": c}))?;
            } else if let Some(bar) = &self.bar
                && enumerated
            {
                bar.set_position(u64::try_from(c.done + c.failed).unwrap_or(u64::MAX));
                bar.set_message(format!(
                    "done {} · running {} · failed {} · queued {}",
                    c.done, c.running, c.failed, c.queued
                ));
            }
        }
        Ok(())
    }

    fn finish(&mut self, doc: &ScanBatchDocument) -> anyhow::Result<()> {
        let c = doc.counts;
        if self.json {
            return self.event(json!({
                "event": "finished",
                "state": doc.state,
                "reason": doc.reason,
                "counts": c,
                "task_ids": doc.task_ids(),
                "estimate": doc.estimate,
                "over_budget": doc.over_budget,
            }));
        }
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        if doc.state == BatchState::Refused {
            eprintln!(
                "scan batch {} refused before anything was scanned: {}",
                doc.id,
                doc.reason.as_deref().unwrap_or("no reason given")
            );
            return Ok(());
        }
        eprintln!(
            "scan batch {} {}: {} repositories, {} done, {} failed, {} skipped{}",
            doc.id,
            doc.state.as_str(),
            c.total,
            c.done,
            c.failed,
            doc.skipped.len(),
            doc.reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        );
        if doc.over_budget > 0 {
            let reason = doc
                .members
                .iter()
                .find_map(|m| m.reason.as_deref().filter(|r| r.contains("budget")))
                .unwrap_or("the budget was reached");
            eprintln!(
                "stopped at its budget: {} of {} repositories were not scanned ({reason})",
                doc.over_budget, c.total
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn manifests_are_json_lines_or_toml() {
        let lines = "# ours\n{\"repository\": \"https://github.com/acme/a.git\"}\n\n{\"repository\": \"https://github.com/acme/b.git\", \"ref\": \"v1\"}\n";
        let entries = parse_manifest(lines, false).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[1].reference.as_deref(), Some("v1"));
        let toml =
            "[[repositories]]\nrepository = \"https://github.com/acme/a.git\"\nref = \"main\"\n";
        let entries = parse_manifest(toml, true).unwrap();
        assert_eq!(entries[0].reference.as_deref(), Some("main"));
        let bad = parse_manifest("{\"repo\": \"x\"}\n", false).unwrap_err();
        assert!(format!("{bad:#}").contains("line 1"), "{bad:#}");
        assert!(parse_manifest("# nothing\n", false).is_err());
    }
}
