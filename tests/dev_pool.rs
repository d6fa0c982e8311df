//! The whole pool in one process (`verdict dev`'s runtime) on the fake provider: every end-to-end
//! scenario of the distributed pool, plus the ones only an in-process test can stage precisely
//! (a poison message, the same stage delivered twice).

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::sync::Arc;
use std::time::Duration;

use verdict::config::Config;
use verdict::dev::DevPool;
use verdict::runtime;
use verdict_api::document::RepositoryView;
use verdict_api::document::{TaskDocument, TaskState};
use verdict_api::submission::{ReviewSubmission, ScanSubmission, SubmissionOptions};
use verdict_backends::broker::{Broker, Message, Route};
use verdict_backends::repo::{GitRepositorySource, GitSourceConfig};
use verdict_backends::store::DocumentStore;
use verdict_proto::outcome::FailureKind;
use verdict_proto::wire::{EventType, Priority};
use verdict_scheduler::service::{ServiceError, TaskService};
use verdict_testkit::scenario::{self, Isolation};
use verdict_testkit::{Behaviour, FakeProvider, Script};

struct Rig {
    fake: FakeProvider,
    pool: DevPool,
    repo: String,
    _dir: tempfile::TempDir,
}

async fn rig(script: impl FnOnce(&FakeProvider)) -> Rig {
    rig_with(script, "", None).await
}

/// [`rig`] with `repositories` keys added to `[repositories]` and, when given, git's fetch limit.
async fn rig_with(
    script: impl FnOnce(&FakeProvider),
    repositories: &str,
    fetch_timeout: Option<Duration>,
) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let repo = scenario::sample_repo(&dir.path().join("repo")).unwrap();
    let fake = FakeProvider::start().await;
    script(&fake);
    let cache = dir.path().join("cache");
    let toml = scenario::config_toml(&fake.base_url(), &Isolation::unique("dev"), &cache).replace(
        "[repositories]\n",
        &format!("[repositories]\n{repositories}"),
    );
    let path = dir.path().join("verdict.toml");
    std::fs::write(&path, toml).unwrap();
    let config = Config::load(Some(&path), &[]).unwrap();
    let mut git = GitSourceConfig::new(&cache);
    git.env = vec![("GIT_CONFIG_GLOBAL".into(), "/dev/null".into())];
    if let Some(limit) = fetch_timeout {
        git.fetch_timeout = limit;
    }
    let repositories = Arc::new(GitRepositorySource::open(git).unwrap());
    let providers = runtime::provider_registry(&config).unwrap();
    let pool = DevPool::start(&config, providers, repositories, None, 2).unwrap();
    Rig {
        fake,
        pool,
        repo: repo.display().to_string(),
        _dir: dir,
    }
}

fn review(rig: &Rig, pipeline: &str) -> ReviewSubmission {
    ReviewSubmission {
        repository: rig.repo.clone(),
        base: "main".into(),
        head: "feature/coupons".into(),
        pipeline: Some(pipeline.into()),
        title: Some("Add percentage coupons".into()),
        body: Some("Adds coupons and an average price.".into()),
        options: SubmissionOptions::default(),
        ..Default::default()
    }
}

async fn run(rig: &Rig, pipeline: &str) -> TaskDocument {
    let id = rig
        .pool
        .scheduler
        .submit_review(review(rig, pipeline))
        .await
        .unwrap()
        .id;
    let doc = rig.pool.wait(&id, Duration::from_secs(60)).await.unwrap();
    assert!(doc.state.is_terminal(), "task did not finish: {doc:#?}");
    doc
}

fn types(doc: &TaskDocument) -> Vec<EventType> {
    doc.events.iter().map(|e| e.kind).collect()
}

/// The full commit id `revision` names in the sample repository, as git itself says.
fn commit_of(rig: &Rig, revision: &str) -> String {
    let out = std::process::Command::new("git")
        .args(["-C", &rig.repo, "rev-parse", "--verify"])
        .arg(format!("{revision}^{{commit}}"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(out.status.success(), "{revision}");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

async fn scan(rig: &Rig, revision: &str) -> TaskDocument {
    let submission = ScanSubmission {
        repository: rig.repo.clone(),
        revision: revision.to_owned(),
        options: SubmissionOptions::default(),
    };
    let id = rig.pool.scheduler.submit_scan(submission).await.unwrap().id;
    let doc = rig.pool.wait(&id, Duration::from_secs(60)).await.unwrap();
    assert!(doc.state.is_terminal(), "task did not finish: {doc:#?}");
    doc
}

fn happy(fake: &FakeProvider) {
    scenario::script_valid_answers(fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_stage_review_completes() {
    let rig = rig(happy).await;
    let doc = run(&rig, "multi").await;
    assert_eq!(doc.state, TaskState::Completed, "{doc:#?}");
    let result = doc.result.as_ref().unwrap();
    assert_eq!(result["decision"], "request_changes");
    assert_eq!(result["score"], 6);
    let stages: Vec<&str> = doc.stages.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(
        stages,
        ["triage", "summary", "reviewer-1", "reviewer-2", "validator"]
    );
    assert!(
        doc.stages
            .iter()
            .all(|s| s.outcome.as_deref() == Some("ok"))
    );
    assert_eq!(doc.coverage.files_reviewed.len(), 2);
    assert_eq!(types(&doc).last(), Some(&EventType::TaskFinished));
}

/// A multi-stage review run to its end on a pool whose triage answers prose every time.
async fn triage_answering_prose() -> (Rig, TaskDocument) {
    let rig = rig(|fake| {
        happy(fake);
        fake.script(
            scenario::TRIAGE,
            Script::always(Behaviour::text(scenario::PROSE)),
        );
    })
    .await;
    let doc = run(&rig, "multi").await;
    (rig, doc)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triage_prose_falls_back_before_the_summary_and_the_review_completes() {
    let (_rig, doc) = triage_answering_prose().await;
    assert_eq!(doc.state, TaskState::Completed, "{doc:#?}");
    let fallback = doc
        .events
        .iter()
        .position(|e| e.kind == EventType::TriageFallback)
        .expect("a triage-fallback event");
    let summary_started = doc
        .events
        .iter()
        .position(|e| e.kind == EventType::StageStarted && e.stage_id.as_deref() == Some("summary"))
        .unwrap();
    assert!(fallback < summary_started);
    assert_eq!(
        doc.events[fallback].message,
        "Triage did not return structured output; continuing with review by default."
    );
    let repairs = doc
        .events
        .iter()
        .filter(|e| e.channel.as_deref() == Some("review:protocol_repair"))
        .count();
    assert_eq!(
        repairs, 1,
        "triage's first repair round repeated its prose, which ended the repair (decision 182)"
    );
    assert_eq!(doc.result.as_ref().unwrap()["triage_fallback"], true);
}

/// Issue 14: an operator can read why a stage failed. The triage stage's transcripts come back
/// over the API (the scheduler's route, from the store the workers wrote them to): the prose
/// answer, its repair round and the outcome, in full; an unknown stage is a 404 naming the
/// task's stages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stages_transcripts_are_read_back_through_the_api() {
    let (rig, doc) = triage_answering_prose().await;
    const TOKEN: &str = "transcripts-token";
    let auth = verdict_scheduler::api::ApiAuth::new([verdict_backends::secret::Secret::new(TOKEN)])
        .unwrap();
    let router = verdict_scheduler::api::router(
        Arc::new(rig.pool.scheduler.clone()),
        auth,
        prometheus::Registry::new(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    let client =
        verdict_client::client::ApiClient::new(&format!("http://{addr}"), Some(TOKEN.to_owned()))
            .unwrap();

    let triage = client.transcripts(&doc.id, Some("triage")).await.unwrap();
    assert_eq!(triage.task_id, doc.id);
    let [attempt] = triage.transcripts.as_slice() else {
        panic!("one triage attempt: {:#?}", triage.transcripts)
    };
    let text = attempt.to_text();
    assert!(text.contains(scenario::PROSE), "{text}");
    assert!(text.contains("--- repair round 1 of"), "{text}");
    assert!(text.contains("--- outcome"), "{text}");

    let all = client.transcripts(&doc.id, None).await.unwrap();
    let stages: Vec<&str> = all
        .transcripts
        .iter()
        .map(|t| t.stage_id.as_str())
        .collect();
    assert!(
        stages.contains(&"triage") && stages.contains(&"summary"),
        "{stages:?}"
    );
    let missing = client
        .transcripts(&doc.id, Some("no-such-stage"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        missing.contains("has no stage `no-such-stage`") && missing.contains("triage"),
        "{missing}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewer_answering_prose_makes_the_task_incomplete() {
    let rig = rig(|fake| {
        happy(fake);
        fake.script(
            scenario::REVIEWER,
            Script::always(Behaviour::text(scenario::PROSE)),
        );
    })
    .await;
    let doc = run(&rig, "multi").await;
    assert_eq!(doc.state, TaskState::Incomplete, "{doc:#?}");
    assert!(doc.result.is_none(), "nothing publishable");
    assert!(doc.reason.as_ref().unwrap().contains("reviewer"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exhausted_review_envelope_degrades_with_no_score() {
    let rig = rig(|fake| {
        fake.script(
            scenario::REVIEW,
            Script::always(Behaviour::text(scenario::PROSE)),
        )
    })
    .await;
    let doc = run(&rig, "single").await;
    assert_eq!(doc.state, TaskState::Degraded, "{doc:#?}");
    let r = doc.result.as_ref().unwrap();
    assert_eq!(r["decision"], "comment");
    assert!(r["score"].is_null());
    assert_eq!(r["findings"], serde_json::json!([]));
    assert!(types(&doc).contains(&EventType::Degraded));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthorised_provider_is_incomplete_with_kind_auth() {
    let rig =
        rig(|fake| fake.script(scenario::REVIEW, Script::always(Behaviour::status(401)))).await;
    let doc = run(&rig, "single").await;
    assert_eq!(doc.state, TaskState::Incomplete, "{doc:#?}");
    assert_eq!(doc.stages[0].failure_kind, Some(FailureKind::Auth));
    assert_eq!(
        rig.fake.requests_for(scenario::REVIEW).len(),
        1,
        "auth is not retried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_aborts() {
    let rig = rig(|fake| fake.script(scenario::REVIEW, Script::always(Behaviour::hang()))).await;
    let id = rig
        .pool
        .scheduler
        .submit_review(review(&rig, "single"))
        .await
        .unwrap()
        .id;
    rig.fake
        .wait_for_requests(1, Duration::from_secs(30))
        .await
        .unwrap();
    rig.pool.scheduler.cancel(&id).await.unwrap();
    let doc = rig.pool.wait(&id, Duration::from_secs(30)).await.unwrap();
    assert_eq!(doc.state, TaskState::Aborted);
    assert!(doc.result.is_none());
    assert!(types(&doc).contains(&EventType::Cancelled));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_message_is_dead_lettered_while_the_pool_carries_on() {
    let rig = rig(happy).await;
    let poison = Message {
        body: b"{\"version\": 7, \"task_id\": \"x\"}".to_vec(),
        headers: Default::default(),
    };
    rig.pool
        .broker
        .publish(Route::Stages(Priority::Interactive), &poison)
        .await
        .unwrap();
    let doc = run(&rig, "single").await;
    assert_eq!(doc.state, TaskState::Completed);
    let dead = rig.pool.broker.dead_letters();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(
        dead[0].1.contains("version 7"),
        "the reason names the problem: {}",
        dead[0].1
    );
}

/// Issue 8, item 3: a repository that accepts the connection and never answers (a listener of
/// this test, on loopback, allowed by name for it) fails its own review at the fetch limit, and
/// a review submitted after it completes meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_that_never_answers_fails_only_its_own_review() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/x.git", listener.local_addr().unwrap());
    let _silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let limit = Duration::from_secs(8);
    let allowed =
        "allow_schemes = [\"http\"]\nallow_hosts = [\"127.0.0.1\"]\nfetch_timeout_seconds = 8\n";
    let rig = rig_with(happy, allowed, Some(limit)).await;
    let hanging = ReviewSubmission {
        repository: url.clone(),
        ..review(&rig, "single")
    };
    let stuck = rig.pool.scheduler.submit_review(hanging).await.unwrap().id;
    let submitted = tokio::time::Instant::now();

    let doc = run(&rig, "single").await;
    assert_eq!(doc.state, TaskState::Completed, "{doc:#?}");
    let meanwhile = rig.pool.scheduler.task(&stuck).await.unwrap();
    assert!(
        submitted.elapsed() < limit && meanwhile.state == TaskState::Queued,
        "the other review completed while this one still hung: {meanwhile:#?}"
    );

    let ended = rig
        .pool
        .wait(&stuck, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(ended.state, TaskState::Incomplete, "{ended:#?}");
    assert_eq!(ended.failure_kind, Some(FailureKind::RepositoryUnavailable));
    let reason = ended.reason.unwrap();
    assert!(
        reason.contains(&format!(
            "git fetch for repository {url} did not finish within 8 s and was stopped"
        )),
        "{reason}"
    );
    assert!(
        reason.contains("raise `repositories.fetch_timeout_seconds`"),
        "{reason}"
    );
}

/// Issue 8, item 4: a title no stage request could carry is refused before anything is stored
/// (the API answers 413 with this message), and the next review completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_title_no_message_can_carry_is_refused_and_the_next_review_completes() {
    let rig = rig(happy).await;
    let oversize = ReviewSubmission {
        title: Some("t".repeat(1 << 20)),
        ..review(&rig, "multi")
    };
    let refused = rig
        .pool
        .scheduler
        .submit_review(oversize)
        .await
        .unwrap_err();
    assert_eq!(
        refused,
        ServiceError::TooLarge(
            "title is 1048576 bytes, above its limit of 16384 bytes (1/64 of broker.message_max_bytes = 1048576, so that every stage request of the task fits one broker message); shorten it"
                .to_owned()
        )
    );
    let doc = run(&rig, "multi").await;
    assert_eq!(doc.state, TaskState::Completed, "{doc:#?}");
}

/// Issue 8, item 4: a stage request larger than a message reaches a worker anyway (published by
/// hand here: the scheduler itself never publishes one); the worker dead-letters it, and the
/// dead letter ends its task with the reason instead of leaving it running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_stage_request_ends_its_task_with_the_reason() {
    let rig = rig(|fake| fake.script(scenario::REVIEW, Script::always(Behaviour::hang()))).await;
    let id = rig
        .pool
        .scheduler
        .submit_review(review(&rig, "single"))
        .await
        .unwrap()
        .id;
    rig.fake
        .wait_for_requests(1, Duration::from_secs(30))
        .await
        .unwrap();
    let record = rig
        .pool
        .store
        .get(&format!("task:{id}"))
        .await
        .unwrap()
        .unwrap();
    let task: serde_json::Value = serde_json::from_str(&record.body).unwrap();
    let mut request: verdict_proto::wire::StageRequest =
        serde_json::from_value(task["stages"][0]["request"].clone()).unwrap();
    request.inputs.push(verdict_proto::wire::InputRef {
        name: "pull request description".to_owned(),
        content: verdict_proto::wire::InputContent::Inline {
            text: "d".repeat(1 << 20),
        },
    });
    let oversize = Message {
        body: verdict_proto::wire::encode(&request).unwrap(),
        headers: [
            ("x-verdict-task".to_owned(), id.clone()),
            ("x-verdict-stage".to_owned(), "review".to_owned()),
        ]
        .into(),
    };
    rig.pool
        .broker
        .publish(Route::Stages(Priority::Interactive), &oversize)
        .await
        .unwrap();

    let doc = rig.pool.wait(&id, Duration::from_secs(30)).await.unwrap();
    assert_eq!(doc.state, TaskState::Incomplete, "{doc:#?}");
    assert_eq!(doc.failure_kind, Some(FailureKind::InvalidRequest));
    let reason = doc.reason.as_deref().unwrap();
    assert!(
        reason.starts_with("stage review could not run (invalid_request): its request was dead-lettered (stage request is "),
        "{reason}"
    );
    assert!(reason.contains("above the 1048576-byte limit"), "{reason}");
    assert!(types(&doc).contains(&EventType::Failed));
    assert_eq!(
        rig.pool.broker.depth(Route::DeadLetters),
        0,
        "taken and acknowledged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_stage_delivered_twice_calls_the_provider_once() {
    let rig = rig(|fake| {
        fake.script(
            scenario::REVIEW,
            Script::always(Behaviour::text(scenario::REVIEW_OK).after(Duration::from_millis(300))),
        );
    })
    .await;
    let id = rig
        .pool
        .scheduler
        .submit_review(review(&rig, "single"))
        .await
        .unwrap()
        .id;
    rig.fake
        .wait_for_requests(1, Duration::from_secs(30))
        .await
        .unwrap();
    // Deliver the stage again while the first delivery is running.
    let record = rig
        .pool
        .store
        .get(&format!("task:{id}"))
        .await
        .unwrap()
        .unwrap();
    let task: serde_json::Value = serde_json::from_str(&record.body).unwrap();
    let request: verdict_proto::wire::StageRequest =
        serde_json::from_value(task["stages"][0]["request"].clone()).unwrap();
    let duplicate = Message {
        body: verdict_proto::wire::encode(&request).unwrap(),
        headers: Default::default(),
    };
    rig.pool
        .broker
        .publish(Route::Stages(Priority::Interactive), &duplicate)
        .await
        .unwrap();
    let doc = rig.pool.wait(&id, Duration::from_secs(30)).await.unwrap();
    assert_eq!(doc.state, TaskState::Completed, "{doc:#?}");
    // Once more after the result is recorded: the worker republishes it instead of running.
    rig.pool
        .broker
        .publish(Route::Stages(Priority::Interactive), &duplicate)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while rig.pool.broker.depth(Route::Stages(Priority::Interactive)) > 0
        || rig
            .pool
            .broker
            .unsettled(Route::Stages(Priority::Interactive))
            > 0
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the duplicate was not consumed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        rig.fake.requests_for(scenario::REVIEW).len(),
        1,
        "the provider is called once"
    );
    assert_eq!(
        rig.pool.scheduler.task(&id).await.unwrap().state,
        TaskState::Completed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_of_head_a_tag_and_a_short_sha_work_on_the_full_commit() {
    let rig = rig(|fake| {
        fake.script(
            scenario::DEFAULT,
            Script::always(Behaviour::text(scenario::SCAN_OK)),
        )
    })
    .await;
    let main = commit_of(&rig, "main");
    for revision in [
        "HEAD",
        "v0.3.0",
        &main[..8],
        "origin/main",
        "feature/coupons~1",
    ] {
        let doc = scan(&rig, revision).await;
        assert_eq!(doc.state, TaskState::Completed, "{revision}: {doc:#?}");
        assert_eq!(
            doc.repository,
            Some(RepositoryView {
                url: rig.repo.clone(),
                revision: revision.to_owned(),
                commit: Some(main.clone()),
                base_revision: None,
                base: None,
            }),
            "{revision}"
        );
        assert_eq!(doc.result.as_ref().unwrap()["overall_score"], 80);
    }
    let asked = rig.fake.requests_for(scenario::DEFAULT);
    assert_eq!(asked.len(), 5);
    assert!(
        asked.iter().all(|r| r.body.to_string().contains(&main)),
        "every scan stage was told the full commit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reviews_of_head_a_tag_and_a_short_sha_record_the_full_commits() {
    let rig = rig(happy).await;
    let (main, feature) = (commit_of(&rig, "main"), commit_of(&rig, "feature/coupons"));
    for (base, head) in [
        ("HEAD", &feature[..10]),
        ("v0.3.0", "feature/coupons"),
        (&main[..7], "origin/feature/coupons"),
    ] {
        let mut submission = review(&rig, "single");
        submission.base = base.to_owned();
        submission.head = head.to_owned();
        let id = rig
            .pool
            .scheduler
            .submit_review(submission)
            .await
            .unwrap()
            .id;
        let doc = rig.pool.wait(&id, Duration::from_secs(60)).await.unwrap();
        assert_eq!(doc.state, TaskState::Completed, "{base}...{head}: {doc:#?}");
        assert_eq!(
            doc.repository,
            Some(RepositoryView {
                url: rig.repo.clone(),
                revision: head.to_owned(),
                commit: Some(feature.clone()),
                base_revision: Some(base.to_owned()),
                base: Some(main.clone()),
            }),
            "{base}...{head}"
        );
        assert_eq!(doc.coverage.files_reviewed.len(), 2, "the change was read");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_branch_that_does_not_exist_is_not_found_naming_it() {
    let rig = rig(happy).await;
    let doc = scan(&rig, "no-such-branch").await;
    assert_eq!(doc.state, TaskState::Incomplete, "{doc:#?}");
    assert_eq!(doc.failure_kind, Some(FailureKind::NotFound));
    let reason = doc.reason.as_deref().unwrap();
    assert!(
        reason.starts_with(&format!(
            "revision `no-such-branch` was not found in repository {}; check the branch, tag or commit name",
            rig.repo
        )),
        "{reason}"
    );
    assert!(doc.stages.is_empty(), "no stage ran");

    let mut submission = review(&rig, "single");
    submission.head = "feature/no-such".into();
    let id = rig
        .pool
        .scheduler
        .submit_review(submission)
        .await
        .unwrap()
        .id;
    let doc = rig.pool.wait(&id, Duration::from_secs(60)).await.unwrap();
    assert_eq!(doc.state, TaskState::Incomplete, "{doc:#?}");
    assert_eq!(doc.failure_kind, Some(FailureKind::NotFound));
    assert!(
        doc.reason
            .as_deref()
            .unwrap()
            .contains("revision `feature/no-such` was not found")
    );
    assert!(
        rig.fake.requests_for(scenario::REVIEW).is_empty(),
        "no provider was asked"
    );
}
