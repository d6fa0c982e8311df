//! What publication posts to a code host and how a pull request or issue is named (SPEC G1–G3,
//! X1, X2): the shared vocabulary of the scheduler, which renders results into these drafts, and
//! the publishers in `backends`, which post them. No I/O and no host-specific client types.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A repository on the code host, `owner/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RepoId {
    pub owner: String,
    pub name: String,
}

impl fmt::Display for RepoId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// A pull request or an issue: a repository and a number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ItemRef {
    pub repo: RepoId,
    pub number: u64,
}

/// Which kind of item a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    PullRequest,
    Issue,
}

/// Why a URL does not name a pull request or an issue; the message names the URL and the form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{shown}` is not a {what} URL; expected {form} (any host, for GitHub Enterprise)")]
pub struct ItemUrlError {
    shown: String,
    what: &'static str,
    form: &'static str,
}

/// A pull request or issue as its web URL names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemUrl {
    /// The web host, with its port if the URL gives one (`github.com`, `ghe.example.com:8443`).
    pub host: String,
    pub item: ItemRef,
}

/// The item a web URL names: `https://HOST/OWNER/REPO/pull/N` (also `…/pull/N/files` and other
/// tabs, a trailing slash, a query or a fragment) or `https://HOST/OWNER/REPO/issues/N`.
pub fn parse_item_url(url: &str, kind: ItemKind) -> Result<ItemUrl, ItemUrlError> {
    let (what, form, segment) = match kind {
        ItemKind::PullRequest => (
            "pull request",
            "https://github.com/OWNER/REPO/pull/NUMBER",
            "pull",
        ),
        ItemKind::Issue => (
            "issue",
            "https://github.com/OWNER/REPO/issues/NUMBER",
            "issues",
        ),
    };
    let fail = || ItemUrlError {
        shown: crate::redact::safe_preview(&crate::redact::redact_urls(url), 200),
        what,
        form,
    };
    let rest = url
        .trim()
        .strip_prefix("https://")
        .or_else(|| url.trim().strip_prefix("http://"))
        .ok_or_else(fail)?;
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let mut parts = rest.split('/').filter(|p| !p.is_empty());
    let host = parts.next().ok_or_else(fail)?;
    if host.contains('@') {
        return Err(fail());
    }
    let owner = parts.next().ok_or_else(fail)?;
    let name = parts.next().ok_or_else(fail)?;
    if parts.next() != Some(segment) {
        return Err(fail());
    }
    let number: u64 = parts
        .next()
        .and_then(|n| n.parse().ok())
        .filter(|&n| n > 0)
        .ok_or_else(fail)?;
    let valid = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    };
    if !valid(owner) || !valid(name) {
        return Err(fail());
    }
    Ok(ItemUrl {
        host: host.to_ascii_lowercase(),
        item: ItemRef {
            repo: RepoId {
                owner: owner.to_owned(),
                name: name.trim_end_matches(".git").to_owned(),
            },
            number,
        },
    })
}

/// The event a review is posted with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReviewEvent {
    Approve,
    RequestChanges,
    Comment,
}

crate::names::string_enum!(ReviewEvent {
    Approve => "APPROVE",
    RequestChanges => "REQUEST_CHANGES",
    Comment => "COMMENT",
});

/// One review to post on a pull request, at the commit it was made for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewDraft {
    /// The head commit the review is about; the host anchors the inline comments on it.
    pub commit_id: String,
    pub event: ReviewEvent,
    /// Markdown; ends with the [`marker`] of the task.
    pub body: String,
    pub comments: Vec<DraftComment>,
}

/// An inline comment on the new side (`RIGHT`) of the diff: one line (`line`), or the range
/// `start_line..=line`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DraftComment {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_line: Option<u32>,
    pub line: u32,
    /// Markdown, with the finding's fingerprint marker.
    pub body: String,
}

/// The state a commit status shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CommitState {
    Pending,
    Success,
    Failure,
    Error,
}

crate::names::string_enum!(CommitState {
    Pending => "pending",
    Success => "success",
    Failure => "failure",
    Error => "error",
});

/// A commit status to set on a pull request's head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusDraft {
    pub sha: String,
    pub state: CommitState,
    /// At most 140 characters (the host's limit); longer text is cut by the publisher.
    pub description: String,
    /// The status's name, e.g. `verdict/review`.
    pub context: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_url: Option<String>,
}

/// What starts every marker verdict leaves in text it posts.
pub const MARKER_PREFIX: &str = "<!-- verdict:";

/// The hidden marker a review or comment of task `task_id` carries, so a redelivered publish
/// message finds it and posts nothing new.
pub fn marker(task_id: &str) -> String {
    format!("{MARKER_PREFIX}task={task_id} -->")
}

/// The hidden marker an inline comment carries for the finding `fingerprint` (SPEC X2).
pub fn fingerprint_marker(fingerprint: &str) -> String {
    format!("{MARKER_PREFIX}finding={fingerprint} -->")
}

/// The task ids and finding fingerprints marked in `text`.
pub fn markers_in(text: &str) -> (Vec<String>, Vec<String>) {
    let mut tasks = Vec::new();
    let mut findings = Vec::new();
    for piece in text.split(MARKER_PREFIX).skip(1) {
        let Some((inner, _)) = piece.split_once(" -->") else {
            continue;
        };
        if let Some(t) = inner.strip_prefix("task=") {
            tasks.push(t.to_owned());
        } else if let Some(f) = inner.strip_prefix("finding=") {
            findings.push(f.to_owned());
        }
    }
    (tasks, findings)
}

/// One repository of an organisation as the code host lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostedRepository {
    /// `OWNER/NAME`.
    pub full_name: String,
    /// What git clones (`https://…/OWNER/NAME.git`).
    pub clone_url: String,
    pub html_url: String,
    pub default_branch: String,
    pub archived: bool,
    pub fork: bool,
    /// GitHub's size in KiB.
    pub size_kib: u64,
    /// `public`, `private` or `internal`.
    pub visibility: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pull_request_and_issue_urls_are_read_and_others_refused() {
        let pr = parse_item_url(
            "https://github.com/acme/shop.git/pull/42/files?w=1#diff",
            ItemKind::PullRequest,
        )
        .unwrap();
        assert_eq!(pr.host, "github.com");
        assert_eq!(pr.item.repo.to_string(), "acme/shop");
        assert_eq!(pr.item.number, 42);
        let issue = parse_item_url(
            "https://GHE.example.com:8443/a/b/issues/7/",
            ItemKind::Issue,
        )
        .unwrap();
        assert_eq!(issue.host, "ghe.example.com:8443");
        assert_eq!(
            (issue.item.repo.owner.as_str(), issue.item.number),
            ("a", 7)
        );
        for bad in [
            "https://github.com/acme/shop/issues/42",
            "https://github.com/acme/pull/42",
            "https://github.com/acme/shop/pull/0",
            "https://github.com/acme/shop/pull/x",
            "github.com/acme/shop/pull/1",
            "https://github.com/../shop/pull/1",
            "https://github.com/acme/sh op/pull/1",
        ] {
            let e = parse_item_url(bad, ItemKind::PullRequest).unwrap_err();
            assert!(
                e.to_string().contains("OWNER/REPO/pull/NUMBER"),
                "{bad}: {e}"
            );
        }
        let e = parse_item_url("https://user:tok@h/a/b/pull/x", ItemKind::PullRequest)
            .unwrap_err()
            .to_string();
        assert!(!e.contains("tok@"), "{e}");
    }

    #[test]
    fn markers_are_found_again() {
        let text = format!(
            "Review.\n{}\n{}\nand {}",
            marker("t-1"),
            fingerprint_marker("ab12"),
            fingerprint_marker("cd34")
        );
        let (tasks, findings) = markers_in(&text);
        assert_eq!(tasks, ["t-1"]);
        assert_eq!(findings, ["ab12", "cd34"]);
        assert_eq!(ReviewEvent::RequestChanges.as_str(), "REQUEST_CHANGES");
    }
}
