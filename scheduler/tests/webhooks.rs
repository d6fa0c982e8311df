//! `POST /v1/webhooks/github` on the real scheduler (in-memory backends): a delivery is taken only
//! with the right signature, a redelivery makes no second task, a new head supersedes the review
//! of the old one, pings are answered and irrelevant events ignored.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

mod support;

use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::Sha256;
use verdict_backends::repo::{MemoryRepositorySource, RepositorySource};
use verdict_backends::secret::Secret;
use verdict_policy::webhook::WebhookPolicy;
use verdict_scheduler::api::{self, ApiAuth, webhooks::GitHubWebhooks};
use verdict_scheduler::engine::SchedulerSettings;

const SECRET: &str = "webhook-s3cret";
const URL: &str = "https://github.com/acme/shop.git";
const BASE: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const HEAD_1: &str = "1111111111111111111111111111111111111111";
const HEAD_2: &str = "2222222222222222222222222222222222222222";
const DIFF: &str = "diff --git a/src/a.py b/src/a.py\n--- a/src/a.py\n+++ b/src/a.py\n@@ -1 +1,2 @@\n x = 1\n+y = 2\n";

struct Server {
    base: String,
    http: reqwest::Client,
}

fn repositories() -> MemoryRepositorySource {
    let repositories = MemoryRepositorySource::new();
    repositories.insert_change(URL, BASE, HEAD_1, DIFF);
    repositories.insert_change(URL, BASE, HEAD_2, DIFF);
    repositories
}

async fn serve() -> Server {
    serve_on(Arc::new(repositories()), |_| {}).await
}

async fn serve_on(
    repositories: Arc<dyn RepositorySource>,
    tweak: impl FnOnce(&mut SchedulerSettings),
) -> Server {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (scheduler, registry) = support::memory_scheduler_on(repositories, None, tweak);
    let hooks = GitHubWebhooks {
        secret: Secret::new(SECRET),
        policy: WebhookPolicy {
            publish: true,
            analyse_issues: true,
            ..WebhookPolicy::default()
        },
    };
    // Webhooks need no bearer token even when the rest of the API does.
    let auth = ApiAuth::new([Secret::new("api-token")]).unwrap();
    let router = api::router_with_webhooks(scheduler, auth, registry, Some(hooks));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    Server {
        base: format!("http://{addr}"),
        http: reqwest::Client::new(),
    }
}

fn signature(secret: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256={hex}")
}

fn pull_request(action: &str, head: &str) -> Value {
    json!({
        "action": action, "number": 7,
        "pull_request": {
            "number": 7, "state": "open", "draft": false, "title": "Add y", "body": "",
            "user": {"login": "ada", "type": "User"}, "labels": [],
            "head": {"sha": head, "ref": "feature"},
            "base": {"sha": BASE, "ref": "main"},
        },
        "repository": {"name": "shop", "owner": {"login": "acme"}, "clone_url": URL},
        "installation": {"id": 1},
    })
}

impl Server {
    async fn deliver(
        &self,
        event: &str,
        delivery: &str,
        body: &Value,
        secret: Option<&str>,
    ) -> reqwest::Response {
        let bytes = serde_json::to_vec(body).unwrap();
        let mut req = self
            .http
            .post(format!("{}/v1/webhooks/github", self.base))
            .header("X-GitHub-Event", event)
            .header("X-GitHub-Delivery", delivery)
            .header("Content-Type", "application/json");
        if let Some(secret) = secret {
            req = req.header("X-Hub-Signature-256", signature(secret, &bytes));
        }
        req.body(bytes).send().await.unwrap()
    }

    async fn task(&self, id: &str) -> Value {
        self.http
            .get(format!("{}/v1/tasks/{id}", self.base))
            .bearer_auth("api-token")
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// The task's document once `done` holds for it (intake runs in the background).
    async fn task_when(&self, id: &str, done: impl Fn(&Value) -> bool) -> Value {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let doc = self.task(id).await;
                if done(&doc) {
                    return doc;
                }
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the task reaches the state in time")
    }
}

#[tokio::test]
async fn a_signed_pull_request_makes_one_review_and_a_redelivery_names_the_same_task() {
    let srv = serve().await;
    let first = srv
        .deliver(
            "pull_request",
            "d-1",
            &pull_request("opened", HEAD_1),
            Some(SECRET),
        )
        .await;
    assert_eq!(first.status(), StatusCode::ACCEPTED);
    let id = first.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let again = srv
        .deliver(
            "pull_request",
            "d-1",
            &pull_request("opened", HEAD_1),
            Some(SECRET),
        )
        .await;
    assert_eq!(again.status(), StatusCode::ACCEPTED);
    assert_eq!(again.json::<Value>().await.unwrap()["id"], id.as_str());

    let doc = srv.task_when(&id, |d| d["state"] == "running").await;
    assert_eq!(doc["github"]["item"]["repo"]["owner"], "acme");
    assert_eq!(doc["github"]["item"]["number"], 7);
    assert_eq!(doc["github"]["head_sha"], HEAD_1);
    assert_eq!(doc["repository"]["commit"], HEAD_1);
}

/// Intake's backlog full: the API refuses a review with 429, but a delivery is admitted, since
/// GitHub would not send it again.
#[tokio::test]
async fn a_delivery_is_admitted_when_the_backlog_refuses_api_submissions() {
    let (held, gate) = support::HeldRepositories::new(repositories());
    let srv = serve_on(held.clone(), |s| s.intake_backlog = 1).await;
    let first = srv
        .deliver(
            "pull_request",
            "d-1",
            &pull_request("opened", HEAD_1),
            Some(SECRET),
        )
        .await;
    assert_eq!(first.status(), StatusCode::ACCEPTED);

    let api = srv
        .http
        .post(format!("{}/v1/reviews", srv.base))
        .bearer_auth("api-token")
        .json(&json!({"repository": URL, "base": BASE, "head": HEAD_2}))
        .send()
        .await
        .unwrap();
    assert_eq!(api.status(), StatusCode::TOO_MANY_REQUESTS);

    let second = srv
        .deliver(
            "pull_request",
            "d-2",
            &pull_request("synchronize", HEAD_2),
            Some(SECRET),
        )
        .await;
    assert_eq!(second.status(), StatusCode::ACCEPTED, "past the backlog");
    let id = second.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    gate.send_replace(true);
    let doc = srv.task_when(&id, |d| d["state"] == "running").await;
    assert_eq!(doc["repository"]["commit"], HEAD_2);
}

#[tokio::test]
async fn a_missing_or_wrong_signature_is_a_401_and_makes_nothing() {
    let srv = serve().await;
    for secret in [None, Some("not-the-secret")] {
        let r = srv
            .deliver(
                "pull_request",
                "d-2",
                &pull_request("opened", HEAD_1),
                secret,
            )
            .await;
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{secret:?}");
        let body: Value = r.json().await.unwrap();
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("X-Hub-Signature-256"),
            "{body}"
        );
    }
    // The same delivery, now signed, is the first task: nothing was made before.
    let r = srv
        .deliver(
            "pull_request",
            "d-2",
            &pull_request("opened", HEAD_1),
            Some(SECRET),
        )
        .await;
    let id = r.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let doc = srv.task(&id).await;
    let queued = doc["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "task-queued")
        .count();
    assert_eq!(queued, 1);
}

#[tokio::test]
async fn a_new_head_supersedes_the_review_of_the_old_one() {
    let srv = serve().await;
    let old = srv
        .deliver(
            "pull_request",
            "d-3",
            &pull_request("opened", HEAD_1),
            Some(SECRET),
        )
        .await
        .json::<Value>()
        .await
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    srv.task_when(&old, |d| d["state"] == "running").await;
    let new = srv
        .deliver(
            "pull_request",
            "d-4",
            &pull_request("synchronize", HEAD_2),
            Some(SECRET),
        )
        .await
        .json::<Value>()
        .await
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(old, new);
    let old_doc = srv.task_when(&old, |d| d["state"] == "aborted").await;
    let reason = old_doc["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("superseded: acme/shop #7 has a new head 222222222222"),
        "{reason}"
    );
    let new_doc = srv.task_when(&new, |d| d["state"] == "running").await;
    assert_eq!(new_doc["repository"]["commit"], HEAD_2);
}

#[tokio::test]
async fn pings_are_answered_and_other_events_ignored_with_a_reason() {
    let srv = serve().await;
    let ping = srv
        .deliver(
            "ping",
            "d-5",
            &json!({"zen": "Design for failure."}),
            Some(SECRET),
        )
        .await;
    assert_eq!(ping.status(), StatusCode::OK);
    let push = srv.deliver("push", "d-6", &json!({}), Some(SECRET)).await;
    assert_eq!(push.status(), StatusCode::OK);
    let body: Value = push.json().await.unwrap();
    assert!(
        body["ignored"].as_str().unwrap().contains("not used"),
        "{body}"
    );
    let closed = srv
        .deliver(
            "pull_request",
            "d-7",
            &pull_request("closed", HEAD_1),
            Some(SECRET),
        )
        .await;
    assert_eq!(closed.status(), StatusCode::OK);
}
