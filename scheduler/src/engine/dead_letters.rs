//! Dead letters end their tasks (SPEC R5, issue 8): the scheduler consumes the dead-letter queue
//! and, for each message, finds the task it belongs to and ends it with the reason, as an
//! execution failure of the stage when the stage is known, so nothing the broker gave up on
//! leaves its task running forever. A dead letter is acknowledged only once its task is updated;
//! one that names no task the scheduler knows is logged and counted
//! (`verdict_dead_letters_total{queue="unidentified"}`).
//!
//! What a dead letter is (decision 116):
//! - a **stage result** that decodes within `broker.message_max_bytes` (the broker's delivery
//!   limit caught a result the scheduler could not store for a while) is applied like any other
//!   result: it was paid for and is still right;
//! - a **stage request** that decodes names its task and stage: the stage fails with kind
//!   `invalid_request` when the message was larger than a message may be, else `internal` (the
//!   broker gave up redelivering it);
//! - anything else (a poison message) is attributed by its headers — `x-verdict-task`, with
//!   `x-verdict-stage` on stage requests — and fails its stage, or its task, with kind
//!   `invalid_request`.

use std::sync::Arc;
use std::time::Duration;

use prometheus::IntCounterVec;
use verdict_backends::broker::{DEAD_LETTER_REASON_HEADER, Delivery, Message};
use verdict_backends::clock::Clock;
use verdict_proto::outcome::FailureKind;
use verdict_proto::redact::safe_preview;
use verdict_proto::wire::{self, StageRequest, StageResult};

use super::transition::Transitions;
use super::{Parts, SchedulerDeps, SchedulerSettings};
use crate::service::ServiceError;
use verdict_policy::pipeline;

/// The header naming the task a message belongs to (stage requests and results carry it).
pub(super) const TASK_HEADER: &str = "x-verdict-task";
/// The header naming the stage of a stage request.
pub(super) const STAGE_HEADER: &str = "x-verdict-stage";
/// Set on a stage result the scheduler dead-letters itself, so its dead letter says what it was
/// even when nothing in it decodes.
pub(super) const ORIGIN_HEADER: &str = "x-verdict-dead-letter-from";
/// [`ORIGIN_HEADER`]'s value on stage results.
pub(super) const FROM_RESULTS: &str = "results";

/// How long a dead letter that could not be applied is held before it is requeued, so a store
/// outage is not a busy loop.
const REQUEUE_PAUSE: Duration = Duration::from_millis(500);

/// The `queue` label of dead letters no task could be found for.
const UNIDENTIFIED: &str = "unidentified";

/// Consumes dead letters; cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct DeadLetters {
    transitions: Transitions,
    clock: Arc<dyn Clock>,
    message_max_bytes: usize,
    applied: IntCounterVec,
    counted: IntCounterVec,
    /// `verdict_dead_letters_consumed_total{what}`.
    consumed: IntCounterVec,
}

/// Who a dead letter belongs to, and what to do about it.
#[derive(Debug, Clone, PartialEq)]
enum Verdict {
    /// A stage result that still reads: apply it.
    Apply(Box<StageResult>),
    /// Fail this task (this stage of it, when known) with this kind and detail.
    Fail {
        task_id: String,
        stage_id: Option<String>,
        kind: FailureKind,
        detail: String,
    },
    /// Nothing says whose it is.
    Unidentified,
}

impl DeadLetters {
    pub(super) fn new(
        deps: &SchedulerDeps,
        settings: &SchedulerSettings,
        parts: &Parts,
    ) -> DeadLetters {
        DeadLetters {
            transitions: parts.transitions.clone(),
            clock: deps.clock.clone(),
            message_max_bytes: settings.message_max_bytes,
            applied: deps.metrics.results.clone(),
            counted: deps.metrics.dead_letters.clone(),
            consumed: deps.metrics.dead_letters_consumed.clone(),
        }
    }

    /// Ends the task of one dead letter, then settles the delivery.
    pub(super) async fn handle(&self, delivery: Delivery) {
        let message = &delivery.message;
        let reason = message
            .headers
            .get(DEAD_LETTER_REASON_HEADER)
            .filter(|r| !r.is_empty())
            .map_or("no reason given", String::as_str);
        let verdict = verdict(message, reason, self.message_max_bytes);
        let what = match &verdict {
            Verdict::Apply(_) => "result",
            Verdict::Fail { .. }
                if wire::decode::<StageRequest>(&message.body, usize::MAX).is_ok() =>
            {
                "request"
            }
            Verdict::Fail { .. } => "poison",
            Verdict::Unidentified => UNIDENTIFIED,
        };
        let outcome = match verdict {
            Verdict::Apply(result) => {
                let now = self.clock.now_unix_ms();
                let applied = self
                    .transitions
                    .apply(&result.task_id, |t| pipeline::on_result(t, &result, now))
                    .await;
                if applied.is_ok() {
                    self.applied
                        .with_label_values(&[result.stage.as_str(), result.outcome.label()])
                        .inc();
                }
                applied.map(|_| ())
            }
            Verdict::Fail {
                task_id,
                stage_id,
                kind,
                detail,
            } => {
                tracing::warn!(task = %task_id, stage = stage_id.as_deref().unwrap_or("-"), reason = %safe_preview(reason, 300), "DeadLetterEndsTask");
                self.transitions
                    .fail_stage(&task_id, stage_id.as_deref(), kind, &detail)
                    .await
                    .map(|_| ())
            }
            Verdict::Unidentified => {
                self.drop_unidentified(message, reason, None);
                let _ = delivery.acker.ack().await;
                return;
            }
        };
        match outcome {
            Ok(()) => {
                self.consumed.with_label_values(&[what]).inc();
                let _ = delivery.acker.ack().await;
            }
            Err(ServiceError::NotFound(task)) => {
                self.drop_unidentified(message, reason, Some(&task));
                let _ = delivery.acker.ack().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "dead letter not applied to its task; requeueing");
                tokio::time::sleep(REQUEUE_PAUSE).await;
                let _ = delivery.acker.requeue().await;
            }
        }
    }

    /// Logs and counts a dead letter that names no task this scheduler knows (`task`, when it
    /// names one that does not exist); it is then dropped.
    fn drop_unidentified(&self, message: &Message, reason: &str, task: Option<&str>) {
        self.counted.with_label_values(&[UNIDENTIFIED]).inc();
        self.consumed.with_label_values(&[UNIDENTIFIED]).inc();
        tracing::warn!(
            task = task.unwrap_or("-"),
            reason = %safe_preview(reason, 300),
            headers = ?message.headers.keys().collect::<Vec<_>>(),
            body = %safe_preview(&String::from_utf8_lossy(&message.body), 200),
            "DeadLetterUnidentified: a dead letter names no task this scheduler knows; dropped"
        );
    }
}

/// What `message`, dead-lettered for `reason`, is and whose it is; pure.
fn verdict(message: &Message, reason: &str, limit: usize) -> Verdict {
    let body = &message.body;
    if let Ok(result) = wire::decode::<StageResult>(body, limit) {
        return Verdict::Apply(Box::new(result));
    }
    let too_large = body.len() > limit;
    // Only the ids are read here, so a request over the limit is read anyway.
    if let Ok(request) = wire::decode::<StageRequest>(body, usize::MAX) {
        let kind = if too_large {
            FailureKind::InvalidRequest
        } else {
            FailureKind::Internal
        };
        return Verdict::Fail {
            task_id: request.task_id,
            stage_id: Some(request.stage_id),
            kind,
            detail: format!("its request was dead-lettered ({reason})"),
        };
    }
    let header = |name: &str| {
        message
            .headers
            .get(name)
            .filter(|v| !v.trim().is_empty())
            .cloned()
    };
    let Some(task_id) = header(TASK_HEADER) else {
        return Verdict::Unidentified;
    };
    let from_results = header(ORIGIN_HEADER).as_deref() == Some(FROM_RESULTS);
    let stage_id = header(STAGE_HEADER).filter(|_| !from_results);
    let what = match (&stage_id, from_results) {
        (_, true) => "a stage result of this task",
        (Some(_), false) => "its request",
        (None, false) => "a message of this task",
    };
    Verdict::Fail {
        task_id,
        stage_id,
        kind: FailureKind::InvalidRequest,
        detail: format!("{what} was dead-lettered ({reason})"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::collections::BTreeMap;

    use verdict_backends::broker::{Broker, Route};
    use verdict_proto::outcome::StageOutcome;
    use verdict_proto::wire::{EventType, StageKind, Usage, WIRE_VERSION};

    use super::*;
    use crate::engine::fixture::Fixture;
    use verdict_api::document::TaskState;
    use verdict_policy::task::StageStatus;

    const LIMIT: usize = 1 << 20;

    fn headers(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn scan_result(task_id: &str) -> StageResult {
        StageResult {
            version: WIRE_VERSION,
            task_id: task_id.to_owned(),
            stage_id: "scan".to_owned(),
            stage: StageKind::Scan,
            attempt: 1,
            outcome: StageOutcome::ExecutionFailure {
                kind: FailureKind::ProviderUnavailable,
                retryable: false,
                message: "HTTP 503".to_owned(),
            },
            usage: Usage::default(),
            started_unix_ms: 0,
            finished_unix_ms: 0,
            model: None,
            evidence_cut: None,
        }
    }

    /// The dead letter of `message` for `reason`, as the scheduler receives it.
    async fn dead_letter(fx: &Fixture, message: Message, reason: &str) -> Delivery {
        fx.broker.dead_letter(&message, reason).await.unwrap();
        let mut dead = fx.broker.consume(Route::DeadLetters, 1).await.unwrap();
        dead.next().await.unwrap()
    }

    #[test]
    fn each_kind_of_dead_letter_is_attributed() {
        let result = scan_result("t1");
        let body = wire::encode(&result).unwrap();
        let message = |body: Vec<u8>, h: &[(&str, &str)]| Message {
            body,
            headers: headers(h),
        };
        assert_eq!(
            verdict(&message(body.clone(), &[]), "delivery_limit", LIMIT),
            Verdict::Apply(Box::new(result))
        );
        assert_eq!(
            verdict(
                &message(body.clone(), &[(TASK_HEADER, "t1"), (ORIGIN_HEADER, FROM_RESULTS)]),
                "stage result is 40 bytes, above the 10-byte limit",
                10
            ),
            Verdict::Fail {
                task_id: "t1".to_owned(),
                stage_id: None,
                kind: FailureKind::InvalidRequest,
                detail: "a stage result of this task was dead-lettered (stage result is 40 bytes, above the 10-byte limit)".to_owned(),
            }
        );
        assert_eq!(
            verdict(
                &message(
                    b"not json".to_vec(),
                    &[(TASK_HEADER, "t2"), (STAGE_HEADER, "triage")]
                ),
                "stage request is not a JSON object",
                LIMIT
            ),
            Verdict::Fail {
                task_id: "t2".to_owned(),
                stage_id: Some("triage".to_owned()),
                kind: FailureKind::InvalidRequest,
                detail: "its request was dead-lettered (stage request is not a JSON object)"
                    .to_owned(),
            }
        );
        assert_eq!(
            verdict(
                &message(b"not json".to_vec(), &[(TASK_HEADER, " ")]),
                "r",
                LIMIT
            ),
            Verdict::Unidentified
        );
        assert_eq!(
            verdict(&message(b"{}".to_vec(), &[]), "r", LIMIT),
            Verdict::Unidentified
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_oversize_stage_request_ends_its_task_with_the_reason_then_is_acknowledged() {
        let fx = Fixture::new();
        let dead = DeadLetters::new(&fx.deps, &fx.settings, &fx.parts);
        let task = fx.started_unpublished_scan().await;
        let mut request = task.stage("scan").unwrap().request.clone();
        request.inputs.push(verdict_proto::wire::InputRef {
            name: "issue body".to_owned(),
            content: verdict_proto::wire::InputContent::Inline {
                text: "x".repeat(LIMIT),
            },
        });
        let body = wire::encode(&request).unwrap();
        let reason = format!(
            "stage request is {} bytes, above the {LIMIT}-byte limit",
            body.len()
        );
        let message = Message {
            body,
            headers: headers(&[(TASK_HEADER, &task.id), (STAGE_HEADER, "scan")]),
        };

        dead.handle(dead_letter(&fx, message, &reason).await).await;

        let ended = fx.load(&task.id).await;
        assert_eq!(ended.state, TaskState::Incomplete);
        assert_eq!(ended.failure_kind, Some(FailureKind::InvalidRequest));
        assert_eq!(
            ended.reason.as_deref(),
            Some(format!("stage scan could not run (invalid_request): its request was dead-lettered ({reason})").as_str())
        );
        assert_eq!(ended.stage("scan").unwrap().status, StageStatus::Done);
        let failed = fx.store.events_of_type(EventType::Failed);
        assert_eq!(failed.len(), 1);
        assert!(
            failed[0].message.contains("dead-lettered"),
            "{}",
            failed[0].message
        );
        assert_eq!(fx.broker.depth(Route::DeadLetters), 0);
        assert_eq!(fx.broker.unsettled(Route::DeadLetters), 0, "acknowledged");
    }

    #[tokio::test(start_paused = true)]
    async fn a_poison_result_fails_its_task_and_a_readable_one_is_applied() {
        let fx = Fixture::new();
        let dead = DeadLetters::new(&fx.deps, &fx.settings, &fx.parts);
        let poisoned = fx.started_unpublished_scan().await;
        let poison = Message {
            body: b"{\"version\": 1, \"task_id\": ".to_vec(),
            headers: headers(&[(TASK_HEADER, &poisoned.id), (ORIGIN_HEADER, FROM_RESULTS)]),
        };
        dead.handle(dead_letter(&fx, poison, "stage result is not a JSON object").await)
            .await;
        let ended = fx.load(&poisoned.id).await;
        assert_eq!(ended.state, TaskState::Incomplete);
        assert_eq!(ended.failure_kind, Some(FailureKind::InvalidRequest));
        assert_eq!(
            ended.reason.as_deref(),
            Some(
                "a stage result of this task was dead-lettered (stage result is not a JSON object)"
            )
        );

        let kept = fx.started_unpublished_scan().await;
        let result = Message {
            body: wire::encode(&scan_result(&kept.id)).unwrap(),
            headers: headers(&[(TASK_HEADER, &kept.id)]),
        };
        dead.handle(dead_letter(&fx, result, "delivery_limit").await)
            .await;
        let applied = fx.load(&kept.id).await;
        assert_eq!(applied.state, TaskState::Incomplete);
        assert_eq!(
            applied.failure_kind,
            Some(FailureKind::ProviderUnavailable),
            "the result's own outcome, not the dead letter's"
        );
        assert_eq!(fx.broker.depth(Route::DeadLetters), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dead_letter_of_no_known_task_is_counted_and_dropped() {
        let fx = Fixture::new();
        let dead = DeadLetters::new(&fx.deps, &fx.settings, &fx.parts);
        for message in [
            Message {
                body: b"garbage".to_vec(),
                headers: BTreeMap::new(),
            },
            Message {
                body: b"garbage".to_vec(),
                headers: headers(&[(TASK_HEADER, "gone"), (STAGE_HEADER, "scan")]),
            },
        ] {
            dead.handle(dead_letter(&fx, message, "not a JSON object").await)
                .await;
        }
        let counted = fx.metrics().dead_letters.with_label_values(&[UNIDENTIFIED]);
        assert_eq!(counted.get(), 2);
        assert_eq!(fx.broker.depth(Route::DeadLetters), 0);
        assert_eq!(fx.broker.unsettled(Route::DeadLetters), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_dead_letter_whose_task_cannot_be_updated_is_requeued_after_a_pause() {
        use crate::engine::fixture::Unreachable;
        use verdict_backends::store::memory::MemoryStore;
        let fx = Fixture::with_documents(Arc::new(Unreachable), Arc::new(MemoryStore::new()));
        let dead = DeadLetters::new(&fx.deps, &fx.settings, &fx.parts);
        let message = Message {
            body: b"garbage".to_vec(),
            headers: headers(&[(TASK_HEADER, "t1"), (STAGE_HEADER, "scan")]),
        };
        let delivery = dead_letter(&fx, message, "not a JSON object").await;
        let start = tokio::time::Instant::now();

        dead.handle(delivery).await;

        assert_eq!(start.elapsed(), REQUEUE_PAUSE);
        assert_eq!(
            fx.broker.depth(Route::DeadLetters),
            1,
            "kept for a later try"
        );
    }
}
