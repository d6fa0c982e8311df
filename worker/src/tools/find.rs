//! `find`: paths matching a glob, across the repository or under one directory.

use std::path::Path;

use serde::Deserialize;
use serde_json::json;

use super::output::{Body, human_bytes};
use super::path::{confine, quote};
use super::walk::{GlobFilter, Kind, walk};
use super::{ToolLimits, ToolOutput, Usage};
use crate::provider::ToolDefinition;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FindArgs {
    glob: String,
    #[serde(default)]
    path: Option<String>,
}

impl Usage for FindArgs {
    const USAGE: &'static str =
        r#"{"glob": "<e.g. *.rs or src/**/test_*.py>", "path"?: "<directory>"}"#;
}

pub(crate) fn definition(limits: &ToolLimits) -> ToolDefinition {
    ToolDefinition {
        name: "find".to_owned(),
        description: format!(
            "Find files and directories of the repository by glob. Output: one path per line, \
             relative to the repository root, sorted; directories end with `/`. A glob without \
             `/` matches names at any depth (`*.toml`, `Dockerfile*`); a glob with `/` matches \
             paths from the repository root or from `path` (`src/**/*.rs`); `*` stays within a \
             directory, `**` crosses them, `{{a,b}}` matches either. Symbolic links are listed \
             but not followed. At most {max} paths are shown (the total is reported), within \
             {bytes} of output.",
            max = limits.find_max_paths,
            bytes = human_bytes(limits.max_output_bytes as u64),
        ),
        parameters: json!({
            "type": "object",
            "properties": {
                "glob": {
                    "type": "string",
                    "description": "The glob to match, e.g. `*.rs`, `**/Cargo.toml` or `src/**/test_*.py`."
                },
                "path": {
                    "type": "string",
                    "description": "A directory to search instead of the whole repository, relative to its root."
                }
            },
            "required": ["glob"],
            "additionalProperties": false
        }),
    }
}

pub(crate) fn run(root: &Path, limits: &ToolLimits, args: &FindArgs) -> ToolOutput {
    let glob = match GlobFilter::new(&args.glob) {
        Ok(glob) => glob,
        Err(message) => return ToolOutput::error(message),
    };
    let requested = args.path.as_deref().unwrap_or("");
    let start = match confine(root, requested) {
        Ok(start) => start,
        Err(e) => return ToolOutput::error(e.message(requested)),
    };
    if !start.is_dir() {
        return ToolOutput::error(format!(
            "{} is a file; find searches directories (use read to see the file)",
            quote(requested)
        ));
    }

    let walked = walk(root, &start, limits.walk_max_entries);
    let mut body = Body::new(limits.max_output_bytes);
    let mut matched: usize = 0;
    let mut shown: usize = 0;
    for entry in walked.entries.iter().filter(|e| glob.matches(e)) {
        matched += 1;
        if shown >= limits.find_max_paths {
            continue;
        }
        let line = if entry.kind == Kind::Dir {
            format!("{}/", entry.shown)
        } else {
            entry.shown.clone()
        };
        if body.push_line(&line) {
            shown += 1;
        }
    }

    let mut notes = Vec::new();
    let place = if requested.is_empty() {
        "the repository".to_owned()
    } else {
        quote(requested)
    };
    if matched == 0 {
        notes.push(format!(
            "no paths match {} under {place}",
            quote(&args.glob)
        ));
    }
    let mut truncated = false;
    if shown < matched {
        truncated = true;
        let why = if body.is_full() {
            format!(
                "the output limit of {}",
                human_bytes(limits.max_output_bytes as u64)
            )
        } else {
            format!("at most {} per call", limits.find_max_paths)
        };
        let at_least = if walked.capped { "at least " } else { "" };
        notes.push(format!(
            "[truncated: {shown} of {at_least}{matched} paths shown ({why}); narrow the glob or the path]"
        ));
    }
    if walked.capped {
        truncated = true;
        notes.push(format!(
            "[truncated: only the first {} entries of the tree were searched; narrow the path or the glob]",
            limits.walk_max_entries
        ));
    }
    ToolOutput::text(body.finish(&notes), truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(glob: &str, path: Option<&str>) -> FindArgs {
        FindArgs {
            glob: glob.to_owned(),
            path: path.map(str::to_owned),
        }
    }

    fn tree() -> (tempfile::TempDir, std::path::PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("src/util")).unwrap();
        std::fs::create_dir_all(root.join("tests")).unwrap();
        for file in [
            "src/main.rs",
            "src/util/mod.rs",
            "tests/it.rs",
            "Cargo.toml",
            "README.md",
        ] {
            std::fs::write(root.join(file), "x").unwrap();
        }
        let root = root.canonicalize().unwrap();
        (tmp, root)
    }

    #[test]
    fn globs_find_sorted_paths() {
        let (_tmp, root) = tree();
        let limits = ToolLimits::default();
        let rs = run(&root, &limits, &args("*.rs", None));
        assert_eq!(rs.content, "src/main.rs\nsrc/util/mod.rs\ntests/it.rs");
        let src = run(&root, &limits, &args("src/**/*.rs", None));
        assert_eq!(src.content, "src/main.rs\nsrc/util/mod.rs");
        let shallow = run(&root, &limits, &args("*", Some("src")));
        assert_eq!(
            shallow.content, "src/main.rs\nsrc/util/\nsrc/util/mod.rs",
            "names at any depth"
        );
        let dirs = run(&root, &limits, &args("util", None));
        assert_eq!(dirs.content, "src/util/");
        let relative_to_path = run(&root, &limits, &args("util/*.rs", Some("src")));
        assert_eq!(relative_to_path.content, "src/util/mod.rs");
        let both = run(&root, &limits, &args("*.{toml,md}", None));
        assert_eq!(both.content, "Cargo.toml\nREADME.md");
    }

    #[test]
    fn nothing_found_and_files_as_paths() {
        let (_tmp, root) = tree();
        let none = run(&root, &ToolLimits::default(), &args("*.py", Some("src")));
        assert_eq!(none.content, "no paths match `*.py` under `src`");
        assert!(!none.is_error);
        let file = run(
            &root,
            &ToolLimits::default(),
            &args("*", Some("Cargo.toml")),
        );
        assert!(file.is_error);
    }

    #[test]
    fn the_path_limit_truncates_but_counts_everything() {
        let (_tmp, root) = tree();
        let limits = ToolLimits {
            find_max_paths: 2,
            ..ToolLimits::default()
        };
        let out = run(&root, &limits, &args("*", None));
        assert!(out.truncated);
        assert_eq!(
            out.content,
            "Cargo.toml\nREADME.md\n[truncated: 2 of 8 paths shown (at most 2 per call); narrow the glob or the path]"
        );
    }

    #[test]
    fn the_walk_limit_is_reported() {
        let (_tmp, root) = tree();
        let limits = ToolLimits {
            walk_max_entries: 3,
            ..ToolLimits::default()
        };
        let out = run(&root, &limits, &args("*", None));
        assert!(out.truncated);
        assert!(out.content.ends_with(
            "[truncated: only the first 3 entries of the tree were searched; narrow the path or the glob]"
        ), "{}", out.content);
    }
}
