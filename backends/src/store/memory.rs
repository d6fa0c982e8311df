//! Every shared-state trait in one process, for `verdict dev` and tests, mirroring
//! [`super::redis::RedisStore`]: the same semantics (claims that expire, first result wins,
//! ordered replayable streams that wake followers, cancellation notices, compare-and-set
//! documents, content-addressed inputs, the response journal, the response cache, transcripts,
//! the budget ledger, heartbeat leases), with time taken from
//! tokio so virtual-time tests can expire claims without waiting.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use verdict_proto::chat::ChatResponse;
use verdict_proto::transcript::Transcript;
use verdict_proto::wire::{EventType, ProgressEvent, StageResult};

use verdict_proto::budget::{Amount, Limit};

use super::{
    Account, BudgetLedger, CacheError, CachedAnswer, CallKey, CancelSignals, Capacity, Claim,
    DocumentStore, EventLog, EventSink, InputError, InputStore, JournalError, Liveness,
    Reservation, ResponseCache, ResponseJournal, ResultStore, StageState, Standing, StoreError,
    StoredEvent, TranscriptError, TranscriptStore, Versioned, content_hash,
};
use crate::BoxFuture;

/// Cancellation notices buffered per subscriber, as on Redis.
const FEED_CAPACITY: usize = 1024;

/// All in-memory stores in one value (each trait is implemented once).
#[derive(Debug)]
pub struct MemoryStore {
    state: Mutex<State>,
    /// Bumped on every append; followers wait for it to change.
    appended: watch::Sender<u64>,
    cancels: broadcast::Sender<String>,
    event_maxlen: usize,
    /// What [`Capacity::pressure`] answers: set by tests, as memory has no limit of its own.
    pressure: std::sync::Mutex<Option<String>>,
}

type StageKey = (String, String);

#[derive(Debug, Default)]
struct State {
    claims: HashMap<StageKey, (String, Instant)>,
    results: HashMap<StageKey, StageResult>,
    streams: HashMap<String, EventStream>,
    cancelled: HashSet<String>,
    documents: HashMap<String, Versioned>,
    sets: HashMap<String, BTreeSet<String>>,
    inputs: HashMap<String, Vec<u8>>,
    journal: HashMap<CallKey, ChatResponse>,
    answers: HashMap<String, CachedAnswer>,
    /// In the order they were first stored; one per task, stage and attempt.
    transcripts: Vec<Transcript>,
    budgets: HashMap<Account, Ledger>,
    /// Heartbeat leases: when each holder's lapses.
    leases: HashMap<String, Instant>,
}

/// One budget account: the aggregate, and each holder's hold (`None` once settled).
#[derive(Debug, Default)]
struct Ledger {
    standing: Standing,
    holds: HashMap<String, Option<Amount>>,
}

#[derive(Debug, Default)]
struct EventStream {
    last: u64,
    entries: VecDeque<(u64, StoredEvent)>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// A store keeping up to 10 000 events per task, like the Redis default.
    pub fn new() -> MemoryStore {
        MemoryStore {
            state: Mutex::new(State::default()),
            appended: watch::Sender::new(0),
            cancels: broadcast::channel(FEED_CAPACITY).0,
            event_maxlen: 10_000,
            pressure: std::sync::Mutex::new(None),
        }
    }

    /// Makes [`Capacity::pressure`] answer `reason` (a store out of room) until set back to
    /// `None`, for tests of what callers do under pressure.
    pub fn set_pressure(&self, reason: Option<String>) {
        *self
            .pressure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = reason;
    }

    /// Keeps at most `maxlen` (at least 1) events per task; older ones are dropped (exactly,
    /// where Redis trims approximately).
    pub fn with_event_maxlen(mut self, maxlen: usize) -> MemoryStore {
        self.event_maxlen = maxlen.max(1);
        self
    }

    /// Reads currently waiting for events (lets tests append only once a follower is parked).
    pub fn waiting_readers(&self) -> usize {
        self.appended.receiver_count()
    }

    /// Every stored event of `kind`, each task's in stream order (tasks by id).
    pub fn events_of_type(&self, kind: EventType) -> Vec<ProgressEvent> {
        let state = self.state();
        let mut tasks: Vec<&String> = state.streams.keys().collect();
        tasks.sort();
        tasks
            .into_iter()
            .filter_map(|task| state.streams.get(task))
            .flat_map(|stream| stream.entries.iter().map(|(_, e)| &e.event))
            .filter(|e| e.kind == kind)
            .cloned()
            .collect()
    }

    /// Every stored transcript, in the order they were stored.
    pub fn transcripts(&self) -> Vec<Transcript> {
        self.state().transcripts.clone()
    }

    /// The transcripts of a task, oldest attempt first, as `RedisStore::transcripts_of` reads
    /// them.
    pub fn transcripts_of(&self, task_id: &str) -> Vec<Transcript> {
        let mut transcripts: Vec<Transcript> = self
            .state()
            .transcripts
            .iter()
            .filter(|t| t.task_id == task_id)
            .cloned()
            .collect();
        transcripts.sort_by(super::reading_order);
        transcripts
    }

    /// How many responses the journal holds.
    pub fn journal_len(&self) -> usize {
        self.state().journal.len()
    }

    /// The state; a panic elsewhere cannot leave it half-updated (every update is a few
    /// infallible map operations), so a poisoned lock is still usable.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn claim_now(&self, task_id: &str, stage_id: &str, owner: &str, ttl: Duration) -> Claim {
        let key = (task_id.to_owned(), stage_id.to_owned());
        let mut state = self.state();
        if let Some(result) = state.results.get(&key) {
            return Claim::Done(Box::new(result.clone()));
        }
        let now = Instant::now();
        if let Some((holder, expires)) = state.claims.get(&key)
            && *expires > now
            && holder != owner
        {
            return Claim::HeldBy {
                owner: holder.clone(),
                expires_in: *expires - now,
            };
        }
        state.claims.insert(key, (owner.to_owned(), now + ttl));
        Claim::Acquired
    }

    fn inspect_now(&self, task_id: &str, stage_id: &str) -> StageState {
        let key = (task_id.to_owned(), stage_id.to_owned());
        let state = self.state();
        if let Some(result) = state.results.get(&key) {
            return StageState::Done(Box::new(result.clone()));
        }
        let now = Instant::now();
        match state.claims.get(&key) {
            Some((holder, expires)) if *expires > now => StageState::Held {
                owner: holder.clone(),
                expires_in: *expires - now,
            },
            _ => StageState::Free,
        }
    }

    fn append_now(&self, event: &ProgressEvent) -> String {
        let id = {
            let mut state = self.state();
            let stream = state.streams.entry(event.task_id.clone()).or_default();
            stream.last += 1;
            let id = format_id(stream.last);
            stream.entries.push_back((
                stream.last,
                StoredEvent {
                    id: id.clone(),
                    event: event.clone(),
                },
            ));
            while stream.entries.len() > self.event_maxlen {
                stream.entries.pop_front();
            }
            id
        };
        self.appended.send_modify(|n| *n = n.wrapping_add(1));
        id
    }

    fn events_after(&self, task_id: &str, after: Option<u64>) -> Vec<StoredEvent> {
        let state = self.state();
        let Some(stream) = state.streams.get(task_id) else {
            return Vec::new();
        };
        stream
            .entries
            .iter()
            .filter(|(n, _)| after.is_none_or(|after| *n > after))
            .map(|(_, e)| e.clone())
            .collect()
    }

    async fn read_events(
        &self,
        task_id: &str,
        after: Option<&str>,
        wait: Duration,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let after = after.map(|id| parse_id(task_id, id)).transpose()?;
        let deadline = Instant::now() + wait;
        // Subscribed before looking, so an append between the look and the wait still wakes us.
        let mut appended = self.appended.subscribe();
        loop {
            let found = self.events_after(task_id, after);
            if !found.is_empty() || wait.is_zero() {
                return Ok(found);
            }
            match tokio::time::timeout_at(deadline, appended.changed()).await {
                Ok(Ok(())) => {}
                // The sender lives in `self`; it cannot be gone while we borrow it.
                Ok(Err(_)) | Err(_) => return Ok(Vec::new()),
            }
        }
    }

    fn put_now(&self, key: &str, body: &str, expected: Option<u64>) -> Option<u64> {
        let mut state = self.state();
        let current = state.documents.get(key).map(|d| d.version);
        if current != expected {
            return None;
        }
        let version = current.unwrap_or(0) + 1;
        state.documents.insert(
            key.to_owned(),
            Versioned {
                version,
                body: body.to_owned(),
            },
        );
        Some(version)
    }
}

/// Zero-padded so that ids order as strings as they do as numbers.
fn format_id(n: u64) -> String {
    format!("{n:020}")
}

fn parse_id(task_id: &str, id: &str) -> Result<u64, StoreError> {
    id.parse().map_err(|_| StoreError::Corrupt {
        key: format!("events:{task_id}"),
        reason: format!("`{id}` is not a position in this stream"),
    })
}

impl Capacity for MemoryStore {
    fn pressure(&self) -> Option<String> {
        self.pressure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl ResultStore for MemoryStore {
    fn claim<'a>(
        &'a self,
        task_id: &'a str,
        stage_id: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<Claim, StoreError>> {
        let claim = self.claim_now(task_id, stage_id, owner, ttl);
        Box::pin(async move { Ok(claim) })
    }

    fn release<'a>(
        &'a self,
        task_id: &'a str,
        stage_id: &'a str,
        owner: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let key = (task_id.to_owned(), stage_id.to_owned());
        let mut state = self.state();
        if state
            .claims
            .get(&key)
            .is_some_and(|(holder, _)| holder == owner)
        {
            state.claims.remove(&key);
        }
        Box::pin(async { Ok(()) })
    }

    fn inspect<'a>(
        &'a self,
        task_id: &'a str,
        stage_id: &'a str,
    ) -> BoxFuture<'a, Result<StageState, StoreError>> {
        let state = self.inspect_now(task_id, stage_id);
        Box::pin(async move { Ok(state) })
    }

    fn record<'a>(
        &'a self,
        result: &'a StageResult,
    ) -> BoxFuture<'a, Result<StageResult, StoreError>> {
        let key = (result.task_id.clone(), result.stage_id.clone());
        let mut state = self.state();
        // As on Redis: once a result is stored the stage's journaled answers are never read.
        state
            .journal
            .retain(|call, _| call.task_id != result.task_id || call.stage_id != result.stage_id);
        let stored = state
            .results
            .entry(key)
            .or_insert_with(|| result.clone())
            .clone();
        drop(state);
        Box::pin(async move { Ok(stored) })
    }

    fn get<'a>(
        &'a self,
        task_id: &'a str,
        stage_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<StageResult>, StoreError>> {
        let key = (task_id.to_owned(), stage_id.to_owned());
        let found = self.state().results.get(&key).cloned();
        Box::pin(async move { Ok(found) })
    }
}

impl EventSink for MemoryStore {
    fn emit(&self, event: ProgressEvent) -> BoxFuture<'_, ()> {
        self.append_now(&event);
        Box::pin(async {})
    }
}

impl EventLog for MemoryStore {
    fn append<'a>(&'a self, event: &'a ProgressEvent) -> BoxFuture<'a, Result<String, StoreError>> {
        let id = self.append_now(event);
        Box::pin(async move { Ok(id) })
    }

    fn append_all<'a>(
        &'a self,
        events: &'a [ProgressEvent],
    ) -> BoxFuture<'a, Result<Vec<String>, StoreError>> {
        let ids = events.iter().map(|e| self.append_now(e)).collect();
        Box::pin(async move { Ok(ids) })
    }

    fn read<'a>(
        &'a self,
        task_id: &'a str,
        after: Option<&'a str>,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<StoredEvent>, StoreError>> {
        Box::pin(self.read_events(task_id, after, wait))
    }
}

impl CancelSignals for MemoryStore {
    fn request_cancel<'a>(&'a self, task_id: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        self.state().cancelled.insert(task_id.to_owned());
        // No subscriber right now is fine: the mark remains.
        let _ = self.cancels.send(task_id.to_owned());
        Box::pin(async { Ok(()) })
    }

    fn is_cancelled<'a>(&'a self, task_id: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        let cancelled = self.state().cancelled.contains(task_id);
        Box::pin(async move { Ok(cancelled) })
    }

    fn subscribe(
        &self,
    ) -> BoxFuture<'_, Result<tokio::sync::broadcast::Receiver<String>, StoreError>> {
        let receiver = self.cancels.subscribe();
        Box::pin(async move { Ok(receiver) })
    }
}

impl DocumentStore for MemoryStore {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>> {
        let found = self.state().documents.get(key).cloned();
        Box::pin(async move { Ok(found) })
    }

    fn put<'a>(
        &'a self,
        key: &'a str,
        body: &'a str,
        expected: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        let written = self.put_now(key, body, expected);
        Box::pin(async move { Ok(written) })
    }

    fn delete<'a>(
        &'a self,
        key: &'a str,
        expected: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let mut state = self.state();
        let matches = state
            .documents
            .get(key)
            .is_some_and(|d| d.version == expected);
        if matches {
            state.documents.remove(key);
        }
        Box::pin(async move { Ok(matches) })
    }

    fn set_add<'a>(
        &'a self,
        set: &'a str,
        member: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.state()
            .sets
            .entry(set.to_owned())
            .or_default()
            .insert(member.to_owned());
        Box::pin(async { Ok(()) })
    }

    fn set_remove<'a>(
        &'a self,
        set: &'a str,
        member: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let mut state = self.state();
        if let Some(members) = state.sets.get_mut(set) {
            members.remove(member);
            if members.is_empty() {
                state.sets.remove(set);
            }
        }
        Box::pin(async { Ok(()) })
    }

    fn set_members<'a>(&'a self, set: &'a str) -> BoxFuture<'a, Result<Vec<String>, StoreError>> {
        let members = self
            .state()
            .sets
            .get(set)
            .map(|m| m.iter().cloned().collect())
            .unwrap_or_default();
        Box::pin(async move { Ok(members) })
    }
}

impl InputStore for MemoryStore {
    fn get<'a>(&'a self, sha256: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, InputError>> {
        let found = self.state().inputs.get(sha256).cloned();
        Box::pin(async move { Ok(found) })
    }

    fn put<'a>(&'a self, bytes: &'a [u8]) -> BoxFuture<'a, Result<String, InputError>> {
        let hash = content_hash(bytes);
        self.state()
            .inputs
            .entry(hash.clone())
            .or_insert_with(|| bytes.to_vec());
        Box::pin(async move { Ok(hash) })
    }
}

impl ResponseJournal for MemoryStore {
    fn get<'a>(
        &'a self,
        key: &'a CallKey,
    ) -> BoxFuture<'a, Result<Option<ChatResponse>, JournalError>> {
        let found = self.state().journal.get(key).cloned();
        Box::pin(async move { Ok(found) })
    }

    fn put<'a>(
        &'a self,
        key: &'a CallKey,
        response: &'a ChatResponse,
    ) -> BoxFuture<'a, Result<(), JournalError>> {
        self.state().journal.insert(key.clone(), response.clone());
        Box::pin(async { Ok(()) })
    }
}

impl ResponseCache for MemoryStore {
    fn get_answer<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<CachedAnswer>, CacheError>> {
        let found = self.state().answers.get(key).cloned();
        Box::pin(async move { Ok(found) })
    }

    fn put_answer<'a>(
        &'a self,
        key: &'a str,
        answer: &'a CachedAnswer,
    ) -> BoxFuture<'a, Result<(), CacheError>> {
        self.state()
            .answers
            .entry(key.to_owned())
            .or_insert_with(|| answer.clone());
        Box::pin(async { Ok(()) })
    }
}

impl BudgetLedger for MemoryStore {
    fn reserve<'a>(
        &'a self,
        account: &'a Account,
        holder: &'a str,
        estimate: Amount,
        limit: Limit,
    ) -> BoxFuture<'a, Result<Reservation, StoreError>> {
        let mut state = self.state();
        let ledger = state.budgets.entry(account.clone()).or_default();
        let answer = if ledger.holds.contains_key(holder) {
            Reservation::Granted(ledger.standing)
        } else if limit.allows(ledger.standing.committed().plus(estimate)) {
            ledger.holds.insert(holder.to_owned(), Some(estimate));
            ledger.standing.held = ledger.standing.held.plus(estimate);
            Reservation::Granted(ledger.standing)
        } else {
            Reservation::Refused(ledger.standing)
        };
        Box::pin(async move { Ok(answer) })
    }

    fn settle<'a>(
        &'a self,
        account: &'a Account,
        holder: &'a str,
        actual: Amount,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let mut state = self.state();
        let settled = match state
            .budgets
            .get_mut(account)
            .and_then(|l| l.holds.get_mut(holder).map(|h| (h.take(), &mut l.standing)))
        {
            Some((Some(hold), standing)) => {
                standing.held = Amount::new(
                    standing.held.tokens.saturating_sub(hold.tokens),
                    standing.held.micro_usd.saturating_sub(hold.micro_usd),
                );
                standing.spent = standing.spent.plus(actual);
                true
            }
            _ => false,
        };
        Box::pin(async move { Ok(settled) })
    }

    fn standing<'a>(&'a self, account: &'a Account) -> BoxFuture<'a, Result<Standing, StoreError>> {
        let standing = self
            .state()
            .budgets
            .get(account)
            .map(|l| l.standing)
            .unwrap_or_default();
        Box::pin(async move { Ok(standing) })
    }
}

impl Liveness for MemoryStore {
    fn beat<'a>(
        &'a self,
        holder: &'a str,
        lease: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.state()
            .leases
            .insert(holder.to_owned(), Instant::now() + lease);
        Box::pin(async { Ok(()) })
    }

    fn alive<'a>(&'a self, holder: &'a str) -> BoxFuture<'a, Result<bool, StoreError>> {
        let alive = self
            .state()
            .leases
            .get(holder)
            .is_some_and(|lapses| *lapses > Instant::now());
        Box::pin(async move { Ok(alive) })
    }

    fn leave<'a>(&'a self, holder: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        self.state().leases.remove(holder);
        Box::pin(async { Ok(()) })
    }
}

impl TranscriptStore for MemoryStore {
    fn put(&self, transcript: Transcript) -> BoxFuture<'_, Result<(), TranscriptError>> {
        let mut state = self.state();
        match state
            .transcripts
            .iter_mut()
            .find(|stored| super::same_attempt(stored, &transcript))
        {
            Some(stored) => *stored = transcript,
            None => state.transcripts.push(transcript),
        }
        Box::pin(async { Ok(()) })
    }

    fn of_task<'a>(
        &'a self,
        task_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Transcript>, TranscriptError>> {
        let transcripts = self.transcripts_of(task_id);
        Box::pin(async { Ok(transcripts) })
    }
}

impl super::TaskArchive for MemoryStore {
    /// Memory holds every record as it is; there is nothing to gather.
    fn seal<'a>(
        &'a self,
        _task_id: &'a str,
        _stage_ids: &'a [String],
    ) -> BoxFuture<'a, Result<super::Sealing, StoreError>> {
        Box::pin(async { Ok(super::Sealing::Nothing) })
    }
}

#[cfg(test)]
mod tests {
    use verdict_proto::outcome::StageOutcome;
    use verdict_proto::wire::{EventType, StageKind, Usage, WIRE_VERSION};

    use super::*;
    use crate::store::event;

    fn result(task: &str, stage: &str, finished: u64) -> StageResult {
        StageResult {
            version: WIRE_VERSION,
            task_id: task.into(),
            stage_id: stage.into(),
            stage: StageKind::Triage,
            attempt: 1,
            outcome: StageOutcome::ExecutionFailure {
                kind: verdict_proto::outcome::FailureKind::Internal,
                retryable: false,
                message: "x".into(),
            },
            usage: Usage::default(),
            started_unix_ms: 0,
            finished_unix_ms: finished,
            model: None,
            evidence_cut: None,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn claims_expire_on_virtual_time() {
        let store = MemoryStore::new();
        let ttl = Duration::from_secs(300);
        assert_eq!(
            store.claim("t", "s", "a", ttl).await.unwrap(),
            Claim::Acquired
        );
        tokio::time::advance(Duration::from_secs(299)).await;
        assert_eq!(
            store.claim("t", "s", "b", ttl).await.unwrap(),
            Claim::HeldBy {
                owner: "a".into(),
                expires_in: Duration::from_secs(1)
            },
            "the holder's claim has one second left"
        );
        // Renewal by the holder restarts its TTL.
        assert_eq!(
            store.claim("t", "s", "a", ttl).await.unwrap(),
            Claim::Acquired
        );
        tokio::time::advance(Duration::from_secs(299)).await;
        assert_eq!(
            store.claim("t", "s", "b", ttl).await.unwrap().holder(),
            Some("a")
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(
            store.claim("t", "s", "b", ttl).await.unwrap(),
            Claim::Acquired
        );
        store.record(&result("t", "s", 1)).await.unwrap();
        assert!(matches!(
            store.claim("t", "s", "c", ttl).await.unwrap(),
            Claim::Done(_)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiting_read_returns_empty_after_its_wait() {
        let store = MemoryStore::new();
        let started = Instant::now();
        let read = store
            .read("t", None, Duration::from_secs(30))
            .await
            .unwrap();
        assert!(read.is_empty());
        assert_eq!(started.elapsed(), Duration::from_secs(30));
    }

    #[tokio::test]
    async fn ids_order_as_strings_and_positions_must_be_ids() {
        let store = MemoryStore::new();
        let mut ids = Vec::new();
        for i in 0..12 {
            ids.push(
                store
                    .append(&event("t", None, i, EventType::StageStarted, "s"))
                    .await
                    .unwrap(),
            );
        }
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
        let after = store
            .read("t", Some(&ids[9]), Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(after.len(), 2);
        assert_eq!(after[0].id, ids[10]);
        let e = store
            .read("t", Some("not-an-id"), Duration::ZERO)
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
    }
}
