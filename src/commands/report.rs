//! `verdict report`: the organisation report of finished scan tasks, fetched through the API
//! and written as `report.json` and a self-contained `report.html` (issue 10).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use verdict_client::client::ApiClient;
use verdict_client::report::{self, Member};

use super::ServerArgs;

#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("members").required(true).args(["tasks", "scan"])))]
pub(crate) struct Args {
    /// A scan task to include (repeat for each repository, in the order to list them).
    #[arg(long = "task", value_name = "ID")]
    tasks: Vec<String>,
    /// Every repository of this scan batch (`verdict scan` printed its id), in the batch's order.
    #[arg(long, value_name = "BATCH_ID", conflicts_with = "tasks")]
    scan: Option<String>,
    /// The directory to write `report.json` and `report.html` into (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The organisation the report is titled with; default: the batch's organisation, else the
    /// owner of the first repository's URL.
    #[arg(long, value_name = "NAME")]
    organisation: Option<String>,
    #[command(flatten)]
    server: ServerArgs,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let client = args.server.client()?;
    super::runtime()?.block_on(async {
        let (tasks, organisation) = match &args.scan {
            Some(batch) => {
                let doc = client
                    .scan_batch(batch)
                    .await
                    .with_context(|| format!("fetch scan batch {batch}"))?;
                let tasks: Vec<String> = doc.task_ids().into_iter().map(str::to_owned).collect();
                (tasks, args.organisation.clone().or(doc.organisation))
            }
            None => (args.tasks.clone(), args.organisation.clone()),
        };
        let written = write(&client, &tasks, organisation, &args.out).await?;
        super::print(&written.summary())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// What [`write`] wrote.
pub(crate) struct Written {
    repositories: usize,
    findings: usize,
    json: PathBuf,
    html: PathBuf,
}

impl Written {
    pub(crate) fn summary(&self) -> String {
        format!(
            "{} repositories, {} findings: {} and {}\n",
            self.repositories,
            self.findings,
            self.json.display(),
            self.html.display()
        )
    }
}

/// Fetches the scan tasks `tasks` through the API and writes their report, titled
/// `organisation` (default: the owner of the first repository), as `out/report.json` and
/// `out/report.html`.
pub(crate) async fn write(
    client: &ApiClient,
    tasks: &[String],
    organisation: Option<String>,
    out: &Path,
) -> anyhow::Result<Written> {
    if tasks.is_empty() {
        bail!("no scan task to report on (the batch has no member yet?)");
    }
    let mut members = Vec::with_capacity(tasks.len());
    for id in tasks {
        let document = client
            .task(id)
            .await
            .with_context(|| format!("fetch task {id}"))?;
        let Some(url) = document.repository.as_ref().map(|r| r.url.clone()) else {
            bail!("task {id} names no repository; a report lists repository scans");
        };
        members.push(Member {
            url,
            cost_usd: document.cost_usd,
            document,
        });
    }
    let organisation = organisation.unwrap_or_else(|| {
        members
            .first()
            .map(|m| report::repository_name(&m.url))
            .and_then(|name| name.split_once('/').map(|(owner, _)| owner.to_owned()))
            .unwrap_or_else(|| "organisation".to_owned())
    });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    let built = report::build(&organisation, &members, now);
    let page = report::html(&built)?;
    let json = serde_json::to_string_pretty(&built).context("serialise the report")?;
    std::fs::create_dir_all(out).with_context(|| format!("create {}", out.display()))?;
    let json_path = out.join("report.json");
    let html_path = out.join("report.html");
    std::fs::write(&json_path, json + "\n")
        .with_context(|| format!("write {}", json_path.display()))?;
    std::fs::write(&html_path, page).with_context(|| format!("write {}", html_path.display()))?;
    Ok(Written {
        repositories: built.totals.repositories,
        findings: built.totals.findings,
        json: json_path,
        html: html_path,
    })
}
