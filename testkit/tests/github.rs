//! The fake GitHub over real HTTP: authentication (tokens, App JWTs, installation tokens and
//! their scope and expiry), reviews with GitHub's diff rules and exact 422, pending reviews,
//! statuses, comments, labels, pagination, faults and hangs, recording, and webhook payloads with
//! their signature checked by an independent HMAC.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a panic in a test is a failed assertion

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use verdict_testkit::github::{
    AuthKind, FakeGitHub, FakeIssue, FakePullRequest, TEST_APP_PRIVATE_KEY, app_jwt, sign_app_jwt,
    webhook,
};

const DEADLINE: Duration = Duration::from_secs(5);
const PAT: &str = "ghp_test_token";
const APP_ID: u64 = 321;
const INSTALLATION: u64 = 9001;
const BASE: &str = "1111111111111111111111111111111111111111";
const HEAD: &str = "2222222222222222222222222222222222222222";
const HEAD2: &str = "3333333333333333333333333333333333333333";

/// Two hunks in `src/lib.rs` (new lines 1–5 and 21–23) and a new file `notes.md` (lines 1–2).
const DIFF: &str = "\
diff --git a/src/lib.rs b/src/lib.rs
index 1111111..2222222 100644
--- a/src/lib.rs
+++ b/src/lib.rs
@@ -1,4 +1,5 @@
 fn one() {}
-fn two() {}
+fn two() -> u8 { 2 }
+fn two_and_a_half() {}
 fn three() {}
 fn four() {}
@@ -20,3 +21,3 @@ fn twenty() {}
 fn twenty_one() {}
-fn twenty_two() {}
+fn twenty_two() -> u8 { 22 }
 fn twenty_three() {}
diff --git a/notes.md b/notes.md
new file mode 100644
index 0000000..3333333
--- /dev/null
+++ b/notes.md
@@ -0,0 +1,2 @@
+# Notes
+hello
";

/// After a push: only `src/lib.rs` lines 40–41 changed.
const DIFF2: &str = "\
diff --git a/src/lib.rs b/src/lib.rs
index 1111111..3333333 100644
--- a/src/lib.rs
+++ b/src/lib.rs
@@ -40,1 +40,2 @@
 fn forty() {}
+fn forty_one() {}
";

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// The fake and one HTTP client for the test (building a client per request is slow).
struct Fake {
    gh: FakeGitHub,
    http: reqwest::Client,
}

impl std::ops::Deref for Fake {
    type Target = FakeGitHub;

    fn deref(&self) -> &FakeGitHub {
        &self.gh
    }
}

/// A fake with `acme/app` (pull request 7 with `DIFF`, issue 8), `acme/other`, a PAT and an app
/// installed on `acme/app` only.
async fn fake() -> Fake {
    let gh = FakeGitHub::start().await;
    gh.add_repository("acme", "app", "file:///repos/app.git");
    gh.add_repository("acme", "other", "file:///repos/other.git");
    gh.add_pull_request(FakePullRequest::new("acme", "app", 7, BASE, HEAD, DIFF));
    gh.add_issue(FakeIssue::new("acme", "app", 8));
    gh.accept_token(PAT);
    gh.install_app(
        APP_ID,
        TEST_APP_PRIVATE_KEY,
        INSTALLATION,
        &[("acme", "app")],
    );
    Fake { gh, http: client() }
}

struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Value,
    text: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// `method path` under the API root with `Authorization: Bearer token`, and a JSON body.
async fn send(
    gh: &Fake,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Answer {
    send_url(gh, method, &format!("{}{path}", gh.api_url()), token, body).await
}

async fn send_url(
    gh: &Fake,
    method: &str,
    url: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> Answer {
    let mut request = gh
        .http
        .request(method.parse().unwrap(), url)
        .header("accept", "application/vnd.github+json")
        .timeout(DEADLINE);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.unwrap();
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::Null)
    };
    Answer {
        status,
        headers,
        body,
        text,
    }
}

async fn get(gh: &Fake, path: &str, token: &str) -> Answer {
    send(gh, "GET", path, Some(token), None).await
}

async fn post(gh: &Fake, path: &str, token: &str, body: Value) -> Answer {
    send(gh, "POST", path, Some(token), Some(body)).await
}

fn now() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

/// The JWT → installation token exchange, as a client does it.
async fn installation_token(gh: &Fake) -> String {
    let jwt = app_jwt(APP_ID, TEST_APP_PRIVATE_KEY);
    let found = get(gh, "/repos/acme/app/installation", &jwt).await;
    assert_eq!(found.status, 200, "{}", found.text);
    let id = found.body["id"].as_u64().unwrap();
    let issued = post(
        gh,
        &format!("/app/installations/{id}/access_tokens"),
        &jwt,
        json!({}),
    )
    .await;
    assert_eq!(issued.status, 201, "{}", issued.text);
    issued.body["token"].as_str().unwrap().to_owned()
}

fn expected_line_error() -> Value {
    json!({
        "message": "Unprocessable Entity",
        "errors": ["Pull request review thread line must be part of the diff, Pull request review thread start line must be part of the same hunk as the line., and Pull request review thread diff hunk can't be blank"],
        "documentation_url": "https://docs.github.com/rest/pulls/reviews#create-a-review-for-a-pull-request",
        "status": "422"
    })
}

// ---- authentication -----------------------------------------------------------------------------

#[tokio::test]
async fn no_or_unknown_credentials_are_refused_like_github() {
    let gh = fake().await;
    let none = send(&gh, "GET", "/repos/acme/app", None, None).await;
    assert_eq!(none.status, 401);
    assert_eq!(none.body["message"], "Requires authentication");
    let bad = get(&gh, "/repos/acme/app", "ghp_nope").await;
    assert_eq!(bad.status, 401);
    assert_eq!(
        bad.body,
        json!({"message": "Bad credentials", "documentation_url": "https://docs.github.com/rest", "status": "401"})
    );
    let basic = gh
        .http
        .get(format!("{}/repos/acme/app", gh.api_url()))
        .basic_auth("user", Some("pass"))
        .timeout(DEADLINE)
        .send()
        .await
        .unwrap();
    assert_eq!(basic.status().as_u16(), 401);
    let kinds: Vec<AuthKind> = gh.requests().iter().map(|r| r.auth).collect();
    assert_eq!(
        kinds,
        [AuthKind::None, AuthKind::Invalid, AuthKind::Invalid]
    );
}

#[tokio::test]
async fn a_personal_token_reads_every_repository_with_either_scheme() {
    let gh = fake().await;
    let repo = get(&gh, "/repos/acme/other", PAT).await;
    assert_eq!(repo.status, 200, "{}", repo.text);
    assert_eq!(repo.body["full_name"], "acme/other");
    assert_eq!(repo.body["clone_url"], "file:///repos/other.git");
    assert_eq!(repo.body["default_branch"], "main");
    let legacy = gh
        .http
        .get(format!("{}/repos/acme/app", gh.api_url()))
        .header("authorization", format!("token {PAT}"))
        .timeout(DEADLINE)
        .send()
        .await
        .unwrap();
    assert_eq!(legacy.status().as_u16(), 200);
    // Owner and repository names are case-insensitive, as on GitHub.
    assert_eq!(get(&gh, "/repos/ACME/App", PAT).await.status, 200);
    let requests = gh.requests();
    assert!(requests.iter().all(|r| r.auth == AuthKind::Token));
    assert_eq!(requests[0].token.as_deref(), Some(PAT));
}

#[tokio::test]
async fn an_app_exchanges_its_jwt_for_an_installation_token_scoped_to_its_repositories() {
    let gh = fake().await;
    let jwt = app_jwt(APP_ID, TEST_APP_PRIVATE_KEY);
    let installation = get(&gh, "/repos/acme/app/installation", &jwt).await;
    assert_eq!(installation.status, 200, "{}", installation.text);
    assert_eq!(installation.body["id"], INSTALLATION);
    assert_eq!(installation.body["app_id"], APP_ID);
    assert_eq!(installation.body["account"]["login"], "acme");
    assert_eq!(
        get(&gh, "/repos/acme/other/installation", &jwt)
            .await
            .status,
        404,
        "not installed there"
    );

    let issued = post(
        &gh,
        &format!("/app/installations/{INSTALLATION}/access_tokens"),
        &jwt,
        json!({}),
    )
    .await;
    assert_eq!(issued.status, 201, "{}", issued.text);
    let token = issued.body["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("ghs_") && token.len() == 40, "{token}");
    let expires = issued.body["expires_at"].as_str().unwrap();
    assert!(
        expires.len() == 20 && expires.ends_with('Z') && expires.as_bytes()[10] == b'T',
        "RFC 3339 UTC: {expires}"
    );
    assert_eq!(issued.body["permissions"]["pull_requests"], "write");
    assert_eq!(gh.tokens_issued(), 1);

    // The token works on the installation's repository, twice, and nowhere else.
    assert_eq!(
        get(&gh, "/repos/acme/app/pulls/7", &token).await.status,
        200
    );
    assert_eq!(
        get(&gh, "/repos/acme/app/issues/8", &token).await.status,
        200
    );
    let outside = get(&gh, "/repos/acme/other", &token).await;
    assert_eq!(outside.status, 404);
    assert_eq!(outside.body["message"], "Not Found");

    // The JWT is only for the app endpoints; tokens are not JWTs.
    let jwt_on_repo = get(&gh, "/repos/acme/app/pulls/7", &jwt).await;
    assert_eq!(jwt_on_repo.status, 401);
    let pat_for_token = post(
        &gh,
        &format!("/app/installations/{INSTALLATION}/access_tokens"),
        PAT,
        json!({}),
    )
    .await;
    assert_eq!(pat_for_token.status, 401);
    assert_eq!(
        pat_for_token.body["message"],
        "A JSON web token could not be decoded"
    );
    // Another app's installation is not this app's.
    assert_eq!(
        post(&gh, "/app/installations/1/access_tokens", &jwt, json!({}))
            .await
            .status,
        404
    );

    let seen: Vec<(String, AuthKind)> = gh
        .requests()
        .iter()
        .map(|r| (r.path.clone(), r.auth))
        .collect();
    assert_eq!(
        seen[0],
        ("/repos/acme/app/installation".to_owned(), AuthKind::Jwt)
    );
    assert_eq!(
        seen[2],
        (
            format!("/app/installations/{INSTALLATION}/access_tokens"),
            AuthKind::Jwt
        )
    );
    let with_token: Vec<_> = gh
        .requests()
        .into_iter()
        .filter(|r| r.auth == AuthKind::Installation)
        .collect();
    assert_eq!(with_token.len(), 3);
    assert!(
        with_token
            .iter()
            .all(|r| r.token.as_deref() == Some(&token))
    );
}

#[tokio::test]
async fn a_token_can_be_narrowed_to_some_of_the_installations_repositories() {
    let gh = fake().await;
    gh.install_app(
        APP_ID,
        TEST_APP_PRIVATE_KEY,
        INSTALLATION,
        &[("acme", "app"), ("acme", "other")],
    );
    let jwt = app_jwt(APP_ID, TEST_APP_PRIVATE_KEY);
    let path = format!("/app/installations/{INSTALLATION}/access_tokens");
    let narrowed = post(&gh, &path, &jwt, json!({"repositories": ["other"]})).await;
    assert_eq!(narrowed.status, 201, "{}", narrowed.text);
    assert_eq!(narrowed.body["repositories"][0]["full_name"], "acme/other");
    let token = narrowed.body["token"].as_str().unwrap();
    assert_eq!(get(&gh, "/repos/acme/other", token).await.status, 200);
    assert_eq!(get(&gh, "/repos/acme/app", token).await.status, 404);
    let foreign = post(&gh, &path, &jwt, json!({"repositories": ["elsewhere"]})).await;
    assert_eq!(foreign.status, 422);
}

#[tokio::test]
async fn jwts_are_held_to_githubs_rules() {
    let gh = fake().await;
    let path = "/repos/acme/app/installation";
    let jwt = |claims: Value| sign_app_jwt(TEST_APP_PRIVATE_KEY, &claims);
    let t = now();

    let numeric_iss = jwt(json!({"iss": APP_ID, "iat": t - 60, "exp": t + 540}));
    assert_eq!(get(&gh, path, &numeric_iss).await.status, 200);
    let ten_minutes = jwt(json!({"iss": APP_ID.to_string(), "iat": t - 60, "exp": t + 540}));
    assert_eq!(get(&gh, path, &ten_minutes).await.status, 200);

    let too_long = get(
        &gh,
        path,
        &jwt(json!({"iss": APP_ID, "iat": t, "exp": t + 601})),
    )
    .await;
    assert_eq!(too_long.status, 401);
    assert_eq!(
        too_long.body["message"],
        "'Expiration time' claim ('exp') is too far in the future"
    );
    let expired = get(
        &gh,
        path,
        &jwt(json!({"iss": APP_ID, "iat": t - 600, "exp": t - 5})),
    )
    .await;
    assert_eq!(expired.status, 401);
    assert!(expired.body["message"].as_str().unwrap().contains("'exp'"));
    let early = get(
        &gh,
        path,
        &jwt(json!({"iss": APP_ID, "iat": t + 120, "exp": t + 300})),
    )
    .await;
    assert_eq!(early.status, 401);
    assert_eq!(
        early.body["message"],
        "'Issued at' claim ('iat') is in the future"
    );
    let stranger = get(
        &gh,
        path,
        &jwt(json!({"iss": 999, "iat": t, "exp": t + 60})),
    )
    .await;
    assert_eq!(stranger.status, 404);
    assert_eq!(stranger.body["message"], "Integration not found");

    // A JWT whose claims were changed after signing does not verify.
    let good = jwt(json!({"iss": APP_ID, "iat": t, "exp": t + 60}));
    let other = jwt(json!({"iss": APP_ID, "iat": t, "exp": t + 120}));
    let parts: Vec<&str> = good.split('.').collect();
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        other.split('.').nth(1).unwrap(),
        parts[2]
    );
    let refused = get(&gh, path, &forged).await;
    assert_eq!(refused.status, 401);
    assert_eq!(
        refused.body["message"],
        "A JSON web token could not be decoded"
    );
    // Nor does an unsigned one.
    let unsigned = format!("eyJhbGciOiJub25lIn0.{}.{}", parts[1], parts[2]);
    assert_eq!(get(&gh, path, &unsigned).await.status, 401);

    let kinds: Vec<AuthKind> = gh.requests().iter().map(|r| r.auth).collect();
    assert_eq!(kinds[..2], [AuthKind::Jwt, AuthKind::Jwt]);
    assert!(kinds[2..].iter().all(|k| *k == AuthKind::Invalid));
}

#[tokio::test]
async fn expired_installation_tokens_are_bad_credentials() {
    let gh = fake().await;
    let token = installation_token(&gh).await;
    assert_eq!(get(&gh, "/repos/acme/app", &token).await.status, 200);
    gh.expire_tokens();
    let expired = get(&gh, "/repos/acme/app", &token).await;
    assert_eq!(expired.status, 401);
    assert_eq!(expired.body["message"], "Bad credentials");
    assert_eq!(gh.requests().last().unwrap().auth, AuthKind::Installation);

    gh.set_token_lifetime(Duration::ZERO);
    let stillborn = installation_token(&gh).await;
    assert_eq!(get(&gh, "/repos/acme/app", &stillborn).await.status, 401);
    gh.set_token_lifetime(Duration::from_secs(600));
    let fresh = installation_token(&gh).await;
    assert_eq!(get(&gh, "/repos/acme/app", &fresh).await.status, 200);
    assert_eq!(gh.tokens_issued(), 3);
}

// ---- pull requests, issues, repositories --------------------------------------------------------

#[tokio::test]
async fn pull_requests_and_issues_read_like_githubs() {
    let gh = fake().await;
    let mut pr = FakePullRequest::new("acme", "app", 9, BASE, HEAD, DIFF);
    pr.title = "Add two".to_owned();
    pr.body = Some("Adds two.".to_owned());
    pr.draft = true;
    pr.author = "dependabot[bot]".to_owned();
    pr.author_is_bot = true;
    pr.labels = vec!["deps".to_owned()];
    gh.add_pull_request(pr);

    let pull = get(&gh, "/repos/acme/app/pulls/9", PAT).await;
    assert_eq!(pull.status, 200, "{}", pull.text);
    let p = &pull.body;
    assert_eq!(p["number"], 9);
    assert_eq!(p["state"], "open");
    assert_eq!(p["draft"], true);
    assert_eq!(p["merged"], false);
    assert_eq!(p["title"], "Add two");
    assert_eq!(p["body"], "Adds two.");
    assert_eq!(p["user"]["login"], "dependabot[bot]");
    assert_eq!(p["user"]["type"], "Bot");
    assert_eq!(p["labels"][0]["name"], "deps");
    assert_eq!(p["head"]["sha"], HEAD);
    assert_eq!(p["head"]["ref"], "feature-9");
    assert_eq!(p["head"]["repo"]["clone_url"], "file:///repos/app.git");
    assert_eq!(p["base"]["sha"], BASE);
    assert_eq!(p["base"]["ref"], "main");
    assert_eq!(p["base"]["repo"]["name"], "app");
    assert_eq!(p["base"]["repo"]["full_name"], "acme/app");
    assert_eq!(p["base"]["repo"]["owner"]["login"], "acme");
    assert_eq!(p["html_url"], format!("{}/acme/app/pull/9", gh.web_url()));
    // Fields typed clients (octocrab's models) cannot do without.
    for key in ["id", "node_id", "url", "locked", "head", "base"] {
        assert!(p.get(key).is_some(), "pull request lacks {key}");
    }
    for key in [
        "login",
        "id",
        "node_id",
        "avatar_url",
        "gravatar_id",
        "url",
        "html_url",
        "followers_url",
        "following_url",
        "gists_url",
        "starred_url",
        "subscriptions_url",
        "organizations_url",
        "repos_url",
        "events_url",
        "received_events_url",
        "site_admin",
    ] {
        assert!(p["user"].get(key).is_some(), "user lacks {key}");
    }
    for key in ["id", "node_id", "url", "name", "color", "default"] {
        assert!(p["labels"][0].get(key).is_some(), "label lacks {key}");
    }

    let as_issue = get(&gh, "/repos/acme/app/issues/9", PAT).await;
    assert_eq!(as_issue.status, 200);
    assert_eq!(
        as_issue.body["pull_request"]["html_url"],
        format!("{}/acme/app/pull/9", gh.web_url())
    );
    let issue = get(&gh, "/repos/acme/app/issues/8", PAT).await;
    assert_eq!(issue.body["number"], 8);
    assert_eq!(issue.body["user"]["login"], "reporter");
    assert!(issue.body.get("pull_request").is_none());
    assert_eq!(
        issue.body["html_url"],
        format!("{}/acme/app/issues/8", gh.web_url())
    );
    for key in [
        "id",
        "node_id",
        "url",
        "repository_url",
        "labels_url",
        "comments_url",
        "events_url",
        "html_url",
        "number",
        "state",
        "title",
        "user",
        "labels",
        "assignees",
        "locked",
        "comments",
        "created_at",
        "updated_at",
    ] {
        assert!(issue.body.get(key).is_some(), "issue lacks {key}");
    }
    // An issue is not a pull request; unknown numbers are 404.
    assert_eq!(get(&gh, "/repos/acme/app/pulls/8", PAT).await.status, 404);
    assert_eq!(get(&gh, "/repos/acme/app/pulls/99", PAT).await.status, 404);
    assert_eq!(get(&gh, "/repos/acme/nope", PAT).await.status, 404);

    // Merged reads as closed and merged.
    let mut merged = FakePullRequest::new("acme", "app", 10, BASE, HEAD, DIFF);
    merged.state = "closed".to_owned();
    merged.merged = true;
    gh.add_pull_request(merged);
    let m = get(&gh, "/repos/acme/app/pulls/10", PAT).await.body;
    assert_eq!(
        (m["state"].as_str(), m["merged"].as_bool()),
        (Some("closed"), Some(true))
    );
    assert!(m["merged_at"].is_string());
}

#[tokio::test]
async fn the_diff_media_type_returns_the_diff() {
    let gh = fake().await;
    let response = gh
        .http
        .get(format!("{}/repos/acme/app/pulls/7", gh.api_url()))
        .header("authorization", format!("Bearer {PAT}"))
        .header("accept", "application/vnd.github.diff")
        .timeout(DEADLINE)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.text().await.unwrap(), DIFF);
}

// ---- reviews ------------------------------------------------------------------------------------

#[tokio::test]
async fn a_review_with_comments_on_the_diff_is_created() {
    let gh = fake().await;
    let token = installation_token(&gh).await;
    let review = post(
        &gh,
        "/repos/acme/app/pulls/7/reviews",
        &token,
        json!({
            "commit_id": HEAD,
            "body": "Two findings.",
            "event": "COMMENT",
            "comments": [
                {"path": "src/lib.rs", "line": 3, "side": "RIGHT", "body": "added line"},
                {"path": "src/lib.rs", "start_line": 2, "line": 5, "side": "RIGHT", "start_side": "RIGHT", "body": "range in the first hunk"},
                {"path": "notes.md", "line": 2, "body": "new file, side defaults to RIGHT"},
                {"path": "src/lib.rs", "line": 21, "body": "context line of the second hunk"},
            ],
        }),
    )
    .await;
    assert_eq!(review.status, 200, "{}", review.text);
    let id = review.body["id"].as_u64().unwrap();
    assert_eq!(review.body["state"], "COMMENTED");
    assert_eq!(review.body["commit_id"], HEAD);
    assert_eq!(
        review.body["user"]["login"],
        format!("fake-app-{APP_ID}[bot]")
    );
    assert_eq!(review.body["user"]["type"], "Bot");
    assert_eq!(
        review.body["html_url"],
        format!("{}/acme/app/pull/7#pullrequestreview-{id}", gh.web_url())
    );
    assert!(review.body["submitted_at"].is_string());

    let reviews = gh.reviews("acme", "app", 7);
    assert_eq!(reviews.len(), 1);
    assert_eq!(reviews[0].comments.len(), 4);
    assert_eq!(reviews[0].comments[1].start_line, Some(2));
    assert_eq!(reviews[0].comments[1].line, 5);
    assert_eq!(gh.review_comments("acme", "app", 7).len(), 4);

    let listed = get(&gh, "/repos/acme/app/pulls/7/comments", &token).await;
    assert_eq!(listed.status, 200);
    let first = &listed.body[0];
    assert_eq!(first["pull_request_review_id"], id);
    assert_eq!(first["path"], "src/lib.rs");
    assert_eq!(first["line"], 3);
    assert_eq!(
        first["position"], 4,
        "lines below the hunk header, the deleted one included"
    );
    assert_eq!(first["side"], "RIGHT");
    assert_eq!(first["commit_id"], HEAD);
    assert_eq!(first["user"]["login"], format!("fake-app-{APP_ID}[bot]"));
    assert_eq!(
        first["diff_hunk"],
        "@@ -1,4 +1,5 @@\n fn one() {}\n-fn two() {}\n+fn two() -> u8 { 2 }\n+fn two_and_a_half() {}",
        "the hunk down to the commented line, as GitHub shows it"
    );
    assert_eq!(listed.body[1]["start_line"], 2);
    let listed_reviews = get(&gh, "/repos/acme/app/pulls/7/reviews", &token).await;
    assert_eq!(listed_reviews.body[0]["id"], id);
    assert_eq!(listed_reviews.body[0]["body"], "Two findings.");
}

#[tokio::test]
async fn one_comment_off_the_diff_fails_the_whole_review_with_githubs_exact_answer() {
    let gh = fake().await;
    let cases = [
        json!({"path": "src/lib.rs", "line": 10, "body": "between the hunks"}),
        json!({"path": "src/lib.rs", "start_line": 4, "line": 21, "body": "spans two hunks"}),
        json!({"path": "src/lib.rs", "line": 24, "body": "after the last hunk"}),
        json!({"path": "lib.rs", "line": 3, "body": "not a path of the diff"}),
        json!({"path": "README.md", "line": 1, "body": "a file the diff does not touch"}),
        json!({"path": "src/lib.rs", "line": 0, "body": "no line 0"}),
    ];
    for bad in cases {
        let answer = post(
            &gh,
            "/repos/acme/app/pulls/7/reviews",
            PAT,
            json!({
                "body": "Review.",
                "event": "REQUEST_CHANGES",
                "comments": [
                    {"path": "src/lib.rs", "line": 3, "body": "fine on its own"},
                    bad,
                ],
            }),
        )
        .await;
        assert_eq!(answer.status, 422, "{bad}");
        assert_eq!(answer.body, expected_line_error(), "{bad}");
    }
    assert!(
        gh.reviews("acme", "app", 7).is_empty(),
        "nothing was created"
    );
    assert!(gh.review_comments("acme", "app", 7).is_empty());
}

#[tokio::test]
async fn ranges_sides_and_commits_are_checked() {
    let gh = fake().await;
    let review = |comment: Value| json!({"body": "r", "event": "COMMENT", "comments": [comment]});
    let path = "/repos/acme/app/pulls/7/reviews";

    let backwards = post(
        &gh,
        path,
        PAT,
        review(json!({"path": "src/lib.rs", "start_line": 4, "line": 4, "body": "x"})),
    )
    .await;
    assert_eq!(backwards.status, 422);
    assert_eq!(
        backwards.body["errors"][0],
        "Pull request review thread start line must precede the end line."
    );
    let left = post(
        &gh,
        path,
        PAT,
        review(json!({"path": "src/lib.rs", "line": 2, "side": "LEFT", "body": "x"})),
    )
    .await;
    assert_eq!(left.status, 422);
    assert!(left.text.contains("RIGHT"), "{}", left.text);
    let position = post(
        &gh,
        path,
        PAT,
        review(json!({"path": "src/lib.rs", "position": 2, "body": "x"})),
    )
    .await;
    assert_eq!(position.status, 422);
    let nulls = post(
        &gh,
        path,
        PAT,
        review(json!({"path": "src/lib.rs", "line": 3, "start_line": null, "body": "x"})),
    )
    .await;
    assert_eq!(
        nulls.status, 422,
        "GitHub's schema refuses null for an integer"
    );

    let stranger = post(
        &gh,
        path,
        PAT,
        json!({"commit_id": "f".repeat(40), "body": "r", "event": "COMMENT"}),
    )
    .await;
    assert_eq!(stranger.status, 422);
    assert_eq!(
        stranger.body["errors"][0],
        "commit_id is not part of the pull request"
    );
    assert!(gh.reviews("acme", "app", 7).is_empty());
}

#[tokio::test]
async fn events_and_bodies_follow_githubs_rules() {
    let gh = fake().await;
    let path = "/repos/acme/app/pulls/7/reviews";
    assert_eq!(
        post(&gh, path, PAT, json!({"body": "x", "event": "PENDING"}))
            .await
            .status,
        422
    );
    assert_eq!(
        post(&gh, path, PAT, json!({"body": "x", "event": "approve"}))
            .await
            .status,
        422
    );
    for event in ["COMMENT", "REQUEST_CHANGES"] {
        let empty = post(&gh, path, PAT, json!({"body": " ", "event": event})).await;
        assert_eq!(empty.status, 422, "{event}");
        assert!(
            empty.body["errors"][0]
                .as_str()
                .unwrap()
                .contains("Body is required")
        );
    }
    let null_body = post(&gh, path, PAT, json!({"body": null, "event": "APPROVE"})).await;
    assert_eq!(null_body.status, 422);
    assert!(
        null_body.body["message"]
            .as_str()
            .unwrap()
            .contains("nil is not a string")
    );
    let huge = post(
        &gh,
        path,
        PAT,
        json!({"body": "x".repeat(65_537), "event": "COMMENT"}),
    )
    .await;
    assert_eq!(huge.status, 422);

    // The author cannot approve or request changes on their own pull request.
    gh.accept_token_as("ghp_author", "contributor");
    for event in ["APPROVE", "REQUEST_CHANGES"] {
        let own = post(
            &gh,
            path,
            "ghp_author",
            json!({"body": "mine", "event": event}),
        )
        .await;
        assert_eq!(own.status, 422, "{event}");
    }
    assert!(gh.reviews("acme", "app", 7).is_empty());

    let approved = post(&gh, path, PAT, json!({"event": "APPROVE"})).await;
    assert_eq!(approved.status, 200, "{}", approved.text);
    assert_eq!(approved.body["state"], "APPROVED");
    let changes = post(
        &gh,
        path,
        PAT,
        json!({"body": "Fix it.", "event": "REQUEST_CHANGES"}),
    )
    .await;
    assert_eq!(changes.body["state"], "CHANGES_REQUESTED");
    let states: Vec<String> = gh
        .reviews("acme", "app", 7)
        .into_iter()
        .map(|r| r.state)
        .collect();
    assert_eq!(states, ["APPROVED", "CHANGES_REQUESTED"]);
}

#[tokio::test]
async fn pending_reviews_are_one_per_user_private_and_deletable() {
    let gh = fake().await;
    gh.accept_token_as("ghp_other", "someone-else");
    let path = "/repos/acme/app/pulls/7/reviews";
    let pending = post(
        &gh,
        path,
        PAT,
        json!({"comments": [{"path": "src/lib.rs", "line": 3, "body": "probe"}]}),
    )
    .await;
    assert_eq!(pending.status, 200, "{}", pending.text);
    assert_eq!(pending.body["state"], "PENDING");
    assert!(pending.body.get("submitted_at").is_none());
    let id = pending.body["id"].as_u64().unwrap();

    // A pending review's comments are checked too, and a second pending review is refused.
    let off = post(
        &gh,
        path,
        "ghp_other",
        json!({"comments": [{"path": "src/lib.rs", "line": 10, "body": "x"}]}),
    )
    .await;
    assert_eq!(off.body, expected_line_error());
    let second = post(&gh, path, PAT, json!({})).await;
    assert_eq!(second.status, 422);
    assert_eq!(
        second.body["errors"][0],
        "User can only have one pending review per pull request"
    );
    let submitted_meanwhile = post(&gh, path, PAT, json!({"body": "x", "event": "COMMENT"})).await;
    assert_eq!(
        submitted_meanwhile.status, 422,
        "the pending review blocks new reviews"
    );

    // Only its author sees it; its comments are not the pull request's comments.
    let mine = get(&gh, path, PAT).await;
    assert_eq!(mine.body.as_array().unwrap().len(), 1);
    let theirs = get(&gh, path, "ghp_other").await;
    assert_eq!(theirs.body, json!([]));
    let comments = get(&gh, "/repos/acme/app/pulls/7/comments", PAT).await;
    assert_eq!(comments.body, json!([]));
    assert_eq!(gh.reviews("acme", "app", 7).len(), 1);
    assert!(gh.review_comments("acme", "app", 7).is_empty());

    let delete_path = format!("{path}/{id}");
    assert_eq!(
        send(&gh, "DELETE", &delete_path, Some("ghp_other"), None)
            .await
            .status,
        404
    );
    let deleted = send(&gh, "DELETE", &delete_path, Some(PAT), None).await;
    assert_eq!(deleted.status, 200, "{}", deleted.text);
    assert_eq!(deleted.body["id"], id);
    assert_eq!(deleted.body["state"], "PENDING");
    assert!(gh.reviews("acme", "app", 7).is_empty());
    assert_eq!(
        send(&gh, "DELETE", &delete_path, Some(PAT), None)
            .await
            .status,
        404
    );

    // Free again; a submitted review cannot be deleted.
    let review = post(&gh, path, PAT, json!({"body": "Done.", "event": "COMMENT"})).await;
    assert_eq!(review.status, 200);
    let submitted = format!("{path}/{}", review.body["id"]);
    let refused = send(&gh, "DELETE", &submitted, Some(PAT), None).await;
    assert_eq!(refused.status, 422);
    assert_eq!(
        refused.body["errors"][0],
        "Can not delete a non-pending pull request review"
    );
}

#[tokio::test]
async fn a_push_moves_the_head_and_older_reviews_read_as_outdated() {
    let gh = fake().await;
    let path = "/repos/acme/app/pulls/7/reviews";
    let first = post(&gh, path, PAT, json!({"body": "r", "event": "COMMENT", "comments": [{"path": "src/lib.rs", "line": 3, "body": "on the first head"}]})).await;
    assert_eq!(first.status, 200);
    gh.push("acme", "app", 7, HEAD2, DIFF2);

    let pull = get(&gh, "/repos/acme/app/pulls/7", PAT).await;
    assert_eq!(pull.body["head"]["sha"], HEAD2);
    // Reviews default to the new head and its diff; the old head is still a commit of the pull.
    let old_line_now = post(&gh, path, PAT, json!({"body": "r", "event": "COMMENT", "comments": [{"path": "src/lib.rs", "line": 3, "body": "x"}]})).await;
    assert_eq!(old_line_now.body, expected_line_error());
    let new_line = post(&gh, path, PAT, json!({"body": "r", "event": "COMMENT", "comments": [{"path": "src/lib.rs", "line": 41, "body": "new head"}]})).await;
    assert_eq!(new_line.status, 200, "{}", new_line.text);
    assert_eq!(new_line.body["commit_id"], HEAD2);
    let on_old_head = post(&gh, path, PAT, json!({"commit_id": HEAD, "body": "r", "event": "COMMENT", "comments": [{"path": "notes.md", "line": 1, "body": "old"}]})).await;
    assert_eq!(on_old_head.status, 200, "{}", on_old_head.text);

    let comments = get(&gh, "/repos/acme/app/pulls/7/comments", PAT).await.body;
    let comments = comments.as_array().unwrap();
    assert_eq!(comments.len(), 3);
    assert_eq!(
        comments[0]["line"],
        Value::Null,
        "outdated: GitHub nulls the current line"
    );
    assert_eq!(comments[0]["original_line"], 3);
    assert_eq!(comments[0]["position"], Value::Null);
    assert_eq!(comments[0]["original_position"], 4);
    assert_eq!(comments[0]["commit_id"], HEAD);
    assert_eq!(comments[1]["line"], 41);
    assert_eq!(comments[2]["line"], Value::Null);
    assert_eq!(gh.reviews("acme", "app", 7).len(), 3);
}

// ---- statuses, comments, labels -----------------------------------------------------------------

#[tokio::test]
async fn statuses_are_checked_and_kept_per_commit() {
    let gh = fake().await;
    let path = format!("/repos/acme/app/statuses/{HEAD}");
    let pending = post(&gh, &path, PAT, json!({"state": "pending", "description": "Reviewing", "context": "verdict", "target_url": "http://127.0.0.1/t/1"})).await;
    assert_eq!(pending.status, 201, "{}", pending.text);
    assert_eq!(pending.body["state"], "pending");
    assert_eq!(pending.body["context"], "verdict");
    assert_eq!(pending.body["creator"]["login"], "fake-user");
    let exactly_140 = post(
        &gh,
        &path,
        PAT,
        json!({"state": "success", "description": "é".repeat(140), "context": "verdict"}),
    )
    .await;
    assert_eq!(exactly_140.status, 201, "140 characters, more bytes");
    let unnamed = post(&gh, &path, PAT, json!({"state": "failure"})).await;
    assert_eq!(unnamed.body["context"], "default");

    let too_long = post(
        &gh,
        &path,
        PAT,
        json!({"state": "success", "description": "x".repeat(141)}),
    )
    .await;
    assert_eq!(too_long.status, 422);
    assert_eq!(too_long.body["message"], "Validation Failed");
    assert_eq!(
        too_long.body["errors"][0]["message"],
        "description is too long (maximum is 140 characters)"
    );
    assert_eq!(
        post(&gh, &path, PAT, json!({"state": "done"})).await.status,
        422
    );
    assert_eq!(
        post(&gh, &path, PAT, json!({"description": "no state"}))
            .await
            .status,
        422
    );
    let unknown = post(
        &gh,
        &format!("/repos/acme/app/statuses/{}", "e".repeat(40)),
        PAT,
        json!({"state": "success"}),
    )
    .await;
    assert_eq!(unknown.status, 422);
    assert!(
        unknown.body["message"]
            .as_str()
            .unwrap()
            .starts_with("No commit found for SHA")
    );
    gh.add_commit("acme", "app", &"e".repeat(40));
    let added = post(
        &gh,
        &format!("/repos/acme/app/statuses/{}", "e".repeat(40)),
        PAT,
        json!({"state": "success"}),
    )
    .await;
    assert_eq!(added.status, 201);

    let states: Vec<String> = gh
        .statuses("acme", "app", HEAD)
        .into_iter()
        .map(|s| s.state)
        .collect();
    assert_eq!(states, ["pending", "success", "failure"], "oldest first");
    assert_eq!(
        gh.statuses("acme", "app", HEAD)[0].target_url.as_deref(),
        Some("http://127.0.0.1/t/1")
    );
    let listed = get(
        &gh,
        &format!("/repos/acme/app/commits/{HEAD}/statuses"),
        PAT,
    )
    .await;
    assert_eq!(
        listed.body[0]["state"], "failure",
        "GitHub lists newest first"
    );
}

#[tokio::test]
async fn issue_comments_are_posted_and_listed() {
    let gh = fake().await;
    let token = installation_token(&gh).await;
    let created = post(
        &gh,
        "/repos/acme/app/issues/8/comments",
        &token,
        json!({"body": "Analysis."}),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.text);
    let id = created.body["id"].as_u64().unwrap();
    assert_eq!(created.body["body"], "Analysis.");
    assert_eq!(
        created.body["user"]["login"],
        format!("fake-app-{APP_ID}[bot]")
    );
    assert_eq!(
        created.body["html_url"],
        format!("{}/acme/app/issues/8#issuecomment-{id}", gh.web_url())
    );
    let on_pull = post(
        &gh,
        "/repos/acme/app/issues/7/comments",
        &token,
        json!({"body": "On the PR."}),
    )
    .await;
    assert!(
        on_pull.body["html_url"]
            .as_str()
            .unwrap()
            .contains("/pull/7#issuecomment-")
    );
    assert_eq!(
        post(
            &gh,
            "/repos/acme/app/issues/8/comments",
            &token,
            json!({"body": ""})
        )
        .await
        .status,
        422
    );
    assert_eq!(
        post(&gh, "/repos/acme/app/issues/8/comments", &token, json!({}))
            .await
            .status,
        422
    );
    assert_eq!(
        post(
            &gh,
            "/repos/acme/app/issues/99/comments",
            &token,
            json!({"body": "x"})
        )
        .await
        .status,
        404
    );

    let listed = get(&gh, "/repos/acme/app/issues/8/comments", &token).await;
    assert_eq!(listed.body.as_array().unwrap().len(), 1);
    assert_eq!(listed.body[0]["id"], id);
    let kept = gh.issue_comments("acme", "app", 8);
    assert_eq!(kept.len(), 1);
    assert_eq!((kept[0].id, kept[0].body.as_str()), (id, "Analysis."));
}

#[tokio::test]
async fn adding_a_label_the_repository_lacks_creates_it() {
    let gh = fake().await;
    gh.define_labels("acme", "app", &["bug", "question"]);
    let labels = get(&gh, "/repos/acme/app/labels", PAT).await;
    let names: Vec<&str> = labels
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bug", "question"]);
    assert!(labels.body[0]["color"].is_string());

    let added = post(
        &gh,
        "/repos/acme/app/issues/8/labels",
        PAT,
        json!({"labels": ["bug", "triage"]}),
    )
    .await;
    assert_eq!(added.status, 200, "{}", added.text);
    let names: Vec<&str> = added
        .body
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bug", "triage"]);
    // A bare array works too, and labels are not doubled.
    let again = post(
        &gh,
        "/repos/acme/app/issues/8/labels",
        PAT,
        json!(["BUG", "question"]),
    )
    .await;
    assert_eq!(again.body.as_array().unwrap().len(), 3);
    assert_eq!(
        gh.issue_labels("acme", "app", 8),
        ["bug", "triage", "question"]
    );
    assert_eq!(gh.repo_labels("acme", "app"), ["bug", "question", "triage"]);
    assert_eq!(
        post(
            &gh,
            "/repos/acme/app/issues/8/labels",
            PAT,
            json!({"labels": "bug"})
        )
        .await
        .status,
        422
    );
}

// ---- pagination ---------------------------------------------------------------------------------

#[tokio::test]
async fn lists_are_paginated_with_githubs_link_header() {
    let gh = fake().await;
    let names: Vec<String> = (1..=65).map(|i| format!("label-{i:02}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    gh.define_labels("acme", "app", &refs);
    let root = gh.api_url();

    let first = get(&gh, "/repos/acme/app/labels", PAT).await;
    assert_eq!(first.body.as_array().unwrap().len(), 30);
    assert_eq!(
        first.header("link"),
        Some(format!("<{root}/repos/acme/app/labels?page=2>; rel=\"next\", <{root}/repos/acme/app/labels?page=3>; rel=\"last\"").as_str())
    );
    let middle = get(&gh, "/repos/acme/app/labels?per_page=50&page=2", PAT).await;
    assert_eq!(middle.body.as_array().unwrap().len(), 15);
    assert_eq!(middle.body[0]["name"], "label-51");
    assert_eq!(
        middle.header("link"),
        Some(format!("<{root}/repos/acme/app/labels?per_page=50&page=1>; rel=\"prev\", <{root}/repos/acme/app/labels?per_page=50&page=1>; rel=\"first\"").as_str())
    );
    let capped = get(&gh, "/repos/acme/app/labels?per_page=500", PAT).await;
    assert_eq!(capped.body.as_array().unwrap().len(), 65);
    assert_eq!(capped.header("link"), None, "one page: no Link header");

    // Following `next` from the first page visits everything once.
    let mut seen = Vec::new();
    let mut url = Some(format!("{root}/repos/acme/app/labels?per_page=20"));
    while let Some(next) = url {
        let page = send_url(&gh, "GET", &next, Some(PAT), None).await;
        seen.extend(
            page.body
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l["name"].as_str().unwrap().to_owned()),
        );
        url = page.header("link").and_then(|link| {
            link.split(", ")
                .find(|l| l.ends_with("rel=\"next\""))
                .map(|l| l[1..l.find('>').unwrap()].to_owned())
        });
    }
    assert_eq!(seen, names);
}

// ---- faults, hangs, routes, recording -----------------------------------------------------------

#[tokio::test]
async fn faults_are_served_once_each_in_order_with_their_headers() {
    let gh = fake().await;
    let path = "/repos/acme/app/pulls/7";
    gh.fail_next_with_headers(
        "GET",
        path,
        403,
        &[("x-ratelimit-remaining", "0"), ("x-ratelimit-reset", "1700000000")],
        json!({"message": "API rate limit exceeded", "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"}),
    );
    gh.fail_next_with_headers(
        "GET",
        path,
        429,
        &[("retry-after", "3")],
        json!({"message": "slow down"}),
    );
    gh.fail_next("GET", path, 502, Value::Null);

    let limited = get(&gh, path, PAT).await;
    assert_eq!(limited.status, 403);
    assert_eq!(limited.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(limited.header("x-ratelimit-reset"), Some("1700000000"));
    assert_eq!(limited.body["message"], "API rate limit exceeded");
    let throttled = get(&gh, path, PAT).await;
    assert_eq!(
        (throttled.status, throttled.header("retry-after")),
        (429, Some("3"))
    );
    let bad_gateway = get(&gh, path, PAT).await;
    assert_eq!(bad_gateway.status, 502);
    assert_eq!(bad_gateway.text, "");
    let fine = get(&gh, path, PAT).await;
    assert_eq!(fine.status, 200);
    assert_eq!(fine.body["number"], 7);
    // Other paths are untouched by a fault.
    gh.fail_next(
        "POST",
        "/repos/acme/app/issues/8/comments",
        500,
        json!({"message": "boom"}),
    );
    assert_eq!(
        get(&gh, "/repos/acme/app/issues/8/comments", PAT)
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn every_response_carries_rate_limit_headers() {
    let gh = fake().await;
    let first = get(&gh, "/repos/acme/app", PAT).await;
    let second = send(&gh, "GET", "/repos/acme/app", None, None).await;
    let third = get(&gh, "/nowhere", PAT).await;
    for (answer, remaining) in [(&first, "4999"), (&second, "4998"), (&third, "4997")] {
        assert_eq!(answer.header("x-ratelimit-limit"), Some("5000"));
        assert_eq!(answer.header("x-ratelimit-remaining"), Some(remaining));
        assert_eq!(answer.header("x-ratelimit-resource"), Some("core"));
        let reset: i64 = answer.header("x-ratelimit-reset").unwrap().parse().unwrap();
        assert!(reset > now());
    }
}

#[tokio::test]
async fn a_hung_request_is_never_answered_while_others_are() {
    let gh = fake().await;
    gh.hang("POST", "/repos/acme/app/pulls/7/reviews");
    let hung = gh
        .http
        .post(format!("{}/repos/acme/app/pulls/7/reviews", gh.api_url()))
        .header("authorization", format!("Bearer {PAT}"))
        .json(&json!({"body": "x", "event": "COMMENT"}))
        .timeout(Duration::from_millis(300))
        .send()
        .await;
    assert!(hung.unwrap_err().is_timeout());
    assert_eq!(get(&gh, "/repos/acme/app/pulls/7", PAT).await.status, 200);
    let seen = gh.wait_for_requests(2, DEADLINE).await.unwrap();
    assert_eq!(seen[0].path, "/repos/acme/app/pulls/7/reviews");
    assert!(gh.reviews("acme", "app", 7).is_empty());
}

#[tokio::test]
async fn unknown_routes_and_paths_outside_the_api_root_are_not_found() {
    let gh = fake().await;
    let unknown = get(&gh, "/repos/acme/app/hooks", PAT).await;
    assert_eq!(unknown.status, 404);
    assert_eq!(
        unknown.body,
        json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest", "status": "404"})
    );
    // A client that drops the GitHub Enterprise base path misses every endpoint.
    let rootless = send_url(
        &gh,
        "GET",
        &format!("{}/repos/acme/app", gh.web_url()),
        Some(PAT),
        None,
    )
    .await;
    assert_eq!(rootless.status, 404);
    let requests = gh.requests();
    assert!(requests[0].under_api_root);
    assert!(!requests[1].under_api_root);
    assert_eq!(requests[1].path, "/repos/acme/app");
}

#[tokio::test]
async fn requests_are_recorded_with_query_body_and_headers() {
    let gh = fake().await;
    post(
        &gh,
        "/repos/acme/app/issues/8/comments",
        PAT,
        json!({"body": "hi"}),
    )
    .await;
    get(&gh, "/repos/acme/app/issues/8/comments?per_page=5", PAT).await;
    let bad_json = gh
        .http
        .post(format!("{}/repos/acme/app/issues/8/comments", gh.api_url()))
        .header("authorization", format!("Bearer {PAT}"))
        .body("{not json")
        .timeout(DEADLINE)
        .send()
        .await
        .unwrap();
    assert_eq!(bad_json.status().as_u16(), 400);
    assert_eq!(
        bad_json.json::<Value>().await.unwrap()["message"],
        "Problems parsing JSON"
    );

    let requests = gh.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].path, "/repos/acme/app/issues/8/comments");
    assert_eq!(requests[0].body, Some(json!({"body": "hi"})));
    assert_eq!(
        requests[0].header("accept"),
        Some("application/vnd.github+json")
    );
    assert_eq!(requests[1].query.as_deref(), Some("per_page=5"));
    assert_eq!(requests[1].body, None);
    assert_eq!(
        requests[2].body, None,
        "a body that is not JSON is not kept as JSON"
    );
}

// ---- webhooks -----------------------------------------------------------------------------------

#[tokio::test]
async fn pull_request_events_have_githubs_shape() {
    let gh = fake().await;
    let mut pr = FakePullRequest::new("acme", "app", 11, BASE, HEAD, DIFF);
    pr.labels = vec!["ready".to_owned()];
    pr.body = Some("Please review.".to_owned());
    gh.add_pull_request(pr);
    let body = webhook::pull_request_event(&gh, "acme", "app", 11, "opened");
    let event: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(event["action"], "opened");
    assert_eq!(event["number"], 11);
    let p = &event["pull_request"];
    assert_eq!(p["number"], 11);
    assert_eq!(p["head"]["sha"], HEAD);
    assert_eq!(p["head"]["ref"], "feature-11");
    assert_eq!(p["head"]["repo"]["clone_url"], "file:///repos/app.git");
    assert_eq!(p["base"]["sha"], BASE);
    assert_eq!(p["base"]["ref"], "main");
    assert_eq!(p["base"]["repo"]["name"], "app");
    assert_eq!(p["base"]["repo"]["full_name"], "acme/app");
    assert_eq!(p["base"]["repo"]["owner"]["login"], "acme");
    assert_eq!(p["base"]["repo"]["clone_url"], "file:///repos/app.git");
    assert_eq!(p["user"]["login"], "contributor");
    assert_eq!(p["user"]["type"], "User");
    assert_eq!(p["labels"][0]["name"], "ready");
    assert_eq!(p["draft"], false);
    assert_eq!(p["state"], "open");
    assert_eq!(p["title"], "Change 11");
    assert_eq!(p["body"], "Please review.");
    assert_eq!(p["html_url"], format!("{}/acme/app/pull/11", gh.web_url()));
    assert_eq!(event["repository"]["full_name"], "acme/app");
    assert_eq!(event["repository"]["owner"]["login"], "acme");
    assert_eq!(event["installation"]["id"], INSTALLATION);
    assert_eq!(event["sender"]["login"], "contributor");

    gh.push("acme", "app", 11, HEAD2, DIFF2);
    let sync: Value = serde_json::from_slice(&webhook::pull_request_event(
        &gh,
        "acme",
        "app",
        11,
        "synchronize",
    ))
    .unwrap();
    assert_eq!(sync["before"], HEAD);
    assert_eq!(sync["after"], HEAD2);
    assert_eq!(sync["pull_request"]["head"]["sha"], HEAD2);

    // No app on the repository: no installation in the payload.
    gh.add_pull_request(FakePullRequest::new("acme", "other", 1, BASE, HEAD, DIFF));
    let plain: Value = serde_json::from_slice(&webhook::pull_request_event(
        &gh, "acme", "other", 1, "opened",
    ))
    .unwrap();
    assert!(plain.get("installation").is_none());
}

#[tokio::test]
async fn issues_events_have_githubs_shape() {
    let gh = fake().await;
    let mut issue = FakeIssue::new("acme", "app", 12);
    issue.title = "It crashes".to_owned();
    issue.body = Some("On start.".to_owned());
    issue.labels = vec!["bug".to_owned()];
    gh.add_issue(issue);
    let event: Value =
        serde_json::from_slice(&webhook::issues_event(&gh, "acme", "app", 12, "opened")).unwrap();
    assert_eq!(event["action"], "opened");
    assert_eq!(event["issue"]["number"], 12);
    assert_eq!(event["issue"]["title"], "It crashes");
    assert_eq!(event["issue"]["body"], "On start.");
    assert_eq!(event["issue"]["user"]["login"], "reporter");
    assert_eq!(event["issue"]["labels"][0]["name"], "bug");
    assert!(event["issue"].get("pull_request").is_none());
    assert_eq!(event["repository"]["clone_url"], "file:///repos/app.git");
    assert_eq!(event["installation"]["id"], INSTALLATION);
    assert_eq!(event["sender"]["login"], "reporter");
}

#[test]
fn webhook_signatures_match_an_independent_hmac_and_githubs_example() {
    // The example in GitHub's "Validating webhook deliveries".
    assert_eq!(
        webhook::signature("It's a Secret to Everybody", b"Hello, World!"),
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    );
    let body = br#"{"action":"opened","number":1}"#;
    let mut mac = Hmac::<Sha256>::new_from_slice(b"s3cret").unwrap();
    mac.update(body);
    let expected: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        webhook::signature("s3cret", body),
        format!("sha256={expected}")
    );
    assert_ne!(
        webhook::signature("other", body),
        webhook::signature("s3cret", body)
    );
    let headers = webhook::delivery_headers("pull_request", "d-1", "s3cret", body);
    assert!(headers.contains(&(
        "X-Hub-Signature-256".to_owned(),
        format!("sha256={expected}")
    )));
    assert!(headers.contains(&("X-GitHub-Event".to_owned(), "pull_request".to_owned())));
    assert!(headers.contains(&("X-GitHub-Delivery".to_owned(), "d-1".to_owned())));
}

#[tokio::test]
async fn the_server_stops_when_the_last_handle_is_dropped() {
    let Fake { gh, http } = fake().await;
    let url = format!("{}/repos/acme/app", gh.api_url());
    let clone = gh.clone();
    drop(gh);
    // A clone keeps it alive.
    let alive = http
        .get(&url)
        .bearer_auth(PAT)
        .timeout(DEADLINE)
        .send()
        .await
        .unwrap();
    assert_eq!(alive.status().as_u16(), 200);
    drop((alive, http, clone));
    // No pooled connection: every attempt must reach the listener.
    let fresh = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let refused = tokio::time::timeout(DEADLINE, async {
        loop {
            // The listener closes once the runtime has dropped the aborted server task.
            match fresh.get(&url).timeout(DEADLINE).send().await {
                Err(e) => break e,
                Ok(_) => tokio::task::yield_now().await,
            }
        }
    })
    .await
    .expect("the server should stop accepting connections");
    assert!(refused.is_connect(), "{refused}");
}
