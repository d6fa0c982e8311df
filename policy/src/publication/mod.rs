//! What a task says on GitHub (SPEC G2, G3, X2, X4): a finished review rendered into one review
//! draft (event, inline comments inside the diff safety zone, a body with everything else), an
//! issue analysis into one comment and the labels to apply, and a task's state into a commit
//! status. Pure: no I/O, no async, no backend calls — the engine reads what is needed (the
//! result, the diff pieces, the fingerprints already posted, the repository's labels), calls
//! these functions, and posts the drafts through a `CodeHost`.
//!
//! # Layout
//! - this file: the settings and inputs, [`plan_review`] and [`move_to_body`].
//! - `review.rs`: the review event (with the critical-finding guard), the body and the inline
//!   comments, fingerprints.
//! - `zone.rs`: a finding's path mapped to a changed file, and whether its range is inside the
//!   diff safety zone.
//! - `suggestion.rs`: when a suggestion is a GitHub suggestion block, realigned to the lines it
//!   replaces.
//! - `markdown.rs`: untrusted text made safe (no forged markers, no open fences), lengths and
//!   cuts.
//! - `issue.rs`: the issue-analysis comment and [`labels_to_apply`].
//! - `status.rs`: the commit status of a task.
//!
//! # Nothing stale, nothing twice
//! Every body ends with the task's [`marker`](verdict_proto::publication::marker) and every
//! posted finding carries its
//! [`fingerprint_marker`](verdict_proto::publication::fingerprint_marker); model text is
//! neutralised so it cannot forge either. A finding whose fingerprint an earlier head of the pull
//! request already has is counted in the body, not posted again (SPEC X2).

use std::collections::BTreeSet;

use serde::Serialize;
use verdict_proto::Language;
use verdict_proto::publication::ReviewDraft;

use crate::result::ReviewResult;
use verdict_api::document::{Coverage, TaskState};

mod issue;
mod markdown;
mod review;
mod status;
mod suggestion;
mod zone;

#[cfg(test)]
mod tests;

pub use issue::{IssueComment, labels_to_apply, plan_issue_comment};
pub use markdown::MAX_BODY;
pub use review::{fingerprint_of, review_event};
pub use status::{STATUS_DESCRIPTION_MAX, status};

/// How results are published; from the configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishSettings {
    /// The language of everything written for people (SPEC P6); severities, paths and code are
    /// never translated.
    pub language: Language,
    /// false: never post APPROVE (a model's approve is posted as COMMENT).
    pub approve: bool,
    /// G3: for a degraded review, post a neutral COMMENT review explaining the non-decision;
    /// otherwise post nothing. Degraded issue analyses follow the same setting.
    pub degraded_comment: bool,
    /// Commit status context, e.g. `verdict/review`.
    pub status_context: String,
    /// Where a status links to, with `{id}` replaced by the task id (e.g.
    /// `https://verdict.example/v1/tasks/{id}`); None: no link.
    pub details_url: Option<String>,
    /// Lowest confidence (0–1) of a suggested label that is applied.
    pub label_min_confidence: f64,
}

/// One changed file of the pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedFile {
    pub path: String,
    /// The file's piece of the unified diff (one `diff --git` section).
    pub diff: String,
}

/// What a review's publication is planned from.
#[derive(Debug, Clone, Copy)]
pub struct ReviewInput<'a> {
    pub task_id: &'a str,
    /// The head commit the review is about (the draft's `commit_id`).
    pub head_sha: &'a str,
    /// Completed, Degraded and Skipped publish; anything else → Nothing.
    pub state: TaskState,
    /// The task's reason (why skipped, why degraded).
    pub reason: Option<&'a str>,
    pub result: Option<&'a ReviewResult>,
    pub coverage: &'a Coverage,
    /// Every changed file's diff piece (also excluded files).
    pub files: &'a [ChangedFile],
    /// Finding fingerprints posted on this pull request before (earlier heads).
    pub already_posted: &'a BTreeSet<String>,
}

/// What to post for a review task.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewPublication {
    Review(ReviewPlan),
    /// Nothing is posted; `why` is for logs.
    Nothing {
        why: String,
    },
}

/// One review to post, with where each finding of the result went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReviewPlan {
    pub draft: ReviewDraft,
    /// For each of draft.comments, the index of its finding in result.findings.
    pub inline: Vec<usize>,
    /// Findings written in the body instead (outside the zone, no file, unlocated, or rejected
    /// by the host), in result order. When the body would pass [`MAX_BODY`], the last ones are
    /// only counted in it.
    pub in_body: Vec<usize>,
    /// Findings not posted because an earlier head of this PR already has them (SPEC X2).
    pub repeated: Vec<usize>,
}

/// The review to post for a task, or why there is none (SPEC G2, G3): a completed review is
/// posted with its decision's event; a degraded one as a neutral COMMENT only when
/// `degraded_comment` is set; skipped, incomplete, aborted and unfinished tasks post nothing
/// (the commit status says what happened).
pub fn plan_review(input: &ReviewInput<'_>, settings: &PublishSettings) -> ReviewPublication {
    plan(input, settings, &BTreeSet::new())
}

/// The same plan with the inline comments at `rejected` (indices into `plan.draft.comments`)
/// moved into the body (the host refused them, e.g. GitHub's 422); everything else unchanged.
/// Indices that name no comment are ignored.
pub fn move_to_body(
    input: &ReviewInput<'_>,
    settings: &PublishSettings,
    plan: &ReviewPlan,
    rejected: &[usize],
) -> ReviewPlan {
    // Findings an earlier move put in the body stay there.
    let mut forced: BTreeSet<usize> = plan.in_body.iter().copied().collect();
    forced.extend(rejected.iter().filter_map(|&c| plan.inline.get(c).copied()));
    match self::plan(input, settings, &forced) {
        ReviewPublication::Review(moved) => moved,
        // Not from this input: nothing to move against.
        ReviewPublication::Nothing { .. } => plan.clone(),
    }
}

fn plan(
    input: &ReviewInput<'_>,
    settings: &PublishSettings,
    forced: &BTreeSet<usize>,
) -> ReviewPublication {
    let nothing = |why: String| ReviewPublication::Nothing { why };
    match input.state {
        TaskState::Completed => match input.result {
            // A result marked degraded is never posted as a decision, whatever the state says.
            Some(r) if r.degraded => degraded(input, settings),
            Some(r) => ReviewPublication::Review(review::decided(input, settings, r, forced)),
            None => nothing("the completed task has no review result".to_owned()),
        },
        TaskState::Degraded => degraded(input, settings),
        TaskState::Skipped => nothing(format!(
            "the review was skipped ({}); the commit status says so",
            input.reason.unwrap_or("no reason given")
        )),
        TaskState::Incomplete | TaskState::Aborted => nothing(format!(
            "an {} task publishes nothing (SPEC G3)",
            input.state.as_str()
        )),
        TaskState::Queued | TaskState::Running => nothing(format!(
            "the task is {}; a review is planned only when it has ended",
            input.state.as_str()
        )),
    }
}

fn degraded(input: &ReviewInput<'_>, settings: &PublishSettings) -> ReviewPublication {
    if settings.degraded_comment {
        ReviewPublication::Review(review::degraded(input, settings))
    } else {
        ReviewPublication::Nothing {
            why: "the review is degraded and neutral comments for degraded reviews are turned off"
                .to_owned(),
        }
    }
}
