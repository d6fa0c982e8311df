//! The fake GitHub's request handling, in the order GitHub applies it: the request is recorded,
//! a scripted fault or hang takes over if one matches, the credential is checked, then the
//! endpoint runs — refusing, with GitHub's status and body, what GitHub refuses (comments outside
//! the diff, a second pending review, a status description over 140 characters, …).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use axum::body::Bytes;
use axum::extract::State as AxumState;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use super::auth::{self, Credential, JWT_UNDECODABLE};
use super::clock::rfc3339;
use super::hunks;
use super::json::{self, DOCS, Urls};
use super::model::{FakeIssueComment, FakeReview, FakeReviewComment, FakeStatus, GitHubRequest};
use super::page::Page;
use super::state::{
    Anchor, CommentRecord, Fault, IssuedToken, Item, Label, RepoKey, ReviewRecord, State,
    StatusRecord, repo_key,
};

/// Every endpoint lives under this prefix, as on GitHub Enterprise Server.
pub(crate) const API_ROOT: &str = "/api/v3";

/// GitHub's hourly limit for an authenticated caller, reported in the rate-limit headers.
const RATE_LIMIT: u64 = 5000;

/// GitHub's limit on the body of a comment or review, in characters.
const MAX_BODY_CHARS: usize = 65_536;

/// GitHub's limit on a commit status description, in characters.
const MAX_STATUS_DESCRIPTION_CHARS: usize = 140;

const DOCS_REVIEWS: &str =
    "https://docs.github.com/rest/pulls/reviews#create-a-review-for-a-pull-request";
const DOCS_DELETE_REVIEW: &str =
    "https://docs.github.com/rest/pulls/reviews#delete-a-pending-review-for-a-pull-request";
const DOCS_STATUSES: &str = "https://docs.github.com/rest/commits/statuses#create-a-commit-status";
const DOCS_ISSUE_COMMENTS: &str =
    "https://docs.github.com/rest/issues/comments#create-an-issue-comment";
const DOCS_LABELS: &str = "https://docs.github.com/rest/issues/labels#add-labels-to-an-issue";
const DOCS_TOKENS: &str =
    "https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app";

/// GitHub's exact answer when any comment of a review is not on the diff (the three reasons it
/// lists are always the same, whichever applies).
pub(crate) const LINE_NOT_IN_DIFF: &str = "Pull request review thread line must be part of the diff, Pull request review thread start line must be part of the same hunk as the line., and Pull request review thread diff hunk can't be blank";

/// What the server task and the handle share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub state: Mutex<State>,
    pub urls: Urls,
    pub shutdown: watch::Receiver<bool>,
    /// How many requests have arrived; `wait_for_requests` watches it.
    pub received: watch::Sender<usize>,
}

/// Poisoning only means another test thread panicked mid-update; the data is still usable for
/// assertions, and a fake must not turn one failure into many.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An answer before the rate-limit headers are added.
#[derive(Debug)]
pub(crate) struct Reply {
    status: StatusCode,
    body: Body,
    headers: Vec<(String, String)>,
}

#[derive(Debug)]
enum Body {
    Json(Value),
    Text { text: String, kind: &'static str },
    Empty,
}

impl Reply {
    fn json(status: StatusCode, value: Value) -> Reply {
        Reply {
            status,
            body: Body::Json(value),
            headers: Vec::new(),
        }
    }

    fn ok(value: Value) -> Reply {
        Reply::json(StatusCode::OK, value)
    }

    fn created(value: Value) -> Reply {
        Reply::json(StatusCode::CREATED, value)
    }

    fn error(status: StatusCode, message: &str, docs: &str) -> Reply {
        Reply::json(status, json::error(status.as_u16(), message, docs))
    }

    fn not_found() -> Reply {
        Reply::error(StatusCode::NOT_FOUND, "Not Found", DOCS)
    }

    fn bad_credentials() -> Reply {
        Reply::error(StatusCode::UNAUTHORIZED, "Bad credentials", DOCS)
    }

    /// GitHub's 422 for a rule of the pulls API: `{"message":"Unprocessable Entity","errors":[…]}`.
    fn unprocessable(error: &str, docs: &str) -> Reply {
        Reply::json(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"message": "Unprocessable Entity", "errors": [error], "documentation_url": docs, "status": "422"}),
        )
    }

    /// GitHub's 422 for a request that does not match the endpoint's schema.
    fn invalid_request(detail: &str, docs: &str) -> Reply {
        Reply::error(
            StatusCode::UNPROCESSABLE_ENTITY,
            &format!("Invalid request.\n\n{detail}"),
            docs,
        )
    }

    /// GitHub's 422 for a model validation: `{"message":"Validation Failed","errors":[{…}]}`.
    fn validation_failed(error: Value, docs: &str) -> Reply {
        Reply::json(
            StatusCode::UNPROCESSABLE_ENTITY,
            json!({"message": "Validation Failed", "errors": [error], "documentation_url": docs, "status": "422"}),
        )
    }

    fn with_header(mut self, name: &str, value: String) -> Reply {
        self.headers.push((name.to_owned(), value));
        self
    }

    fn from_fault(fault: Fault) -> Reply {
        Reply {
            status: fault.status,
            body: if fault.body.is_null() {
                Body::Empty
            } else {
                Body::Json(fault.body)
            },
            headers: fault.headers,
        }
    }

    /// The response, with GitHub's rate-limit headers unless the reply sets its own.
    fn into_response(self, rate: [(&'static str, String); 5]) -> Response {
        let mut response = match self.body {
            Body::Json(value) => (
                self.status,
                [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
                value.to_string(),
            )
                .into_response(),
            Body::Text { text, kind } => {
                (self.status, [(header::CONTENT_TYPE, kind)], text).into_response()
            }
            Body::Empty => self.status.into_response(),
        };
        let headers = response.headers_mut();
        for (name, value) in rate {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(HeaderName::from_static(name), value);
            }
        }
        headers.insert(
            HeaderName::from_static("x-github-api-version-selected"),
            HeaderValue::from_static("2022-11-28"),
        );
        for (name, value) in self.headers {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(&value),
            ) {
                headers.insert(n, v);
            }
        }
        response
    }
}

/// Who a repository endpoint is answering: a token's login, and the repositories it may see.
#[derive(Debug)]
struct Caller {
    login: String,
    is_bot: bool,
    /// `None`: every repository (a personal access token).
    scope: Option<BTreeSet<RepoKey>>,
}

/// The parts of a request an endpoint reads.
#[derive(Debug)]
struct Call<'a> {
    method: &'a str,
    segments: Vec<&'a str>,
    path: &'a str,
    query: Option<&'a str>,
    body: Option<&'a Value>,
    accept: &'a str,
}

/// The one axum handler: every method and path comes here, so that recording, faults and
/// authentication happen before routing, and unknown routes get GitHub's 404.
pub(crate) async fn handle(
    AxumState(shared): AxumState<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let now = SystemTime::now();
    let raw_path = uri.path();
    let (path, under_api_root) = match raw_path.strip_prefix(API_ROOT) {
        Some("") => ("/", true),
        Some(rest) if rest.starts_with('/') => (rest, true),
        _ => (raw_path, false),
    };
    let query = uri.query();
    let parsed: Option<Result<Value, serde_json::Error>> =
        (!body.is_empty()).then(|| serde_json::from_slice(&body));
    let presented = auth::presented_token(&headers);
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");

    // `None`: the request hangs.
    let (reply, rate) = {
        let mut state = lock(&shared.state);
        let credential = auth::classify(
            &state,
            presented.as_ref().map(Option::as_deref).map_err(|_| ()),
            now,
        );
        state.requests.push(GitHubRequest {
            method: method.as_str().to_owned(),
            path: path.to_owned(),
            query: query.map(str::to_owned),
            auth: credential.kind(),
            body: parsed.as_ref().and_then(|p| p.as_ref().ok()).cloned(),
            under_api_root,
            token: presented.clone().ok().flatten(),
            headers: headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_owned(),
                        String::from_utf8_lossy(v.as_bytes()).into_owned(),
                    )
                })
                .collect(),
        });
        shared.received.send_modify(|n| *n += 1);
        state.served += 1;
        let rate = rate_headers(&state);
        let fault = state
            .faults
            .iter()
            .position(|f| f.method.eq_ignore_ascii_case(method.as_str()) && f.path == path);
        if let Some(i) = fault {
            (Some(Reply::from_fault(state.faults.remove(i))), rate)
        } else if state
            .hangs
            .iter()
            .any(|(m, p)| m.eq_ignore_ascii_case(method.as_str()) && p == path)
        {
            (None, rate)
        } else if !under_api_root {
            (Some(Reply::not_found()), rate)
        } else {
            let reply = match parsed {
                Some(Err(_)) => gate(&credential).unwrap_or_else(|| {
                    Reply::error(StatusCode::BAD_REQUEST, "Problems parsing JSON", DOCS)
                }),
                Some(Ok(ref value)) => route(
                    &mut state,
                    &shared.urls,
                    &credential,
                    &call(method.as_str(), path, query, Some(value), accept),
                    now,
                ),
                None => route(
                    &mut state,
                    &shared.urls,
                    &credential,
                    &call(method.as_str(), path, query, None, accept),
                    now,
                ),
            };
            (Some(reply), rate)
        }
    };
    match reply {
        Some(reply) => reply.into_response(rate),
        None => {
            // A hang answers only when the server goes away, long after any client timeout.
            let mut stop = shared.shutdown.clone();
            let _ = stop.wait_for(|stop| *stop).await;
            Reply::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "fake GitHub: shutting down",
                DOCS,
            )
            .into_response(rate)
        }
    }
}

fn call<'a>(
    method: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    body: Option<&'a Value>,
    accept: &'a str,
) -> Call<'a> {
    Call {
        method,
        segments: path.trim_start_matches('/').split('/').collect(),
        path,
        query,
        body,
        accept,
    }
}

fn rate_headers(state: &State) -> [(&'static str, String); 5] {
    let used = state.served.min(RATE_LIMIT);
    [
        ("x-ratelimit-limit", RATE_LIMIT.to_string()),
        ("x-ratelimit-remaining", (RATE_LIMIT - used).to_string()),
        ("x-ratelimit-used", used.to_string()),
        ("x-ratelimit-reset", state.rate_reset.to_string()),
        ("x-ratelimit-resource", "core".to_owned()),
    ]
}

/// The refusal for a credential no endpoint accepts, if it is one.
fn gate(credential: &Credential) -> Option<Reply> {
    match credential {
        Credential::None => Some(Reply::error(
            StatusCode::UNAUTHORIZED,
            "Requires authentication",
            DOCS,
        )),
        Credential::Unknown | Credential::Installation { expired: true, .. } => {
            Some(Reply::bad_credentials())
        }
        Credential::BadJwt { status, message } => Some(Reply::error(*status, message, DOCS)),
        Credential::Pat { .. } | Credential::Installation { .. } | Credential::Jwt { .. } => None,
    }
}

fn route(
    state: &mut State,
    urls: &Urls,
    credential: &Credential,
    call: &Call<'_>,
    now: SystemTime,
) -> Reply {
    if let Some(refusal) = gate(credential) {
        return refusal;
    }
    // The two endpoints that take the app's JWT and nothing else.
    match (call.method, call.segments.as_slice()) {
        ("GET", ["repos", owner, name, "installation"]) => {
            return match credential {
                Credential::Jwt { app_id } => repo_installation(state, urls, *app_id, owner, name),
                _ => Reply::error(StatusCode::UNAUTHORIZED, JWT_UNDECODABLE, DOCS),
            };
        }
        ("GET", ["orgs", org, "installation"]) => {
            return match credential {
                Credential::Jwt { app_id } => org_installation(state, urls, *app_id, org),
                _ => Reply::error(StatusCode::UNAUTHORIZED, JWT_UNDECODABLE, DOCS),
            };
        }
        ("POST", ["app", "installations", id, "access_tokens"]) => {
            return match credential {
                Credential::Jwt { app_id } => access_token(state, urls, *app_id, id, call, now),
                _ => Reply::error(StatusCode::UNAUTHORIZED, JWT_UNDECODABLE, DOCS),
            };
        }
        _ => {}
    }
    let caller = match credential {
        Credential::Pat { login } => Caller {
            login: login.clone(),
            is_bot: false,
            scope: None,
        },
        Credential::Installation { app_id, repos, .. } => Caller {
            login: auth::app_login(*app_id),
            is_bot: true,
            scope: Some(repos.clone()),
        },
        Credential::Jwt { .. } => {
            return Reply::error(
                StatusCode::UNAUTHORIZED,
                "A JSON web token authenticates as the app itself; this endpoint needs an installation access token (fake GitHub)",
                DOCS,
            );
        }
        Credential::None | Credential::Unknown | Credential::BadJwt { .. } => {
            return Reply::bad_credentials();
        }
    };
    if let ("GET", ["orgs", org, "repos"]) = (call.method, call.segments.as_slice()) {
        return list_org_repos(state, urls, org, &caller, call);
    }
    let ["repos", owner, name, rest @ ..] = call.segments.as_slice() else {
        return Reply::not_found();
    };
    let key = repo_key(owner, name);
    if !state.repos.contains_key(&key) || caller.scope.as_ref().is_some_and(|s| !s.contains(&key)) {
        // GitHub hides what a caller may not see behind the same 404 as what does not exist.
        return Reply::not_found();
    }
    let number = |s: &str| s.parse::<u64>().ok();
    match (call.method, rest) {
        ("GET", []) => get_repository(state, urls, &key),
        ("GET", ["pulls", n]) => match number(n) {
            Some(n) => get_pull(state, urls, &key, n, call.accept),
            None => Reply::not_found(),
        },
        ("GET", ["pulls", n, "reviews"]) => match number(n) {
            Some(n) => list_reviews(state, urls, &key, n, &caller, call),
            None => Reply::not_found(),
        },
        ("POST", ["pulls", n, "reviews"]) => match number(n) {
            Some(n) => create_review(state, urls, &key, n, &caller, call.body, now),
            None => Reply::not_found(),
        },
        ("DELETE", ["pulls", n, "reviews", id]) => match (number(n), number(id)) {
            (Some(n), Some(id)) => delete_review(state, urls, &key, n, id, &caller),
            _ => Reply::not_found(),
        },
        ("GET", ["pulls", n, "comments"]) => match number(n) {
            Some(n) => list_review_comments(state, urls, &key, n, call),
            None => Reply::not_found(),
        },
        ("GET", ["issues", n]) => match number(n) {
            Some(n) => get_issue(state, urls, &key, n),
            None => Reply::not_found(),
        },
        ("GET", ["issues", n, "comments"]) => match number(n) {
            Some(n) => list_issue_comments(state, urls, &key, n, call),
            None => Reply::not_found(),
        },
        ("POST", ["issues", n, "comments"]) => match number(n) {
            Some(n) => create_issue_comment(state, urls, &key, n, &caller, call.body, now),
            None => Reply::not_found(),
        },
        ("GET", ["issues", n, "labels"]) => match number(n) {
            Some(n) => list_issue_labels(state, urls, &key, n, call),
            None => Reply::not_found(),
        },
        ("POST", ["issues", n, "labels"]) => match number(n) {
            Some(n) => add_labels(state, urls, &key, n, call.body),
            None => Reply::not_found(),
        },
        ("GET", ["labels"]) => list_repo_labels(state, urls, &key, call),
        ("POST", ["statuses", sha]) => {
            create_status(state, urls, &key, sha, &caller, call.body, now)
        }
        ("GET", ["commits", sha, "statuses"]) => list_statuses(state, urls, &key, sha, call),
        _ => Reply::not_found(),
    }
}

/// A list endpoint's answer: one page of `items` and GitHub's `Link` header.
fn paginated(urls: &Urls, call: &Call<'_>, items: Vec<Value>) -> Reply {
    let page = Page::from_query(call.query);
    let link = page.link(
        &format!("{}{}", urls.api, call.path),
        call.query,
        items.len(),
    );
    let reply = Reply::ok(Value::Array(page.slice(&items).to_vec()));
    match link {
        Some(link) => reply.with_header("link", link),
        None => reply,
    }
}

// ---- request bodies -------------------------------------------------------------------------

fn body_object<'a>(
    body: Option<&'a Value>,
    docs: &str,
) -> Result<Option<&'a Map<String, Value>>, Reply> {
    match body {
        None => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(_) => Err(Reply::invalid_request(
            "The request body must be a JSON object.",
            docs,
        )),
    }
}

/// JSON's name for a value's type, as GitHub's schema errors word it.
fn shown(value: &Value) -> String {
    match value {
        Value::Null => "nil".to_owned(),
        other => other.to_string(),
    }
}

/// An optional string field; `null` is refused unless the schema allows it, as GitHub does.
fn opt_str<'a>(
    obj: Option<&'a Map<String, Value>>,
    name: &str,
    nullable: bool,
    docs: &str,
) -> Result<Option<&'a str>, Reply> {
    match obj.and_then(|o| o.get(name)) {
        None => Ok(None),
        Some(Value::Null) if nullable => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(Reply::invalid_request(
            &format!("For 'properties/{name}', {} is not a string.", shown(other)),
            docs,
        )),
    }
}

fn req_str<'a>(
    obj: Option<&'a Map<String, Value>>,
    name: &str,
    docs: &str,
) -> Result<&'a str, Reply> {
    opt_str(obj, name, false, docs)?
        .ok_or_else(|| Reply::invalid_request(&format!("\"{name}\" wasn't supplied."), docs))
}

fn opt_int(obj: &Map<String, Value>, name: &str, docs: &str) -> Result<Option<i64>, Reply> {
    match obj.get(name) {
        None => Ok(None),
        Some(Value::Number(n)) if n.is_i64() => Ok(n.as_i64()),
        Some(other) => Err(Reply::invalid_request(
            &format!(
                "For 'properties/{name}', {} is not an integer.",
                shown(other)
            ),
            docs,
        )),
    }
}

fn too_long(text: &str, max: usize) -> bool {
    text.chars().count() > max
}

// ---- apps -----------------------------------------------------------------------------------

fn repo_installation(state: &State, urls: &Urls, app_id: u64, owner: &str, name: &str) -> Reply {
    let key = repo_key(owner, name);
    let Some(repo) = state.repos.get(&key) else {
        return Reply::not_found();
    };
    match state.installation_for(app_id, &key) {
        Some((id, _)) => Reply::ok(json::installation(urls, id, app_id, &repo.owner)),
        None => Reply::not_found(),
    }
}

fn access_token(
    state: &mut State,
    urls: &Urls,
    app_id: u64,
    id: &str,
    call: &Call<'_>,
    now: SystemTime,
) -> Reply {
    let Some(installation) = id
        .parse::<u64>()
        .ok()
        .and_then(|id| state.installations.get(&id).cloned())
        .filter(|i| i.app_id == app_id)
    else {
        return Reply::not_found();
    };
    let obj = match body_object(call.body, DOCS_TOKENS) {
        Ok(obj) => obj,
        Err(reply) => return reply,
    };
    let mut repos = installation.repos.clone();
    if let Some(asked) = obj.and_then(|o| o.get("repositories")) {
        let Some(names) = asked
            .as_array()
            .and_then(|a| a.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
        else {
            return Reply::invalid_request(
                "For 'properties/repositories', the value is not an array of strings.",
                DOCS_TOKENS,
            );
        };
        let mut narrowed = BTreeSet::new();
        for name in names {
            let lower = name.to_ascii_lowercase();
            match installation.repos.iter().find(|(_, n)| *n == lower) {
                Some(key) => {
                    narrowed.insert(key.clone());
                }
                None => {
                    return Reply::error(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "There is at least one repository that does not exist or is not accessible to the parent installation.",
                        DOCS_TOKENS,
                    );
                }
            }
        }
        repos = narrowed;
    }
    let token = auth::new_installation_token();
    let expires_at = now + state.token_lifetime;
    state.issued.insert(
        token.clone(),
        IssuedToken {
            app_id,
            repos: repos.clone(),
            expires_at,
        },
    );
    state.tokens_issued += 1;
    let mut body = json!({
        "token": token,
        "expires_at": rfc3339(expires_at),
        "permissions": json::permissions(),
        "repository_selection": "selected",
    });
    if obj.is_some_and(|o| o.contains_key("repositories"))
        && let Some(map) = body.as_object_mut()
    {
        let listed: Vec<Value> = repos
            .iter()
            .filter_map(|k| state.repos.get(k))
            .map(|r| json::repository(urls, r))
            .collect();
        map.insert("repositories".to_owned(), Value::Array(listed));
    }
    Reply::created(body)
}

// ---- repositories, pull requests, issues ----------------------------------------------------

/// `GET /orgs/{org}/repos`: the organisation's repositories the caller may see, filtered by
/// `type` (`all` by default; `public`, `private`, `forks`, `sources`, `member`), sorted by
/// `sort` (`created` by default, or `updated`, `pushed`, `full_name`) in `direction` (`asc` for
/// `full_name`, else `desc`, unless given), one page at a time. An organisation with no
/// repository is a 404, as GitHub answers for an organisation that does not exist.
fn list_org_repos(
    state: &State,
    urls: &Urls,
    org: &str,
    caller: &Caller,
    call: &Call<'_>,
) -> Reply {
    let param = |name: &str| {
        call.query.and_then(|q| {
            q.split('&')
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_owned())
        })
    };
    let owner = org.to_ascii_lowercase();
    let mut repos: Vec<&super::state::Repo> = state
        .repos
        .iter()
        .filter(|(key, _)| key.0 == owner)
        .filter(|(key, _)| caller.scope.as_ref().is_none_or(|s| s.contains(*key)))
        .map(|(_, r)| r)
        .collect();
    if repos.is_empty() && !state.repos.keys().any(|k| k.0 == owner) {
        return Reply::not_found();
    }
    let kind = param("type").unwrap_or_else(|| "all".to_owned());
    repos.retain(|r| match kind.as_str() {
        "public" => r.traits.visibility == "public",
        "private" => r.traits.visibility != "public",
        "forks" => r.traits.fork,
        "sources" => !r.traits.fork,
        _ => true,
    });
    let sort = param("sort").unwrap_or_else(|| "created".to_owned());
    if sort == "full_name" {
        repos.sort_by_key(|r| r.full_name().to_ascii_lowercase());
    } else {
        repos.sort_by_key(|r| (r.created, r.id));
    }
    let ascending = match param("direction").as_deref() {
        Some("asc") => true,
        Some("desc") => false,
        _ => sort == "full_name",
    };
    if !ascending {
        repos.reverse();
    }
    let items = repos.iter().map(|r| json::repository(urls, r)).collect();
    paginated(urls, call, items)
}

/// `GET /orgs/{org}/installation`: the app's installation covering a repository of `org`.
fn org_installation(state: &State, urls: &Urls, app_id: u64, org: &str) -> Reply {
    let owner = org.to_ascii_lowercase();
    let found = state
        .installations
        .iter()
        .find(|(_, i)| i.app_id == app_id && i.repos.iter().any(|k| k.0 == owner));
    match found {
        Some((id, _)) => Reply::ok(json::installation(urls, *id, app_id, org)),
        None => Reply::not_found(),
    }
}

fn get_repository(state: &State, urls: &Urls, key: &RepoKey) -> Reply {
    match state.repos.get(key) {
        Some(repo) => Reply::ok(json::repository(urls, repo)),
        None => Reply::not_found(),
    }
}

fn get_pull(state: &State, urls: &Urls, key: &RepoKey, number: u64, accept: &str) -> Reply {
    let Some(repo) = state.repos.get(key) else {
        return Reply::not_found();
    };
    let Some(pull) = repo.pull(number) else {
        return Reply::not_found();
    };
    if accept.contains("application/vnd.github.diff")
        || accept.contains("application/vnd.github.v3.diff")
    {
        return Reply {
            status: StatusCode::OK,
            body: Body::Text {
                text: pull.pr.diff.clone(),
                kind: "application/vnd.github.diff; charset=utf-8",
            },
            headers: Vec::new(),
        };
    }
    Reply::ok(json::pull_request(urls, repo, pull))
}

fn get_issue(state: &State, urls: &Urls, key: &RepoKey, number: u64) -> Reply {
    let Some(repo) = state.repos.get(key) else {
        return Reply::not_found();
    };
    match repo.items.get(&number) {
        Some(item) => Reply::ok(json::issue(urls, repo, number, item)),
        None => Reply::not_found(),
    }
}

// ---- reviews --------------------------------------------------------------------------------

fn list_reviews(
    state: &State,
    urls: &Urls,
    key: &RepoKey,
    number: u64,
    caller: &Caller,
    call: &Call<'_>,
) -> Reply {
    let Some(repo) = state.repos.get(key) else {
        return Reply::not_found();
    };
    let Some(pull) = repo.pull(number) else {
        return Reply::not_found();
    };
    // Pending reviews are visible to their author only.
    let visible: Vec<Value> = pull
        .reviews
        .iter()
        .filter(|r| r.submitted_at.is_some() || r.review.user == caller.login)
        .map(|r| json::review(urls, repo, number, r))
        .collect();
    paginated(urls, call, visible)
}

/// An inline comment as the request gave it, before it is checked against the diff.
#[derive(Debug)]
struct DraftComment {
    path: String,
    body: String,
    line: i64,
    start_line: Option<i64>,
    side: String,
    start_side: Option<String>,
}

fn draft_comment(value: &Value) -> Result<DraftComment, Reply> {
    let Value::Object(obj) = value else {
        return Err(Reply::invalid_request(
            &format!("For 'items', {} is not an object.", shown(value)),
            DOCS_REVIEWS,
        ));
    };
    let path = req_str(Some(obj), "path", DOCS_REVIEWS)?.to_owned();
    let body = req_str(Some(obj), "body", DOCS_REVIEWS)?.to_owned();
    let line = opt_int(obj, "line", DOCS_REVIEWS)?;
    let position = opt_int(obj, "position", DOCS_REVIEWS)?;
    let line = match (line, position) {
        (Some(line), _) => line,
        (None, Some(_)) => {
            return Err(Reply::invalid_request(
                "This fake GitHub accepts only `line` (with `side`) on review comments, not the deprecated `position`.",
                DOCS_REVIEWS,
            ));
        }
        (None, None) => {
            return Err(Reply::invalid_request(
                "\"line\" wasn't supplied.",
                DOCS_REVIEWS,
            ));
        }
    };
    Ok(DraftComment {
        path,
        body,
        line,
        start_line: opt_int(obj, "start_line", DOCS_REVIEWS)?,
        side: opt_str(Some(obj), "side", false, DOCS_REVIEWS)?
            .unwrap_or("RIGHT")
            .to_owned(),
        start_side: opt_str(Some(obj), "start_side", false, DOCS_REVIEWS)?.map(str::to_owned),
    })
}

/// The fields of a create-review request, checked against GitHub's schema.
#[derive(Debug)]
struct ReviewRequest<'a> {
    commit_id: Option<&'a str>,
    text: &'a str,
    event: Option<&'a str>,
    comments: Vec<DraftComment>,
}

fn review_request(obj: Option<&Map<String, Value>>) -> Result<ReviewRequest<'_>, Reply> {
    let comments = match obj.and_then(|o| o.get("comments")) {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(draft_comment)
            .collect::<Result<Vec<_>, _>>()?,
        Some(other) => {
            return Err(Reply::invalid_request(
                &format!(
                    "For 'properties/comments', {} is not an array.",
                    shown(other)
                ),
                DOCS_REVIEWS,
            ));
        }
    };
    Ok(ReviewRequest {
        commit_id: opt_str(obj, "commit_id", false, DOCS_REVIEWS)?,
        text: opt_str(obj, "body", false, DOCS_REVIEWS)?.unwrap_or(""),
        event: opt_str(obj, "event", false, DOCS_REVIEWS)?,
        comments,
    })
}

fn create_review(
    state: &mut State,
    urls: &Urls,
    key: &RepoKey,
    number: u64,
    caller: &Caller,
    body: Option<&Value>,
    now: SystemTime,
) -> Reply {
    let obj = match body_object(body, DOCS_REVIEWS) {
        Ok(obj) => obj,
        Err(reply) => return reply,
    };
    let ReviewRequest {
        commit_id,
        text,
        event,
        comments,
    } = match review_request(obj) {
        Ok(request) => request,
        Err(reply) => return reply,
    };
    let review_state = match event {
        None | Some("") => "PENDING",
        Some("APPROVE") => "APPROVED",
        Some("REQUEST_CHANGES") => "CHANGES_REQUESTED",
        Some("COMMENT") => "COMMENTED",
        Some(other) => {
            return Reply::invalid_request(
                &format!(
                    "For 'properties/event', \"{other}\" is not one of [\"APPROVE\", \"REQUEST_CHANGES\", \"COMMENT\"] (leave it out for a pending review)."
                ),
                DOCS_REVIEWS,
            );
        }
    };
    let Some(repo) = state.repos.get(key) else {
        return Reply::not_found();
    };
    let Some(pull) = repo.pull(number) else {
        return Reply::not_found();
    };
    if pull
        .reviews
        .iter()
        .any(|r| r.submitted_at.is_none() && r.review.user == caller.login)
    {
        return Reply::unprocessable(
            "User can only have one pending review per pull request",
            DOCS_REVIEWS,
        );
    }
    if matches!(review_state, "CHANGES_REQUESTED" | "COMMENTED") && text.trim().is_empty() {
        return Reply::unprocessable(
            "Body is required for REQUEST_CHANGES and COMMENT events",
            DOCS_REVIEWS,
        );
    }
    if pull.pr.author.eq_ignore_ascii_case(&caller.login) {
        match review_state {
            "APPROVED" => {
                return Reply::unprocessable("Can not approve your own pull request", DOCS_REVIEWS);
            }
            "CHANGES_REQUESTED" => {
                return Reply::unprocessable(
                    "Can not request changes on your own pull request",
                    DOCS_REVIEWS,
                );
            }
            _ => {}
        }
    }
    if too_long(text, MAX_BODY_CHARS) || comments.iter().any(|c| too_long(&c.body, MAX_BODY_CHARS))
    {
        return Reply::unprocessable(
            "Body is too long (maximum is 65536 characters)",
            DOCS_REVIEWS,
        );
    }
    let commit = commit_id.unwrap_or(&pull.pr.head_sha).to_owned();
    let Some(head) = pull.head(&commit) else {
        return Reply::unprocessable("commit_id is not part of the pull request", DOCS_REVIEWS);
    };
    let mut placed = Vec::with_capacity(comments.len());
    let mut off_diff = false;
    for c in &comments {
        if c.side != "RIGHT" || c.start_side.as_deref().is_some_and(|s| s != "RIGHT") {
            return Reply::unprocessable(
                &format!(
                    "This fake GitHub accepts review comments on the new side only: side and start_side must be RIGHT (got {} on {})",
                    if c.side != "RIGHT" {
                        &c.side
                    } else {
                        c.start_side.as_deref().unwrap_or("")
                    },
                    c.path
                ),
                DOCS_REVIEWS,
            );
        }
        if c.start_line.is_some_and(|s| s >= c.line) {
            return Reply::unprocessable(
                "Pull request review thread start line must precede the end line.",
                DOCS_REVIEWS,
            );
        }
        let range = (
            u32::try_from(c.start_line.unwrap_or(c.line)).ok(),
            u32::try_from(c.line).ok(),
        );
        let hunk = match range {
            (Some(start), Some(end)) => hunks::hunk_for(&head.files, &c.path, start, end),
            _ => None,
        };
        match hunk {
            Some(hunk) => {
                let line = u32::try_from(c.line).unwrap_or(0);
                placed.push((
                    line,
                    c.start_line.and_then(|s| u32::try_from(s).ok()),
                    Anchor {
                        diff_hunk: hunk.text_until(line),
                        position: hunks::position(&head.files, &c.path, line).unwrap_or(0),
                    },
                ));
            }
            None => off_diff = true,
        }
    }
    if off_diff {
        // All or nothing, with GitHub's exact words.
        return Reply::unprocessable(LINE_NOT_IN_DIFF, DOCS_REVIEWS);
    }
    let review_id = state.next_id();
    let comment_ids: Vec<u64> = comments.iter().map(|_| state.next_id()).collect();
    let mut review_comments = Vec::with_capacity(comments.len());
    let mut anchors = Vec::with_capacity(comments.len());
    for ((draft, (line, start_line, anchor)), id) in comments.iter().zip(placed).zip(comment_ids) {
        review_comments.push(FakeReviewComment {
            id,
            review_id,
            path: draft.path.clone(),
            line,
            start_line,
            side: "RIGHT".to_owned(),
            body: draft.body.clone(),
            commit_id: commit.clone(),
        });
        anchors.push(anchor);
    }
    let record = ReviewRecord {
        review: FakeReview {
            id: review_id,
            state: review_state.to_owned(),
            body: text.to_owned(),
            commit_id: commit,
            comments: review_comments,
            user: caller.login.clone(),
        },
        submitted_at: (review_state != "PENDING").then_some(now),
        created: now,
        anchors,
        user_is_bot: caller.is_bot,
    };
    let Some(repo) = state.repos.get(key) else {
        return Reply::not_found();
    };
    let reply = Reply::ok(json::review(urls, repo, number, &record));
    if let Some(pull) = state.repos.get_mut(key).and_then(|r| r.pull_mut(number)) {
        pull.reviews.push(record);
    }
    reply
}

fn delete_review(
    state: &mut State,
    urls: &Urls,
    key: &RepoKey,
    number: u64,
    id: u64,
    caller: &Caller,
) -> Reply {
    let Some(pull) = state.repos.get_mut(key).and_then(|r| r.pull_mut(number)) else {
        return Reply::not_found();
    };
    let Some(index) = pull.reviews.iter().position(|r| {
        r.review.id == id && (r.submitted_at.is_some() || r.review.user == caller.login)
    }) else {
        return Reply::not_found();
    };
    if pull.reviews[index].submitted_at.is_some() {
        return Reply::unprocessable(
            "Can not delete a non-pending pull request review",
            DOCS_DELETE_REVIEW,
        );
    }
    let removed = pull.reviews.remove(index);
    let Some(repo) = state.repos.get(key) else {
        return Reply::not_found();
    };
    Reply::ok(json::review(urls, repo, number, &removed))
}

fn list_review_comments(
    state: &State,
    urls: &Urls,
    key: &RepoKey,
    number: u64,
    call: &Call<'_>,
) -> Reply {
    let Some(repo) = state.repos.get(key) else {
        return Reply::not_found();
    };
    let Some(pull) = repo.pull(number) else {
        return Reply::not_found();
    };
    let mut comments: Vec<(u64, Value)> = pull
        .reviews
        .iter()
        .filter(|r| r.submitted_at.is_some())
        .flat_map(|r| {
            r.review.comments.iter().enumerate().map(move |(i, c)| {
                let outdated = c.commit_id != pull.pr.head_sha;
                (
                    c.id,
                    json::review_comment(urls, repo, number, r, i, outdated),
                )
            })
        })
        .collect();
    comments.sort_by_key(|(id, _)| *id);
    paginated(urls, call, comments.into_iter().map(|(_, v)| v).collect())
}

// ---- issue comments and labels --------------------------------------------------------------

fn list_issue_comments(
    state: &State,
    urls: &Urls,
    key: &RepoKey,
    number: u64,
    call: &Call<'_>,
) -> Reply {
    let Some(repo) = state.repos.get(key) else {
        return Reply::not_found();
    };
    let Some(item) = repo.items.get(&number) else {
        return Reply::not_found();
    };
    let is_pull = matches!(item, Item::Pull(_));
    let comments = item
        .comments()
        .iter()
        .map(|c| json::issue_comment(urls, repo, number, is_pull, c))
        .collect();
    paginated(urls, call, comments)
}

fn create_issue_comment(
    state: &mut State,
    urls: &Urls,
    key: &RepoKey,
    number: u64,
    caller: &Caller,
    body: Option<&Value>,
    now: SystemTime,
) -> Reply {
    let text = match body_object(body, DOCS_ISSUE_COMMENTS)
        .and_then(|obj| req_str(obj, "body", DOCS_ISSUE_COMMENTS))
    {
        Ok(text) => text.to_owned(),
        Err(reply) => return reply,
    };
    if text.trim().is_empty() {
        return Reply::validation_failed(
            json!({"resource": "IssueComment", "code": "missing_field", "field": "body"}),
            DOCS_ISSUE_COMMENTS,
        );
    }
    if too_long(&text, MAX_BODY_CHARS) {
        return Reply::validation_failed(
            json!({"resource": "IssueComment", "code": "custom", "field": "body", "message": "body is too long (maximum is 65536 characters)"}),
            DOCS_ISSUE_COMMENTS,
        );
    }
    if state
        .repos
        .get(key)
        .and_then(|r| r.items.get(&number))
        .is_none()
    {
        return Reply::not_found();
    }
    let id = state.next_id();
    let record = CommentRecord {
        comment: FakeIssueComment {
            id,
            body: text,
            user: caller.login.clone(),
        },
        user_is_bot: caller.is_bot,
        created: now,
    };
    let Some(item) = state
        .repos
        .get_mut(key)
        .and_then(|r| r.items.get_mut(&number))
    else {
        return Reply::not_found();
    };
    let is_pull = matches!(item, Item::Pull(_));
    item.comments_mut().push(record.clone());
    let Some(repo) = state.repos.get(key) else {
        return Reply::not_found();
    };
    Reply::created(json::issue_comment(urls, repo, number, is_pull, &record))
}

fn list_repo_labels(state: &State, urls: &Urls, key: &RepoKey, call: &Call<'_>) -> Reply {
    let Some(repo) = state.repos.get(key) else {
        return Reply::not_found();
    };
    let labels = repo
        .labels
        .iter()
        .map(|l| json::label(urls, repo, l))
        .collect();
    paginated(urls, call, labels)
}

fn list_issue_labels(
    state: &State,
    urls: &Urls,
    key: &RepoKey,
    number: u64,
    call: &Call<'_>,
) -> Reply {
    let Some(repo) = state.repos.get(key) else {
        return Reply::not_found();
    };
    let Some(item) = repo.items.get(&number) else {
        return Reply::not_found();
    };
    let labels = item
        .labels()
        .iter()
        .filter_map(|n| repo.label(n))
        .map(|l| json::label(urls, repo, l))
        .collect();
    paginated(urls, call, labels)
}

/// `{"labels": ["a", …]}` or a bare `["a", …]`, as GitHub accepts both.
fn label_names(body: Option<&Value>) -> Result<Vec<String>, Reply> {
    let list = match body {
        Some(Value::Object(obj)) => obj.get("labels"),
        Some(array @ Value::Array(_)) => Some(array),
        _ => None,
    };
    let Some(list) = list else {
        return Err(Reply::invalid_request(
            "\"labels\" wasn't supplied.",
            DOCS_LABELS,
        ));
    };
    list.as_array()
        .and_then(|items| {
            items
                .iter()
                .map(|v| v.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| {
            Reply::invalid_request(
                &format!(
                    "For 'properties/labels', {} is not an array of strings.",
                    shown(list)
                ),
                DOCS_LABELS,
            )
        })
}

fn add_labels(
    state: &mut State,
    urls: &Urls,
    key: &RepoKey,
    number: u64,
    body: Option<&Value>,
) -> Reply {
    let names = match label_names(body) {
        Ok(names) => names,
        Err(reply) => return reply,
    };
    if names.iter().any(|n| n.trim().is_empty()) {
        return Reply::validation_failed(
            json!({"resource": "Label", "code": "invalid", "field": "name"}),
            DOCS_LABELS,
        );
    }
    if state
        .repos
        .get(key)
        .and_then(|r| r.items.get(&number))
        .is_none()
    {
        return Reply::not_found();
    }
    // Like GitHub, a label the repository lacks is created on the way.
    for name in &names {
        let exists = state
            .repos
            .get(key)
            .is_some_and(|r| r.label(name).is_some());
        if !exists {
            let id = state.next_id();
            if let Some(repo) = state.repos.get_mut(key) {
                repo.labels.push(Label {
                    id,
                    name: name.clone(),
                    color: "ededed".to_owned(),
                });
            }
        }
    }
    let Some(repo) = state.repos.get_mut(key) else {
        return Reply::not_found();
    };
    let canonical: Vec<String> = names
        .iter()
        .filter_map(|n| repo.label(n).map(|l| l.name.clone()))
        .collect();
    let Some(item) = repo.items.get_mut(&number) else {
        return Reply::not_found();
    };
    let labels = item.labels_mut();
    for name in canonical {
        if !labels.iter().any(|l| l.eq_ignore_ascii_case(&name)) {
            labels.push(name);
        }
    }
    let Some(repo) = state.repos.get(key) else {
        return Reply::not_found();
    };
    let Some(item) = repo.items.get(&number) else {
        return Reply::not_found();
    };
    Reply::ok(Value::Array(
        item.labels()
            .iter()
            .filter_map(|n| repo.label(n))
            .map(|l| json::label(urls, repo, l))
            .collect(),
    ))
}

// ---- commit statuses ------------------------------------------------------------------------

/// The fields of a create-status request, checked against GitHub's schema (the URL and the
/// description may be `null`).
#[derive(Debug)]
struct StatusRequest<'a> {
    state: &'a str,
    target_url: Option<&'a str>,
    description: Option<&'a str>,
    context: Option<&'a str>,
}

fn status_request(obj: Option<&Map<String, Value>>) -> Result<StatusRequest<'_>, Reply> {
    Ok(StatusRequest {
        state: req_str(obj, "state", DOCS_STATUSES)?,
        target_url: opt_str(obj, "target_url", true, DOCS_STATUSES)?,
        description: opt_str(obj, "description", true, DOCS_STATUSES)?,
        context: opt_str(obj, "context", false, DOCS_STATUSES)?,
    })
}

fn create_status(
    state: &mut State,
    urls: &Urls,
    key: &RepoKey,
    sha: &str,
    caller: &Caller,
    body: Option<&Value>,
    now: SystemTime,
) -> Reply {
    let obj = match body_object(body, DOCS_STATUSES) {
        Ok(obj) => obj,
        Err(reply) => return reply,
    };
    let StatusRequest {
        state: status_state,
        target_url,
        description,
        context,
    } = match status_request(obj) {
        Ok(request) => request,
        Err(reply) => return reply,
    };
    if !matches!(status_state, "error" | "failure" | "pending" | "success") {
        return Reply::invalid_request(
            &format!(
                "For 'properties/state', \"{status_state}\" is not one of [\"error\", \"failure\", \"pending\", \"success\"]."
            ),
            DOCS_STATUSES,
        );
    }
    if description.is_some_and(|d| too_long(d, MAX_STATUS_DESCRIPTION_CHARS)) {
        return Reply::validation_failed(
            json!({"resource": "Status", "code": "custom", "field": "description", "message": "description is too long (maximum is 140 characters)"}),
            DOCS_STATUSES,
        );
    }
    if !state.repos.get(key).is_some_and(|r| r.knows_commit(sha)) {
        return Reply::error(
            StatusCode::UNPROCESSABLE_ENTITY,
            &format!("No commit found for SHA: {sha}"),
            DOCS_STATUSES,
        );
    }
    let id = state.next_id();
    let record = StatusRecord {
        id,
        sha: sha.to_owned(),
        status: FakeStatus {
            state: status_state.to_owned(),
            description: description.map(str::to_owned),
            context: context.unwrap_or("default").to_owned(),
            target_url: target_url.map(str::to_owned),
        },
        creator: caller.login.clone(),
        creator_is_bot: caller.is_bot,
        created: now,
    };
    let Some(repo) = state.repos.get_mut(key) else {
        return Reply::not_found();
    };
    repo.statuses.push(record.clone());
    Reply::created(json::status(urls, repo, &record))
}

fn list_statuses(state: &State, urls: &Urls, key: &RepoKey, sha: &str, call: &Call<'_>) -> Reply {
    let Some(repo) = state.repos.get(key) else {
        return Reply::not_found();
    };
    if !repo.knows_commit(sha) {
        return Reply::not_found();
    }
    // GitHub lists a commit's statuses newest first.
    let statuses = repo
        .statuses
        .iter()
        .rev()
        .filter(|s| s.sha == sha)
        .map(|s| json::status(urls, repo, s))
        .collect();
    paginated(urls, call, statuses)
}
