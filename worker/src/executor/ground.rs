//! Grounding in the executor: a parsed answer's findings checked against the snapshot at the
//! task's commit before anyone sees them (see [`verdict_proto::grounding`]). The checks read
//! files, so they run on the blocking pool; the conclusions are counted per stage and model and
//! recorded in the transcript.

use std::sync::Arc;

use serde_json::Value;
use verdict_proto::grounding::{self, Check, Scope, Tally};
use verdict_proto::transcript::TranscriptEntry;

use super::context::CallContext;
use super::conversation::Conversation;
use crate::tools::SnapshotTree;

/// The conclusions about `value`'s findings; empty when the stage has nothing to ground (its
/// protocol has no located findings, or it works without a repository).
pub(super) async fn check(ctx: &CallContext<'_>, value: &Value) -> Vec<Check> {
    let Some(tree) = ctx.tree.clone() else {
        return Vec::new();
    };
    let value = value.clone();
    let changed = ctx.request.changed_files.clone();
    let checked = tokio::task::spawn_blocking(move || {
        let scope = Scope {
            changed_files: changed.as_deref(),
            commit: Some(tree.commit()),
        };
        grounding::check(&value, tree.as_ref(), scope)
    })
    .await;
    match checked {
        Ok(checks) => checks,
        Err(e) => {
            // A panic in the checks is a bug; the answer still goes through, ungrounded, rather
            // than failing a stage the model answered correctly.
            tracing::error!(error = %e, "grounding did not finish; findings left as reported");
            Vec::new()
        }
    }
}

/// Writes the conclusions into `value` (corrections applied, unresolved locations demoted to
/// unlocated), counts them and records them in the transcript.
pub(super) fn settle(
    ctx: &CallContext<'_>,
    conv: &mut Conversation<'_>,
    value: &mut Value,
    checks: &[Check],
) {
    if checks.is_empty() {
        return;
    }
    let tally = grounding::apply(value, checks);
    let stage = ctx.request.stage.as_str();
    let model = ctx.route.model();
    let Tally {
        located,
        corrected,
        unlocated,
    } = tally;
    for (outcome, n) in [
        ("located", located),
        ("corrected", corrected),
        ("unlocated", unlocated),
    ] {
        if n > 0 {
            ctx.deps
                .metrics
                .findings_grounded
                .with_label_values(&[stage, model, outcome])
                .inc_by(u64::from(n));
        }
    }
    let notes = checks
        .iter()
        .filter_map(|c| match &c.verdict {
            grounding::Verdict::Located { .. } => None,
            grounding::Verdict::Corrected { reason, .. } => {
                Some(format!("finding {}: corrected: {reason}", c.index + 1))
            }
            grounding::Verdict::Unresolved { problem, .. } => {
                Some(format!("finding {}: unlocated: {problem}", c.index + 1))
            }
        })
        .collect();
    conv.record(TranscriptEntry::Grounding {
        located,
        corrected,
        unlocated,
        notes,
    });
    if corrected + unlocated > 0 {
        tracing::info!(located, corrected, unlocated, "findings grounded");
    }
}

/// The tree grounding reads, when the stage's protocol has located findings and a snapshot.
pub(super) fn tree_for(
    protocol: verdict_proto::ProtocolId,
    snapshot: Option<&verdict_backends::repo::Snapshot>,
) -> Option<Arc<SnapshotTree>> {
    if !grounding::applies_to(protocol) {
        return None;
    }
    snapshot.map(|s| Arc::new(SnapshotTree::new(s.clone())))
}
