//! `verdict validate`: the protocols' parsers from the command line, for operators and scripts.

use std::path::PathBuf;
use std::process::ExitCode;

use verdict_proto::{ProtocolId, ValidateOptions, validate};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The output protocol to hold the response to.
    #[arg(long, value_parser = parse_protocol)]
    protocol: ProtocolId,
    /// For issue-analysis: the configured categories CATEGORY must be one of (comma-separated).
    #[arg(long, value_delimiter = ',')]
    categories: Option<Vec<String>>,
    /// Print the diagnostics as a JSON array instead of one line each.
    #[arg(long)]
    json_diagnostics: bool,
    /// The response to validate; `-` or nothing reads standard input.
    file: Option<PathBuf>,
}

pub(crate) fn parse_protocol(s: &str) -> Result<ProtocolId, String> {
    s.parse::<ProtocolId>().map_err(|e| e.to_string())
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let response = super::read_input(args.file.as_ref())?;
    let options = ValidateOptions {
        issue_categories: args.categories,
    };
    match validate(args.protocol, &options, &response) {
        Ok(value) => {
            super::print(&format!("{}\n", serde_json::to_string_pretty(&value)?))?;
            Ok(ExitCode::SUCCESS)
        }
        Err(diagnostics) => {
            if args.json_diagnostics {
                eprintln!("{}", serde_json::to_string_pretty(&diagnostics)?);
            } else {
                eprintln!(
                    "invalid {} response ({} problem{}):\n{diagnostics}",
                    args.protocol,
                    diagnostics.len(),
                    if diagnostics.len() == 1 { "" } else { "s" }
                );
            }
            Ok(ExitCode::FAILURE)
        }
    }
}
