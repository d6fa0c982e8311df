//! Intake under load (issue 11): a full backlog refuses what can be submitted again and admits
//! what cannot, on the real scheduler engine over in-memory backends and a repository source
//! that holds every change until the test lets it go.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use support::HeldRepositories;
use verdict_backends::repo::MemoryRepositorySource;
use verdict_scheduler::document::TaskState;
use verdict_scheduler::service::{ReviewSubmission, ServiceError, TaskService};

const URL: &str = "https://git.example.com/shop.git";

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
    let inner = MemoryRepositorySource::new();
    inner.insert_change(URL, "main", "feature", "diff --git a/a b/a\n");
    let (source, gate) = HeldRepositories::new(inner);
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
