//! One module per CLI subcommand; each turns parsed arguments into an exit code.

pub mod contract;
pub mod diff_lines;
pub mod validate;

use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};

/// Exit code for usage errors (unknown protocol, unreadable input), as clap uses for bad flags.
pub fn exit_usage() -> ExitCode {
    ExitCode::from(2)
}

/// Reads `FILE`, or standard input for `-` or no argument, as UTF-8.
pub fn read_input(file: Option<&PathBuf>) -> anyhow::Result<String> {
    let (bytes, name) = match file {
        Some(p) if p.as_os_str() != "-" => (
            std::fs::read(p).with_context(|| {
                format!(
                    "read {}: check the path and that the file is readable",
                    p.display()
                )
            })?,
            p.display().to_string(),
        ),
        _ => {
            let mut buf = Vec::new();
            io::stdin()
                .read_to_end(&mut buf)
                .context("read standard input")?;
            (buf, "standard input".to_owned())
        }
    };
    match String::from_utf8(bytes) {
        Ok(s) => Ok(s),
        Err(e) => bail!(
            "{name} is not valid UTF-8 (first invalid byte at offset {}); convert it to UTF-8 first",
            e.utf8_error().valid_up_to()
        ),
    }
}

/// Writes `text` to standard output; a closed pipe is not an error worth a panic.
pub fn print(text: &str) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => Err(e).context("write standard output"),
        _ => Ok(()),
    }
}
