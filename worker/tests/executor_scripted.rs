//! The executor's rules on the in-memory scripted provider, in virtual time: repair rounds and
//! their modes, classification, retries and fallbacks, idempotent redelivery.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod common;

use common::{PROSE, PROSE_AGAIN, VALID_REVIEW, counter, far_future, request, rig, rig_with};

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use verdict_backends::store::memory::MemoryStore;
use verdict_proto::outcome::{FailureKind, StageOutcome};
use verdict_proto::repair::RepairMode;
use verdict_proto::wire::{EventType, StageKind};
use verdict_worker::executor::ExecutorSettings;
use verdict_worker::provider::scripted::{ScriptedProvider, Step};
use verdict_worker::provider::{Role, ToolChoice};
use verdict_worker::retry::RetryPolicy;

#[tokio::test(start_paused = true)]
async fn valid_first_time_is_ok_without_repair() {
    let r = rig(vec![Step::text(VALID_REVIEW)], ExecutorSettings::default());
    let req = request(
        StageKind::Review,
        RepairMode::Conversation,
        3,
        far_future(&r),
    );
    let e = r.executor.execute(&req, &CancellationToken::new()).await;
    match &e.result.outcome {
        StageOutcome::Ok {
            value,
            repaired,
            attempts,
        } => {
            assert_eq!(value["score"], 8);
            assert!(!repaired);
            assert_eq!(*attempts, 1);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(e.result.usage.calls, 1);
    assert_eq!(r.store.transcripts().len(), 1);
    assert_eq!(
        counter(
            &r.registry,
            "verdict_stage_outcomes_total",
            &[("stage", "review"), ("outcome", "ok")]
        ),
        1.0
    );
}

#[tokio::test(start_paused = true)]
async fn conversation_repair_keeps_history_drops_tools_and_quotes_the_error() {
    let r = rig(
        vec![Step::text(PROSE), Step::text(VALID_REVIEW)],
        ExecutorSettings::default(),
    );
    let req = request(
        StageKind::Review,
        RepairMode::Conversation,
        3,
        far_future(&r),
    );
    let e = r.executor.execute(&req, &CancellationToken::new()).await;
    assert!(
        matches!(
            e.result.outcome,
            StageOutcome::Ok {
                repaired: true,
                attempts: 2,
                ..
            }
        ),
        "{:?}",
        e.result.outcome
    );
    let sent = r.provider.requests();
    assert_eq!(sent.len(), 2);
    let repair = &sent[1];
    assert!(repair.tools.is_empty());
    assert_eq!(repair.tool_choice, ToolChoice::None);
    assert_eq!(repair.temperature, Some(0.0));
    // Full history: system, user (with the diff), the invalid answer, the repair instruction.
    assert_eq!(repair.messages.len(), 4);
    assert!(repair.messages[1].content.contains("diff --git"));
    assert_eq!(repair.messages[2].role, Role::Assistant);
    assert_eq!(repair.messages[2].content, PROSE);
    assert!(
        repair.messages[3]
            .content
            .contains("no <SAKURA_REVIEW> envelope found")
    );
    assert!(repair.messages[3].content.contains("repair round 1 of 3"));
    let rounds = r.store.events_of_type(EventType::ProtocolRepair);
    assert_eq!(rounds.len(), 1);
    assert_eq!(rounds[0].channel.as_deref(), Some("review:protocol_repair"));
    assert_eq!(rounds[0].data["attempt"], 1);
    assert_eq!(rounds[0].data["max"], 3);
    assert_eq!(rounds[0].data["outcome"], "repaired");
    assert!(
        rounds[0].data["error"]
            .as_str()
            .unwrap()
            .contains("no <SAKURA_REVIEW> envelope")
    );
}

/// Decision 182: a repair round that gives back the same invalid answer ends the repair; the
/// rounds left are not paid for, and the outcome counts the calls that were made.
#[tokio::test(start_paused = true)]
async fn a_round_that_repeats_the_invalid_answer_ends_the_repair() {
    let r = rig(
        vec![
            Step::text(PROSE),
            Step::text(PROSE_AGAIN),
            Step::text(&format!("  {PROSE_AGAIN}\n")),
            Step::text(VALID_REVIEW),
        ],
        ExecutorSettings::default(),
    );
    let req = request(
        StageKind::Review,
        RepairMode::Conversation,
        3,
        far_future(&r),
    );
    let e = r.executor.execute(&req, &CancellationToken::new()).await;
    match &e.result.outcome {
        StageOutcome::InvalidOutput {
            attempts, preview, ..
        } => {
            assert_eq!(
                *attempts, 3,
                "the answer and two rounds, the second a repeat"
            );
            assert_eq!(preview.trim(), PROSE_AGAIN);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.provider.requests().len(), 3, "round three was never sent");
    let outcomes: Vec<_> = r
        .store
        .events_of_type(EventType::ProtocolRepair)
        .iter()
        .map(|e| e.data["outcome"].clone())
        .collect();
    assert_eq!(outcomes, vec!["invalid", "invalid"]);
}

#[tokio::test(start_paused = true)]
async fn repaired_in_round_three_and_exhausted_after_the_last_round() {
    let r = rig(
        vec![
            Step::text(PROSE),
            Step::text(PROSE_AGAIN),
            Step::text(PROSE),
            Step::text(VALID_REVIEW),
        ],
        ExecutorSettings::default(),
    );
    let req = request(
        StageKind::Review,
        RepairMode::Conversation,
        3,
        far_future(&r),
    );
    let e = r.executor.execute(&req, &CancellationToken::new()).await;
    assert!(matches!(
        e.result.outcome,
        StageOutcome::Ok {
            repaired: true,
            attempts: 4,
            ..
        }
    ));
    assert_eq!(r.store.events_of_type(EventType::ProtocolRepair).len(), 3);

    let last = "Final answer: approve.";
    let r = rig(
        vec![
            Step::text(PROSE),
            Step::text(PROSE_AGAIN),
            Step::text(PROSE),
            Step::text(last),
        ],
        ExecutorSettings::default(),
    );
    let e = r.executor.execute(&req, &CancellationToken::new()).await;
    match &e.result.outcome {
        StageOutcome::InvalidOutput {
            stage,
            error,
            preview,
            attempts,
            diagnostics,
        } => {
            assert_eq!(stage, "review");
            assert!(error.contains("no <SAKURA_REVIEW> envelope"), "{error}");
            assert_eq!(preview, last);
            assert_eq!(*attempts, 4);
            assert!(!diagnostics.is_empty());
        }
        other => panic!("{other:?}"),
    }
    let outcomes: Vec<_> = r
        .store
        .events_of_type(EventType::ProtocolRepair)
        .iter()
        .map(|e| e.data["outcome"].clone())
        .collect();
    assert_eq!(outcomes, vec!["invalid", "invalid", "invalid"]);
    assert_eq!(
        counter(
            &r.registry,
            "verdict_protocol_repair_rounds_total",
            &[("protocol", "review"), ("result", "invalid")]
        ),
        3.0
    );
}

#[tokio::test(start_paused = true)]
async fn isolated_repair_sees_only_contract_response_and_error() {
    let triage_prose =
        "Looking at the repository, this change touches the parser and needs review.";
    let r = rig(
        vec![
            Step::text(triage_prose),
            Step::text(r#"{"review": true, "reason": "Parser change."}"#),
        ],
        ExecutorSettings::default(),
    );
    let mut req = request(StageKind::Triage, RepairMode::Isolated, 3, far_future(&r));
    req.repository = Some(verdict_proto::wire::RepositoryRef {
        url: "/srv/repos/secret-project".into(),
        commit: "abc123".into(),
        base: None,
    });
    let e = r.executor.execute(&req, &CancellationToken::new()).await;
    assert!(
        matches!(e.result.outcome, StageOutcome::Ok { repaired: true, .. }),
        "{:?}",
        e.result.outcome
    );
    let repair = &r.provider.requests()[1];
    assert_eq!(repair.messages.len(), 2);
    assert_eq!(repair.messages[0].role, Role::System);
    let all = format!(
        "{}\n{}",
        repair.messages[0].content, repair.messages[1].content
    );
    assert!(all.contains("\"review\""), "the contract");
    assert!(all.contains(triage_prose), "the invalid response");
    assert!(all.contains("$"), "the error");
    assert!(!all.contains("diff --git"), "no original task material");
    assert!(!all.contains("secret-project"), "no repository path");
    assert!(repair.tools.is_empty());
    assert_eq!(repair.temperature, Some(0.0));
}

#[tokio::test(start_paused = true)]
async fn consistency_warning_when_the_repair_changes_the_finding_count() {
    let original = "<SAKURA_REVIEW>\n<VERSION>1</VERSION>\n<SCORE>7</SCORE>\n<DECISION>comment</DECISION>\n<DECISION_REASON>\nx\n</DECISION_REASON>\n<SUMMARY>\ny\n</SUMMARY>\n<FINDINGS>\n<FINDING>\n<SEVERITY>minor</SEVERITY>\n</FINDING>\n</FINDINGS>\n</SAKURA_REVIEW>\n";
    let r = rig(
        vec![Step::text(original), Step::text(VALID_REVIEW)],
        ExecutorSettings::default(),
    );
    let req = request(
        StageKind::Review,
        RepairMode::Conversation,
        3,
        far_future(&r),
    );
    let e = r.executor.execute(&req, &CancellationToken::new()).await;
    assert!(matches!(
        e.result.outcome,
        StageOutcome::Ok { repaired: true, .. }
    ));
    let w = r.store.events_of_type(EventType::RepairConsistencyWarning);
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].data["original"], 1);
    assert_eq!(w[0].data["repaired"], 0);
    assert_eq!(
        counter(
            &r.registry,
            "verdict_protocol_repair_consistency_warnings_total",
            &[("protocol", "review")]
        ),
        1.0
    );
}

fn fast_retries(budget: u32) -> ExecutorSettings {
    ExecutorSettings {
        retry: RetryPolicy {
            budget,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
            max_inline_wait: Duration::from_secs(30),
        },
        ..ExecutorSettings::default()
    }
}

#[tokio::test(start_paused = true)]
async fn five_xx_until_the_budget_is_spent_is_provider_unavailable() {
    let steps = (0..4)
        .map(|_| Step::fail(FailureKind::ProviderUnavailable))
        .collect();
    let r = rig(steps, fast_retries(3));
    let req = request(
        StageKind::Review,
        RepairMode::Conversation,
        3,
        far_future(&r),
    );
    let e = r.executor.execute(&req, &CancellationToken::new()).await;
    assert_eq!(
        e.result.outcome.failure_kind(),
        Some(FailureKind::ProviderUnavailable)
    );
    assert!(matches!(
        e.result.outcome,
        StageOutcome::ExecutionFailure {
            retryable: false,
            ..
        }
    ));
    assert_eq!(r.provider.requests().len(), 4, "one call and three retries");
    assert_eq!(
        counter(
            &r.registry,
            "verdict_provider_retries_total",
            &[("kind", "provider_unavailable")]
        ),
        3.0
    );
}

#[tokio::test(start_paused = true)]
async fn auth_is_not_retried_and_never_becomes_a_decision() {
    let r = rig(
        vec![Step::fail(FailureKind::Auth), Step::text(VALID_REVIEW)],
        fast_retries(3),
    );
    let req = request(
        StageKind::Review,
        RepairMode::Conversation,
        3,
        far_future(&r),
    );
    let e = r.executor.execute(&req, &CancellationToken::new()).await;
    assert_eq!(e.result.outcome.failure_kind(), Some(FailureKind::Auth));
    assert_eq!(r.provider.requests().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn execution_failure_during_repair_is_an_execution_failure() {
    let r = rig(
        vec![Step::text(PROSE), Step::fail(FailureKind::Auth)],
        fast_retries(3),
    );
    let req = request(
        StageKind::Review,
        RepairMode::Conversation,
        3,
        far_future(&r),
    );
    let e = r.executor.execute(&req, &CancellationToken::new()).await;
    assert_eq!(e.result.outcome.failure_kind(), Some(FailureKind::Auth));
    let rounds = r.store.events_of_type(EventType::ProtocolRepair);
    assert_eq!(rounds[0].data["outcome"], "execution_failure");
}

#[tokio::test(start_paused = true)]
async fn fallback_model_is_tried_after_the_primary_budget() {
    let mut steps: Vec<Step> = (0..3)
        .map(|_| Step::fail(FailureKind::ProviderUnavailable))
        .collect();
    steps.push(Step::text(VALID_REVIEW));
    let mut settings = fast_retries(2);
    settings
        .fallback_models
        .insert(StageKind::Review, vec!["model-b".into()]);
    let r = rig(steps, settings);
    let req = request(
        StageKind::Review,
        RepairMode::Conversation,
        3,
        far_future(&r),
    );
    let e = r.executor.execute(&req, &CancellationToken::new()).await;
    assert!(
        matches!(e.result.outcome, StageOutcome::Ok { .. }),
        "{:?}",
        e.result.outcome
    );
    let models: Vec<String> = r
        .provider
        .requests()
        .iter()
        .map(|q| q.model.clone())
        .collect();
    assert_eq!(models, ["model-a", "model-a", "model-a", "model-b"]);
}

#[tokio::test(start_paused = true)]
async fn long_retry_after_requeues_instead_of_holding_the_slot() {
    let mut err = verdict_worker::provider::ProviderError::new(FailureKind::RateLimited, "429");
    err.retry_after = Some(Duration::from_secs(120));
    let r = rig(vec![Step::Fail(err)], fast_retries(3));
    let req = request(
        StageKind::Review,
        RepairMode::Conversation,
        3,
        far_future(&r),
    );
    let e = r.executor.execute(&req, &CancellationToken::new()).await;
    assert_eq!(e.requeue_after, Some(Duration::from_secs(120)));
    assert!(matches!(
        e.result.outcome,
        StageOutcome::ExecutionFailure {
            kind: FailureKind::RateLimited,
            retryable: true,
            ..
        }
    ));
}

#[tokio::test(start_paused = true)]
async fn cancellation_aborts_an_in_flight_call() {
    let r = rig(
        vec![Step::text(VALID_REVIEW).after(Duration::from_secs(3600))],
        fast_retries(3),
    );
    let req = request(
        StageKind::Review,
        RepairMode::Conversation,
        3,
        far_future(&r),
    );
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        c.cancel();
    });
    let e = r.executor.execute(&req, &cancel).await;
    assert_eq!(
        e.result.outcome.failure_kind(),
        Some(FailureKind::Cancelled)
    );
}

#[tokio::test(start_paused = true)]
async fn a_redelivered_stage_reuses_paid_responses() {
    let journal = Arc::new(MemoryStore::new());
    let first = Arc::new(ScriptedProvider::new(
        "scripted",
        "model-a",
        vec![Step::text(PROSE), Step::text(VALID_REVIEW)],
    ));
    let r = rig_with(first.clone(), ExecutorSettings::default(), journal.clone());
    let req = request(
        StageKind::Review,
        RepairMode::Conversation,
        3,
        far_future(&r),
    );
    let e1 = r.executor.execute(&req, &CancellationToken::new()).await;
    assert!(matches!(e1.result.outcome, StageOutcome::Ok { .. }));
    assert_eq!(r.store.journal_len(), 2);

    // A second delivery of the same stage (worker crashed before the ack): no new calls.
    let second = Arc::new(ScriptedProvider::new("scripted", "model-a", vec![]));
    let r2 = rig_with(second.clone(), ExecutorSettings::default(), journal.clone());
    let e2 = r2.executor.execute(&req, &CancellationToken::new()).await;
    assert_eq!(e2.result.outcome, e1.result.outcome);
    assert_eq!(second.requests().len(), 0, "the provider is not paid twice");
    assert_eq!(
        counter(&r2.registry, "verdict_provider_responses_reused_total", &[]),
        2.0
    );
}
