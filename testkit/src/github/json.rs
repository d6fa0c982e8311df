//! GitHub's JSON shapes for what the fake serves: users, labels, repositories, pull requests,
//! issues, reviews, review comments, issue comments, statuses, installations and error bodies —
//! with every field typed clients (octocrab's models) require, and URLs under the fake's roots.

use serde_json::{Value, json};

use super::clock::rfc3339;
use super::state::{CommentRecord, Item, Label, PullState, Repo, ReviewRecord, StatusRecord};

/// The documentation link GitHub puts in error bodies it has no more specific page for.
pub(crate) const DOCS: &str = "https://docs.github.com/rest";

/// The fake's two roots: `http://127.0.0.1:PORT/api/v3` and `http://127.0.0.1:PORT`.
#[derive(Debug, Clone)]
pub(crate) struct Urls {
    pub api: String,
    pub web: String,
}

/// `{"message", "documentation_url", "status"}`, GitHub's error body.
pub(crate) fn error(status: u16, message: &str, documentation_url: &str) -> Value {
    json!({"message": message, "documentation_url": documentation_url, "status": status.to_string()})
}

/// A stable id for a login, so the same user has the same id in every payload.
fn user_id(login: &str) -> u64 {
    // FNV-1a: deterministic across runs, unlike the standard hasher.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in login.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash % 100_000_000 + 1
}

pub(crate) fn user(urls: &Urls, login: &str, is_bot: bool) -> Value {
    let api = format!("{}/users/{login}", urls.api);
    json!({
        "login": login,
        "id": user_id(login),
        "node_id": format!("U_fake{}", user_id(login)),
        "avatar_url": format!("{}/avatars/{login}", urls.web),
        "gravatar_id": "",
        "url": api,
        "html_url": format!("{}/{login}", urls.web),
        "followers_url": format!("{api}/followers"),
        "following_url": format!("{api}/following{{/other_user}}"),
        "gists_url": format!("{api}/gists{{/gist_id}}"),
        "starred_url": format!("{api}/starred{{/owner}}{{/repo}}"),
        "subscriptions_url": format!("{api}/subscriptions"),
        "organizations_url": format!("{api}/orgs"),
        "repos_url": format!("{api}/repos"),
        "events_url": format!("{api}/events{{/privacy}}"),
        "received_events_url": format!("{api}/received_events"),
        "type": if is_bot { "Bot" } else { "User" },
        "user_view_type": "public",
        "site_admin": false,
    })
}

pub(crate) fn repo_api(urls: &Urls, repo: &Repo) -> String {
    format!("{}/repos/{}/{}", urls.api, repo.owner, repo.name)
}

fn repo_web(urls: &Urls, repo: &Repo) -> String {
    format!("{}/{}/{}", urls.web, repo.owner, repo.name)
}

pub(crate) fn label(urls: &Urls, repo: &Repo, label: &Label) -> Value {
    json!({
        "id": label.id,
        "node_id": format!("LA_fake{}", label.id),
        "url": format!("{}/labels/{}", repo_api(urls, repo), label.name.replace(' ', "%20")),
        "name": label.name,
        "color": label.color,
        "default": false,
        "description": null,
    })
}

/// The labels named, in the item's order, as GitHub embeds them.
fn labels(urls: &Urls, repo: &Repo, names: &[String]) -> Value {
    Value::Array(
        names
            .iter()
            .filter_map(|n| repo.label(n))
            .map(|l| label(urls, repo, l))
            .collect(),
    )
}

pub(crate) fn repository(urls: &Urls, repo: &Repo) -> Value {
    let api = repo_api(urls, repo);
    json!({
        "id": repo.id,
        "node_id": format!("R_fake{}", repo.id),
        "name": repo.name,
        "full_name": repo.full_name(),
        "private": repo.traits.visibility != "public",
        "owner": user(urls, &repo.owner, false),
        "html_url": repo_web(urls, repo),
        "description": null,
        "fork": repo.traits.fork,
        "size": repo.traits.size_kib,
        "url": api,
        "pulls_url": format!("{api}/pulls{{/number}}"),
        "issues_url": format!("{api}/issues{{/number}}"),
        "labels_url": format!("{api}/labels{{/name}}"),
        "statuses_url": format!("{api}/statuses/{{sha}}"),
        "git_url": format!("git://127.0.0.1/{}.git", repo.full_name()),
        "ssh_url": format!("git@127.0.0.1:{}.git", repo.full_name()),
        "clone_url": repo.clone_url,
        "default_branch": repo.traits.default_branch,
        "visibility": repo.traits.visibility,
        "archived": repo.traits.archived,
        "disabled": false,
        "created_at": rfc3339(repo.created),
        "updated_at": rfc3339(repo.created),
        "pushed_at": rfc3339(repo.created),
    })
}

fn branch(urls: &Urls, repo: &Repo, name: &str, sha: &str) -> Value {
    json!({
        "label": format!("{}:{name}", repo.owner),
        "ref": name,
        "sha": sha,
        "user": user(urls, &repo.owner, false),
        "repo": repository(urls, repo),
    })
}

pub(crate) fn pull_request(urls: &Urls, repo: &Repo, pull: &PullState) -> Value {
    let pr = &pull.pr;
    let api = format!("{}/pulls/{}", repo_api(urls, repo), pr.number);
    let issue_api = format!("{}/issues/{}", repo_api(urls, repo), pr.number);
    let html = format!("{}/pull/{}", repo_web(urls, repo), pr.number);
    let created = rfc3339(pull.created);
    let closed = pr.state == "closed" || pr.merged;
    let mut value = json!({
        "url": api,
        "id": pull.id,
        "node_id": format!("PR_fake{}", pull.id),
        "html_url": html,
        "diff_url": format!("{html}.diff"),
        "patch_url": format!("{html}.patch"),
        "issue_url": issue_api,
        "commits_url": format!("{api}/commits"),
        "review_comments_url": format!("{api}/comments"),
        "review_comment_url": format!("{}/pulls/comments{{/number}}", repo_api(urls, repo)),
        "comments_url": format!("{issue_api}/comments"),
        "statuses_url": format!("{}/statuses/{}", repo_api(urls, repo), pr.head_sha),
        "number": pr.number,
        "state": if closed { "closed" } else { "open" },
        "locked": false,
        "title": pr.title,
        "user": user(urls, &pr.author, pr.author_is_bot),
        "body": pr.body,
        "labels": labels(urls, repo, &pr.labels),
        "milestone": null,
        "active_lock_reason": null,
        "created_at": created,
        "updated_at": created,
        "closed_at": if closed { Value::String(created.clone()) } else { Value::Null },
        "merged_at": if pr.merged { Value::String(created.clone()) } else { Value::Null },
        "merge_commit_sha": null,
        "assignee": null,
        "assignees": [],
        "requested_reviewers": [],
        "requested_teams": [],
    });
    // Two halves: one `json!` this size exceeds the macro's recursion limit.
    let more = json!({
        "head": branch(urls, repo, &pr.head_ref, &pr.head_sha),
        "base": branch(urls, repo, &pr.base_ref, &pr.base_sha),
        "_links": {
            "self": {"href": api},
            "html": {"href": html},
            "issue": {"href": issue_api},
            "comments": {"href": format!("{issue_api}/comments")},
            "review_comments": {"href": format!("{api}/comments")},
            "statuses": {"href": format!("{}/statuses/{}", repo_api(urls, repo), pr.head_sha)},
        },
        "author_association": "CONTRIBUTOR",
        "auto_merge": null,
        "draft": pr.draft,
        "merged": pr.merged,
        "mergeable": null,
        "rebaseable": null,
        "mergeable_state": "unknown",
        "merged_by": null,
        "comments": pull.comments.len(),
        "review_comments": pull
            .reviews
            .iter()
            .filter(|r| r.submitted_at.is_some())
            .map(|r| r.review.comments.len())
            .sum::<usize>(),
        "maintainer_can_modify": false,
        "commits": pull.heads.len(),
    });
    if let (Value::Object(map), Value::Object(rest)) = (&mut value, more) {
        map.extend(rest);
    }
    value
}

/// An issue, or a pull request seen through the issues API (with `pull_request`, as GitHub
/// shows it).
pub(crate) fn issue(urls: &Urls, repo: &Repo, number: u64, item: &Item) -> Value {
    let api = format!("{}/issues/{number}", repo_api(urls, repo));
    let (id, title, body, author, bot, state, created, kind) = match item {
        Item::Pull(p) => (
            p.id,
            &p.pr.title,
            &p.pr.body,
            &p.pr.author,
            p.pr.author_is_bot,
            if p.pr.state == "closed" || p.pr.merged {
                "closed"
            } else {
                "open"
            },
            p.created,
            "pull",
        ),
        Item::Issue(i) => (
            i.id,
            &i.issue.title,
            &i.issue.body,
            &i.issue.author,
            i.issue.author_is_bot,
            if i.issue.state == "closed" {
                "closed"
            } else {
                "open"
            },
            i.created,
            "issues",
        ),
    };
    let html = format!("{}/{kind}/{number}", repo_web(urls, repo));
    let created = rfc3339(created);
    let mut value = json!({
        "id": id,
        "node_id": format!("I_fake{id}"),
        "url": api,
        "repository_url": repo_api(urls, repo),
        "labels_url": format!("{api}/labels{{/name}}"),
        "comments_url": format!("{api}/comments"),
        "events_url": format!("{api}/events"),
        "html_url": html,
        "number": number,
        "state": state,
        "state_reason": null,
        "title": title,
        "body": body,
        "user": user(urls, author, bot),
        "labels": labels(urls, repo, item.labels()),
        "assignee": null,
        "assignees": [],
        "milestone": null,
        "locked": false,
        "active_lock_reason": null,
        "comments": item.comments().len(),
        "closed_at": if state == "closed" { Value::String(created.clone()) } else { Value::Null },
        "created_at": created,
        "updated_at": created,
        "author_association": "CONTRIBUTOR",
    });
    if let (Item::Pull(p), Some(obj)) = (item, value.as_object_mut()) {
        let pulls = format!("{}/pulls/{number}", repo_api(urls, repo));
        obj.insert(
            "pull_request".to_owned(),
            json!({
                "url": pulls,
                "html_url": html,
                "diff_url": format!("{html}.diff"),
                "patch_url": format!("{html}.patch"),
                "merged_at": if p.pr.merged { Value::String(created.clone()) } else { Value::Null },
            }),
        );
        obj.insert("draft".to_owned(), Value::Bool(p.pr.draft));
    }
    value
}

pub(crate) fn review(urls: &Urls, repo: &Repo, number: u64, record: &ReviewRecord) -> Value {
    let r = &record.review;
    let pull_api = format!("{}/pulls/{number}", repo_api(urls, repo));
    let html = format!(
        "{}/pull/{number}#pullrequestreview-{}",
        repo_web(urls, repo),
        r.id
    );
    let mut value = json!({
        "id": r.id,
        "node_id": format!("PRR_fake{}", r.id),
        "user": user(urls, &r.user, record.user_is_bot),
        "body": r.body,
        "state": r.state,
        "html_url": html,
        "pull_request_url": pull_api,
        "author_association": "CONTRIBUTOR",
        "_links": {
            "html": {"href": html},
            "pull_request": {"href": pull_api},
        },
        "commit_id": r.commit_id,
    });
    // GitHub leaves `submitted_at` out of pending reviews.
    if let (Some(at), Some(obj)) = (record.submitted_at, value.as_object_mut()) {
        obj.insert("submitted_at".to_owned(), Value::String(rfc3339(at)));
    }
    value
}

/// One inline comment of a review. `outdated` (the pull request has moved past the comment's
/// commit) nulls the current position fields, as GitHub does; the `original_*` fields keep it.
pub(crate) fn review_comment(
    urls: &Urls,
    repo: &Repo,
    number: u64,
    record: &ReviewRecord,
    index: usize,
    outdated: bool,
) -> Value {
    let Some(c) = record.review.comments.get(index) else {
        return Value::Null;
    };
    let base = repo_api(urls, repo);
    let api = format!("{base}/pulls/comments/{}", c.id);
    let pull_api = format!("{base}/pulls/{number}");
    let html = format!(
        "{}/pull/{number}#discussion_r{}",
        repo_web(urls, repo),
        c.id
    );
    let created = rfc3339(record.created);
    let current = |v: Value| if outdated { Value::Null } else { v };
    let anchor = record.anchors.get(index);
    json!({
        "url": api,
        "pull_request_review_id": c.review_id,
        "id": c.id,
        "node_id": format!("PRRC_fake{}", c.id),
        "diff_hunk": anchor.map(|a| a.diff_hunk.clone()).unwrap_or_default(),
        "path": c.path,
        "position": current(json!(anchor.map(|a| a.position))),
        "original_position": anchor.map(|a| a.position),
        "commit_id": c.commit_id,
        "original_commit_id": c.commit_id,
        "user": user(urls, &record.review.user, record.user_is_bot),
        "body": c.body,
        "created_at": created,
        "updated_at": created,
        "html_url": html,
        "pull_request_url": pull_api,
        "author_association": "CONTRIBUTOR",
        "_links": {
            "self": {"href": api},
            "html": {"href": html},
            "pull_request": {"href": pull_api},
        },
        "start_line": current(json!(c.start_line)),
        "original_start_line": c.start_line,
        "start_side": c.start_line.map(|_| c.side.clone()),
        "line": current(json!(c.line)),
        "original_line": c.line,
        "side": c.side,
        "subject_type": "line",
    })
}

pub(crate) fn issue_comment(
    urls: &Urls,
    repo: &Repo,
    number: u64,
    is_pull: bool,
    record: &CommentRecord,
) -> Value {
    let c = &record.comment;
    let base = repo_api(urls, repo);
    let kind = if is_pull { "pull" } else { "issues" };
    let created = rfc3339(record.created);
    json!({
        "id": c.id,
        "node_id": format!("IC_fake{}", c.id),
        "url": format!("{base}/issues/comments/{}", c.id),
        "html_url": format!("{}/{kind}/{number}#issuecomment-{}", repo_web(urls, repo), c.id),
        "body": c.body,
        "user": user(urls, &c.user, record.user_is_bot),
        "created_at": created,
        "updated_at": created,
        "issue_url": format!("{base}/issues/{number}"),
        "author_association": "CONTRIBUTOR",
    })
}

pub(crate) fn status(urls: &Urls, repo: &Repo, record: &StatusRecord) -> Value {
    let s = &record.status;
    let created = rfc3339(record.created);
    json!({
        "url": format!("{}/statuses/{}", repo_api(urls, repo), record.sha),
        "avatar_url": format!("{}/avatars/{}", urls.web, record.creator),
        "id": record.id,
        "node_id": format!("SC_fake{}", record.id),
        "state": s.state,
        "description": s.description,
        "target_url": s.target_url,
        "context": s.context,
        "created_at": created,
        "updated_at": created,
        "creator": user(urls, &record.creator, record.creator_is_bot),
    })
}

/// What an installation token may do: what verdict needs, as the App setup asks for it.
pub(crate) fn permissions() -> Value {
    json!({
        "contents": "read",
        "issues": "write",
        "metadata": "read",
        "pull_requests": "write",
        "statuses": "write",
    })
}

pub(crate) fn installation(urls: &Urls, id: u64, app_id: u64, account: &str) -> Value {
    json!({
        "id": id,
        "app_id": app_id,
        "app_slug": format!("fake-app-{app_id}"),
        "target_id": user_id(account),
        "target_type": "User",
        "account": user(urls, account, false),
        "repository_selection": "selected",
        "access_tokens_url": format!("{}/app/installations/{id}/access_tokens", urls.api),
        "repositories_url": format!("{}/installation/repositories", urls.api),
        "html_url": format!("{}/settings/installations/{id}", urls.web),
        "permissions": permissions(),
        "events": ["issues", "pull_request"],
        "created_at": "2024-01-01T00:00:00Z",
        "updated_at": "2024-01-01T00:00:00Z",
        "single_file_name": null,
        "suspended_at": null,
        "suspended_by": null,
    })
}
