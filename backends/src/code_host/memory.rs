//! [`MemoryCodeHost`]: pull requests and issues held in memory, with GitHub's rules where a
//! caller can tell — a review is all or nothing, an inline comment must lie inside one hunk's
//! new-side lines of the diff at the review's commit (else the whole review is refused with
//! GitHub's own 422 words), labels that do not exist are created when applied. For unit tests
//! and `verdict dev`; what it was sent can be read back.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use verdict_proto::diff::{self, CommentableLines};
use verdict_proto::publication::{
    DraftComment, ItemKind, ItemRef, RepoId, ReviewDraft, ReviewEvent, StatusDraft,
};

use super::{
    CodeHost, CodeHostError, HostedRepository, Issue, Posted, PostedItem, PullRequest,
    collect_posted,
};
use crate::BoxFuture;

/// GitHub's words for an inline comment outside the diff (its 422 `errors` entry).
pub const OUTSIDE_DIFF: &str = "Pull request review thread line must be part of the diff, Pull request review thread start line must be part of the same hunk as the line., and Pull request review thread diff hunk can't be blank";

/// GitHub's words for a range whose start is not before its end.
pub const START_NOT_BEFORE_END: &str =
    "Pull request review thread start line must precede the end line.";

/// A review as the in-memory host holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredReview {
    pub id: u64,
    pub draft: ReviewDraft,
    pub url: String,
}

/// A top-level comment as the in-memory host holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredComment {
    pub id: u64,
    pub body: String,
    pub url: String,
}

#[derive(Debug, Default)]
struct Item {
    pull: Option<PullRequest>,
    issue: Option<Issue>,
    /// The diff of every head the pull request had, by head commit.
    diffs: BTreeMap<String, CommentableLines>,
    reviews: Vec<StoredReview>,
    comments: Vec<StoredComment>,
    labels: Vec<String>,
}

#[derive(Debug, Default)]
struct State {
    items: BTreeMap<(RepoId, u64), Item>,
    repo_labels: BTreeMap<RepoId, Vec<String>>,
    statuses: BTreeMap<RepoId, Vec<StatusDraft>>,
    /// Organisations' repositories by lowercase organisation, then full name.
    organisations: BTreeMap<String, BTreeMap<String, HostedRepository>>,
    next_id: u64,
    /// Errors the next calls return, in order (fault injection).
    failures: VecDeque<CodeHostError>,
    probes: usize,
    calls: usize,
}

/// An in-memory code host (see the module documentation).
#[derive(Debug, Default)]
pub struct MemoryCodeHost {
    state: Mutex<State>,
}

fn key(item: &ItemRef) -> (RepoId, u64) {
    (item.repo.clone(), item.number)
}

fn not_found(kind: &str, item: &ItemRef) -> CodeHostError {
    CodeHostError::NotFound {
        what: format!("{kind} {}#{}", item.repo, item.number),
    }
}

fn rejected(error: &str) -> CodeHostError {
    CodeHostError::Rejected {
        message: "Unprocessable Entity".to_owned(),
        errors: vec![error.to_owned()],
    }
}

impl MemoryCodeHost {
    pub fn new() -> MemoryCodeHost {
        MemoryCodeHost::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds (or replaces) a pull request whose head has the unified `diff` (what GitHub shows
    /// for base…head).
    pub fn add_pull_request(&self, pull: PullRequest, diff: &str) {
        let mut state = self.lock();
        let item = state.items.entry(key(&pull.item)).or_default();
        item.diffs
            .insert(pull.head_sha.clone(), diff::parse(diff).commentable());
        item.pull = Some(pull);
    }

    /// A push: the pull request's head becomes `head_sha`, with `diff`. Reviews may still be
    /// posted on older heads (as on GitHub, where they show as outdated).
    pub fn push(&self, item: &ItemRef, head_sha: &str, diff: &str) {
        let mut state = self.lock();
        let entry = state.items.entry(key(item)).or_default();
        entry
            .diffs
            .insert(head_sha.to_owned(), diff::parse(diff).commentable());
        if let Some(pull) = &mut entry.pull {
            pull.head_sha = head_sha.to_owned();
        }
    }

    pub fn add_issue(&self, issue: Issue) {
        let mut state = self.lock();
        let k = key(&issue.item);
        state.items.entry(k).or_default().issue = Some(issue);
    }

    /// The labels the repository defines.
    pub fn define_labels(&self, repo: &RepoId, labels: &[&str]) {
        self.lock().repo_labels.insert(
            repo.clone(),
            labels.iter().map(|l| (*l).to_owned()).collect(),
        );
    }

    /// Adds (or replaces) a repository of the organisation its full name begins with.
    pub fn add_repository(&self, repo: HostedRepository) {
        let org = repo
            .full_name
            .split('/')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        self.lock()
            .organisations
            .entry(org)
            .or_default()
            .insert(repo.full_name.to_ascii_lowercase(), repo);
    }

    /// The next calls (of any method) fail with these errors, in order.
    pub fn fail_next(&self, errors: impl IntoIterator<Item = CodeHostError>) {
        self.lock().failures.extend(errors);
    }

    /// The reviews submitted on `item`, oldest first.
    pub fn reviews(&self, item: &ItemRef) -> Vec<StoredReview> {
        self.lock()
            .items
            .get(&key(item))
            .map(|i| i.reviews.clone())
            .unwrap_or_default()
    }

    /// The top-level comments posted on `item`, oldest first.
    pub fn comments(&self, item: &ItemRef) -> Vec<StoredComment> {
        self.lock()
            .items
            .get(&key(item))
            .map(|i| i.comments.clone())
            .unwrap_or_default()
    }

    /// The labels applied to `item`.
    pub fn applied_labels(&self, item: &ItemRef) -> Vec<String> {
        self.lock()
            .items
            .get(&key(item))
            .map(|i| i.labels.clone())
            .unwrap_or_default()
    }

    /// The statuses set in `repo`, oldest first.
    pub fn statuses(&self, repo: &RepoId) -> Vec<StatusDraft> {
        self.lock().statuses.get(repo).cloned().unwrap_or_default()
    }

    /// How many inline comments were checked with [`CodeHost::accepts_comment`].
    pub fn probes(&self) -> usize {
        self.lock().probes
    }

    /// How many calls were made, of any method.
    pub fn calls(&self) -> usize {
        self.lock().calls
    }

    /// Counts the call and returns the injected failure, if one is due.
    fn begin(&self) -> Result<MutexGuard<'_, State>, CodeHostError> {
        let mut state = self.lock();
        state.calls += 1;
        match state.failures.pop_front() {
            Some(e) => Err(e),
            None => Ok(state),
        }
    }

    fn next_id(state: &mut State) -> u64 {
        state.next_id += 1;
        state.next_id
    }
}

/// Why the host refuses `comment` on the diff `zone`, if it does.
fn refusal(zone: &CommentableLines, comment: &DraftComment) -> Option<&'static str> {
    let start = comment.start_line.unwrap_or(comment.line);
    if comment.start_line.is_some_and(|s| s >= comment.line) {
        return Some(START_NOT_BEFORE_END);
    }
    (!zone.contains(&comment.path, start, comment.line)).then_some(OUTSIDE_DIFF)
}

impl Item {
    fn zone(&self, commit: &str) -> Result<&CommentableLines, CodeHostError> {
        self.diffs
            .get(commit)
            .ok_or_else(|| rejected("commit_id is not part of the pull request"))
    }
}

impl CodeHost for MemoryCodeHost {
    fn pull_request<'a>(
        &'a self,
        item: &'a ItemRef,
    ) -> BoxFuture<'a, Result<PullRequest, CodeHostError>> {
        Box::pin(async move {
            let state = self.begin()?;
            state
                .items
                .get(&key(item))
                .and_then(|i| i.pull.clone())
                .ok_or_else(|| not_found("pull request", item))
        })
    }

    fn issue<'a>(&'a self, item: &'a ItemRef) -> BoxFuture<'a, Result<Issue, CodeHostError>> {
        Box::pin(async move {
            let state = self.begin()?;
            state
                .items
                .get(&key(item))
                .and_then(|i| i.issue.clone())
                .ok_or_else(|| not_found("issue", item))
        })
    }

    fn posted<'a>(
        &'a self,
        item: &'a ItemRef,
        kind: ItemKind,
    ) -> BoxFuture<'a, Result<Posted, CodeHostError>> {
        Box::pin(async move {
            let state = self.begin()?;
            let Some(entry) = state.items.get(&key(item)) else {
                return Err(not_found("item", item));
            };
            if kind == ItemKind::PullRequest && entry.pull.is_none() {
                return Err(not_found("pull request", item));
            }
            let reviews = entry
                .reviews
                .iter()
                .filter(|_| kind == ItemKind::PullRequest)
                .flat_map(|r| {
                    std::iter::once((r.draft.body.as_str(), r.url.as_str())).chain(
                        r.draft
                            .comments
                            .iter()
                            .map(|c| (c.body.as_str(), r.url.as_str())),
                    )
                });
            let comments = entry
                .comments
                .iter()
                .map(|c| (c.body.as_str(), c.url.as_str()));
            Ok(collect_posted(reviews.chain(comments)))
        })
    }

    fn create_review<'a>(
        &'a self,
        item: &'a ItemRef,
        draft: &'a ReviewDraft,
    ) -> BoxFuture<'a, Result<PostedItem, CodeHostError>> {
        Box::pin(async move {
            let mut state = self.begin()?;
            let entry = state
                .items
                .get(&key(item))
                .filter(|i| i.pull.is_some())
                .ok_or_else(|| not_found("pull request", item))?;
            if draft.body.trim().is_empty() && draft.event != ReviewEvent::Approve {
                return Err(rejected(
                    "Review body is required when the event is COMMENT or REQUEST_CHANGES",
                ));
            }
            let zone = entry.zone(&draft.commit_id)?;
            if let Some(error) = draft.comments.iter().find_map(|c| refusal(zone, c)) {
                return Err(rejected(error));
            }
            let id = MemoryCodeHost::next_id(&mut state);
            let url = format!(
                "memory://{}/pull/{}#pullrequestreview-{id}",
                item.repo, item.number
            );
            let stored = StoredReview {
                id,
                draft: draft.clone(),
                url: url.clone(),
            };
            if let Some(entry) = state.items.get_mut(&key(item)) {
                entry.reviews.push(stored);
            }
            Ok(PostedItem { id, url })
        })
    }

    fn accepts_comment<'a>(
        &'a self,
        item: &'a ItemRef,
        commit: &'a str,
        comment: &'a DraftComment,
    ) -> BoxFuture<'a, Result<bool, CodeHostError>> {
        Box::pin(async move {
            let mut state = self.begin()?;
            state.probes += 1;
            let entry = state
                .items
                .get(&key(item))
                .ok_or_else(|| not_found("pull request", item))?;
            Ok(refusal(entry.zone(commit)?, comment).is_none())
        })
    }

    fn set_status<'a>(
        &'a self,
        repo: &'a RepoId,
        status: &'a StatusDraft,
    ) -> BoxFuture<'a, Result<(), CodeHostError>> {
        Box::pin(async move {
            let mut state = self.begin()?;
            // As GitHub: a status needs a commit the repository has (here: a pull request's
            // head, earlier head or base).
            let known = state.items.iter().any(|((r, _), i)| {
                r == repo
                    && (i.diffs.contains_key(&status.sha)
                        || i.pull.as_ref().is_some_and(|p| p.base_sha == status.sha))
            });
            if !known {
                return Err(rejected(&format!(
                    "No commit found for SHA: {}",
                    status.sha
                )));
            }
            let mut status = status.clone();
            status.description = status.description.chars().take(140).collect();
            state.statuses.entry(repo.clone()).or_default().push(status);
            Ok(())
        })
    }

    fn create_comment<'a>(
        &'a self,
        item: &'a ItemRef,
        body: &'a str,
    ) -> BoxFuture<'a, Result<PostedItem, CodeHostError>> {
        Box::pin(async move {
            let mut state = self.begin()?;
            if !state.items.contains_key(&key(item)) {
                return Err(not_found("issue", item));
            }
            let id = MemoryCodeHost::next_id(&mut state);
            let url = format!(
                "memory://{}/issues/{}#issuecomment-{id}",
                item.repo, item.number
            );
            if let Some(entry) = state.items.get_mut(&key(item)) {
                entry.comments.push(StoredComment {
                    id,
                    body: body.to_owned(),
                    url: url.clone(),
                });
            }
            Ok(PostedItem { id, url })
        })
    }

    fn labels<'a>(&'a self, repo: &'a RepoId) -> BoxFuture<'a, Result<Vec<String>, CodeHostError>> {
        Box::pin(async move {
            let state = self.begin()?;
            // As on GitHub, a repository nobody told this host about does not exist.
            let known =
                state.repo_labels.contains_key(repo) || state.items.keys().any(|(r, _)| r == repo);
            if !known {
                return Err(CodeHostError::NotFound {
                    what: format!("repository {repo}"),
                });
            }
            Ok(state.repo_labels.get(repo).cloned().unwrap_or_default())
        })
    }

    fn add_labels<'a>(
        &'a self,
        item: &'a ItemRef,
        labels: &'a [String],
    ) -> BoxFuture<'a, Result<(), CodeHostError>> {
        Box::pin(async move {
            let mut state = self.begin()?;
            if !state.items.contains_key(&key(item)) {
                return Err(not_found("issue", item));
            }
            // As GitHub does: a label that does not exist yet is created.
            let defined = state.repo_labels.entry(item.repo.clone()).or_default();
            for label in labels {
                if !defined.contains(label) {
                    defined.push(label.clone());
                }
            }
            if let Some(entry) = state.items.get_mut(&key(item)) {
                // What the item shows when read again, as on GitHub.
                let shown = [
                    entry.pull.as_mut().map(|p| &mut p.labels),
                    entry.issue.as_mut().map(|i| &mut i.labels),
                ];
                for list in shown.into_iter().flatten() {
                    for label in labels {
                        if !list.contains(label) {
                            list.push(label.clone());
                        }
                    }
                }
                for label in labels {
                    if !entry.labels.contains(label) {
                        entry.labels.push(label.clone());
                    }
                }
            }
            Ok(())
        })
    }

    fn organisation_repositories<'a>(
        &'a self,
        org: &'a str,
    ) -> BoxFuture<'a, Result<Vec<HostedRepository>, CodeHostError>> {
        Box::pin(async move {
            let state = self.begin()?;
            state
                .organisations
                .get(&org.to_ascii_lowercase())
                .map(|repos| repos.values().cloned().collect())
                .ok_or_else(|| CodeHostError::NotFound {
                    what: format!("organisation {org}"),
                })
        })
    }
}
