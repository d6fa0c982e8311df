//! The explicit context of one stage attempt's calls: the executor's backends and settings, the
//! request, the cancellation token, where calls go (provider, model, fallbacks, retry budget) and
//! the repository the attempt works in. The turn loop, the repair loop and every AI call take it
//! beside the [`super::conversation::Conversation`]; it holds nothing that was said.

use tokio_util::sync::CancellationToken;
use verdict_proto::wire::{EventType, StageRequest};

use super::call::Route;
use super::{ExecutorDeps, ExecutorSettings};
use std::sync::Arc;

use crate::tools::{SnapshotTree, ToolBox};
use verdict_backends::repo::Snapshot;
use verdict_backends::store::ResolvedInput;
use verdict_proto::diff::CommentableLines;
use verdict_proto::structured::Scope;
use verdict_proto::wire::input_name;

pub(super) struct CallContext<'a> {
    pub deps: &'a ExecutorDeps,
    pub settings: &'a ExecutorSettings,
    pub request: &'a StageRequest,
    pub cancel: &'a CancellationToken,
    /// The provider, model and retry budget calls go to; a fallback changes the model.
    pub route: Route,
    /// Held for the whole attempt: its lease keeps the cache from evicting the tree while an
    /// `exec` agent or a tool works in it.
    pub snapshot: Option<Snapshot>,
    /// The stage's tools over the snapshot, when its policy allows any.
    pub toolbox: Option<ToolBox>,
    /// The snapshot as grounding reads it, when the stage's answers have located findings.
    pub tree: Option<Arc<SnapshotTree>>,
    /// What the stage's inputs say its answer may name; decoding constraints narrow to it.
    pub scope: InputScope,
}

/// What a stage's inputs say its answer may name, read once per attempt.
#[derive(Debug, Default)]
pub(super) struct InputScope {
    /// The commentable lines of the stage's diff (whole, or one input per file), when it has one.
    pub diff_lines: Option<CommentableLines>,
    /// The ids of the candidate findings a validator is given, in order.
    pub finding_ids: Vec<String>,
}

impl InputScope {
    /// Reads the inputs the pipeline names for this (see [`input_name`]); an input that does
    /// not parse narrows nothing.
    pub(super) fn of(inputs: &[ResolvedInput]) -> InputScope {
        let diff_text: Vec<&str> = inputs
            .iter()
            .filter(|i| i.name == input_name::DIFF || i.name.starts_with(input_name::DIFF_OF_FILE))
            .map(|i| i.text.as_str())
            .collect();
        let diff_lines = Some(verdict_proto::diff::parse(&diff_text.join("\n")).commentable())
            .filter(|lines| !lines.files.is_empty());
        let finding_ids = inputs
            .iter()
            .filter(|i| i.name == input_name::CANDIDATES)
            .filter_map(|i| serde_json::from_str::<Vec<serde_json::Value>>(&i.text).ok())
            .flatten()
            .filter_map(|c| {
                c.get("id")
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned)
            })
            .collect();
        InputScope {
            diff_lines,
            finding_ids,
        }
    }

    pub(super) fn as_scope(&self) -> Scope<'_> {
        Scope {
            lines: self.diff_lines.as_ref(),
            finding_ids: &self.finding_ids,
        }
    }
}

impl CallContext<'_> {
    pub(super) fn now_unix_ms(&self) -> u64 {
        self.deps.clock.now_unix_ms()
    }

    /// Emits a progress event for this stage (best effort).
    pub(super) async fn emit(
        &self,
        kind: EventType,
        channel: Option<&str>,
        message: String,
        data: serde_json::Value,
    ) {
        let mut e = verdict_backends::store::event(
            &self.request.task_id,
            Some(&self.request.stage_id),
            self.now_unix_ms(),
            kind,
            message,
        );
        e.channel = channel.map(str::to_owned);
        e.data = data;
        self.deps.events.emit(e).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(name: &str, text: &str) -> ResolvedInput {
        ResolvedInput {
            name: name.to_owned(),
            text: text.to_owned(),
        }
    }

    #[test]
    fn the_scope_reads_the_diff_inputs_and_the_candidates_ids_in_order() {
        let diff = "diff --git a/src/a.rs b/src/a.rs\n--- a/src/a.rs\n+++ b/src/a.rs\n@@ -1,1 +1,2 @@\n a\n+b\n";
        let scope = InputScope::of(&[
            input("title", "Fix"),
            input(&format!("{}src/a.rs", input_name::DIFF_OF_FILE), diff),
            input(
                input_name::CANDIDATES,
                r#"[{"id": "F2", "finding": {}}, {"id": "F1", "finding": {}}]"#,
            ),
        ]);
        let lines = scope.diff_lines.as_ref().expect("the diff's lines");
        assert_eq!(lines.files.len(), 1);
        assert_eq!(lines.files[0].path, "src/a.rs");
        assert_eq!(scope.finding_ids, ["F2", "F1"]);
    }

    #[test]
    fn inputs_that_do_not_parse_narrow_nothing() {
        let scope = InputScope::of(&[
            input(input_name::DIFF, "not a diff"),
            input(input_name::CANDIDATES, "not json"),
        ]);
        assert!(scope.diff_lines.is_none());
        assert!(scope.finding_ids.is_empty());
    }
}
