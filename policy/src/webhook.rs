//! GitHub webhooks in (issue intake from the code host): the signature checked before anything is
//! parsed, then the event read into what the scheduler should do — start a review, start an issue
//! analysis, answer a ping, or ignore it with a reason. Pure: bytes and headers in, an [`Action`]
//! out; the API route does the submitting.
//!
//! - **Signature.** `X-Hub-Signature-256: sha256=<hex>` is HMAC-SHA256 of the exact body with the
//!   webhook secret, compared in constant time (`hmac`'s `verify_slice`). A missing, malformed or
//!   wrong signature is refused before the body is looked at.
//! - **Events.** `pull_request` with `opened`, `synchronize`, `reopened` or `ready_for_review`
//!   starts a review of the head against the base (the git source diffs from their merge base);
//!   `issues` with `opened` starts an issue analysis; `ping` is answered. Anything else is ignored
//!   with a reason, never an error: GitHub retries errors.
//! - **Filters** ([`WebhookFilters`]): drafts, bot authors, authors, titles and labels to ignore.
//! - **Redeliveries.** A review's idempotency key is its pull request and head commit, so a
//!   redelivered webhook — and any other event for a head already taken in (`reopened`,
//!   `ready_for_review` after `opened`) — names the task the first one made; an issue analysis's
//!   key is the `X-GitHub-Delivery` id (decision 82).

use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;
use verdict_proto::publication::{ItemRef, RepoId};

use verdict_api::submission::{
    GitHubSource, IssueAnalysisSubmission, IssueInput, ReviewSubmission, SubmissionOptions,
};

/// Which pull requests and issues are left alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookFilters {
    /// Review draft pull requests too (default: wait for `ready_for_review`).
    pub review_drafts: bool,
    /// Ignore pull requests and issues opened by bots (`user.type == "Bot"`).
    pub ignore_bots: bool,
    /// Logins whose pull requests and issues are ignored (case-insensitive).
    pub ignore_authors: Vec<String>,
    /// Titles containing any of these (case-insensitive) are ignored, e.g. `[skip review]`, `WIP`.
    pub ignore_titles: Vec<String>,
    /// Items carrying any of these labels (case-insensitive) are ignored.
    pub ignore_labels: Vec<String>,
}

impl Default for WebhookFilters {
    fn default() -> Self {
        WebhookFilters {
            review_drafts: false,
            ignore_bots: true,
            ignore_authors: Vec::new(),
            ignore_titles: vec!["[skip review]".to_owned(), "[no review]".to_owned()],
            ignore_labels: Vec::new(),
        }
    }
}

/// How webhook events become tasks.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WebhookPolicy {
    pub filters: WebhookFilters,
    /// The review pipeline (`multi` or `single`); `None` is the submission default.
    pub pipeline: Option<String>,
    /// Publish results back to the pull request or issue.
    pub publish: bool,
    /// Analyse opened issues.
    pub analyse_issues: bool,
}

/// What a delivery asks of the scheduler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Ping,
    Review(Box<ReviewSubmission>),
    IssueAnalysis(Box<IssueAnalysisSubmission>),
    /// Nothing to do, and why (answered with 200 so GitHub does not retry).
    Ignore(String),
}

/// Why a delivery is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    #[error(
        "the request has no X-Hub-Signature-256 header; set the webhook's secret on GitHub to the value verdict is configured with"
    )]
    MissingSignature,
    #[error(
        "X-Hub-Signature-256 does not match the body; check that the webhook's secret on GitHub is the one verdict is configured with"
    )]
    BadSignature,
    #[error("the request has no {0} header; only GitHub webhook deliveries are accepted here")]
    MissingHeader(&'static str),
    #[error("the {event} payload could not be read: {reason}")]
    BadPayload { event: String, reason: String },
}

/// Checks `signature` (the `X-Hub-Signature-256` header) against `body` in constant time.
pub fn verify(secret: &[u8], body: &[u8], signature: Option<&str>) -> Result<(), WebhookError> {
    let signature = signature.ok_or(WebhookError::MissingSignature)?;
    let hex = signature
        .trim()
        .strip_prefix("sha256=")
        .ok_or(WebhookError::BadSignature)?;
    let expected = decode_hex(hex).ok_or(WebhookError::BadSignature)?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).map_err(|_| WebhookError::BadSignature)?;
    mac.update(body);
    mac.verify_slice(&expected)
        .map_err(|_| WebhookError::BadSignature)
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.len() != 64 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Reads a verified delivery of `event` (the `X-GitHub-Event` header) into an [`Action`].
pub fn interpret(
    event: &str,
    delivery: &str,
    body: &[u8],
    policy: &WebhookPolicy,
) -> Result<Action, WebhookError> {
    let bad = |e: serde_json::Error| WebhookError::BadPayload {
        event: event.to_owned(),
        reason: e.to_string(),
    };
    match event {
        "ping" => Ok(Action::Ping),
        "pull_request" => {
            let p: PullRequestEvent = serde_json::from_slice(body).map_err(bad)?;
            Ok(pull_request(p, policy))
        }
        "issues" => {
            let p: IssuesEvent = serde_json::from_slice(body).map_err(bad)?;
            Ok(issue(p, delivery, policy))
        }
        other => Ok(Action::Ignore(format!(
            "`{other}` events are not used; subscribe the webhook to pull_request and issues only"
        ))),
    }
}

const REVIEW_ACTIONS: [&str; 4] = ["opened", "synchronize", "reopened", "ready_for_review"];

fn pull_request(p: PullRequestEvent, policy: &WebhookPolicy) -> Action {
    let pr = p.pull_request;
    if !REVIEW_ACTIONS.contains(&p.action.as_str()) {
        return Action::Ignore(format!("pull_request `{}` needs no review", p.action));
    }
    if pr.state.as_deref().is_some_and(|s| s != "open") {
        return Action::Ignore("the pull request is not open".to_owned());
    }
    if pr.draft && !policy.filters.review_drafts {
        return Action::Ignore(
            "the pull request is a draft; it is reviewed when marked ready for review".to_owned(),
        );
    }
    let labels: Vec<String> = pr.labels.iter().map(|l| l.name.clone()).collect();
    if let Some(reason) = filtered(&policy.filters, &pr.user, &pr.title, &labels) {
        return Action::Ignore(reason);
    }
    let repo = p.repository.id();
    let key = format!("github-pull:{repo}#{}@{}", pr.number, pr.head.sha);
    let clone_url = pr
        .base
        .repo
        .as_ref()
        .map_or_else(|| p.repository.clone_url.clone(), |r| r.clone_url.clone());
    Action::Review(Box::new(ReviewSubmission {
        repository: clone_url,
        base: pr.base.sha,
        head: pr.head.sha.clone(),
        pipeline: policy.pipeline.clone(),
        title: Some(pr.title),
        body: pr.body,
        options: SubmissionOptions {
            idempotency_key: Some(key),
            ..SubmissionOptions::default()
        },
        github: Some(GitHubSource {
            item: ItemRef {
                repo,
                number: pr.number,
            },
            head_sha: Some(pr.head.sha),
            publish: policy.publish,
        }),
        ..ReviewSubmission::default()
    }))
}

fn issue(p: IssuesEvent, delivery: &str, policy: &WebhookPolicy) -> Action {
    if p.action != "opened" {
        return Action::Ignore(format!("issues `{}` needs no analysis", p.action));
    }
    if !policy.analyse_issues {
        return Action::Ignore("issue analysis is turned off (github.analyse_issues)".to_owned());
    }
    let issue = p.issue;
    if issue.pull_request.is_some() {
        return Action::Ignore("the issue is a pull request".to_owned());
    }
    let labels: Vec<String> = issue.labels.iter().map(|l| l.name.clone()).collect();
    if let Some(reason) = filtered(&policy.filters, &issue.user, &issue.title, &labels) {
        return Action::Ignore(reason);
    }
    Action::IssueAnalysis(Box::new(IssueAnalysisSubmission {
        repository: Some(p.repository.clone_url.clone()),
        revision: None,
        issue: IssueInput {
            number: Some(issue.number),
            title: issue.title,
            body: issue.body.unwrap_or_default(),
            labels,
        },
        categories: None,
        options: SubmissionOptions {
            idempotency_key: Some(format!("github-delivery:{delivery}")),
            ..SubmissionOptions::default()
        },
        github: Some(GitHubSource {
            item: ItemRef {
                repo: p.repository.id(),
                number: issue.number,
            },
            head_sha: None,
            publish: policy.publish,
        }),
        ..IssueAnalysisSubmission::default()
    }))
}

/// Why the filters leave an item alone, if they do.
fn filtered(f: &WebhookFilters, user: &User, title: &str, labels: &[String]) -> Option<String> {
    if f.ignore_bots && user.kind.as_deref() == Some("Bot") {
        return Some(format!("opened by the bot `{}`", user.login));
    }
    if f.ignore_authors
        .iter()
        .any(|a| a.eq_ignore_ascii_case(&user.login))
    {
        return Some(format!("opened by `{}`, an ignored author", user.login));
    }
    let lower = title.to_lowercase();
    if let Some(t) = f
        .ignore_titles
        .iter()
        .find(|t| !t.is_empty() && lower.contains(&t.to_lowercase()))
    {
        return Some(format!("the title contains `{t}`"));
    }
    if let Some(l) = labels.iter().find(|l| {
        f.ignore_labels
            .iter()
            .any(|i| i.eq_ignore_ascii_case(l.as_str()))
    }) {
        return Some(format!("labelled `{l}`"));
    }
    None
}

// The parts of GitHub's payloads that are read; everything else is ignored.

#[derive(Debug, Deserialize)]
struct PullRequestEvent {
    action: String,
    pull_request: PullRequest,
    repository: Repository,
}

#[derive(Debug, Deserialize)]
struct PullRequest {
    number: u64,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    draft: bool,
    title: String,
    #[serde(default)]
    body: Option<String>,
    user: User,
    #[serde(default)]
    labels: Vec<Label>,
    head: Branch,
    base: Branch,
}

#[derive(Debug, Deserialize)]
struct Branch {
    sha: String,
    #[serde(default)]
    repo: Option<Repository>,
}

#[derive(Debug, Deserialize)]
struct Repository {
    name: String,
    owner: Owner,
    clone_url: String,
}

impl Repository {
    fn id(&self) -> RepoId {
        RepoId {
            owner: self.owner.login.clone(),
            name: self.name.clone(),
        }
    }
}

#[derive(Debug, Deserialize)]
struct Owner {
    login: String,
}

#[derive(Debug, Deserialize)]
struct User {
    login: String,
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Label {
    name: String,
}

#[derive(Debug, Deserialize)]
struct IssuesEvent {
    action: String,
    issue: Issue,
    repository: Repository,
}

#[derive(Debug, Deserialize)]
struct Issue {
    number: u64,
    title: String,
    #[serde(default)]
    body: Option<String>,
    user: User,
    #[serde(default)]
    labels: Vec<Label>,
    #[serde(default)]
    pull_request: Option<serde_json::Value>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn sign(secret: &str, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(body);
        let bytes = mac.finalize().into_bytes();
        format!(
            "sha256={}",
            bytes.iter().map(|b| format!("{b:02x}")).collect::<String>()
        )
    }

    fn pr_event(action: &str, pr: serde_json::Value) -> Vec<u8> {
        let mut pull_request = json!({
            "number": 7, "state": "open", "draft": false, "title": "Add coupons", "body": "Adds coupons.",
            "user": {"login": "ada", "type": "User"}, "labels": [{"name": "feature"}],
            "head": {"sha": "h".repeat(40), "ref": "feature"},
            "base": {"sha": "b".repeat(40), "ref": "main",
                     "repo": {"name": "shop", "owner": {"login": "acme"}, "clone_url": "https://github.com/acme/shop.git"}},
        });
        for (k, v) in pr.as_object().unwrap() {
            pull_request[k] = v.clone();
        }
        serde_json::to_vec(&json!({
            "action": action, "number": 7, "pull_request": pull_request,
            "repository": {"name": "shop", "owner": {"login": "acme"}, "clone_url": "https://github.com/acme/shop.git"},
            "installation": {"id": 1},
        }))
        .unwrap()
    }

    fn policy() -> WebhookPolicy {
        WebhookPolicy {
            publish: true,
            analyse_issues: true,
            ..WebhookPolicy::default()
        }
    }

    #[test]
    fn only_the_right_signature_of_the_exact_body_passes() {
        let body = br#"{"zen": "Keep it logically awesome."}"#;
        let good = sign("s3cret", body);
        assert_eq!(verify(b"s3cret", body, Some(&good)), Ok(()));
        assert_eq!(
            verify(b"s3cret", body, None),
            Err(WebhookError::MissingSignature)
        );
        for bad in [
            sign("other", body),
            sign("s3cret", b"{}"),
            good.replace("sha256=", "sha1="),
            "sha256=zz".to_owned(),
            good[..good.len() - 2].to_owned(),
        ] {
            assert_eq!(
                verify(b"s3cret", body, Some(&bad)),
                Err(WebhookError::BadSignature),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_pull_request_event_becomes_a_review_of_its_head_against_its_base() {
        let Action::Review(s) = interpret(
            "pull_request",
            "d-1",
            &pr_event("opened", json!({})),
            &policy(),
        )
        .unwrap() else {
            panic!("not a review")
        };
        assert_eq!(s.repository, "https://github.com/acme/shop.git");
        assert_eq!(
            (s.base.len(), s.head.as_str()),
            (40, "h".repeat(40).as_str())
        );
        assert_eq!(
            s.options.idempotency_key,
            Some(format!("github-pull:acme/shop#7@{}", "h".repeat(40)))
        );
        let source = s.github.unwrap();
        assert_eq!(source.item.repo.to_string(), "acme/shop");
        assert_eq!(source.item.number, 7);
        assert!(source.publish);
        for action in ["synchronize", "reopened", "ready_for_review"] {
            assert!(matches!(
                interpret("pull_request", "d", &pr_event(action, json!({})), &policy()),
                Ok(Action::Review(_))
            ));
        }
    }

    #[test]
    fn filtered_and_irrelevant_events_are_ignored_with_a_reason() {
        let ignored = |event: &str, body: Vec<u8>, policy: &WebhookPolicy| match interpret(
            event, "d", &body, policy,
        )
        .unwrap()
        {
            Action::Ignore(reason) => reason,
            other => panic!("{other:?}"),
        };
        let p = policy();
        assert!(ignored("pull_request", pr_event("closed", json!({})), &p).contains("closed"));
        assert!(
            ignored(
                "pull_request",
                pr_event("opened", json!({"draft": true})),
                &p
            )
            .contains("draft")
        );
        assert!(
            ignored(
                "pull_request",
                pr_event(
                    "opened",
                    json!({"user": {"login": "dependabot[bot]", "type": "Bot"}})
                ),
                &p
            )
            .contains("bot")
        );
        assert!(
            ignored(
                "pull_request",
                pr_event("opened", json!({"title": "WIP [Skip Review]"})),
                &p
            )
            .contains("[skip review]")
        );
        let mut labelled = policy();
        labelled.filters.ignore_labels = vec!["no-ai".into()];
        assert!(
            ignored(
                "pull_request",
                pr_event("opened", json!({"labels": [{"name": "NO-AI"}]})),
                &labelled
            )
            .contains("NO-AI")
        );
        let mut drafts = policy();
        drafts.filters.review_drafts = true;
        assert!(matches!(
            interpret(
                "pull_request",
                "d",
                &pr_event("opened", json!({"draft": true})),
                &drafts
            ),
            Ok(Action::Review(_))
        ));
        assert!(ignored("push", b"{}".to_vec(), &p).contains("not used"));
        assert_eq!(interpret("ping", "d", b"{}", &p), Ok(Action::Ping));
        assert!(matches!(
            interpret("pull_request", "d", b"{\"action\": 1}", &p),
            Err(WebhookError::BadPayload { .. })
        ));
    }

    #[test]
    fn an_opened_issue_becomes_an_issue_analysis() {
        let body = serde_json::to_vec(&json!({
            "action": "opened",
            "issue": {"number": 12, "title": "Crash on empty cart", "body": "Steps…",
                      "user": {"login": "bob", "type": "User"}, "labels": [{"name": "bug"}]},
            "repository": {"name": "shop", "owner": {"login": "acme"}, "clone_url": "https://github.com/acme/shop.git"},
        }))
        .unwrap();
        let Action::IssueAnalysis(s) = interpret("issues", "d-9", &body, &policy()).unwrap() else {
            panic!("not an issue analysis")
        };
        assert_eq!(s.issue.number, Some(12));
        assert_eq!(s.issue.labels, ["bug"]);
        assert_eq!(s.github.unwrap().item.number, 12);
        let mut off = policy();
        off.analyse_issues = false;
        assert!(matches!(
            interpret("issues", "d", &body, &off),
            Ok(Action::Ignore(_))
        ));
    }
}
