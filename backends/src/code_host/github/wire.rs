//! GitHub's REST payloads, only the fields verdict reads or sends. Own small types rather than
//! octocrab's models: those require fields verdict never uses (and GitHub Enterprise versions
//! and the test server omit), so a missing `node_id` would fail a review.

use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
pub(super) struct User {
    pub login: String,
    /// `User`, `Bot` or `Organization`.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
}

impl User {
    pub(super) fn is_bot(&self) -> bool {
        self.kind.as_deref() == Some("Bot")
    }
}

#[derive(Debug, Deserialize)]
pub(super) struct Label {
    pub name: String,
}

#[derive(Debug, Deserialize)]
pub(super) struct Repository {
    pub clone_url: String,
}

/// An entry of `GET /orgs/{org}/repos`.
#[derive(Debug, Deserialize)]
pub(super) struct OrgRepository {
    pub full_name: String,
    pub clone_url: String,
    pub html_url: String,
    /// Absent for an empty repository on some GitHub Enterprise versions.
    #[serde(default)]
    pub default_branch: Option<String>,
    #[serde(default)]
    pub archived: bool,
    #[serde(default)]
    pub fork: bool,
    #[serde(default)]
    pub size: u64,
    /// Absent before GitHub Enterprise 3.0: `private` decides then.
    #[serde(default)]
    pub visibility: Option<String>,
    #[serde(default)]
    pub private: bool,
}

#[derive(Debug, Deserialize)]
pub(super) struct Branch {
    pub sha: String,
    #[serde(rename = "ref")]
    pub name: String,
    /// `null` for a fork that was deleted (the head side); the base repository always exists.
    #[serde(default)]
    pub repo: Option<Repository>,
}

/// `GET /repos/{o}/{r}/pulls/{n}`.
#[derive(Debug, Deserialize)]
pub(super) struct Pull {
    pub state: String,
    #[serde(default)]
    pub draft: bool,
    #[serde(default)]
    pub merged: bool,
    #[serde(default)]
    pub merged_at: Option<String>,
    pub title: String,
    #[serde(default)]
    pub body: Option<String>,
    pub user: User,
    #[serde(default)]
    pub labels: Vec<Label>,
    pub head: Branch,
    pub base: Branch,
    pub html_url: String,
}

/// `GET /repos/{o}/{r}/issues/{n}` (pull requests are issues too, with `pull_request` set).
#[derive(Debug, Deserialize)]
pub(super) struct Issue {
    pub state: String,
    pub title: String,
    #[serde(default)]
    pub body: Option<String>,
    pub user: User,
    #[serde(default)]
    pub labels: Vec<Label>,
    pub html_url: String,
    #[serde(default)]
    pub pull_request: Option<serde_json::Value>,
}

/// An entry of `GET /repos/{o}/{r}/pulls/{n}/reviews`, and what creating one answers.
#[derive(Debug, Deserialize)]
pub(super) struct Review {
    pub id: u64,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub state: Option<String>,
    pub html_url: String,
}

impl Review {
    pub(super) fn is_pending(&self) -> bool {
        self.state.as_deref() == Some("PENDING")
    }
}

/// An entry of `GET /repos/{o}/{r}/pulls/{n}/comments` (inline comments).
#[derive(Debug, Deserialize)]
pub(super) struct ReviewComment {
    #[serde(default)]
    pub pull_request_review_id: Option<u64>,
    #[serde(default)]
    pub body: String,
    pub html_url: String,
}

/// An issue comment, listed or created.
#[derive(Debug, Deserialize)]
pub(super) struct IssueComment {
    pub id: u64,
    #[serde(default)]
    pub body: Option<String>,
    pub html_url: String,
}

/// `GET /repos/{o}/{r}/installation`.
#[derive(Debug, Deserialize)]
pub(super) struct Installation {
    pub id: u64,
}

/// `POST /app/installations/{id}/access_tokens`. No `Debug`: it holds the token.
#[derive(Deserialize)]
pub(super) struct AccessToken {
    pub token: String,
    pub expires_at: String,
}

/// `POST /repos/{o}/{r}/pulls/{n}/reviews`. Without `event` the review stays PENDING.
#[derive(Debug, Serialize)]
pub(super) struct NewReview<'a> {
    pub commit_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<&'a str>,
    pub comments: Vec<NewReviewComment<'a>>,
}

/// An inline comment of a new review: always on the new side (`RIGHT`).
#[derive(Debug, Serialize)]
pub(super) struct NewReviewComment<'a> {
    pub path: &'a str,
    pub body: &'a str,
    pub line: u32,
    pub side: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_line: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_side: Option<&'static str>,
}

impl<'a> NewReviewComment<'a> {
    pub(super) fn from_draft(comment: &'a verdict_proto::publication::DraftComment) -> Self {
        NewReviewComment {
            path: &comment.path,
            body: &comment.body,
            line: comment.line,
            side: "RIGHT",
            start_line: comment.start_line,
            start_side: comment.start_line.map(|_| "RIGHT"),
        }
    }
}

/// `POST /repos/{o}/{r}/statuses/{sha}`.
#[derive(Debug, Serialize)]
pub(super) struct NewStatus<'a> {
    pub state: &'a str,
    pub description: &'a str,
    pub context: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_url: Option<&'a str>,
}

/// `POST /repos/{o}/{r}/issues/{n}/comments`.
#[derive(Debug, Serialize)]
pub(super) struct NewComment<'a> {
    pub body: &'a str,
}

/// `POST /repos/{o}/{r}/issues/{n}/labels`.
#[derive(Debug, Serialize)]
pub(super) struct NewLabels<'a> {
    pub labels: &'a [String],
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use verdict_proto::publication::DraftComment;

    #[test]
    fn a_range_comment_names_both_sides_and_a_single_line_neither_start() {
        let range = DraftComment {
            path: "src/a.rs".into(),
            start_line: Some(3),
            line: 5,
            body: "b".into(),
        };
        let json = serde_json::to_value(NewReviewComment::from_draft(&range)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"path": "src/a.rs", "body": "b", "line": 5, "side": "RIGHT",
                "start_line": 3, "start_side": "RIGHT"})
        );
        let single = DraftComment {
            start_line: None,
            ..range
        };
        let json = serde_json::to_value(NewReviewComment::from_draft(&single)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"path": "src/a.rs", "body": "b", "line": 5, "side": "RIGHT"})
        );
    }

    #[test]
    fn a_pending_review_has_no_event_and_no_body() {
        let review = NewReview {
            commit_id: "abc",
            body: None,
            event: None,
            comments: Vec::new(),
        };
        assert_eq!(
            serde_json::to_value(review).unwrap(),
            serde_json::json!({"commit_id": "abc", "comments": []})
        );
    }
}
