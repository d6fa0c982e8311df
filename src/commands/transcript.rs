//! `verdict transcript`: why a stage did what it did — every message, tool call, raw response and
//! repair round of a task's attempts, as the workers recorded them (redacted), read through the
//! scheduler's API.

use std::process::ExitCode;

use anyhow::Context;

use super::ServerArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The task id (as `verdict submit` printed it).
    task: String,
    /// Only this stage's attempts (a stage id of the task, e.g. `summary` or `reviewer-1`).
    stage: Option<String>,
    /// Print the transcripts as the API returns them (JSON) instead of as text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: ServerArgs,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let client = args.server.client()?;
    let doc = super::runtime()?
        .block_on(client.transcripts(&args.task, args.stage.as_deref()))
        .with_context(|| match &args.stage {
            Some(stage) => format!("read the transcripts of task {} stage {stage}", args.task),
            None => format!("read the transcripts of task {}", args.task),
        })?;
    if args.json {
        super::print(&format!("{}\n", serde_json::to_string_pretty(&doc)?))?;
        return Ok(ExitCode::SUCCESS);
    }
    if doc.transcripts.is_empty() {
        super::print(&format!(
            "task {}: no transcripts stored (no attempt has ended yet, or they expired after transcript_ttl)\n",
            doc.task_id
        ))?;
        return Ok(ExitCode::SUCCESS);
    }
    let text: Vec<String> = doc.transcripts.iter().map(|t| t.to_text()).collect();
    super::print(&text.join("\n"))?;
    Ok(ExitCode::SUCCESS)
}
