//! Intake under load (issues 11 and 14): a full backlog, or a state store out of room, refuses
//! what can be submitted again and admits what cannot, on the real scheduler engine over in-memory backends and a repository source
//! that holds every change until the test lets it go.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod support;

use std::sync::atomic::Ordering;
use std::time::Duration;

use support::HeldRepositories;
use verdict_api::document::TaskState;
use verdict_api::submission::ReviewSubmission;
use verdict_backends::repo::MemoryRepositorySource;
use verdict_scheduler::service::{ServiceError, TaskService};

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

/// A state store near its memory limit (issue 14): new submissions are refused as overloaded
/// with a wait and nothing is created; a webhook delivery is still taken; with room again the
/// same submission is admitted, and every task taken runs.
#[tokio::test]
async fn a_store_out_of_room_refuses_new_tasks_until_it_has_room_again() {
    let source = MemoryRepositorySource::new();
    source.insert_change(URL, "main", "feature", "diff --git a/a b/a\n");
    let store = std::sync::Arc::new(verdict_backends::store::memory::MemoryStore::new());
    let (scheduler, _registry) =
        support::memory_scheduler_over(store.clone(), std::sync::Arc::new(source), None, |_| {});

    store.set_pressure(Some(
        "Redis at 127.0.0.1:6379 holds 95 % of its maxmemory".into(),
    ));
    let refused = scheduler.submit_review(review()).await.unwrap_err();
    let ServiceError::Overloaded {
        reason,
        retry_after_secs,
    } = &refused
    else {
        panic!("expected overloaded, got {refused:?}");
    };
    assert!(*retry_after_secs >= 1, "{retry_after_secs}");
    assert!(
        reason.contains("95 % of its maxmemory") && reason.contains("nothing was created"),
        "{reason}"
    );
    let mut delivery = review();
    delivery.options.past_backlog = true;
    let taken = scheduler.submit_review(delivery).await.unwrap();

    store.set_pressure(None);
    let admitted = scheduler.submit_review(review()).await.unwrap();
    for id in [&taken.id, &admitted.id] {
        until("the tasks to leave the queue", async || {
            scheduler.task(id).await.unwrap().state != TaskState::Queued
        })
        .await;
    }
}
