//! The `verdict` binary: one artefact for the CLI, the scheduler and the workers.
//!
//! Thin by design: argument parsing, exit codes, signals and log setup live here; the wiring of
//! processes is the `verdict` library (`src/lib.rs`), behaviour lives in the crates.

mod commands;
mod process;
mod telemetry;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "verdict",
    version,
    about = "AI code review as a distributed, queue-driven worker pool"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Hold a model response to an output protocol: print its canonical JSON (exit 0) or every
    /// diagnostic (exit 1).
    Validate(commands::validate::Args),
    /// Print the commentable new-side lines of a unified diff as JSON.
    DiffLines(commands::diff_lines::Args),
    /// Print the output contract a protocol's prompts show.
    Contract(commands::contract::Args),
    /// Submit a review, issue analysis or scan to the scheduler; with --wait, follow it to the
    /// end and exit 0 (completed, skipped, degraded) or 1 (incomplete, aborted).
    Submit(commands::submit::Args),
    /// Scan an organisation's repositories (`--org`), a manifest's (`--manifest`) or one
    /// (`--repo`) at bulk priority, with live progress; `--resume ID` follows an interrupted
    /// scan again without redoing finished repositories.
    Scan(commands::scan::Args),
    /// Follow a task's progress as readable milestones until it ends.
    Tail(commands::tail::Args),
    /// Show a task's transcripts (of one stage, or all): every message, tool call, raw response
    /// and repair round in full, secrets redacted.
    Transcript(commands::transcript::Args),
    /// Write the organisation report (report.json, report.html) of finished scan tasks.
    Report(commands::report::Args),
    /// Run the scheduler: the HTTP API, pipelines, results and sweeper (RabbitMQ + Redis).
    Scheduler(commands::scheduler::Args),
    /// Run a worker: consume stage requests and execute them (RabbitMQ + Redis).
    Worker(commands::worker::Args),
    /// Run the scheduler and workers in one process on in-memory backends; `dev review` runs
    /// one review to its end.
    Dev(commands::dev::Args),
}

fn main() -> ExitCode {
    // Every TLS client of the process — the providers', GitHub's, Redis's, the OTLP exporter's —
    // is built on rustls without a default provider: ring is chosen once, here, before any of
    // them (an exporter built without one panics in its client thread).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Validate(args) => commands::validate::run(args),
        Command::DiffLines(args) => commands::diff_lines::run(args),
        Command::Contract(args) => commands::contract::run(args),
        Command::Submit(args) => commands::submit::run(args),
        Command::Scan(args) => commands::scan::run(args),
        Command::Tail(args) => commands::tail::run(args),
        Command::Transcript(args) => commands::transcript::run(args),
        Command::Report(args) => commands::report::run(args),
        Command::Scheduler(args) => commands::scheduler::run(args),
        Command::Worker(args) => commands::worker::run(args),
        Command::Dev(args) => commands::dev::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("verdict: {e:#}");
            commands::exit_usage()
        }
    }
}
