//! Intake under load (issue 11): a full backlog refuses what can be submitted again and admits
//! what cannot, on the real scheduler engine over in-memory backends and a repository source
//! that holds every change until the test lets it go.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use verdict_backends::BoxFuture;
use verdict_backends::repo::{
    Change, MemoryRepositorySource, RepoError, RepoFile, RepositorySource, Snapshot,
};
use verdict_proto::wire::RepositoryRef;
use verdict_scheduler::document::TaskState;
use verdict_scheduler::service::{ReviewSubmission, ServiceError, TaskService};

const URL: &str = "https://git.example.com/shop.git";

/// A memory source whose `change` waits until the gate opens, counting the calls.
#[derive(Debug)]
struct Held {
    inner: MemoryRepositorySource,
    open: watch::Receiver<bool>,
    changes: AtomicUsize,
}

impl Held {
    fn new() -> (Arc<Held>, watch::Sender<bool>) {
        let (gate, open) = watch::channel(false);
        let inner = MemoryRepositorySource::new();
        inner.insert_change(URL, "main", "feature", "diff --git a/a b/a\n");
        let held = Arc::new(Held {
            inner,
            open,
            changes: AtomicUsize::new(0),
        });
        (held, gate)
    }
}

impl RepositorySource for Held {
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
                opened = open.wait_for(|o| *o) => { opened.unwrap(); }
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

fn review() -> ReviewSubmission {
    ReviewSubmission {
        repository: URL.to_owned(),
        base: "main".into(),
        head: "feature".into(),
        ..ReviewSubmission::default()
    }
}

/// Awaits `done` with a deadline, yielding in between (intake runs in the background).
async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while !done().await {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

#[tokio::test]
async fn a_full_backlog_refuses_what_can_be_submitted_again_and_nothing_is_created() {
    let (source, gate) = Held::new();
    let (scheduler, _registry) = support::memory_scheduler_on(source.clone(), None, |s| {
        s.intake_backlog = 2;
        s.intake_concurrency = 1;
    });
    let first = scheduler.submit_review(review()).await.unwrap();
    let second = scheduler.submit_review(review()).await.unwrap();
    until("the first intake to be running", async || {
        source.changes.load(Ordering::SeqCst) == 1
    })
    .await;

    let refused = scheduler.submit_review(review()).await.unwrap_err();
    let ServiceError::Busy {
        reason,
        retry_after_secs,
    } = &refused
    else {
        panic!("expected busy, got {refused:?}");
    };
    assert!((1..=60).contains(retry_after_secs), "{retry_after_secs}");
    assert!(
        reason.contains("2 tasks are waiting for intake")
            && reason.contains("scheduler.intake_backlog = 2"),
        "{reason}"
    );

    // A submission that cannot be made again (a webhook delivery) is admitted all the same.
    let mut delivery = review();
    delivery.options.past_backlog = true;
    let third = scheduler.submit_review(delivery).await.unwrap();

    gate.send_replace(true);
    for id in [&first.id, &second.id, &third.id] {
        until("the held intakes to start their tasks", async || {
            scheduler.task(id).await.unwrap().state != TaskState::Queued
        })
        .await;
    }
    assert_eq!(
        source.changes.load(Ordering::SeqCst),
        3,
        "the refused submission never reached intake"
    );
    // Room again: the same submission is admitted now.
    scheduler.submit_review(review()).await.unwrap();
}
