//! What the scheduler's integration tests share: the real scheduler engine on the in-memory
//! broker and store, over a given repository source, and a source that holds intakes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use verdict_backends::BoxFuture;
use verdict_backends::broker::memory::MemoryBroker;
use verdict_backends::clock::SystemClock;
use verdict_backends::repo::{
    Change, MemoryRepositorySource, RepoError, RepoFile, RepositorySource, Snapshot,
};
use verdict_backends::store::memory::MemoryStore;
use verdict_policy::pipeline::PipelineSettings;
use verdict_proto::wire::RepositoryRef;
use verdict_scheduler::engine::{
    AllowlistRules, RepositoryAllowlist, Scheduler, SchedulerDeps, SchedulerSettings,
    StaticResolver,
};
use verdict_scheduler::metrics::SchedulerMetrics;

/// A scheduler on in-memory backends reading `repositories` (one reviewer, no triage, no code
/// host, a sweeper that never runs during a test, repositories on `git.example.com` and
/// `github.com` allowed), and the registry its metrics are in.
#[allow(dead_code)] // not every test crate using this module reads a memory source
pub(crate) fn memory_scheduler(
    repositories: Arc<MemoryRepositorySource>,
) -> (Arc<Scheduler>, prometheus::Registry) {
    memory_scheduler_with(repositories, None)
}

/// [`memory_scheduler`] with a code host (organisation scans list their repositories there).
#[allow(dead_code)] // not every test crate using this module reads a code host
pub(crate) fn memory_scheduler_with(
    repositories: Arc<MemoryRepositorySource>,
    code_host: Option<Arc<dyn verdict_backends::code_host::CodeHost>>,
) -> (Arc<Scheduler>, prometheus::Registry) {
    memory_scheduler_on(repositories, code_host, |_| {})
}

/// [`memory_scheduler_with`] over any repository source, with `tweak` applied to the settings.
#[allow(dead_code)] // not every test crate using this module needs another source
pub(crate) fn memory_scheduler_on(
    repositories: Arc<dyn RepositorySource>,
    code_host: Option<Arc<dyn verdict_backends::code_host::CodeHost>>,
    tweak: impl FnOnce(&mut SchedulerSettings),
) -> (Arc<Scheduler>, prometheus::Registry) {
    memory_scheduler_over(Arc::new(MemoryStore::new()), repositories, code_host, tweak)
}

/// [`memory_scheduler_on`] over a store the test holds too (to set its pressure, say).
#[allow(dead_code)] // not every test crate reaches into the store
pub(crate) fn memory_scheduler_over(
    store: Arc<MemoryStore>,
    repositories: Arc<dyn RepositorySource>,
    code_host: Option<Arc<dyn verdict_backends::code_host::CodeHost>>,
    tweak: impl FnOnce(&mut SchedulerSettings),
) -> (Arc<Scheduler>, prometheus::Registry) {
    let registry = prometheus::Registry::new();
    let deps = SchedulerDeps {
        broker: Arc::new(MemoryBroker::new()),
        documents: store.clone(),
        events: store.clone(),
        cancels: store.clone(),
        inputs: store.clone(),
        results: store.clone(),
        budgets: store.clone(),
        liveness: store.clone(),
        transcripts: store.clone(),
        archive: store.clone(),
        capacity: store,
        repositories,
        code_host,
        resolver: Arc::new(StaticResolver::new()),
        clock: Arc::new(SystemClock),
        metrics: SchedulerMetrics::register(&registry).expect("metrics register once"),
    };
    let mut settings = SchedulerSettings {
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
        language: verdict_proto::Language::En,
        message_max_bytes: 1 << 20,
        sweep_interval: Duration::from_secs(3600),
        queue_stats_interval: Duration::from_secs(3600),
        stall_after: Duration::from_secs(3600),
        recover_after: Duration::from_secs(3600),
        code_host: None,
        intake_concurrency: 8,
        intake_backlog: 4096,
        intake_timeout: Duration::from_secs(600),
        repositories: RepositoryAllowlist::new(&AllowlistRules {
            hosts: vec!["git.example.com".to_owned(), "github.com".to_owned()],
            ..AllowlistRules::default()
        })
        .expect("the hosts are valid"),
        budgets: Default::default(),
        replica_lease: Duration::from_secs(15),
    };
    tweak(&mut settings);
    (Arc::new(Scheduler::new(deps, settings)), registry)
}

/// A memory source whose `change` waits until the gate (the returned sender) is set to `true`,
/// counting the calls: intakes held in flight, as a slow repository holds them.
#[derive(Debug)]
#[allow(dead_code)] // not every test crate using this module holds intakes
pub(crate) struct HeldRepositories {
    inner: MemoryRepositorySource,
    open: watch::Receiver<bool>,
    pub changes: AtomicUsize,
}

#[allow(dead_code)]
impl HeldRepositories {
    pub(crate) fn new(
        inner: MemoryRepositorySource,
    ) -> (Arc<HeldRepositories>, watch::Sender<bool>) {
        let (gate, open) = watch::channel(false);
        let held = Arc::new(HeldRepositories {
            inner,
            open,
            changes: AtomicUsize::new(0),
        });
        (held, gate)
    }
}

impl RepositorySource for HeldRepositories {
    fn snapshot<'a>(
        &'a self,
        repo: &'a RepositoryRef,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Snapshot, RepoError>> {
        self.inner.snapshot(repo, cancel)
    }

    fn resolve<'a>(
        &'a self,
        url: &'a str,
        revision: &'a str,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<String, RepoError>> {
        self.inner.resolve(url, revision, cancel)
    }

    fn change<'a>(
        &'a self,
        url: &'a str,
        base: &'a str,
        head: &'a str,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Change, RepoError>> {
        Box::pin(async move {
            self.changes.fetch_add(1, Ordering::SeqCst);
            let mut open = self.open.clone();
            tokio::select! {
                () = cancel.cancelled() => return Err(RepoError::Cancelled),
                opened = open.wait_for(|o| *o) => {
                    opened.map_err(|_| RepoError::Cancelled)?;
                }
            }
            self.inner.change(url, base, head, cancel).await
        })
    }

    fn files<'a>(
        &'a self,
        url: &'a str,
        commit: &'a str,
        cancel: &'a CancellationToken,
    ) -> BoxFuture<'a, Result<Vec<RepoFile>, RepoError>> {
        self.inner.files(url, commit, cancel)
    }
}
