//! Webhook deliveries as GitHub sends them: `pull_request` and `issues` event bodies built from
//! what the fake has now (GitHub's documented payload shape, the same objects the REST API
//! serves), and the `X-Hub-Signature-256` value that signs them.

use std::fmt::Write as _;

use ring::hmac;
use serde_json::{Map, Value, json};

use super::FakeGitHub;
use super::json;
use super::routes::lock;
use super::state::{Item, repo_key};

/// GitHub's `pull_request` event body for `action` (`opened`, `synchronize`, `reopened`,
/// `ready_for_review`, …) of the pull request as the fake has it now. A `synchronize` carries
/// `before` (the previous head) and `after` (the head). `installation` is present when an app is
/// installed on the repository; `sender` is the pull request's author.
///
/// Panics when the pull request does not exist: set it up first.
pub fn pull_request_event(
    fake: &FakeGitHub,
    owner: &str,
    repo: &str,
    number: u64,
    action: &str,
) -> Vec<u8> {
    let shared = &fake.inner.shared;
    let state = lock(&shared.state);
    let key = repo_key(owner, repo);
    let Some(pull) = state.repos.get(&key).and_then(|r| r.pull(number)) else {
        panic!("fake GitHub: no pull request {owner}/{repo}#{number} for a webhook; add it first");
    };
    let Some(r) = state.repos.get(&key) else {
        panic!("fake GitHub: no repository {owner}/{repo}");
    };
    let urls = &shared.urls;
    let mut body = Map::new();
    body.insert("action".to_owned(), json!(action));
    body.insert("number".to_owned(), json!(number));
    if action == "synchronize" {
        let before = pull
            .heads
            .iter()
            .rev()
            .nth(1)
            .map_or(pull.pr.base_sha.as_str(), |h| h.sha.as_str());
        body.insert("before".to_owned(), json!(before));
        body.insert("after".to_owned(), json!(pull.pr.head_sha));
    }
    body.insert("pull_request".to_owned(), json::pull_request(urls, r, pull));
    body.insert("repository".to_owned(), json::repository(urls, r));
    if let Some(id) = state.any_installation(&key) {
        body.insert(
            "installation".to_owned(),
            json!({"id": id, "node_id": format!("MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9u{id}")}),
        );
    }
    body.insert(
        "sender".to_owned(),
        json::user(urls, &pull.pr.author, pull.pr.author_is_bot),
    );
    Value::Object(body).to_string().into_bytes()
}

/// GitHub's `issues` event body for `action` (`opened`, `labeled`, …) of the issue as the fake
/// has it now; `sender` is its author.
///
/// Panics when the issue does not exist (pull requests are not `issues` events on GitHub).
pub fn issues_event(
    fake: &FakeGitHub,
    owner: &str,
    repo: &str,
    number: u64,
    action: &str,
) -> Vec<u8> {
    let shared = &fake.inner.shared;
    let state = lock(&shared.state);
    let key = repo_key(owner, repo);
    let Some(r) = state.repos.get(&key) else {
        panic!("fake GitHub: no repository {owner}/{repo} for a webhook; add it first");
    };
    let Some(item @ Item::Issue(issue)) = r.items.get(&number) else {
        panic!("fake GitHub: no issue {owner}/{repo}#{number} for a webhook; add it first");
    };
    let urls = &shared.urls;
    let mut body = Map::new();
    body.insert("action".to_owned(), json!(action));
    body.insert("issue".to_owned(), json::issue(urls, r, number, item));
    body.insert("repository".to_owned(), json::repository(urls, r));
    if let Some(id) = state.any_installation(&key) {
        body.insert(
            "installation".to_owned(),
            json!({"id": id, "node_id": format!("MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9u{id}")}),
        );
    }
    body.insert(
        "sender".to_owned(),
        json::user(urls, &issue.issue.author, issue.issue.author_is_bot),
    );
    Value::Object(body).to_string().into_bytes()
}

/// `sha256=<hex HMAC-SHA256(secret, body)>`, the `X-Hub-Signature-256` value.
pub fn signature(secret: &str, body: &[u8]) -> String {
    let key = hmac::Key::new(hmac::HMAC_SHA256, secret.as_bytes());
    let tag = hmac::sign(&key, body);
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256=");
    for b in tag.as_ref() {
        // Writing to a String cannot fail.
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// The headers GitHub sends with a delivery: `X-GitHub-Event`, `X-GitHub-Delivery`,
/// `X-Hub-Signature-256` (of `body` with `secret`), `Content-Type` and GitHub's `User-Agent`.
pub fn delivery_headers(
    event: &str,
    delivery_id: &str,
    secret: &str,
    body: &[u8],
) -> Vec<(String, String)> {
    vec![
        ("X-GitHub-Event".to_owned(), event.to_owned()),
        ("X-GitHub-Delivery".to_owned(), delivery_id.to_owned()),
        ("X-Hub-Signature-256".to_owned(), signature(secret, body)),
        ("Content-Type".to_owned(), "application/json".to_owned()),
        ("User-Agent".to_owned(), "GitHub-Hookshot/fake".to_owned()),
    ]
}
