//! The `verdict` binary: one artefact for the CLI, the scheduler and the workers.

use std::process::ExitCode;

use clap::Parser;

#[derive(Debug, Parser)]
#[command(name = "verdict", version, about = "AI code review as a distributed worker pool")]
enum Cli {}

fn main() -> ExitCode {
    let _ = Cli::parse();
    ExitCode::SUCCESS
}
