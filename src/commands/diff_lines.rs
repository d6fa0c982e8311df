//! `verdict diff-lines`: the diff safety zone (commentable new-side lines) of a unified diff.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The unified diff; `-` or nothing reads standard input.
    file: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let _diff = super::read_input(args.file.as_ref())?;
    anyhow::bail!("diff-lines lands with the diff parser")
}
