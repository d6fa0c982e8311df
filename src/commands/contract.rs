//! `verdict contract`: print the exact contract text a protocol's prompts show.

use std::process::ExitCode;

use verdict_proto::contract::contract_text;
use verdict_proto::{Language, ProtocolId};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The output protocol.
    #[arg(long, value_parser = super::validate::parse_protocol)]
    protocol: ProtocolId,
    /// Output language; normalised as configured languages are (anything unrecognised is zh-CN).
    #[arg(long, default_value = "en")]
    lang: String,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let language = Language::recognise(&args.lang).unwrap_or_else(|| {
        eprintln!(
            "verdict: language `{}` is not en or zh-CN; falling back to zh-CN",
            args.lang
        );
        Language::ZhCn
    });
    super::print(&contract_text(args.protocol, language))?;
    Ok(ExitCode::SUCCESS)
}
