//! The engine's parts on the in-memory backends, for their unit tests: a memory broker, store and
//! repository source, and a clock on tokio's time, so tests that wait run on paused time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use verdict_backends::BoxFuture;
use verdict_backends::broker::memory::MemoryBroker;
use verdict_backends::broker::{Broker, Delivery, Message, Route};
use verdict_backends::clock::TokioClock;
use verdict_backends::code_host::{Author, ItemState, MemoryCodeHost, PullRequest};
use verdict_backends::repo::MemoryRepositorySource;
use verdict_backends::store::memory::MemoryStore;
use verdict_backends::store::{DocumentStore, InputError, InputStore, StoreError, Versioned};
use verdict_proto::Language;
use verdict_proto::publication::{ItemRef, RepoId};

use super::allowlist::{AllowlistRules, RepositoryAllowlist, StaticResolver};
use super::submission::TaskDefaults;
use super::{Parts, SchedulerDeps, SchedulerSettings};
use crate::metrics::SchedulerMetrics;
use verdict_api::submission::{ReviewSubmission, ScanSubmission, SubmissionOptions};
use verdict_policy::pipeline::{self, PipelineSettings};
use verdict_policy::task::TaskRecord;

pub(super) const REPO: &str = "https://example.test/shop.git";
/// The commit revision `v1` of [`REPO`] names (the scans of [`Fixture::queued_scan`]).
pub(super) const V1: &str = "5ca1ab1e00000000000000000000000000000001";
/// The commit `main` of [`REPO`] names in pull requests of [`Fixture::pull_request`].
pub(super) const MAIN_COMMIT: &str = "0000000000000000000000000000000000000a11";
/// How long after publication the sweeper looks up a stage without a result applied.
pub(super) const RECOVER_AFTER: Duration = Duration::from_secs(120);
pub(super) const STALL_AFTER: Duration = Duration::from_secs(30);
pub(super) const INTAKE_TIMEOUT: Duration = Duration::from_secs(300);

/// One file changed by one added line.
pub(super) const DIFF: &str = "diff --git a/src/cart.rs b/src/cart.rs\n--- a/src/cart.rs\n+++ b/src/cart.rs\n@@ -1,2 +1,3 @@\n fn total() {\n+    apply_coupon();\n }\n";

/// GitHub at `github.com`, publishing in English with approvals allowed and labels applied.
pub(super) fn code_host_settings() -> super::CodeHostSettings {
    super::CodeHostSettings {
        web_host: "github.com".to_owned(),
        publish: verdict_policy::publication::PublishSettings {
            language: Language::En,
            approve: true,
            degraded_comment: false,
            status_context: "verdict".to_owned(),
            details_url: Some("https://verdict.example/v1/tasks/{id}".to_owned()),
            label_min_confidence: 0.7,
        },
        apply_labels: true,
    }
}

pub(super) struct Fixture {
    pub broker: Arc<MemoryBroker>,
    pub store: Arc<MemoryStore>,
    pub repositories: Arc<MemoryRepositorySource>,
    pub code_host: Arc<MemoryCodeHost>,
    pub deps: SchedulerDeps,
    pub settings: SchedulerSettings,
    pub parts: Parts,
    /// Where the parts run what they start in the background (publications).
    pub background: TaskTracker,
    /// What `Scheduler::run` cancels when it stops.
    pub stop: CancellationToken,
}

impl Fixture {
    pub(super) fn new() -> Fixture {
        let store = Arc::new(MemoryStore::new());
        Fixture::with_documents(store.clone(), store)
    }

    /// Task records kept in `documents`; everything else in `store`.
    pub(super) fn with_documents(
        documents: Arc<dyn DocumentStore>,
        store: Arc<MemoryStore>,
    ) -> Fixture {
        Fixture::with_stores(documents, store.clone(), store)
    }

    /// Task records and stage inputs behind `outages`' switches; everything else in its store.
    pub(super) fn with_outages(outages: &Arc<Outages>) -> Fixture {
        Fixture::with_stores(outages.clone(), outages.clone(), outages.store.clone())
    }

    fn with_stores(
        documents: Arc<dyn DocumentStore>,
        inputs: Arc<dyn InputStore>,
        store: Arc<MemoryStore>,
    ) -> Fixture {
        let broker = Arc::new(MemoryBroker::new());
        let repositories = Arc::new(MemoryRepositorySource::new());
        repositories.insert_revision(REPO, "v1", V1);
        repositories.insert(
            REPO,
            V1,
            verdict_backends::repo::MemoryTree::new()
                .file("src/cart.rs", "fn total() {}\n")
                .file("vendor/lib/x.go", "package x\n"),
        );
        let code_host = Arc::new(MemoryCodeHost::new());
        let metrics = SchedulerMetrics::register(&prometheus::Registry::new()).unwrap();
        let deps = SchedulerDeps {
            broker: broker.clone(),
            documents,
            events: store.clone(),
            cancels: store.clone(),
            inputs,
            repositories: repositories.clone(),
            results: store.clone(),
            code_host: Some(code_host.clone()),
            resolver: Arc::new(StaticResolver::new()),
            clock: Arc::new(TokioClock::new()),
            metrics,
            budgets: store.clone(),
            liveness: store.clone(),
            transcripts: store.clone(),
            archive: store.clone(),
            capacity: store.clone(),
        };
        let settings = SchedulerSettings {
            pipeline: PipelineSettings {
                triage: false,
                reviewers: 1,
                max_diff_bytes_per_reviewer: 10_000,
                max_diff_bytes: 100_000,
                stages: Default::default(),
                issue_categories: None,
                ignore_paths: Vec::new(),
                scan: Default::default(),
            },
            review_timeout: Duration::from_secs(600),
            language: Language::En,
            message_max_bytes: 1 << 20,
            sweep_interval: Duration::from_secs(10),
            queue_stats_interval: Duration::from_secs(3600),
            stall_after: STALL_AFTER,
            recover_after: RECOVER_AFTER,
            code_host: Some(code_host_settings()),
            intake_concurrency: 8,
            intake_backlog: 4096,
            intake_timeout: INTAKE_TIMEOUT,
            repositories: RepositoryAllowlist::new(&AllowlistRules {
                hosts: vec!["example.test".to_owned()],
                code_host: Some("github.com".to_owned()),
                ..AllowlistRules::default()
            })
            .unwrap(),
            budgets: Default::default(),
            replica_lease: Duration::from_secs(15),
        };
        let background = TaskTracker::new();
        let stop = CancellationToken::new();
        Fixture {
            parts: Parts::assemble(&deps, &settings, &background, &stop),
            stop,
            background,
            broker,
            store,
            repositories,
            code_host,
            deps,
            settings,
        }
    }

    /// A fixture whose scheduler applies `budgets` (SPEC X5).
    pub(super) fn with_budgets(budgets: verdict_policy::budget::BudgetSettings) -> Fixture {
        let mut fx = Fixture::new();
        fx.settings.budgets = budgets;
        fx.parts = Parts::assemble(&fx.deps, &fx.settings, &fx.background, &fx.stop);
        fx
    }

    pub(super) fn now(&self) -> u64 {
        self.deps.clock.now_unix_ms()
    }

    pub(super) fn metrics(&self) -> &SchedulerMetrics {
        &self.deps.metrics
    }

    /// A scan of [`REPO`] as submitted: stored, queued, not yet taken in.
    pub(super) async fn queued_scan(&self) -> TaskRecord {
        let task = self.queued_scan_unstored();
        self.parts.records.create(&task).await.unwrap();
        task
    }

    /// The record of a scan of [`REPO`] as submitted, not stored yet.
    pub(super) fn queued_scan_unstored(&self) -> TaskRecord {
        let submission = ScanSubmission {
            repository: REPO.to_owned(),
            revision: "v1".to_owned(),
            options: SubmissionOptions::default(),
        };
        TaskDefaults::new(&self.settings)
            .scan(submission, self.now())
            .unwrap()
    }

    /// A review of [`REPO`] from `main` to `feature` as submitted: stored, queued.
    pub(super) async fn queued_review(&self) -> TaskRecord {
        let submission = ReviewSubmission {
            repository: REPO.to_owned(),
            base: "main".to_owned(),
            head: "feature".to_owned(),
            pipeline: None,
            title: Some("Coupons".to_owned()),
            body: None,
            options: SubmissionOptions::default(),
            ..Default::default()
        };
        let task = TaskDefaults::new(&self.settings)
            .review(submission, self.now())
            .unwrap();
        self.parts.records.create(&task).await.unwrap();
        task
    }

    /// Pull request #`number` of `acme/shop` on the in-memory host, its head `head` changing
    /// [`REPO`] by [`DIFF`] from `main`'s commit.
    pub(super) fn pull_request(&self, number: u64, head: &str) -> ItemRef {
        let item = ItemRef {
            repo: RepoId {
                owner: "acme".to_owned(),
                name: "shop".to_owned(),
            },
            number,
        };
        self.repositories
            .insert_change(REPO, MAIN_COMMIT, head, DIFF);
        self.code_host.add_pull_request(
            PullRequest {
                item: item.clone(),
                state: ItemState::Open,
                draft: false,
                title: "Apply coupons".to_owned(),
                body: Some("Coupons at checkout.".to_owned()),
                author: Author {
                    login: "ada".to_owned(),
                    bot: false,
                },
                labels: Vec::new(),
                head_sha: head.to_owned(),
                base_sha: MAIN_COMMIT.to_owned(),
                head_ref: "feature".to_owned(),
                base_ref: "main".to_owned(),
                clone_url: REPO.to_owned(),
                html_url: format!("https://github.com/acme/shop/pull/{number}"),
            },
            DIFF,
        );
        item
    }

    /// A review of pull request `item` given by its URL, stored and queued.
    pub(super) async fn queued_pull_request_review(
        &self,
        item: &ItemRef,
        publish: bool,
    ) -> TaskRecord {
        let submission = ReviewSubmission {
            pull_request: Some(format!(
                "https://github.com/{}/pull/{}",
                item.repo, item.number
            )),
            publish,
            ..Default::default()
        };
        let task = TaskDefaults::new(&self.settings)
            .review(submission, self.now())
            .unwrap();
        self.parts.records.create(&task).await.unwrap();
        task
    }

    /// A scan started by a replica that crashed before publishing: its stage is `planned`.
    pub(super) async fn started_unpublished_scan(&self) -> TaskRecord {
        let task = self.queued_scan().await;
        let now = self.now();
        self.parts
            .records
            .update(&task.id, |t| pipeline::start(t, now))
            .await
            .unwrap()
            .task
    }

    /// Waits until everything the parts started in the background has finished.
    pub(super) async fn settle(&self) {
        self.background.close();
        self.background.wait().await;
        self.background.reopen();
    }

    pub(super) async fn load(&self, id: &str) -> TaskRecord {
        self.parts.records.load(id).await.unwrap()
    }

    /// `body` published on the results queue and taken off it again. A delivery dropped without
    /// being settled goes back on the queue, so the queue's depth afterwards tells whether the
    /// code under test settled it.
    pub(super) async fn result_delivery(&self, body: Vec<u8>) -> Delivery {
        let message = Message {
            body,
            headers: Default::default(),
        };
        self.broker.publish(Route::Results, &message).await.unwrap();
        let mut results = self.broker.consume(Route::Results, 1).await.unwrap();
        results.next().await.unwrap()
    }
}

/// A document store that is down.
#[derive(Debug)]
pub(super) struct Unreachable;

impl Unreachable {
    fn down<T>() -> Result<T, StoreError> {
        Err(StoreError::Unavailable("connection refused".to_owned()))
    }
}

impl DocumentStore for Unreachable {
    fn get<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>> {
        Box::pin(async { Unreachable::down() })
    }

    fn put<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        Box::pin(async { Unreachable::down() })
    }

    fn delete<'a>(&'a self, _: &'a str, _: u64) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async { Unreachable::down() })
    }

    fn set_add<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Unreachable::down() })
    }

    fn set_remove<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Unreachable::down() })
    }

    fn set_members<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Vec<String>, StoreError>> {
        Box::pin(async { Unreachable::down() })
    }
}

/// The memory store behind switches, as a Redis deployment is during a failover: while
/// `documents_down` (`inputs_down`), every call for task records (stage inputs) fails as a
/// refused connection does, doing nothing; each of the next `lost_replies` document writes
/// lands and then fails, as one whose reply a failover lost; each of the next `refused_adds` set
/// adds fails.
#[derive(Debug, Default)]
pub(super) struct Outages {
    pub store: Arc<MemoryStore>,
    pub documents_down: AtomicBool,
    pub inputs_down: AtomicBool,
    pub lost_replies: AtomicUsize,
    pub refused_adds: AtomicUsize,
}

impl Outages {
    fn refused<T>(down: &AtomicBool) -> Option<Result<T, StoreError>> {
        down.load(Ordering::SeqCst)
            .then(|| Err(StoreError::Unavailable("connection refused".to_owned())))
    }

    /// Whether one of `counter`'s failures is due now (and takes it).
    fn due(counter: &AtomicUsize) -> bool {
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

impl DocumentStore for Outages {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Versioned>, StoreError>> {
        Box::pin(async move {
            match Outages::refused(&self.documents_down) {
                Some(refused) => refused,
                None => DocumentStore::get(self.store.as_ref(), key).await,
            }
        })
    }

    fn put<'a>(
        &'a self,
        key: &'a str,
        body: &'a str,
        expected: Option<u64>,
    ) -> BoxFuture<'a, Result<Option<u64>, StoreError>> {
        Box::pin(async move {
            if let Some(refused) = Outages::refused(&self.documents_down) {
                return refused;
            }
            let written = DocumentStore::put(self.store.as_ref(), key, body, expected).await;
            if Outages::due(&self.lost_replies) {
                return Err(StoreError::Unavailable("connection reset".to_owned()));
            }
            written
        })
    }

    fn delete<'a>(
        &'a self,
        key: &'a str,
        expected: u64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            match Outages::refused(&self.documents_down) {
                Some(refused) => refused,
                None => self.store.delete(key, expected).await,
            }
        })
    }

    fn set_add<'a>(
        &'a self,
        set: &'a str,
        member: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            match Outages::refused(&self.documents_down) {
                Some(refused) => refused,
                None if Outages::due(&self.refused_adds) => {
                    Err(StoreError::Unavailable("NOREPLICAS".to_owned()))
                }
                None => self.store.set_add(set, member).await,
            }
        })
    }

    fn set_remove<'a>(
        &'a self,
        set: &'a str,
        member: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            match Outages::refused(&self.documents_down) {
                Some(refused) => refused,
                None => self.store.set_remove(set, member).await,
            }
        })
    }

    fn set_members<'a>(&'a self, set: &'a str) -> BoxFuture<'a, Result<Vec<String>, StoreError>> {
        Box::pin(async move {
            match Outages::refused(&self.documents_down) {
                Some(refused) => refused,
                None => self.store.set_members(set).await,
            }
        })
    }
}

impl InputStore for Outages {
    fn get<'a>(&'a self, sha256: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, InputError>> {
        InputStore::get(self.store.as_ref(), sha256)
    }

    fn put<'a>(&'a self, bytes: &'a [u8]) -> BoxFuture<'a, Result<String, InputError>> {
        Box::pin(async move {
            if self.inputs_down.load(Ordering::SeqCst) {
                return Err(InputError::Unavailable("MOVED 7414".to_owned()));
            }
            InputStore::put(self.store.as_ref(), bytes).await
        })
    }
}
