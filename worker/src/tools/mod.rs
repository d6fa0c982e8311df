//! The read-only repository tools (SPEC E1, R2): `read`, `grep`, `find` and `ls` over one
//! snapshot, for stages whose tool policy allows them.
//!
//! A tool call never fails the stage and never panics: bad arguments, unknown or disallowed tools,
//! hostile paths and unreadable files all come back as a [`ToolOutput`] with `is_error` set and a
//! message the model can act on. Every path goes through one confinement check (`path`), every
//! output through one bounded writer (`output`) that says what it cut and how to ask for less.
//! Filesystem work runs on tokio's blocking pool.
//!
//! # Layout
//! - `path`: confinement of requested paths to the snapshot root.
//! - `output`: bounded output, truncation notes, line decoding.
//! - `walk`: the symlink-free directory walk and glob rule shared by `grep` and `find`.
//! - `read`, `grep`, `find`, `ls`: one file per tool (arguments, definition, behaviour).
//! - `tree`: [`SnapshotTree`], the snapshot as grounding sees it (confined lookups, the walk).

use std::fmt;
use std::sync::Arc;

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer};
use verdict_proto::wire::Tool;

use crate::provider::ToolDefinition;
use verdict_backends::repo::Snapshot;

mod find;
mod grep;
mod ls;
mod output;
mod path;
mod read;
mod tree;
mod walk;

pub use tree::SnapshotTree;

/// Bounds on what one tool call may read and return. Every output states what a bound cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolLimits {
    /// `read`: lines per call (the `limit` argument is capped to it). Default 2000.
    pub read_max_lines: usize,
    /// `read` and `grep`: longer lines are cut (minified files would otherwise fill the output
    /// with one line). Default 2000 characters.
    pub max_line_chars: usize,
    /// `grep`: matching lines shown (all matches are still counted). Default 200.
    pub grep_max_matches: usize,
    /// `grep`: larger files are skipped (and counted as skipped). Default 1 MiB.
    pub grep_max_file_bytes: u64,
    /// `grep`: the search stops after reading this much (and says so). Default 64 MiB.
    pub grep_max_scan_bytes: u64,
    /// `find`: paths shown (all matches are still counted). Default 1000.
    pub find_max_paths: usize,
    /// `ls`: entries shown. Default 1000.
    pub ls_max_entries: usize,
    /// `grep` and `find`: entries a walk visits before it stops (and says so). Default 100 000.
    pub walk_max_entries: usize,
    /// Every tool: the size of one result, notes included. It also bounds `read` per call, so a
    /// read returns fewer than `read_max_lines` lines of long text. Default 64 KiB (about 16k
    /// tokens: enough to read a large file in a few calls, small enough to leave room for many).
    pub max_output_bytes: usize,
}

impl Default for ToolLimits {
    fn default() -> ToolLimits {
        ToolLimits {
            read_max_lines: 2000,
            max_line_chars: 2000,
            grep_max_matches: 200,
            grep_max_file_bytes: 1 << 20,
            grep_max_scan_bytes: 64 << 20,
            find_max_paths: 1000,
            ls_max_entries: 1000,
            walk_max_entries: 100_000,
            max_output_bytes: 64 << 10,
        }
    }
}

/// The result of one tool call, as it goes back to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub content: String,
    /// The call did not do what was asked; `content` says why and what to do instead.
    pub is_error: bool,
    /// A limit cut the result; `content` ends with a note saying what was cut.
    pub truncated: bool,
}

impl ToolOutput {
    pub fn error(message: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: message.into(),
            is_error: true,
            truncated: false,
        }
    }

    fn text(content: String, truncated: bool) -> ToolOutput {
        ToolOutput {
            content,
            is_error: false,
            truncated,
        }
    }
}

/// The tools one stage may call, over one snapshot. Cheap to clone; holding it keeps the
/// snapshot leased.
#[derive(Clone)]
pub struct ToolBox {
    inner: Arc<Inner>,
}

struct Inner {
    snapshot: Snapshot,
    allowed: Vec<Tool>,
    limits: ToolLimits,
}

impl fmt::Debug for ToolBox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolBox")
            .field("snapshot", &self.inner.snapshot)
            .field("allowed", &self.inner.allowed)
            .field("limits", &self.inner.limits)
            .finish()
    }
}

impl ToolBox {
    /// The tools in `allowed` (duplicates ignored) over `snapshot`.
    pub fn new(snapshot: Snapshot, allowed: &[Tool], limits: ToolLimits) -> ToolBox {
        let mut allowed = allowed.to_vec();
        allowed.sort();
        allowed.dedup();
        ToolBox {
            inner: Arc::new(Inner {
                snapshot,
                allowed,
                limits,
            }),
        }
    }

    pub fn snapshot(&self) -> &Snapshot {
        &self.inner.snapshot
    }

    /// The allowed tools, sorted.
    pub fn allowed(&self) -> &[Tool] {
        &self.inner.allowed
    }

    /// Name, description (with the output format and limits) and argument schema of each
    /// allowed tool, for the provider request.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        let limits = &self.inner.limits;
        self.inner
            .allowed
            .iter()
            .map(|tool| match tool {
                Tool::Read => read::definition(limits),
                Tool::Grep => grep::definition(limits),
                Tool::Find => find::definition(limits),
                Tool::Ls => ls::definition(limits),
            })
            .collect()
    }

    /// Runs the tool `name` with the JSON `arguments` the model produced. Never fails: every
    /// problem is an error output the model can read.
    pub async fn call(&self, name: &str, arguments: &str) -> ToolOutput {
        let Some(tool) = Tool::READ_ONLY.into_iter().find(|t| t.as_str() == name) else {
            return ToolOutput::error(format!(
                "unknown tool {}; the available tools are: {}",
                path::quote(name),
                self.available()
            ));
        };
        if !self.inner.allowed.contains(&tool) {
            return ToolOutput::error(format!(
                "the tool `{name}` is not available in this stage; the available tools are: {}",
                self.available()
            ));
        }
        let job: Box<dyn FnOnce(&Inner) -> ToolOutput + Send> = match tool {
            Tool::Read => match parse_arguments::<read::ReadArgs>(tool, arguments) {
                Ok(args) => Box::new(move |inner| read::run(inner.root(), &inner.limits, &args)),
                Err(output) => return output,
            },
            Tool::Grep => match parse_arguments::<grep::GrepArgs>(tool, arguments) {
                Ok(args) => Box::new(move |inner| grep::run(inner.root(), &inner.limits, &args)),
                Err(output) => return output,
            },
            Tool::Find => match parse_arguments::<find::FindArgs>(tool, arguments) {
                Ok(args) => Box::new(move |inner| find::run(inner.root(), &inner.limits, &args)),
                Err(output) => return output,
            },
            Tool::Ls => match parse_arguments::<ls::LsArgs>(tool, arguments) {
                Ok(args) => Box::new(move |inner| ls::run(inner.root(), &inner.limits, &args)),
                Err(output) => return output,
            },
        };
        let inner = Arc::clone(&self.inner);
        match tokio::task::spawn_blocking(move || job(&inner)).await {
            Ok(output) => output,
            Err(e) => {
                tracing::error!(tool = name, error = %e, "a repository tool failed internally");
                ToolOutput::error(format!(
                    "`{name}` failed internally; try again, or use another tool"
                ))
            }
        }
    }

    fn available(&self) -> String {
        if self.inner.allowed.is_empty() {
            return "none".to_owned();
        }
        self.inner
            .allowed
            .iter()
            .map(|t| t.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Inner {
    fn root(&self) -> &std::path::Path {
        self.snapshot.root()
    }
}

/// Arguments from the model's JSON. Empty text and `null` mean "no arguments", because some
/// providers send those for calls without parameters.
fn parse_arguments<T: DeserializeOwned + Usage>(
    tool: Tool,
    arguments: &str,
) -> Result<T, ToolOutput> {
    let text = arguments.trim();
    let text = if text.is_empty() || text == "null" {
        "{}"
    } else {
        text
    };
    let invalid = |problem: String| {
        ToolOutput::error(format!(
            "invalid arguments for `{}`: {problem}; expected {}",
            tool.as_str(),
            T::USAGE
        ))
    };
    // Checked as an object first: serde would also accept a JSON array for a struct.
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value @ serde_json::Value::Object(_)) => {
            serde_json::from_value(value).map_err(|e| invalid(e.to_string()))
        }
        Ok(other) => Err(invalid(format!(
            "the arguments must be a JSON object, not {}",
            verdict_proto::redact::safe_preview(&other.to_string(), 100)
        ))),
        Err(e) => Err(invalid(format!("not valid JSON ({e})"))),
    }
}

/// How a tool's arguments look, quoted in argument errors.
trait Usage {
    const USAGE: &'static str;
}

/// A whole number ≥ 1, also accepted as a string of digits (models quote numbers at times).
fn positive_number<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(deserializer)?;
    let number = match &value {
        None | Some(serde_json::Value::Null) => return Ok(None),
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(serde_json::Value::String(s)) => s.trim().parse::<u64>().ok(),
        Some(_) => None,
    };
    match number {
        Some(n) if n >= 1 => Ok(Some(n)),
        _ => Err(D::Error::custom(format!(
            "expected a whole number of at least 1, got {}",
            value.map(|v| v.to_string()).unwrap_or_default()
        ))),
    }
}

/// `true`/`false`, also accepted as those strings.
fn lenient_bool<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<bool>, D::Error> {
    match Option::<serde_json::Value>::deserialize(deserializer)? {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::Bool(b)) => Ok(Some(b)),
        Some(serde_json::Value::String(s)) if s == "true" => Ok(Some(true)),
        Some(serde_json::Value::String(s)) if s == "false" => Ok(Some(false)),
        Some(other) => Err(D::Error::custom(format!(
            "expected true or false, got {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toolbox(allowed: &[Tool]) -> (tempfile::TempDir, ToolBox) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("a.txt"), "one\ntwo\n").unwrap();
        let snapshot = Snapshot::new(tmp.path(), "c", ()).unwrap();
        (tmp, ToolBox::new(snapshot, allowed, ToolLimits::default()))
    }

    #[test]
    fn definitions_follow_the_allowlist() {
        let (_tmp, tools) = toolbox(&[Tool::Ls, Tool::Read, Tool::Ls]);
        let names: Vec<_> = tools.definitions().into_iter().map(|d| d.name).collect();
        assert_eq!(names, ["read", "ls"]);
        let (_tmp, all) = toolbox(&Tool::READ_ONLY);
        for definition in all.definitions() {
            assert_eq!(
                definition.parameters["type"], "object",
                "{}",
                definition.name
            );
            assert_eq!(definition.parameters["additionalProperties"], false);
            assert!(definition.description.len() > 100, "{}", definition.name);
        }
        let (_tmp, none) = toolbox(&[]);
        assert!(none.definitions().is_empty());
    }

    #[tokio::test]
    async fn unknown_and_disallowed_tools_are_errors() {
        let (_tmp, tools) = toolbox(&[Tool::Read]);
        let unknown = tools.call("cat", "{}").await;
        assert!(unknown.is_error);
        assert!(
            unknown.content.contains("unknown tool `cat`"),
            "{}",
            unknown.content
        );
        assert!(unknown.content.contains("read"));
        let disallowed = tools.call("grep", r#"{"pattern": "x"}"#).await;
        assert!(disallowed.is_error);
        assert!(
            disallowed.content.contains("not available"),
            "{}",
            disallowed.content
        );
    }

    #[tokio::test]
    async fn bad_arguments_are_errors_that_show_the_usage() {
        let (_tmp, tools) = toolbox(&Tool::READ_ONLY);
        for (tool, arguments, expected) in [
            ("read", "{not json", "invalid arguments for `read`"),
            ("read", "{}", "missing field `path`"),
            ("read", r#"{"path": 3}"#, "invalid type"),
            ("read", r#"{"path": "a.txt", "offset": 0}"#, "at least 1"),
            ("read", r#"{"path": "a.txt", "offset": -2}"#, "at least 1"),
            (
                "read",
                r#"{"path": "a.txt", "file": "x"}"#,
                "unknown field `file`",
            ),
            ("grep", "{}", "missing field `pattern`"),
            (
                "grep",
                r#"{"pattern": "(", "glob": "*.rs"}"#,
                "invalid regex",
            ),
            (
                "grep",
                r#"{"pattern": "x", "case_insensitive": "yes"}"#,
                "true or false",
            ),
            ("find", "", "missing field `glob`"),
            ("ls", "[]", "invalid arguments for `ls`"),
        ] {
            let output = tools.call(tool, arguments).await;
            assert!(output.is_error, "{tool} {arguments}");
            assert!(
                output.content.contains(expected),
                "{tool} {arguments}: {}",
                output.content
            );
        }
        let usage = tools.call("read", "{}").await.content;
        assert!(usage.contains("expected {\"path\""), "{usage}");
    }

    #[tokio::test]
    async fn lenient_where_models_are_sloppy() {
        let (_tmp, tools) = toolbox(&Tool::READ_ONLY);
        let read = tools
            .call("read", r#"{"path": "a.txt", "offset": "2", "limit": null}"#)
            .await;
        assert!(!read.is_error, "{}", read.content);
        assert_eq!(read.content, "2\ttwo");
        for empty in ["", "null", "  {}  "] {
            let ls = tools.call("ls", empty).await;
            assert_eq!(ls.content, "a.txt", "{empty:?}");
        }
        let grep = tools
            .call("grep", r#"{"pattern": "ONE", "case_insensitive": "true"}"#)
            .await;
        assert_eq!(grep.content, "a.txt:1:one");
    }
}
