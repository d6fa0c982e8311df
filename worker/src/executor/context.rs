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
use verdict_proto::diff::CommentableLines;

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
    /// The commentable lines of the stage's diff input, when it has one: decoding constraints
    /// name only the change's files and lines.
    pub diff_lines: Option<CommentableLines>,
}

impl CallContext<'_> {
    pub fn now_unix_ms(&self) -> u64 {
        self.deps.clock.now_unix_ms()
    }

    /// Emits a progress event for this stage (best effort).
    pub async fn emit(
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
