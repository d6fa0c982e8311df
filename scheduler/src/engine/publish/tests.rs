//! Unit tests of publication on the in-memory backends and the in-memory code host: what is
//! posted for each outcome, once, never stale, and what happens when the host refuses or fails.

use serde_json::{Value, json};
use verdict_backends::code_host::{Author, Issue, ItemState, MemoryCodeHost};
use verdict_proto::outcome::{FailureKind, StageOutcome};
use verdict_proto::publication::{CommitState, ReviewEvent};
use verdict_proto::wire::{StageKind, StageResult, Usage, WIRE_VERSION};

use super::*;
use crate::engine::fixture::{Fixture, REPO, STALL_AFTER};
use crate::engine::submission::TaskDefaults;
use crate::engine::sweeper::{Chore, chore};
use verdict_api::submission::{IssueAnalysisSubmission, ReviewSubmission};
use verdict_policy::pipeline;

const HEAD: &str = "fea7000000000000000000000000000000000001";
const NEWER: &str = "fea7100000000000000000000000000000000002";

/// A finding of the review envelope (the fixture's diff adds line 2 of `src/cart.rs`).
fn finding(severity: &str, line: u32, title: &str) -> String {
    format!(
        "<FINDING>\n<SEVERITY>{severity}</SEVERITY>\n<FILE>src/cart.rs</FILE>\n<START_LINE>{line}</START_LINE>\n<END_LINE>{line}</END_LINE>\n<TITLE>{title}</TITLE>\n<DESCRIPTION>\nWhy it matters.\n</DESCRIPTION>\n<SUGGESTION>NONE</SUGGESTION>\n</FINDING>\n"
    )
}

/// A single-pass review's answer with `findings`, grounded as located.
fn answer(decision: &str, findings: &[String]) -> Value {
    let envelope = format!(
        "<SAKURA_REVIEW>\n<VERSION>1</VERSION>\n<SCORE>8</SCORE>\n<DECISION>{decision}</DECISION>\n<DECISION_REASON>Reason.</DECISION_REASON>\n<SUMMARY>Summary.</SUMMARY>\n<FINDINGS>\n{}</FINDINGS>\n</SAKURA_REVIEW>",
        findings.concat()
    );
    let mut value = verdict_proto::validate(
        verdict_proto::ProtocolId::Review,
        &Default::default(),
        &envelope,
    )
    .unwrap();
    for f in value["findings"].as_array_mut().unwrap() {
        f["grounding"] = json!({"status": "located", "in_change": true});
    }
    value
}

fn stage_result(
    task: &TaskRecord,
    stage: &str,
    kind: StageKind,
    outcome: StageOutcome,
) -> StageResult {
    StageResult {
        version: WIRE_VERSION,
        task_id: task.id.clone(),
        stage_id: stage.to_owned(),
        stage: kind,
        attempt: 1,
        outcome,
        usage: Usage::default(),
        started_unix_ms: 0,
        finished_unix_ms: 0,
        model: Some("m".to_owned()),
        evidence_cut: None,
    }
}

fn ok(value: Value) -> StageOutcome {
    StageOutcome::Ok {
        value,
        repaired: false,
        attempts: 1,
    }
}

/// A single-pass review of pull request #7 at `head`, published to it, taken in and running.
async fn running_review(fx: &Fixture, head: &str) -> (TaskRecord, ItemRef) {
    let item = fx.pull_request(7, head);
    let submission = ReviewSubmission {
        pull_request: Some("https://github.com/acme/shop/pull/7".to_owned()),
        publish: true,
        pipeline: Some("single".to_owned()),
        ..Default::default()
    };
    let task = TaskDefaults::new(&fx.settings)
        .review(submission, fx.now())
        .unwrap();
    fx.parts.records.create(&task).await.unwrap();
    fx.parts.intake.start(&task.id).await;
    (fx.load(&task.id).await, item)
}

/// The review's stage answers `outcome`; then the publication it starts runs to its end.
async fn finish(fx: &Fixture, task: &TaskRecord, outcome: StageOutcome) -> TaskRecord {
    let result = stage_result(task, "review", StageKind::Review, outcome);
    let now = fx.now();
    fx.parts
        .transitions
        .apply(&task.id, |t| pipeline::on_result(t, &result, now))
        .await
        .unwrap();
    fx.settle().await;
    fx.load(&task.id).await
}

fn publication(task: &TaskRecord) -> &PublicationRecord {
    task.publication.as_ref().unwrap()
}

fn host(fx: &Fixture) -> &MemoryCodeHost {
    &fx.code_host
}

#[tokio::test(start_paused = true)]
async fn a_finished_review_is_posted_once_inline_where_the_diff_allows_and_the_rest_in_the_body() {
    let fx = Fixture::new();
    let (task, item) = running_review(&fx, HEAD).await;
    fx.settle().await;
    let pending = host(&fx).statuses(&item.repo);
    assert_eq!(pending.len(), 1, "a pending status when the review starts");
    assert_eq!(
        (pending[0].state, pending[0].sha.as_str()),
        (CommitState::Pending, HEAD)
    );

    let inside = finding("major", 2, "Coupon applied twice");
    let outside = finding("minor", 40, "Rounding of totals");
    let ended = finish(
        &fx,
        &task,
        ok(answer("request_changes", &[inside, outside])),
    )
    .await;

    assert_eq!(ended.state, TaskState::Completed);
    let p = publication(&ended);
    assert_eq!(p.state, PublicationState::Published, "{p:?}");
    let reviews = host(&fx).reviews(&item);
    assert_eq!(reviews.len(), 1);
    assert_eq!(p.url.as_deref(), Some(reviews[0].url.as_str()));
    let draft = &reviews[0].draft;
    assert_eq!(draft.event, ReviewEvent::RequestChanges);
    assert_eq!(draft.commit_id, HEAD);
    assert_eq!(
        draft.comments.len(),
        1,
        "only the commentable line is inline"
    );
    assert_eq!(
        (draft.comments[0].path.as_str(), draft.comments[0].line),
        ("src/cart.rs", 2)
    );
    assert!(draft.body.contains("Rounding of totals"), "{}", draft.body);
    assert!(
        draft
            .body
            .contains(&verdict_proto::publication::marker(&task.id))
    );
    let statuses = host(&fx).statuses(&item.repo);
    assert_eq!(statuses.last().unwrap().state, CommitState::Failure);
    assert!(
        fx.parts.records.active().await.unwrap().is_empty(),
        "a settled publication leaves the active index"
    );
    assert_eq!(
        fx.store.events_of_type(EventType::Published).len(),
        1,
        "the published event is in the task's stream"
    );
    let published = &fx.metrics().publications;
    assert_eq!(
        published.with_label_values(&["review", "published"]).get(),
        1
    );

    // A crash after posting and before recording it: the attempt runs again and finds its marker.
    fx.parts
        .records
        .update(&task.id, |t| {
            t.publication = Some(PublicationRecord::pending());
            Effects::default()
        })
        .await
        .unwrap();
    fx.parts.publication.publish(&task.id).await;
    assert_eq!(host(&fx).reviews(&item).len(), 1, "nothing is posted twice");
    let again = fx.load(&task.id).await;
    assert_eq!(publication(&again).state, PublicationState::Published);
    assert_eq!(
        publication(&again).detail.as_deref(),
        Some("already posted by an earlier attempt")
    );
}

#[tokio::test(start_paused = true)]
async fn a_review_of_a_head_that_moved_on_is_not_posted() {
    let fx = Fixture::new();
    let (task, item) = running_review(&fx, HEAD).await;
    host(&fx).push(&item, NEWER, crate::engine::fixture::DIFF);

    let ended = finish(&fx, &task, ok(answer("approve", &[]))).await;

    let p = publication(&ended);
    assert_eq!(p.state, PublicationState::Stale);
    assert!(
        p.detail
            .as_deref()
            .unwrap()
            .contains("moved from fea700000000 to fea710000000"),
        "{p:?}"
    );
    assert!(host(&fx).reviews(&item).is_empty());
}

#[tokio::test(start_paused = true)]
async fn incomplete_and_aborted_reviews_post_nothing_but_their_status() {
    let fx = Fixture::new();
    let (task, item) = running_review(&fx, HEAD).await;
    let failed = StageOutcome::ExecutionFailure {
        kind: FailureKind::Auth,
        retryable: false,
        message: "the provider refused the key".to_owned(),
    };
    let ended = finish(&fx, &task, failed).await;
    assert_eq!(ended.state, TaskState::Incomplete);
    assert_eq!(publication(&ended).state, PublicationState::Nothing);
    assert!(host(&fx).reviews(&item).is_empty());
    assert!(host(&fx).comments(&item).is_empty());
    assert_eq!(
        host(&fx).statuses(&item.repo).last().unwrap().state,
        CommitState::Error
    );

    let fx = Fixture::new();
    let (task, item) = running_review(&fx, HEAD).await;
    let now = fx.now();
    fx.parts
        .transitions
        .apply(&task.id, |t| {
            pipeline::cancel(t, "cancelled on request", now)
        })
        .await
        .unwrap();
    fx.settle().await;
    let ended = fx.load(&task.id).await;
    assert_eq!(ended.state, TaskState::Aborted);
    assert_eq!(publication(&ended).state, PublicationState::Nothing);
    assert!(host(&fx).reviews(&item).is_empty());
}

#[tokio::test(start_paused = true)]
async fn comments_the_host_refuses_move_into_the_body_and_the_review_is_posted() {
    let fx = Fixture::new();
    let (task, item) = running_review(&fx, HEAD).await;
    // The host's diff of this head has no line 2: GitHub answers the review with 422.
    host(&fx).push(
        &item,
        HEAD,
        "diff --git a/src/cart.rs b/src/cart.rs\n--- a/src/cart.rs\n+++ b/src/cart.rs\n@@ -9,1 +9,2 @@\n x\n+y\n",
    );

    let ended = finish(
        &fx,
        &task,
        ok(answer(
            "comment",
            &[finding("major", 2, "Coupon applied twice")],
        )),
    )
    .await;

    let p = publication(&ended);
    assert_eq!(p.state, PublicationState::Published, "{p:?}");
    assert!(
        p.detail
            .as_deref()
            .unwrap()
            .contains("1 comment(s) GitHub refused inline were moved into the body")
    );
    let reviews = host(&fx).reviews(&item);
    assert_eq!(reviews.len(), 1);
    assert!(reviews[0].draft.comments.is_empty());
    assert!(reviews[0].draft.body.contains("Coupon applied twice"));
    assert_eq!(host(&fx).probes(), 1, "the one comment was checked");
}

#[tokio::test(start_paused = true)]
async fn a_finding_posted_on_an_earlier_head_is_not_posted_again() {
    let fx = Fixture::new();
    let (first, item) = running_review(&fx, HEAD).await;
    let same = finding("major", 2, "Coupon applied twice");
    finish(
        &fx,
        &first,
        ok(answer("comment", std::slice::from_ref(&same))),
    )
    .await;
    assert_eq!(host(&fx).reviews(&item)[0].draft.comments.len(), 1);

    // The next push: the same finding on the new head.
    let (second, _) = running_review(&fx, NEWER).await;
    let ended = finish(&fx, &second, ok(answer("comment", &[same]))).await;

    assert_eq!(publication(&ended).state, PublicationState::Published);
    let reviews = host(&fx).reviews(&item);
    assert_eq!(reviews.len(), 2);
    assert!(reviews[1].draft.comments.is_empty(), "not posted again");
    assert!(
        publication(&ended)
            .detail
            .as_deref()
            .unwrap()
            .contains("1 already posted on an earlier head"),
        "{:?}",
        publication(&ended)
    );
}

#[tokio::test(start_paused = true)]
async fn a_host_that_is_down_is_retried_by_the_sweeper_after_a_backoff() {
    let fx = Fixture::new();
    let (task, item) = running_review(&fx, HEAD).await;
    fx.settle().await;
    host(&fx).fail_next([CodeHostError::Unavailable {
        reason: "502 Bad Gateway".to_owned(),
    }]);

    let ended = finish(&fx, &task, ok(answer("approve", &[]))).await;

    let p = publication(&ended).clone();
    assert_eq!(p.state, PublicationState::Pending);
    assert_eq!(p.attempts, 1);
    assert!(p.not_before_unix_ms > fx.now());
    assert_eq!(
        fx.parts.records.active().await.unwrap(),
        std::slice::from_ref(&task.id),
        "kept on the active index until it settles"
    );
    let stall = &crate::engine::sweeper::Limits {
        stall_after_ms: u64::try_from(STALL_AFTER.as_millis()).unwrap(),
        intake_timeout_ms: 300_000,
        recover_after_ms: 600_000,
    };
    assert_eq!(
        chore(&ended, fx.now(), stall, true),
        Chore::Nothing,
        "not before its backoff"
    );

    tokio::time::advance(FIRST_BACKOFF.max(STALL_AFTER) + Duration::from_secs(1)).await;
    assert_eq!(
        chore(&fx.load(&task.id).await, fx.now(), stall, true),
        Chore::Publish
    );
    fx.parts.publication.publish(&task.id).await;

    let settled = fx.load(&task.id).await;
    assert_eq!(publication(&settled).state, PublicationState::Published);
    assert_eq!(publication(&settled).attempts, 2);
    assert_eq!(
        host(&fx).reviews(&item)[0].draft.event,
        ReviewEvent::Approve
    );
    let m = &fx.metrics().publications;
    assert_eq!(m.with_label_values(&["review", "retry"]).get(), 1);
    assert_eq!(m.with_label_values(&["review", "published"]).get(), 1);
}

#[tokio::test(start_paused = true)]
async fn an_issue_analysis_posts_one_comment_and_only_labels_the_repository_defines() {
    let fx = Fixture::new();
    let item = ItemRef {
        repo: verdict_proto::publication::RepoId {
            owner: "acme".to_owned(),
            name: "shop".to_owned(),
        },
        number: 12,
    };
    fx.repositories.insert_revision(REPO, "HEAD", HEAD);
    host(&fx).add_issue(Issue {
        item: item.clone(),
        state: ItemState::Open,
        title: "Crash on empty cart".to_owned(),
        body: Some("Steps".to_owned()),
        author: Author {
            login: "bob".to_owned(),
            bot: false,
        },
        labels: Vec::new(),
        clone_url: REPO.to_owned(),
        html_url: "https://github.com/acme/shop/issues/12".to_owned(),
    });
    host(&fx).define_labels(&item.repo, &["bug", "checkout"]);
    let submission = IssueAnalysisSubmission {
        issue_url: Some("https://github.com/acme/shop/issues/12".to_owned()),
        publish: true,
        ..Default::default()
    };
    let task = TaskDefaults::new(&fx.settings)
        .issue_analysis(submission, fx.now())
        .unwrap();
    fx.parts.records.create(&task).await.unwrap();
    fx.parts.intake.start(&task.id).await;
    let task = fx.load(&task.id).await;
    let envelope = "<SAKURA_ISSUE_ANALYSIS>\n<VERSION>1</VERSION>\n<CATEGORY>bug</CATEGORY>\n<PRIORITY>high</PRIORITY>\n<SUMMARY>Empty carts crash.</SUMMARY>\n<FEASIBILITY>Easy.</FEASIBILITY>\n<SUGGESTED_LABELS>\n<LABEL>\n<NAME>Bug</NAME>\n<CONFIDENCE>0.9</CONFIDENCE>\n<REASON>A crash.</REASON>\n</LABEL>\n<LABEL>\n<NAME>needs-triage</NAME>\n<CONFIDENCE>0.95</CONFIDENCE>\n<REASON>New.</REASON>\n</LABEL>\n</SUGGESTED_LABELS>\n<SUGGESTED_ASSIGNEES>\n</SUGGESTED_ASSIGNEES>\n<SUGGESTED_MILESTONE>NONE</SUGGESTED_MILESTONE>\n<DUPLICATE_OF>NONE</DUPLICATE_OF>\n<SUGGESTED_TITLE>NONE</SUGGESTED_TITLE>\n</SAKURA_ISSUE_ANALYSIS>";
    let value = verdict_proto::validate(
        verdict_proto::ProtocolId::IssueAnalysis,
        &Default::default(),
        envelope,
    )
    .unwrap();
    let result = stage_result(&task, "issue-analysis", StageKind::IssueAnalysis, ok(value));
    let now = fx.now();
    fx.parts
        .transitions
        .apply(&task.id, |t| pipeline::on_result(t, &result, now))
        .await
        .unwrap();
    fx.settle().await;

    let ended = fx.load(&task.id).await;
    assert_eq!(ended.state, TaskState::Completed);
    assert_eq!(publication(&ended).state, PublicationState::Published);
    let comments = host(&fx).comments(&item);
    assert_eq!(comments.len(), 1);
    assert!(comments[0].body.contains("Empty carts crash."));
    assert_eq!(
        host(&fx).applied_labels(&item),
        ["bug"],
        "the repository's spelling, and never a label it does not define"
    );
    assert!(
        host(&fx).statuses(&item.repo).is_empty(),
        "issues have no commit status"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stopping_scheduler_gives_its_claim_back_and_posts_nothing() {
    let fx = Fixture::new();
    let (task, item) = running_review(&fx, HEAD).await;
    fx.settle().await;
    fx.stop.cancel();

    let ended = finish(&fx, &task, ok(answer("approve", &[]))).await;

    let p = publication(&ended);
    assert_eq!(p.state, PublicationState::Pending, "{p:?}");
    assert_eq!(
        p.claimed_until_unix_ms, 0,
        "another replica may take it at once"
    );
    assert!(host(&fx).reviews(&item).is_empty());
    let stall = &crate::engine::sweeper::Limits {
        stall_after_ms: u64::try_from(STALL_AFTER.as_millis()).unwrap(),
        intake_timeout_ms: 300_000,
        recover_after_ms: 600_000,
    };
    tokio::time::advance(STALL_AFTER + Duration::from_secs(1)).await;
    assert_eq!(
        chore(&fx.load(&task.id).await, fx.now(), stall, true),
        Chore::Publish
    );
}
