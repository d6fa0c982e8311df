//! Organisation scans as data (SPEC S4, Q6; issue 10): a scan batch is many scan tasks, one per
//! repository, at bulk priority. This module holds what the engine stores of a batch (its
//! source, its members once enumerated, what was left out and why), the filters that choose an
//! organisation's repositories, and the public document `GET /v1/scans/{id}` answers with its
//! counts. Pure: no I/O; the scheduler's `engine::batches` enumerates, stores and creates the member tasks.

use globset::{GlobSet, GlobSetBuilder};
use serde::{Deserialize, Serialize};
use verdict_api::batch::{
    BatchState, Counts, MemberDocument, MemberState, ScanBatchDocument, Skipped,
};
use verdict_proto::budget::Amount;
use verdict_proto::publication::HostedRepository;

use verdict_api::document::TaskState;
use verdict_api::submission::{ManifestEntry, ScanBatchSubmission, SubmissionOptions};

/// Where a batch's repositories come from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum BatchSource {
    /// An organisation on the configured code host, with the filters that choose among its
    /// repositories.
    Organisation {
        name: String,
        #[serde(default)]
        filters: Filters,
    },
    /// A list of repositories given with the submission.
    Manifest { entries: Vec<ManifestEntry> },
}

/// Which of an organisation's repositories a batch scans (decision 141).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filters {
    /// Globs a repository must match one of (none: every repository).
    #[serde(default)]
    pub include: Vec<String>,
    /// Globs that leave a repository out, even when included.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Scan forks too.
    #[serde(default)]
    pub forks: bool,
    /// Scan archived repositories too.
    #[serde(default)]
    pub archived: bool,
}

/// One repository of a batch and the scan task it has (or will have: the id is fixed when the
/// batch is enumerated, so creating it again names the same task).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// `OWNER/NAME` for an organisation's repository, the URL for a manifest entry.
    pub repository: String,
    /// What git clones.
    pub clone_url: String,
    /// The revision scanned: the batch's `ref`, else the manifest entry's, else the default
    /// branch.
    pub revision: String,
    pub task_id: String,
    /// The idempotency key the member's task is created with (its id is derived from it).
    pub key: String,
    /// Whether its task exists (set after the create call answered).
    #[serde(default)]
    pub created: bool,
    /// Why its task could not be created (the allowlist, an invalid revision): counted failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// A scan batch as stored (`scan-batch:{id}` in the document store).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchRecord {
    pub id: String,
    pub source: BatchSource,
    /// The revision every member scans, when the submission named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// Applied to every member's task (priority is always bulk).
    #[serde(default)]
    pub options: SubmissionOptions,
    pub state: BatchState,
    /// Why it failed, or the last transient trouble while enumerating or creating members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `None` until enumerated; then in a fixed order (by repository).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<Member>>,
    #[serde(default)]
    pub skipped: Vec<Skipped>,
    pub created_unix_ms: u64,
    /// Until when the replica driving the batch (enumerating, creating members) owns it; the
    /// sweeping pass of another replica takes over only after that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_until_unix_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_unix_ms: Option<u64>,
    /// The pre-flight estimate (SPEC X5), for an organisation with a budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<Amount>,
}

impl BatchRecord {
    /// A new batch in state `enumerating`.
    pub fn new(id: String, s: ScanBatchSubmission, now: u64) -> Result<BatchRecord, String> {
        let source = match (s.organisation, s.manifest) {
            (Some(org), None) => {
                let org = org.trim().to_owned();
                let valid = !org.is_empty()
                    && org.len() <= 100
                    && org
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
                if !valid {
                    return Err(format!(
                        "organisation `{org}` is not an organisation name (letters, digits, `-`, `_`, `.`)"
                    ));
                }
                let filters = Filters {
                    include: s.include,
                    exclude: s.exclude,
                    forks: s.forks,
                    archived: s.archived,
                };
                RepositoryFilter::new(&filters)?;
                BatchSource::Organisation { name: org, filters }
            }
            (None, Some(entries)) => {
                if entries.is_empty() {
                    return Err("manifest lists no repository".to_owned());
                }
                let filtered = !s.include.is_empty() || !s.exclude.is_empty() || s.forks;
                if filtered || s.archived {
                    return Err(
                        "include, exclude, forks and archived filter an organisation's repositories; a manifest is scanned as listed"
                            .to_owned(),
                    );
                }
                for (i, e) in entries.iter().enumerate() {
                    if e.repository.trim().is_empty() {
                        return Err(format!("manifest[{i}].repository is required"));
                    }
                }
                BatchSource::Manifest { entries }
            }
            (Some(_), Some(_)) => {
                return Err("give either organisation or manifest, not both".to_owned());
            }
            (None, None) => return Err("organisation or manifest is required".to_owned()),
        };
        Ok(BatchRecord {
            id,
            source,
            reference: s.reference.filter(|r| !r.trim().is_empty()),
            options: s.options,
            state: BatchState::Enumerating,
            reason: None,
            members: None,
            skipped: Vec::new(),
            created_unix_ms: now,
            driver_until_unix_ms: None,
            finished_unix_ms: None,
            estimate: None,
        })
    }

    /// Whether a member still needs its create call.
    pub fn pending_members(&self) -> usize {
        self.members.as_ref().map_or(0, |m| {
            m.iter()
                .filter(|m| !m.created && m.refused.is_none())
                .count()
        })
    }
}

/// [`Filters`] compiled. Patterns are globs (`*`, `?`, `[..]`, `{a,b}`), matched
/// case-insensitively against the repository's name, or against `OWNER/NAME` when the pattern
/// has a `/` (decision 141).
#[derive(Debug)]
pub struct RepositoryFilter {
    include_names: GlobSet,
    include_full: GlobSet,
    exclude_names: GlobSet,
    exclude_full: GlobSet,
    any_include: bool,
    forks: bool,
    archived: bool,
}

fn compile(patterns: &[String], field: &str) -> Result<(GlobSet, GlobSet), String> {
    let mut names = GlobSetBuilder::new();
    let mut full = GlobSetBuilder::new();
    for p in patterns {
        let glob = globset::GlobBuilder::new(p)
            .case_insensitive(true)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("{field} pattern `{p}` is not a glob: {e}"))?;
        if p.contains('/') {
            full.add(glob);
        } else {
            names.add(glob);
        }
    }
    let built = |b: GlobSetBuilder| b.build().map_err(|e| format!("{field} patterns: {e}"));
    Ok((built(names)?, built(full)?))
}

impl RepositoryFilter {
    pub fn new(filters: &Filters) -> Result<RepositoryFilter, String> {
        let (include_names, include_full) = compile(&filters.include, "include")?;
        let (exclude_names, exclude_full) = compile(&filters.exclude, "exclude")?;
        Ok(RepositoryFilter {
            include_names,
            include_full,
            exclude_names,
            exclude_full,
            any_include: !filters.include.is_empty(),
            forks: filters.forks,
            archived: filters.archived,
        })
    }

    /// `Ok` when the batch scans `repo`, else why not.
    pub fn decide(&self, repo: &HostedRepository) -> Result<(), String> {
        if repo.archived && !self.archived {
            return Err("archived (include it with --archived)".to_owned());
        }
        if repo.fork && !self.forks {
            return Err("a fork (include it with --forks)".to_owned());
        }
        let name = repo.full_name.rsplit('/').next().unwrap_or(&repo.full_name);
        let full = repo.full_name.as_str();
        if self.any_include
            && !(self.include_names.is_match(name) || self.include_full.is_match(full))
        {
            return Err("matches no include pattern".to_owned());
        }
        if self.exclude_names.is_match(name) || self.exclude_full.is_match(full) {
            return Err("matches an exclude pattern".to_owned());
        }
        Ok(())
    }
}

/// The document of `record`, given the state of each member's task (`None`: not created or
/// not readable), in member order. A running batch whose members are all created and ended
/// reads as `finished` at once, before the sweeping pass writes it so.
pub fn document(record: &BatchRecord, tasks: &[Option<TaskState>]) -> ScanBatchDocument {
    let mut counts = Counts::default();
    let mut members = Vec::new();
    for (i, m) in record.members.iter().flatten().enumerate() {
        let task_state = tasks.get(i).copied().flatten();
        let state = if m.refused.is_some() {
            MemberState::Failed
        } else {
            MemberState::of(task_state)
        };
        counts.total += 1;
        match state {
            MemberState::Queued => counts.queued += 1,
            MemberState::Running => counts.running += 1,
            MemberState::Done => counts.done += 1,
            MemberState::Failed => counts.failed += 1,
        }
        members.push(MemberDocument {
            repository: m.repository.clone(),
            revision: m.revision.clone(),
            task_id: m.task_id.clone(),
            state,
            task_state,
            reason: m.refused.clone(),
        });
    }
    let state = if record.state == BatchState::Running && is_finished(record, tasks) {
        BatchState::Finished
    } else {
        record.state
    };
    let (source, organisation) = match &record.source {
        BatchSource::Organisation { name, .. } => ("organisation", Some(name.clone())),
        BatchSource::Manifest { .. } => ("manifest", None),
    };
    ScanBatchDocument {
        id: record.id.clone(),
        state,
        source: source.to_owned(),
        organisation,
        reference: record.reference.clone(),
        reason: record.reason.clone(),
        counts,
        members,
        skipped: record.skipped.clone(),
        created_unix_ms: record.created_unix_ms,
        finished_unix_ms: record.finished_unix_ms,
        estimate: record.estimate,
        over_budget: 0,
    }
}

/// Marks the members whose task the budget refused (`reasons`, in member order): each gets the
/// refusal as its reason, and the document counts them.
pub fn mark_over_budget(doc: &mut ScanBatchDocument, reasons: &[Option<String>]) {
    for (member, reason) in doc.members.iter_mut().zip(reasons) {
        if let Some(reason) = reason {
            member.reason = Some(reason.clone());
            doc.over_budget += 1;
        }
    }
}

/// Whether every member of an enumerated batch was created (or refused) and its task ended.
pub fn is_finished(record: &BatchRecord, tasks: &[Option<TaskState>]) -> bool {
    let Some(members) = &record.members else {
        return false;
    };
    members.iter().enumerate().all(|(i, m)| {
        m.refused.is_some()
            || (m.created
                && tasks
                    .get(i)
                    .copied()
                    .flatten()
                    .is_some_and(TaskState::is_terminal))
    })
}

/// The members for `repos` (already filtered), each scanning `reference` or its default
/// branch, with the task ids `key_to_id` derives from their keys.
pub fn members_of(
    batch_id: &str,
    repos: impl IntoIterator<Item = (String, String, String)>,
    key_to_id: impl Fn(&str) -> String,
) -> Vec<Member> {
    let mut members: Vec<Member> = repos
        .into_iter()
        .map(|(repository, clone_url, revision)| {
            let key = member_key(batch_id, &clone_url, &revision);
            Member {
                task_id: key_to_id(&key),
                key,
                repository,
                clone_url,
                revision,
                created: false,
                refused: None,
            }
        })
        .collect();
    members.sort_by(|a, b| a.repository.cmp(&b.repository));
    members.dedup_by(|a, b| a.key == b.key);
    members
}

/// A member's idempotency key: the batch, the repository and the revision (hashed, so any URL
/// fits the key's 256 characters).
pub fn member_key(batch_id: &str, clone_url: &str, revision: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{clone_url}\n{revision}").as_bytes());
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("scan-batch/{batch_id}/{hex}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn repo(name: &str, archived: bool, fork: bool) -> HostedRepository {
        HostedRepository {
            full_name: format!("acme/{name}"),
            clone_url: format!("https://github.com/acme/{name}.git"),
            html_url: format!("https://github.com/acme/{name}"),
            default_branch: "main".to_owned(),
            archived,
            fork,
            size_kib: 1,
            visibility: "private".to_owned(),
        }
    }

    fn filter(include: &[&str], exclude: &[&str], forks: bool, archived: bool) -> RepositoryFilter {
        RepositoryFilter::new(&Filters {
            include: include.iter().map(|s| (*s).to_owned()).collect(),
            exclude: exclude.iter().map(|s| (*s).to_owned()).collect(),
            forks,
            archived,
        })
        .unwrap()
    }

    #[test]
    fn archived_and_forks_are_left_out_unless_asked_for() {
        let none = filter(&[], &[], false, false);
        assert!(none.decide(&repo("app", false, false)).is_ok());
        assert!(
            none.decide(&repo("old", true, false))
                .unwrap_err()
                .contains("archived")
        );
        assert!(
            none.decide(&repo("copy", false, true))
                .unwrap_err()
                .contains("fork")
        );
        let all = filter(&[], &[], true, true);
        assert!(all.decide(&repo("old", true, false)).is_ok());
        assert!(all.decide(&repo("copy", false, true)).is_ok());
        assert!(all.decide(&repo("both", true, true)).is_ok());
    }

    #[test]
    fn include_and_exclude_globs_match_the_name_or_the_full_name() {
        let f = filter(
            &["svc-*", "acme/lib-{a,b}"],
            &["*-legacy", "ACME/svc-x"],
            false,
            false,
        );
        assert!(f.decide(&repo("svc-pay", false, false)).is_ok());
        assert!(
            f.decide(&repo("SVC-Pay", false, false)).is_ok(),
            "case-insensitive"
        );
        assert!(f.decide(&repo("lib-a", false, false)).is_ok());
        assert!(
            f.decide(&repo("lib-c", false, false))
                .unwrap_err()
                .contains("include")
        );
        assert!(
            f.decide(&repo("svc-legacy", false, false))
                .unwrap_err()
                .contains("exclude")
        );
        assert!(
            f.decide(&repo("svc-x", false, false))
                .unwrap_err()
                .contains("exclude")
        );
        assert!(f.decide(&repo("web", false, false)).is_err());
        // A name pattern never matches across the owner's slash.
        let g = filter(&["acme*"], &[], false, false);
        assert!(g.decide(&repo("web", false, false)).is_err());
    }

    #[test]
    fn a_bad_glob_is_refused_naming_it() {
        let e = RepositoryFilter::new(&Filters {
            include: vec!["svc-[".to_owned()],
            ..Filters::default()
        })
        .unwrap_err();
        assert!(e.contains("include pattern `svc-[`"), "{e}");
    }

    fn submission() -> ScanBatchSubmission {
        ScanBatchSubmission {
            organisation: Some("acme".to_owned()),
            ..ScanBatchSubmission::default()
        }
    }

    #[test]
    fn a_submission_names_exactly_one_source() {
        assert!(BatchRecord::new("b".into(), submission(), 1).is_ok());
        let both = ScanBatchSubmission {
            manifest: Some(vec![ManifestEntry {
                repository: "https://x/a.git".into(),
                reference: None,
            }]),
            ..submission()
        };
        assert!(
            BatchRecord::new("b".into(), both, 1)
                .unwrap_err()
                .contains("not both")
        );
        let none = ScanBatchSubmission::default();
        assert!(
            BatchRecord::new("b".into(), none, 1)
                .unwrap_err()
                .contains("required")
        );
        let bad = ScanBatchSubmission {
            organisation: Some("ac me/../x".into()),
            ..ScanBatchSubmission::default()
        };
        assert!(BatchRecord::new("b".into(), bad, 1).is_err());
        let filtered_manifest = ScanBatchSubmission {
            manifest: Some(vec![ManifestEntry {
                repository: "https://x/a.git".into(),
                reference: None,
            }]),
            forks: true,
            ..ScanBatchSubmission::default()
        };
        assert!(BatchRecord::new("b".into(), filtered_manifest, 1).is_err());
    }

    #[test]
    fn members_are_keyed_by_batch_repository_and_revision_and_ordered() {
        let members = members_of(
            "b1",
            [
                ("acme/z".to_owned(), "u-z".to_owned(), "main".to_owned()),
                ("acme/a".to_owned(), "u-a".to_owned(), "main".to_owned()),
                ("acme/a".to_owned(), "u-a".to_owned(), "main".to_owned()),
            ],
            |k| format!("id:{k}"),
        );
        assert_eq!(members.len(), 2, "a repository listed twice is one member");
        assert_eq!(members[0].repository, "acme/a");
        assert_eq!(members[0].task_id, format!("id:{}", members[0].key));
        assert_eq!(member_key("b1", "u-a", "main"), members[0].key);
        assert_ne!(member_key("b2", "u-a", "main"), members[0].key);
        assert_ne!(member_key("b1", "u-a", "dev"), members[0].key);
    }

    #[test]
    fn counts_and_the_finished_state_follow_the_member_tasks() {
        let mut record = BatchRecord::new("b".into(), submission(), 1).unwrap();
        record.state = BatchState::Running;
        let mut members = members_of(
            "b",
            (0..4).map(|i| (format!("acme/r{i}"), format!("u{i}"), "main".to_owned())),
            |k| k.to_owned(),
        );
        for m in &mut members {
            m.created = true;
        }
        members[3].created = false;
        members[3].refused = Some("refused by the allowlist".into());
        record.members = Some(members);
        let tasks = [
            Some(TaskState::Completed),
            Some(TaskState::Running),
            None,
            None,
        ];
        let doc = document(&record, &tasks);
        assert_eq!(
            doc.counts,
            Counts {
                total: 4,
                queued: 1,
                running: 1,
                done: 1,
                failed: 1
            }
        );
        assert_eq!(doc.state, BatchState::Running);
        assert_eq!(doc.task_ids().len(), 4);
        let ended = [
            Some(TaskState::Completed),
            Some(TaskState::Incomplete),
            Some(TaskState::Degraded),
            None,
        ];
        let doc = document(&record, &ended);
        assert_eq!(doc.state, BatchState::Finished);
        assert_eq!((doc.counts.done, doc.counts.failed), (2, 2));
    }
}
