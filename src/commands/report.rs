//! `verdict report`: the organisation report of finished scan tasks, fetched through the API
//! and written as `report.json` and a self-contained `report.html` (issue 10).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use verdict_scheduler::report::{self, Member};

use super::ServerArgs;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// A scan task to include (repeat for each repository, in the order to list them).
    #[arg(long = "task", value_name = "ID", required = true)]
    tasks: Vec<String>,
    /// The directory to write `report.json` and `report.html` into (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The organisation the report is titled with; default: the owner of the first
    /// repository's URL.
    #[arg(long, value_name = "NAME")]
    organisation: Option<String>,
    #[command(flatten)]
    server: ServerArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let client = args.server.client()?;
    let members = super::runtime()?.block_on(async {
        let mut members = Vec::with_capacity(args.tasks.len());
        for id in &args.tasks {
            let document = client
                .task(id)
                .await
                .with_context(|| format!("fetch task {id}"))?;
            let Some(url) = document.repository.as_ref().map(|r| r.url.clone()) else {
                bail!("task {id} names no repository; a report lists repository scans");
            };
            members.push(Member {
                url,
                document,
                cost_usd: None,
            });
        }
        anyhow::Ok(members)
    })?;
    let organisation = args.organisation.clone().unwrap_or_else(|| {
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
    std::fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out.display()))?;
    let json_path = args.out.join("report.json");
    let html_path = args.out.join("report.html");
    std::fs::write(&json_path, json + "\n")
        .with_context(|| format!("write {}", json_path.display()))?;
    std::fs::write(&html_path, page).with_context(|| format!("write {}", html_path.display()))?;
    super::print(&format!(
        "{} repositories, {} findings: {} and {}\n",
        built.totals.repositories,
        built.totals.findings,
        json_path.display(),
        html_path.display()
    ))?;
    Ok(ExitCode::SUCCESS)
}
