//! `ls`: the entries of one directory.

use std::path::Path;

use serde::Deserialize;
use serde_json::json;

use super::output::{Body, human_bytes};
use super::path::{confine, quote};
use super::{ToolLimits, ToolOutput, Usage};
use crate::provider::ToolDefinition;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LsArgs {
    #[serde(default)]
    path: Option<String>,
}

impl Usage for LsArgs {
    const USAGE: &'static str = r#"{"path"?: "<directory relative to the repository root>"}"#;
}

pub(crate) fn definition(limits: &ToolLimits) -> ToolDefinition {
    ToolDefinition {
        name: "ls".to_owned(),
        description: format!(
            "List one directory of the repository. Output: one entry name per line, sorted; \
             directories end with `/`, symbolic links with `@`. At most {max} entries are shown \
             (the total is reported), within {bytes} of output. Without `path`, lists the \
             repository root.",
            max = limits.ls_max_entries,
            bytes = human_bytes(limits.max_output_bytes as u64),
        ),
        parameters: json!({
            "type": "object",
            "properties": {
                "path": {
                    "type": "string",
                    "description": "The directory, relative to the repository root, e.g. `src`. Default: the root."
                }
            },
            "additionalProperties": false
        }),
    }
}

pub(crate) fn run(root: &Path, limits: &ToolLimits, args: &LsArgs) -> ToolOutput {
    let requested = args.path.as_deref().unwrap_or("");
    let dir = match confine(root, requested) {
        Ok(dir) => dir,
        Err(e) => return ToolOutput::error(e.message(requested)),
    };
    if !dir.is_dir() {
        return ToolOutput::error(format!(
            "{} is a file, not a directory; use read to see it",
            quote(requested)
        ));
    }
    let listing = match std::fs::read_dir(&dir) {
        Ok(listing) => listing,
        Err(e) => return ToolOutput::error(format!("{} cannot be listed: {e}", quote(requested))),
    };
    let mut names: Vec<String> = listing
        .flatten()
        .map(|dirent| {
            let name = dirent.file_name().to_string_lossy().into_owned();
            // The entry's own type: a symlink is marked, never followed.
            match dirent.file_type() {
                Ok(t) if t.is_symlink() => format!("{name}@"),
                Ok(t) if t.is_dir() => format!("{name}/"),
                _ => name,
            }
        })
        .collect();
    names.sort();

    if names.is_empty() {
        return ToolOutput::text("[the directory is empty]".to_owned(), false);
    }
    let mut body = Body::new(limits.max_output_bytes);
    let mut shown = 0;
    for name in names.iter().take(limits.ls_max_entries) {
        if !body.push_line(name) {
            break;
        }
        shown += 1;
    }
    let mut notes = Vec::new();
    let truncated = shown < names.len();
    if truncated {
        notes.push(format!(
            "[truncated: {shown} of {} entries shown; use find with a glob to narrow the listing]",
            names.len()
        ));
    }
    ToolOutput::text(body.finish(&notes), truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ls(root: &Path, limits: &ToolLimits, path: Option<&str>) -> ToolOutput {
        run(
            root,
            limits,
            &LsArgs {
                path: path.map(str::to_owned),
            },
        )
    }

    #[test]
    fn entries_are_sorted_and_marked() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("src/empty")).unwrap();
        std::fs::write(tmp.path().join("b.txt"), "").unwrap();
        std::fs::write(tmp.path().join(".hidden"), "").unwrap();
        std::os::unix::fs::symlink("/etc", tmp.path().join("etc")).unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let limits = ToolLimits::default();
        let out = ls(&root, &limits, None);
        assert_eq!(out.content, ".hidden\nb.txt\netc@\nsrc/");
        assert_eq!(ls(&root, &limits, Some("src")).content, "empty/");
        assert_eq!(
            ls(&root, &limits, Some("src/empty")).content,
            "[the directory is empty]"
        );
        let file = ls(&root, &limits, Some("b.txt"));
        assert!(
            file.is_error && file.content.contains("use read"),
            "{}",
            file.content
        );
        let outside = ls(&root, &limits, Some("etc"));
        assert!(outside.is_error, "{}", outside.content);
        assert!(outside.content.contains("does not exist in the repository"));
    }

    #[test]
    fn the_entry_limit_truncates() {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..5 {
            std::fs::write(tmp.path().join(format!("f{i}")), "").unwrap();
        }
        let root = tmp.path().canonicalize().unwrap();
        let limits = ToolLimits {
            ls_max_entries: 3,
            ..ToolLimits::default()
        };
        let out = ls(&root, &limits, None);
        assert!(out.truncated);
        assert_eq!(
            out.content,
            "f0\nf1\nf2\n[truncated: 3 of 5 entries shown; use find with a glob to narrow the listing]"
        );
    }
}
