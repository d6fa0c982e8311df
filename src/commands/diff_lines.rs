//! `verdict diff-lines`: the diff safety zone (commentable new-side lines) of a unified diff.

use std::path::PathBuf;
use std::process::ExitCode;

use verdict_proto::diff;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The unified diff (`git diff` or `diff -u` output); `-` or nothing reads standard input.
    file: Option<PathBuf>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let text = super::read_input(args.file.as_ref())?;
    let parsed = diff::parse(&text);
    // Malformed parts are skipped, not fatal: say so on stderr, keep stdout machine-readable.
    for w in &parsed.warnings {
        eprintln!("verdict: diff warning: {w}");
    }
    super::print(&format!(
        "{}\n",
        serde_json::to_string(&parsed.commentable())?
    ))?;
    Ok(ExitCode::SUCCESS)
}
