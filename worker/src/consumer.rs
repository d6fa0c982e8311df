//! The worker process loop: stage requests from the broker to the executor and results back,
//! effectively once (SPEC E7, Q1, Q4, R1): claim before running, record before acknowledging,
//! requeue with delay instead of holding a slot, dead-letter what cannot be read, stop cleanly.
//!
//! A claim is a lease: short, renewed while the stage runs, so it outlives its worker by at most
//! one TTL. A delivery is never acknowledged away while its stage is unfinished: a redelivery
//! that finds another worker's live claim — the worker may be running it, or may have died with
//! the claim not yet expired — is *deferred*: published again for when that claim would have
//! lapsed, so it takes the stage over if nobody renewed it, or finds the result. A store that
//! cannot be reached defers the same way. A result that cannot be recorded is held, with its
//! delivery, and recorded again until the store returns (bounded), so the provider is not paid
//! again for it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use verdict_proto::outcome::{FailureKind, StageOutcome};
use verdict_proto::wire::{self, EventType, Priority, StageRequest, StageResult};

use crate::executor::StageExecutor;
use verdict_backends::broker::{Broker, BrokerError, Delivery, Message, Route};
use verdict_backends::ratelimit::SlotLimiter;
use verdict_backends::store::{CancelSignals, Claim, ResultStore};

/// How long after another worker's lease would lapse its stage's deferred delivery comes back, at
/// most twice this with jitter: a live holder renews every third of the lease, long before, so a
/// moment past the lapse is enough to tell a dead holder from a live one.
const PAST_LEASE: Duration = Duration::from_millis(500);

/// How long a recorded result's delivery is held while the broker cannot take the result: well
/// below RabbitMQ's `consumer_timeout` (30 min by default), which would close the channel over a
/// delivery held longer.
const RESULT_PATIENCE: Duration = Duration::from_secs(10 * 60);

/// How a worker consumes.
#[derive(Debug, Clone)]
pub struct ConsumerSettings {
    /// A name unique among workers (claims are held in its name).
    pub worker_id: String,
    /// Interactive stages in flight (and the interactive queue's prefetch).
    pub concurrency: u16,
    /// Additional slots for bulk stages (0: this worker takes no bulk work).
    pub bulk_concurrency: u16,
    /// Requeues with delay allowed for a retryable failure before it is final (SPEC E5).
    pub max_requeues: u32,
    /// Largest stage request accepted; larger ones are dead-lettered (SPEC R2).
    pub message_max_bytes: usize,
    /// How long a claim lasts without renewal; renewed every third of it while a stage runs.
    /// A dead worker's stages are taken over at most this long after it stopped renewing.
    pub claim_ttl: Duration,
    /// How long a finished stage's result is held, and recording retried, while the state store
    /// is unreachable, before the stage is deferred for later (its responses stay journaled).
    pub record_retry: Duration,
    /// Bulk stages of one organisation running at once across the pool (SPEC Q6); 0: no cap.
    /// Every worker of a pool must use the same value.
    pub bulk_per_organisation: u32,
    /// On shutdown, how long in-flight stages may take to finish before they are cancelled and
    /// given back to the queue (SPEC Q4).
    pub shutdown_grace: Duration,
}

/// One worker's consumer.
#[derive(Debug, Clone)]
pub struct Consumer {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    executor: StageExecutor,
    broker: Arc<dyn Broker>,
    results: Arc<dyn ResultStore>,
    cancels: Arc<dyn CancelSignals>,
    /// The pool's per-organisation caps on bulk stages.
    slots: Arc<dyn SlotLimiter>,
    settings: ConsumerSettings,
    /// Cancellation tokens of running stages, by task id, each with a unique number.
    running: Mutex<HashMap<String, Vec<(u64, CancellationToken)>>>,
    /// The (task, stage) pairs this process is running: a second delivery of one of them (the
    /// broker redelivers after a channel recovery) is deferred, not run twice side by side.
    in_flight: Mutex<HashSet<(String, String)>>,
    next_run: std::sync::atomic::AtomicU64,
}

impl Consumer {
    pub fn new(
        executor: StageExecutor,
        broker: Arc<dyn Broker>,
        results: Arc<dyn ResultStore>,
        cancels: Arc<dyn CancelSignals>,
        slots: Arc<dyn SlotLimiter>,
        settings: ConsumerSettings,
    ) -> Consumer {
        Consumer {
            inner: Arc::new(Inner {
                executor,
                broker,
                results,
                cancels,
                slots,
                settings,
                running: Mutex::new(HashMap::new()),
                in_flight: Mutex::new(HashSet::new()),
                next_run: std::sync::atomic::AtomicU64::new(0),
            }),
        }
    }

    /// Consumes until `shutdown` fires, then stops taking work, lets in-flight stages finish
    /// within the grace period, cancels the rest and gives them back to the queue.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<(), BrokerError> {
        let s = &self.inner.settings;
        let mut interactive = self
            .inner
            .broker
            .consume(Route::Stages(Priority::Interactive), s.concurrency.max(1))
            .await?;
        let mut bulk = if s.bulk_concurrency > 0 {
            Some(
                self.inner
                    .broker
                    .consume(Route::Stages(Priority::Bulk), s.bulk_concurrency)
                    .await?,
            )
        } else {
            None
        };
        // What this process sees of its queues (SPEC O1): the prefetch it subscribed with, and
        // below, each delivery held from receipt until it is settled.
        let metrics = &self.inner.executor.deps().metrics;
        let interactive_label = crate::metrics::queue_label(Priority::Interactive);
        let bulk_label = crate::metrics::queue_label(Priority::Bulk);
        let limits = [
            (interactive_label, i64::from(s.concurrency.max(1))),
            (
                bulk_label,
                if bulk.is_some() {
                    i64::from(s.bulk_concurrency)
                } else {
                    0
                },
            ),
        ];
        for (queue, limit) in limits {
            metrics
                .prefetch_limit
                .with_label_values(&[queue])
                .add(limit);
        }
        let held = |queue: &str| Held::new(metrics.prefetch_in_use.with_label_values(&[queue]));
        let mut cancelled = match self.inner.cancels.subscribe().await {
            Ok(rx) => Some(rx),
            Err(e) => {
                tracing::warn!(error = %e, "task cancellations not subscribed; stages are checked at start only");
                None
            }
        };
        // Fires when the grace period is over: in-flight stages stop and are requeued.
        let hard_stop = CancellationToken::new();
        let tracker = TaskTracker::new();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                d = interactive.next() => match d {
                    Some(d) => { let this = self.clone(); let stop = hard_stop.clone(); let held = held(interactive_label); tracker.spawn(async move { this.handle(d, stop).await; drop(held); }); }
                    None => break,
                },
                d = next_or_pending(&mut bulk) => match d {
                    Some(d) => { let this = self.clone(); let stop = hard_stop.clone(); let held = held(bulk_label); tracker.spawn(async move { this.handle(d, stop).await; drop(held); }); }
                    None => bulk = None,
                },
                id = recv_or_pending(&mut cancelled) => match id {
                    Some(id) => self.cancel_task(&id),
                    None => cancelled = None,
                },
            }
        }
        // Q4: no new deliveries; in-flight stages get the grace period.
        drop(interactive);
        drop(bulk);
        tracker.close();
        if tokio::time::timeout(s.shutdown_grace, tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("grace period over; cancelling in-flight stages and requeueing them");
            hard_stop.cancel();
            tracker.wait().await;
        }
        for (queue, limit) in limits {
            metrics
                .prefetch_limit
                .with_label_values(&[queue])
                .sub(limit);
        }
        Ok(())
    }

    fn count(&self, result: &str) {
        self.inner
            .executor
            .deps()
            .metrics
            .deliveries
            .with_label_values(&[result])
            .inc();
    }

    fn cancel_task(&self, task_id: &str) {
        let running = self
            .inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(tokens) = running.get(task_id) {
            for (_, t) in tokens {
                t.cancel();
            }
        }
    }

    /// Handles one delivery to the end: every path settles it exactly once.
    async fn handle(&self, delivery: Delivery, hard_stop: CancellationToken) {
        let s = &self.inner.settings;
        let request = match wire::decode::<StageRequest>(
            &delivery.message.body,
            s.message_max_bytes,
        ) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "dead-lettering a poison stage request");
                self.count("poison");
                match self
                    .inner
                    .broker
                    .dead_letter(&delivery.message, &e.to_string())
                    .await
                {
                    Ok(()) => settle(delivery, Settle::Ack).await,
                    Err(err) => {
                        tracing::warn!(error = %err, "dead-lettering failed; giving the message back");
                        settle(delivery, Settle::Requeue).await;
                    }
                }
                return;
            }
        };
        let span = tracing::info_span!("consume_stage", task_id = %request.task_id, stage_id = %request.stage_id, attempt = request.attempt);
        verdict_backends::trace::set_parent(&span, &delivery.message.headers);
        self.handle_request(delivery, request, hard_stop)
            .instrument(span)
            .await;
    }

    async fn handle_request(
        &self,
        delivery: Delivery,
        request: StageRequest,
        hard_stop: CancellationToken,
    ) {
        let s = &self.inner.settings;
        let (task, stage) = (request.task_id.clone(), request.stage_id.clone());
        if matches!(self.inner.cancels.is_cancelled(&task).await, Ok(true)) {
            // The task was aborted: its stages are not run and nothing is published.
            self.count("task_cancelled");
            settle(delivery, Settle::Ack).await;
            return;
        }
        let key = (task.clone(), stage.clone());
        if !self.lock_in_flight().insert(key.clone()) {
            tracing::info!("stage already running in this process; deferring this delivery");
            self.count("deferred");
            let settle_as = self.publish_later(&request, s.claim_ttl, false).await;
            settle(delivery, settle_as).await;
            return;
        }
        self.run_claimed(delivery, request, hard_stop).await;
        self.lock_in_flight().remove(&key);
    }

    fn lock_in_flight(&self) -> std::sync::MutexGuard<'_, HashSet<(String, String)>> {
        self.inner
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Claims the stage, then runs it, records and publishes its result, and settles the
    /// delivery (or defers it, when the stage is held elsewhere or the store is unreachable).
    async fn run_claimed(
        &self,
        delivery: Delivery,
        request: StageRequest,
        hard_stop: CancellationToken,
    ) {
        let s = &self.inner.settings;
        let (task, stage) = (request.task_id.clone(), request.stage_id.clone());
        match self
            .inner
            .results
            .claim(&task, &stage, &s.worker_id, s.claim_ttl)
            .await
        {
            Ok(Claim::Acquired) => {}
            Ok(Claim::Done(result)) => {
                // Redelivered after its result was recorded (E7): publish it again (the first
                // publication may be what was lost) and acknowledge, without running.
                let settle_as = self.deliver_result(&result, &hard_stop).await;
                self.count("already_done");
                settle(delivery, settle_as).await;
                return;
            }
            Ok(Claim::HeldBy { owner, expires_in }) => {
                // Another worker's live claim: it is running the stage, or it died and its
                // lease has not lapsed yet. This copy comes back when the lease would have
                // lapsed — never dropped, or a dead worker's stage would be lost.
                tracing::info!(%owner, ?expires_in, "stage held by another worker; deferring this delivery");
                self.count("deferred");
                let delay = expires_in + PAST_LEASE + jitter(PAST_LEASE);
                let settle_as = self.publish_later(&request, delay, false).await;
                settle(delivery, settle_as).await;
                return;
            }
            Err(e) => {
                // The store is unreachable: try again in a while, without growing the
                // delivery count towards the dead-letter limit.
                tracing::warn!(error = %e, "cannot claim the stage; deferring it");
                self.count("given_back");
                let delay = s.claim_ttl / 3 + jitter(s.claim_ttl / 3);
                let settle_as = self.publish_later(&request, delay, false).await;
                settle(delivery, settle_as).await;
                return;
            }
        }

        let slot = self.organisation_slot(&request);
        if let Some(slot) = &slot
            && !self.take_slot(slot).await
        {
            // The organisation has its share of the pool: this stage waits its turn, behind the
            // other organisations' work (the deferred copy goes to the back of the queue).
            let _ = self
                .inner
                .results
                .release(&task, &stage, &s.worker_id)
                .await;
            self.count("organisation_capped");
            let delay = s.claim_ttl / 3 + jitter(s.claim_ttl);
            let settle_as = self.publish_later(&request, delay, false).await;
            settle(delivery, settle_as).await;
            return;
        }
        let token = hard_stop.child_token();
        let run = self.track(&task, &token);
        let lease = self.renew_claim(&task, &stage, slot.clone(), token.clone());
        let (execution, transcript) = self.inner.executor.execute_unstored(&request, &token).await;
        self.untrack(&task, run);
        if lease.lost.is_cancelled() {
            transcript.store().await;
            // Another worker took the stage over (this one could not renew its lease in time):
            // it runs the stage from its own delivery, and whichever result is recorded first
            // wins. This delivery is a duplicate now.
            lease.stop.cancel();
            self.give_slot_back(slot.as_ref()).await;
            self.count("taken_over");
            settle(delivery, Settle::Ack).await;
            return;
        }

        let shutdown_cancelled = hard_stop.is_cancelled()
            && matches!(
                execution.result.outcome,
                StageOutcome::ExecutionFailure {
                    kind: FailureKind::Cancelled,
                    ..
                }
            );
        let requeue = execution
            .requeue_after
            .filter(|_| request.attempt <= s.max_requeues);
        // Counted as soon as the stage has run, before results travel: what happens to this
        // delivery is decided here.
        self.count(if shutdown_cancelled {
            "given_back"
        } else if requeue.is_some() {
            "requeued_later"
        } else {
            "executed"
        });
        // The transcript is stored while the outcome travels, and before the delivery is
        // settled, so an acknowledged stage always has its transcript.
        let settle_as = if shutdown_cancelled {
            // Q4: not a task cancellation — give the stage back for another worker.
            transcript.store().await;
            Settle::Requeue
        } else if let Some(delay) = requeue {
            tokio::join!(
                self.publish_later(&request, delay, true),
                transcript.store()
            )
            .0
        } else {
            tokio::join!(
                self.finish(&request, &execution.result, &hard_stop),
                transcript.store()
            )
            .0
        };
        // The lease is kept until the result is recorded (or the stage deferred).
        lease.stop.cancel();
        let release = async {
            self.give_slot_back(slot.as_ref()).await;
            if let Err(e) = self
                .inner
                .results
                .release(&task, &stage, &s.worker_id)
                .await
            {
                tracing::debug!(error = %e, "claim not released; it expires on its own");
            }
        };
        if settle_as == Settle::Ack {
            // Recorded or deferred: no copy of this delivery can come back, so the claim is
            // released while the ack travels instead of one round trip before it.
            tokio::join!(release, settle(delivery, settle_as));
        } else {
            // A requeued copy must find the claim already released, or it would be deferred.
            release.await;
            settle(delivery, settle_as).await;
        }
    }

    /// Records the result (first write wins), then publishes the stored one. Only a recorded
    /// result is acknowledged. While the store is unreachable the result is held and recording
    /// retried (with the delivery unacknowledged and the lease renewed) for
    /// [`ConsumerSettings::record_retry`]; after that the stage is deferred, and its re-run
    /// answers from the response journal instead of paying the provider again.
    async fn finish(
        &self,
        request: &StageRequest,
        result: &StageResult,
        hard_stop: &CancellationToken,
    ) -> Settle {
        let s = &self.inner.settings;
        let deadline = tokio::time::Instant::now() + s.record_retry;
        let mut wait = Duration::from_millis(200);
        let stored = loop {
            match self.inner.results.record(result).await {
                Ok(stored) => break stored,
                Err(e) if e.is_retryable() && tokio::time::Instant::now() + wait < deadline => {
                    tracing::warn!(error = %e, "result not recorded; holding it and retrying");
                    self.count("record_retried");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(5));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "result not recorded; deferring the stage");
                    return self.publish_later(request, s.claim_ttl, false).await;
                }
            }
        };
        self.deliver_result(&stored, hard_stop).await
    }

    /// Publishes a recorded result; `Ack` once the broker confirmed it. While the broker cannot
    /// take it for a reason that passes (an outage, a resource alarm holding publishers back) the
    /// delivery is held, its lease renewed, and publishing tried again for up to
    /// [`RESULT_PATIENCE`]: given back instead, every attempt would count towards the queue's
    /// delivery limit, and a long alarm would dead-letter stages whose results are recorded.
    /// Given back (`Requeue`) after that, on a failure that will not pass, or at a hard stop.
    async fn deliver_result(&self, result: &StageResult, hard_stop: &CancellationToken) -> Settle {
        let give_up = tokio::time::Instant::now() + RESULT_PATIENCE;
        let mut wait = Duration::from_secs(1);
        loop {
            match self.publish_result(result).await {
                Ok(()) => return Settle::Ack,
                Err(e)
                    if e.is_retryable()
                        && !hard_stop.is_cancelled()
                        && tokio::time::Instant::now() + wait < give_up =>
                {
                    tracing::warn!(error = %e, wait_seconds = wait.as_secs(), "result not published; holding the delivery and publishing again");
                    tokio::select! {
                        () = hard_stop.cancelled() => return Settle::Requeue,
                        () = tokio::time::sleep(wait) => {}
                    }
                    wait = (wait * 2).min(Duration::from_secs(30));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "result not published; giving the delivery back to be redelivered, which publishes it again");
                    return Settle::Requeue;
                }
            }
        }
    }

    async fn publish_result(&self, result: &StageResult) -> Result<(), BrokerError> {
        let body = wire::encode(result).map_err(|e| BrokerError::Other(e.to_string()))?;
        let mut message = Message {
            body,
            headers: Default::default(),
        };
        message
            .headers
            .insert("x-verdict-task".into(), result.task_id.clone());
        verdict_backends::trace::inject(&mut message.headers);
        self.inner.broker.publish(Route::Results, &message).await
    }

    /// The request published again to come back after `delay`, then this delivery acknowledged
    /// (so a deferral never counts towards the queue's delivery limit). `retry`: a new attempt
    /// after a retryable failure (E5: a long wait spent in a delay queue, not in a worker slot),
    /// counted and announced, never before `delay`; otherwise the same attempt, deferred, back
    /// by `delay` at the latest — a delay queue at or below it, so a dead worker's stage is taken
    /// over about when its lease lapses, not at the next longer queue (a copy back early finds
    /// the lease live and is deferred again, for less).
    async fn publish_later(&self, request: &StageRequest, delay: Duration, retry: bool) -> Settle {
        let mut next = request.clone();
        let delay = if retry {
            next.attempt += 1;
            delay
        } else {
            self.inner.broker.delay_within(delay)
        };
        let Ok(body) = wire::encode(&next) else {
            return Settle::Requeue;
        };
        let mut message = Message {
            body,
            headers: Default::default(),
        };
        message
            .headers
            .insert("x-verdict-task".into(), next.task_id.clone());
        verdict_backends::trace::inject(&mut message.headers);
        let published = self
            .inner
            .broker
            .publish_delayed(Route::Stages(next.priority), &message, delay)
            .await;
        if let Err(e) = published {
            tracing::warn!(error = %e, "delayed requeue failed; giving the message back now");
            return Settle::Requeue;
        }
        if retry {
            let mut e = verdict_backends::store::event(
                &next.task_id,
                Some(&next.stage_id),
                self.inner.executor.deps().clock.now_unix_ms(),
                EventType::StageRetry,
                format!(
                    "Stage {} will be retried in {} s (attempt {}).",
                    next.stage_id,
                    delay.as_secs(),
                    next.attempt
                ),
            );
            e.data =
                serde_json::json!({"delay_ms": delay.as_millis() as u64, "attempt": next.attempt});
            self.inner.executor.deps().events.emit(e).await;
        }
        Settle::Ack
    }

    /// Keeps the claim alive while the stage runs and until its result is recorded. When a
    /// renewal finds another worker holding the claim (this worker could not renew in time and
    /// the stage was taken over), the run is cancelled and `lost` fires.
    fn renew_claim(
        &self,
        task: &str,
        stage: &str,
        slot: Option<Slot>,
        running: CancellationToken,
    ) -> Lease {
        let lease = Lease {
            stop: CancellationToken::new(),
            lost: CancellationToken::new(),
        };
        let this = self.clone();
        let (task, stage) = (task.to_owned(), stage.to_owned());
        let (stop, lost) = (lease.stop.clone(), lease.lost.clone());
        let every = this.inner.settings.claim_ttl / 3;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(every) => {
                        let s = &this.inner.settings;
                        match this.inner.results.claim(&task, &stage, &s.worker_id, s.claim_ttl).await {
                            Ok(Claim::HeldBy { owner, .. }) => {
                                tracing::warn!(%owner, "the stage was taken over by another worker; stopping it here");
                                lost.cancel();
                                running.cancel();
                                return;
                            }
                            // Done: recorded by a duplicate; this run's result loses the race.
                            Ok(_) => {}
                            Err(e) => tracing::warn!(error = %e, "claim renewal failed"),
                        }
                        if let Some(slot) = &slot
                            && let Err(e) = this.inner.slots.acquire_slot(&slot.key, &slot.holder, slot.capacity, s.claim_ttl).await
                        {
                            tracing::warn!(error = %e, "organisation slot renewal failed");
                        }
                    }
                }
            }
        });
        lease
    }

    /// The slot a bulk stage needs under its organisation's cap, when there is a cap and the
    /// stage names an organisation's repository.
    fn organisation_slot(&self, request: &StageRequest) -> Option<Slot> {
        let s = &self.inner.settings;
        if s.bulk_per_organisation == 0 || request.priority != Priority::Bulk {
            return None;
        }
        let org = organisation(&request.repository.as_ref()?.url)?;
        Some(Slot {
            key: format!("bulk:{org}"),
            holder: format!("{}/{}/{}", s.worker_id, request.task_id, request.stage_id),
            capacity: s.bulk_per_organisation,
        })
    }

    /// Takes the slot; a limiter that cannot be reached counts as no room (the cap holds, the
    /// stage comes back later).
    async fn take_slot(&self, slot: &Slot) -> bool {
        let ttl = self.inner.settings.claim_ttl;
        match self
            .inner
            .slots
            .acquire_slot(&slot.key, &slot.holder, slot.capacity, ttl)
            .await
        {
            Ok(taken) => taken,
            Err(e) => {
                tracing::warn!(error = %e, "organisation slot not taken; the stage waits");
                false
            }
        }
    }

    async fn give_slot_back(&self, slot: Option<&Slot>) {
        if let Some(slot) = slot
            && let Err(e) = self.inner.slots.release_slot(&slot.key, &slot.holder).await
        {
            tracing::debug!(error = %e, "organisation slot not given back; it lapses");
        }
    }

    fn track(&self, task: &str, token: &CancellationToken) -> u64 {
        let run = self
            .inner
            .next_run
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut running = self
            .inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        running
            .entry(task.to_owned())
            .or_default()
            .push((run, token.clone()));
        run
    }

    fn untrack(&self, task: &str, run: u64) {
        let mut running = self
            .inner
            .running
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(tokens) = running.get_mut(task) {
            tokens.retain(|(r, _)| *r != run);
            if tokens.is_empty() {
                running.remove(task);
            }
        }
    }
}

/// One bulk stage's slot of its organisation's cap.
#[derive(Debug, Clone)]
struct Slot {
    key: String,
    holder: String,
    capacity: u32,
}

/// The organisation a repository belongs to, as `host/owner` (`github.com/acme`), for
/// `https://host/owner/repo`, `ssh://…` and `git@host:owner/repo` URLs; `None` for local paths.
fn organisation(url: &str) -> Option<String> {
    let (host, path) = match url.split_once("://") {
        // scheme://[user@]host[:port]/owner/repo
        Some((_, rest)) => {
            let (authority, path) = rest.split_once('/')?;
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            (host, path)
        }
        // [user@]host:owner/repo (scp-like); a path (`/srv/x`, `./x`) has no `host:` part.
        None => {
            let (authority, path) = url.split_once(':')?;
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            if host.contains('/') {
                return None;
            }
            (host, path)
        }
    };
    let owner = path.trim_start_matches('/').split('/').next()?;
    if host.is_empty() || owner.is_empty() {
        return None;
    }
    Some(format!(
        "{}/{}",
        host.to_ascii_lowercase(),
        owner.to_ascii_lowercase()
    ))
}

/// A running stage's claim renewal: `stop` ends it; `lost` fires when another worker took the
/// stage over.
struct Lease {
    stop: CancellationToken,
    lost: CancellationToken,
}

/// A uniformly random duration in `[0, max]`, so deferred copies of many stages do not all come
/// back at once.
fn jitter(max: Duration) -> Duration {
    crate::retry::full_jitter(max)
}

#[cfg(test)]
mod tests {
    use super::organisation;

    #[test]
    fn an_organisation_is_the_host_and_owner_of_a_repository() {
        for (url, org) in [
            ("https://github.com/Acme/shop.git", Some("github.com/acme")),
            (
                "https://x-access-token:t@ghe.example.com:8443/acme/shop",
                Some("ghe.example.com:8443/acme"),
            ),
            (
                "ssh://git@github.com/acme/shop.git",
                Some("github.com/acme"),
            ),
            ("git@github.com:acme/shop.git", Some("github.com/acme")),
            ("/srv/repos/shop", None),
            ("file:///srv/repos/shop", None),
            ("https://github.com/", None),
        ] {
            assert_eq!(organisation(url).as_deref(), org, "{url}");
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settle {
    Ack,
    Requeue,
}

/// One delivery counted in `verdict_worker_prefetch_in_use` from receipt until it is dropped
/// (after the delivery was settled).
struct Held(prometheus::IntGauge);

impl Held {
    fn new(gauge: prometheus::IntGauge) -> Held {
        gauge.inc();
        Held(gauge)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.dec();
    }
}

async fn settle(delivery: Delivery, how: Settle) {
    let result = match how {
        Settle::Ack => delivery.acker.ack().await,
        Settle::Requeue => delivery.acker.requeue().await,
    };
    if let Err(e) = result {
        // The broker will redeliver: handlers are idempotent (E7).
        tracing::warn!(error = %e, "delivery not settled; it will be redelivered");
    }
}

async fn next_or_pending(d: &mut Option<verdict_backends::broker::Deliveries>) -> Option<Delivery> {
    match d {
        Some(d) => d.next().await,
        None => std::future::pending().await,
    }
}

async fn recv_or_pending(
    rx: &mut Option<tokio::sync::broadcast::Receiver<String>>,
) -> Option<String> {
    match rx {
        Some(r) => loop {
            match r.recv().await {
                Ok(id) => return Some(id),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        },
        None => std::future::pending().await,
    }
}
