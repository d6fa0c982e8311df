//! `verdict tail`: a task's progress as readable milestones, one line each, replayed and then
//! live until the task ends; exits like `verdict submit --wait`.

use std::process::ExitCode;

use anyhow::{Context, bail};
use verdict_client::client::{ApiClient, StreamItem};
use verdict_client::milestone::{self, Milestone};
use verdict_scheduler::api::StreamEnd;

use super::ServerArgs;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The task id (as `verdict submit` printed it).
    task: String,
    /// Resume after this event id instead of replaying from the start.
    #[arg(long, value_name = "EVENT_ID")]
    after: Option<String>,
    #[command(flatten)]
    server: ServerArgs,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let client = args.server.client()?;
    let end = super::runtime()?.block_on(follow(&client, &args.task, args.after, Sink::Stdout))?;
    super::print(&format!("{}\n", end_line(&args.task, &end)))?;
    Ok(super::exit_for_state(end.state))
}

/// Where milestone lines go: standard output for `tail`, standard error for `submit --wait`
/// (whose standard output is the result).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Sink {
    Stdout,
    Stderr,
}

impl Sink {
    fn write(self, line: &str) -> anyhow::Result<()> {
        match self {
            Sink::Stdout => super::print(&format!("{line}\n")),
            Sink::Stderr => {
                eprintln!("{line}");
                Ok(())
            }
        }
    }
}

/// Prints every event of `task` after `after` as a milestone line until the task ends; returns
/// how it ended.
pub(crate) async fn follow(
    client: &ApiClient,
    task: &str,
    after: Option<String>,
    sink: Sink,
) -> anyhow::Result<StreamEnd> {
    let mut events = client.events(task, after);
    while let Some(item) = events
        .next()
        .await
        .with_context(|| format!("follow the events of task {task}"))?
    {
        let line = match item {
            StreamItem::Event(stored) => milestone::line(&stored.event),
            StreamItem::Unknown { kind, data, .. } => unknown_line(&kind, &data),
            StreamItem::End(end) => return Ok(end),
        };
        sink.write(&line)?;
    }
    bail!("the event stream of task {task} ended without saying how the task ended")
}

/// An event type this build does not know (a newer server): its type as the title, and its
/// message and time when the data has them.
fn unknown_line(kind: &str, data: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(data).unwrap_or_default();
    let milestone = Milestone {
        title: kind.to_owned(),
        detail: value["message"].as_str().unwrap_or("").trim().to_owned(),
    };
    match value["at_unix_ms"].as_u64() {
        Some(at) => milestone.line(at),
        None if milestone.detail.is_empty() => milestone.title,
        None => format!("{} — {}", milestone.title, milestone.detail),
    }
}

/// The closing line: `Task t-1 completed`, with the reason when there is one.
pub(crate) fn end_line(task: &str, end: &StreamEnd) -> String {
    match end
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty())
    {
        Some(reason) => format!("Task {task} {} — {reason}", end.state.as_str()),
        None => format!("Task {task} {}", end.state.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_types_print_their_type() {
        assert_eq!(
            unknown_line(
                "budget-warning",
                r#"{"at_unix_ms": 3723000, "message": "80% of the budget"}"#
            ),
            "01:02:03 budget-warning — 80% of the budget"
        );
        assert_eq!(unknown_line("budget-warning", "not json"), "budget-warning");
    }
}
