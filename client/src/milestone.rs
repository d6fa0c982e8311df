//! Tasks as people read them (SPEC O3, S5): one titled line per progress event, e.g.
//! `12:03:04 Triage fallback — Triage did not return structured output; …`, and a short summary
//! of a finished task. `verdict tail`, `verdict submit --wait` and `verdict dev` print the same.

use std::fmt::Write as _;

use serde_json::Value;
use verdict_proto::wire::{EventType, ProgressEvent};

use verdict_api::document::PublicationState;
use verdict_api::document::TaskDocument;

/// One readable milestone: a short title and the event's own explanation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Milestone {
    pub title: String,
    /// The event's message, trimmed; may be empty.
    pub detail: String,
}

impl Milestone {
    /// `HH:MM:SS Title — detail` (UTC, so lines from machines in different zones agree).
    pub fn line(&self, at_unix_ms: u64) -> String {
        let time = utc_clock(at_unix_ms);
        if self.detail.is_empty() {
            format!("{time} {}", self.title)
        } else {
            format!("{time} {} — {}", self.title, self.detail)
        }
    }
}

/// The milestone of `event`.
pub fn milestone(event: &ProgressEvent) -> Milestone {
    let stage = || stage_name(event.stage_id.as_deref());
    let title = match event.kind {
        EventType::TaskQueued => "Queued".to_owned(),
        EventType::TaskStarted => "Started".to_owned(),
        EventType::StageStarted => format!("{} started", stage()),
        EventType::StageFinished => format!("{} finished", stage()),
        EventType::StageRetry => format!("{} retry", stage()),
        EventType::ProtocolRepair => "Protocol repair".to_owned(),
        EventType::RepairConsistencyWarning => "Repair consistency warning".to_owned(),
        EventType::TriageFallback => "Triage fallback".to_owned(),
        EventType::DeadlineReached => "Deadline reached".to_owned(),
        EventType::Degraded => "Degraded".to_owned(),
        EventType::Published => "Published".to_owned(),
        EventType::Failed => "Failed".to_owned(),
        EventType::Cancelled => "Cancelled".to_owned(),
        EventType::TaskFinished => "Finished".to_owned(),
    };
    Milestone {
        title,
        detail: event.message.trim().to_owned(),
    }
}

/// The line of `event`: [`milestone`] at the event's time.
pub fn line(event: &ProgressEvent) -> String {
    milestone(event).line(event.at_unix_ms)
}

/// A stage id as a title: `issue-analysis` → `Issue analysis`, `reviewer-2` → `Reviewer 2`.
fn stage_name(stage_id: Option<&str>) -> String {
    let Some(id) = stage_id.map(str::trim).filter(|s| !s.is_empty()) else {
        return "Stage".to_owned();
    };
    let spaced = id.replace(['-', '_'], " ");
    let mut chars = spaced.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => "Stage".to_owned(),
    }
}

/// `HH:MM:SS` of a Unix time in milliseconds, in UTC.
pub fn utc_clock(at_unix_ms: u64) -> String {
    let secs = at_unix_ms / 1000;
    let of_day = secs % 86_400;
    format!(
        "{:02}:{:02}:{:02}",
        of_day / 3600,
        (of_day % 3600) / 60,
        of_day % 60
    )
}

/// A few lines on a task: its state and reason, then the result's headline fields (score,
/// decision, category, priority, summary), its findings one per line, and the files left out.
pub fn summary(doc: &TaskDocument) -> String {
    let mut out = format!(
        "Task {}: {} ({})\n",
        doc.id,
        doc.state.as_str(),
        doc.pipeline
    );
    if let Some(reason) = doc
        .reason
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty())
    {
        let _ = writeln!(out, "Reason: {reason}");
    }
    if let Some(repo) = &doc.repository {
        // What was asked for and what was looked at: a branch moves, a commit does not.
        let at = |given: &str, commit: Option<&str>| match commit {
            Some(c) if c != given => format!("{given} ({})", c.get(..12).unwrap_or(c)),
            _ => given.to_owned(),
        };
        let head = at(&repo.revision, repo.commit.as_deref());
        match &repo.base_revision {
            Some(base) => {
                let base = at(base, repo.base.as_deref());
                let _ = writeln!(out, "Revisions: {base}..{head}");
            }
            None => {
                let _ = writeln!(out, "Revision: {head}");
            }
        }
    }
    if let Some(result) = &doc.result {
        result_lines(result, &mut out);
    }
    for left_out in &doc.coverage.files_not_reviewed {
        let _ = writeln!(out, "Not reviewed: {} ({})", left_out.path, left_out.reason);
    }
    if let (Some(github), Some(p)) = (&doc.github, &doc.publication) {
        let item = format!("{}#{}", github.item.repo, github.item.number);
        let line = match (p.state, &p.url) {
            (PublicationState::Published, Some(url)) => format!("Published to {item}: {url}"),
            (state, _) => format!(
                "Publication to {item}: {}{}",
                state.as_str(),
                p.detail
                    .as_deref()
                    .map(|d| format!(" — {d}"))
                    .unwrap_or_default()
            ),
        };
        let _ = writeln!(out, "{line}");
    }
    out
}

fn result_lines(result: &Value, out: &mut String) {
    let text = |key: &str| result.get(key).and_then(Value::as_str).map(str::trim);
    if let Some(score) = result.get("score").and_then(Value::as_u64) {
        let _ = writeln!(out, "Score: {score}/10");
    }
    if let Some(score) = result.get("overall_score").and_then(Value::as_u64) {
        let _ = writeln!(out, "Overall score: {score}/100");
    }
    if let Some(decision) = text("decision") {
        match text("decision_reason").filter(|r| !r.is_empty()) {
            Some(reason) => {
                let _ = writeln!(out, "Decision: {decision} — {reason}");
            }
            None => {
                let _ = writeln!(out, "Decision: {decision}");
            }
        }
    }
    for (key, label) in [("category", "Category"), ("priority", "Priority")] {
        if let Some(value) = text(key) {
            let _ = writeln!(out, "{label}: {value}");
        }
    }
    if let Some(summary) = text("summary").filter(|s| !s.is_empty()) {
        let _ = writeln!(out, "Summary: {summary}");
    }
    if let Some(findings) = result.get("findings").and_then(Value::as_array) {
        let _ = writeln!(out, "Findings: {}", findings.len());
        for finding in findings {
            let field = |key: &str| finding.get(key).and_then(Value::as_str).unwrap_or("");
            let reported = finding
                .get(verdict_proto::grounding::NOTE_KEY)
                .filter(|note| note.get("status").and_then(Value::as_str) == Some("unlocated"))
                .and_then(|note| note.get("reported"));
            let place = match reported {
                // Never shown as a place: the model named code that is not in the repository.
                Some(r) => format!("(not found in the repository: {})", place_of(r)),
                None => place_of(finding),
            };
            let raised_by: Vec<&str> = finding
                .get("raised_by")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let by = if raised_by.len() > 1 {
                format!(" (raised by {})", raised_by.join(", "))
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "  [{}] {place} {}{by}",
                field("severity"),
                field("title").trim()
            );
        }
    }
}

/// `file:start-end` of a finding or a reported location; `(general)` without a file.
fn place_of(location: &Value) -> String {
    match (
        location.get("file").and_then(Value::as_str),
        location.get("start_line").and_then(Value::as_u64),
        location.get("end_line").and_then(Value::as_u64),
    ) {
        (Some(file), Some(start), Some(end)) if start != end => format!("{file}:{start}-{end}"),
        (Some(file), Some(start), _) => format!("{file}:{start}"),
        (Some(file), None, _) => file.to_owned(),
        (None, _, _) => "(general)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verdict_proto::wire::WIRE_VERSION;

    fn event(kind: EventType, stage_id: Option<&str>, message: &str) -> ProgressEvent {
        ProgressEvent {
            version: WIRE_VERSION,
            task_id: "t-1".into(),
            // 12:03:04.5 UTC, some day in 2022.
            at_unix_ms: (19_000 * 86_400 + 12 * 3600 + 3 * 60 + 4) * 1000 + 500,
            kind,
            channel: None,
            stage_id: stage_id.map(str::to_owned),
            message: message.into(),
            data: serde_json::Value::Null,
        }
    }

    #[test]
    fn triage_fallback_line() {
        let e = event(
            EventType::TriageFallback,
            Some("triage"),
            "Triage did not return structured output; continuing with review by default.",
        );
        assert_eq!(
            line(&e),
            "12:03:04 Triage fallback — Triage did not return structured output; continuing with review by default."
        );
    }

    #[test]
    fn titles() {
        let cases = [
            (EventType::StageStarted, Some("triage"), "Triage started"),
            (
                EventType::StageFinished,
                Some("reviewer-2"),
                "Reviewer 2 finished",
            ),
            (
                EventType::StageStarted,
                Some("issue-analysis"),
                "Issue analysis started",
            ),
            (EventType::StageStarted, None, "Stage started"),
            (EventType::ProtocolRepair, Some("review"), "Protocol repair"),
            (
                EventType::DeadlineReached,
                Some("review"),
                "Deadline reached",
            ),
            (EventType::Degraded, None, "Degraded"),
            (EventType::Failed, None, "Failed"),
        ];
        for (kind, stage, title) in cases {
            assert_eq!(milestone(&event(kind, stage, "x")).title, title, "{kind:?}");
        }
    }

    #[test]
    fn an_empty_message_leaves_only_the_title() {
        let e = event(EventType::TaskQueued, None, "  ");
        assert_eq!(line(&e), "12:03:04 Queued");
    }

    #[test]
    fn clock_wraps_at_midnight() {
        assert_eq!(utc_clock(0), "00:00:00");
        assert_eq!(utc_clock(86_399_999), "23:59:59");
        assert_eq!(utc_clock(86_400_000), "00:00:00");
    }

    #[test]
    fn review_summary() {
        use verdict_api::document::{Coverage, NotReviewed, TaskKind, TaskState, Timings};
        let doc = TaskDocument {
            id: "t-1".into(),
            kind: TaskKind::Review,
            pipeline: "multi".into(),
            state: TaskState::Completed,
            reason: None,
            failure_kind: None,
            github: None,
            publication: None,
            trace_id: None,
            repository: Some(verdict_api::document::RepositoryView {
                url: "https://example.test/r.git".into(),
                revision: "feature".into(),
                commit: Some("0123456789abcdef0123456789abcdef01234567".into()),
                base_revision: Some("main".into()),
                base: Some("fedcba9876543210fedcba9876543210fedcba98".into()),
            }),
            result: Some(serde_json::json!({
                "score": 5,
                "decision": "request_changes",
                "decision_reason": "A crash on empty input.",
                "summary": "Adds a parser.",
                "findings": [
                    {"severity": "major", "file": "src/a.rs", "start_line": 3, "end_line": 9,
                     "title": "Panics on empty input"},
                    {"severity": "suggestion", "file": null, "start_line": null,
                     "end_line": null, "title": "Add docs"},
                    {"severity": "minor", "file": null, "start_line": null, "end_line": null,
                     "title": "Leaks a handle", "raised_by": ["reviewer-1", "reviewer-2"],
                     "grounding": {"status": "unlocated", "reported":
                        {"file": "src/gone.rs", "start_line": 4, "end_line": 4}}}
                ]
            })),
            stages: vec![],
            events: vec![],
            coverage: Coverage {
                files_total: 2,
                files_reviewed: vec!["src/a.rs".into()],
                files_not_reviewed: vec![NotReviewed {
                    path: "big.bin".into(),
                    reason: "binary".into(),
                    kind: None,
                }],
                shards_failed: Vec::new(),
            },
            timings: Timings::default(),
            usage: Default::default(),
            cost_usd: None,
        };
        assert_eq!(
            summary(&doc),
            "Task t-1: completed (multi)\n\
             Revisions: main (fedcba987654)..feature (0123456789ab)\n\
             Score: 5/10\n\
             Decision: request_changes — A crash on empty input.\n\
             Summary: Adds a parser.\n\
             Findings: 3\n  \
             [major] src/a.rs:3-9 Panics on empty input\n  \
             [suggestion] (general) Add docs\n  \
             [minor] (not found in the repository: src/gone.rs:4) Leaks a handle (raised by reviewer-1, reviewer-2)\n\
             Not reviewed: big.bin (binary)\n"
        );
        let mut published = doc;
        published.github = Some(verdict_api::submission::GitHubSource {
            item: verdict_proto::publication::ItemRef {
                repo: verdict_proto::publication::RepoId {
                    owner: "acme".into(),
                    name: "shop".into(),
                },
                number: 7,
            },
            head_sha: None,
            publish: true,
        });
        let mut record = verdict_api::document::PublicationRecord::pending();
        record.state = PublicationState::Published;
        record.url = Some("https://github.com/acme/shop/pull/7#pullrequestreview-1".into());
        published.publication = Some(record.clone());
        assert!(summary(&published).ends_with(
            "Published to acme/shop#7: https://github.com/acme/shop/pull/7#pullrequestreview-1\n"
        ));
        record.state = PublicationState::Stale;
        record.url = None;
        record.detail = Some("the head moved".into());
        published.publication = Some(record);
        assert!(
            summary(&published).ends_with("Publication to acme/shop#7: stale — the head moved\n")
        );
    }
}
