//! The task record: everything the scheduler keeps about one task, stored as one versioned
//! document so that every change is a compare-and-set (several scheduler replicas never
//! double-advance a task).

use std::collections::BTreeMap;
use verdict_api::document::PublicationRecord;

use serde::{Deserialize, Serialize};
use verdict_proto::Language;
use verdict_proto::outcome::{FailureKind, StageOutcome};
use verdict_proto::redact::redact_urls;
use verdict_proto::wire::{
    InputRef, Priority, ProgressEvent, RepositoryRef, StageKind, StageRequest, Usage,
};

use verdict_api::document::{
    Coverage, RepositoryView, StageView, TaskDocument, TaskKind, TaskState, Timings,
};
use verdict_api::submission::IssueInput;

/// Which pipeline a task runs (SPEC S1–S4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PipelineKind {
    /// S1: triage → summary → reviewers → validator → result.
    Multi,
    /// S2: one agentic review stage producing P1.
    Single,
    /// S3.
    IssueAnalysis,
    /// S4.
    Scan,
}

impl PipelineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PipelineKind::Multi => "multi",
            PipelineKind::Single => "single",
            PipelineKind::IssueAnalysis => "issue-analysis",
            PipelineKind::Scan => "scan",
        }
    }

    pub fn task_kind(self) -> TaskKind {
        match self {
            PipelineKind::Multi | PipelineKind::Single => TaskKind::Review,
            PipelineKind::IssueAnalysis => TaskKind::IssueAnalysis,
            PipelineKind::Scan => TaskKind::Scan,
        }
    }
}

/// Where one stage is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageStatus {
    /// Planned and written to the record, not yet confirmed as published (the outbox: a
    /// sweeper republishes stages left here by a crash).
    Planned,
    /// Published to the broker.
    Dispatched,
    /// Its result is recorded.
    Done,
}

/// One stage of a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageRecord {
    pub id: String,
    pub kind: StageKind,
    pub required: bool,
    pub status: StageStatus,
    /// The request as published (kept so it can be republished identically).
    pub request: StageRequest,
    #[serde(default)]
    pub outcome: Option<StageOutcome>,
    #[serde(default)]
    pub attempts: u32,
    #[serde(default)]
    pub usage: Usage,
    /// The model that answered, from the stage's result (when the worker said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default)]
    pub planned_unix_ms: u64,
    /// When it was last published (the sweeper publishes a stage again that was published long
    /// ago and has neither a result nor a live claim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatched_unix_ms: Option<u64>,
    #[serde(default)]
    pub finished_unix_ms: Option<u64>,
}

/// The material a task's stages are built from.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TaskInputs {
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub body: Option<String>,
    /// Per-file pieces of the diff, for sharding reviewers.
    #[serde(default)]
    pub diff_files: Vec<DiffFile>,
    #[serde(default)]
    pub issue: Option<IssueInput>,
    /// One line per changed file with its added/removed line counts: what triage looks at.
    #[serde(default)]
    pub diffstat: Option<String>,
    /// A scan's shards, as intake packed them (one scan stage each); `None` for a scan whose
    /// files were never listed (one stage over the whole repository).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan_shards: Option<Vec<crate::scan_shards::ScanShard>>,
}

/// One file's part of the review diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffFile {
    pub path: String,
    pub bytes: usize,
    /// The file's diff text, stored by hash.
    pub input: InputRef,
    /// Why this file is not sent to reviewers, if it is not.
    #[serde(default)]
    pub excluded: Option<String>,
}

/// The revisions as the request gave them, kept when intake resolves them to commits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GivenRevisions {
    /// A review's head, a scan's or an issue analysis's revision.
    pub head: String,
    /// A review's base.
    #[serde(default)]
    pub base: Option<String>,
}

/// The task as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub id: String,
    pub pipeline: PipelineKind,
    pub state: TaskState,
    #[serde(default)]
    pub reason: Option<String>,
    /// Why the task could not run, classified; set with `reason` when intake or a stage's
    /// execution failure ends it.
    #[serde(default)]
    pub failure_kind: Option<FailureKind>,
    pub language: Language,
    pub priority: Priority,
    /// The repository as given until intake, then with its revisions resolved to full commit
    /// ids (what every stage works on).
    #[serde(default)]
    pub repository: Option<RepositoryRef>,
    /// The revisions as given, set by intake when it resolves `repository`; `None` before.
    #[serde(default)]
    pub revisions: Option<GivenRevisions>,
    pub inputs: TaskInputs,
    pub settings: crate::pipeline::PipelineSettings,
    pub stages: Vec<StageRecord>,
    #[serde(default)]
    pub result: Option<serde_json::Value>,
    #[serde(default)]
    pub coverage: Coverage,
    pub created_unix_ms: u64,
    /// When the intake that owns this queued task started (its submission, or a sweeper's
    /// takeover): the intake ends by this time plus its timeout, so only an older one is a crashed
    /// replica's to take over. `None`: no intake owns it (given back by a stopping replica).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intake_started_unix_ms: Option<u64>,
    /// The scheduler replica whose intake owns this queued task: while that replica's heartbeat
    /// lease runs, no other replica takes the intake over, however slow it is. `None` on records
    /// written before replicas beat (their intakes are judged by age alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intake_owner: Option<String>,
    #[serde(default)]
    pub started_unix_ms: Option<u64>,
    #[serde(default)]
    pub finished_unix_ms: Option<u64>,
    pub deadline_unix_ms: u64,
    /// Triage fell back to "review" (S5).
    #[serde(default)]
    pub triage_fallback: bool,
    /// The GitHub pull request or issue the task is about, and whether to publish to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub github: Option<verdict_api::submission::GitHubSource>,
    /// The task span's W3C trace context (`traceparent`, `tracestate`), kept so every later span
    /// of the task — intake, stages in workers, publication — joins one trace (SPEC O2). Empty
    /// when tracing export is off.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub trace: BTreeMap<String, String>,
    /// Publishing the outcome to the pull request or issue: set when a task to publish ends, in
    /// the same write (so a crash cannot lose it), and kept until publication settles.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publication: Option<PublicationRecord>,
    /// The budget reservation intake made for the task (SPEC X5), settled when it ends; `None`
    /// when its organisation has no budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::budget::BudgetHold>,
    /// The organisation the task spends for, when its submitter named it (a scan batch's);
    /// otherwise its pull request's or issue's owner, else its repository URL's owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organisation: Option<String>,
}

impl TaskRecord {
    /// The queued task's intake is `replica`'s from `now` (at submission, or a takeover).
    pub fn own_intake(&mut self, replica: &str, now: u64) {
        self.intake_started_unix_ms = Some(now);
        self.intake_owner = Some(replica.to_owned());
    }

    /// No intake owns the queued task (given back by a stopping replica).
    pub fn disown_intake(&mut self) {
        self.intake_started_unix_ms = None;
        self.intake_owner = None;
    }

    pub fn stage(&self, id: &str) -> Option<&StageRecord> {
        self.stages.iter().find(|s| s.id == id)
    }

    pub fn stage_mut(&mut self, id: &str) -> Option<&mut StageRecord> {
        self.stages.iter_mut().find(|s| s.id == id)
    }

    pub fn usage(&self) -> Usage {
        self.stages.iter().fold(Usage::default(), |acc, s| Usage {
            calls: acc.calls + s.usage.calls,
            input_tokens: acc.input_tokens + s.usage.input_tokens,
            output_tokens: acc.output_tokens + s.usage.output_tokens,
        })
    }

    /// The public document, with the given events.
    pub fn document(&self, events: Vec<ProgressEvent>) -> TaskDocument {
        TaskDocument {
            id: self.id.clone(),
            kind: self.pipeline.task_kind(),
            pipeline: self.pipeline.as_str().to_owned(),
            state: self.state,
            reason: self.reason.clone(),
            failure_kind: self.failure_kind,
            repository: self.repository_view(),
            github: self.github.clone(),
            publication: self.publication.clone(),
            trace_id: verdict_proto::wire::trace_id(&self.trace),
            result: self.result.clone(),
            stages: self.stages.iter().map(stage_view).collect(),
            events,
            coverage: self.coverage.clone(),
            timings: Timings {
                created_unix_ms: self.created_unix_ms,
                started_unix_ms: self.started_unix_ms,
                finished_unix_ms: self.finished_unix_ms,
                deadline_unix_ms: self.deadline_unix_ms,
            },
            usage: self.usage(),
            cost_usd: None,
        }
    }
}

impl TaskRecord {
    /// The repository as the document shows it: given revisions and, once intake resolved them,
    /// their commits.
    fn repository_view(&self) -> Option<RepositoryView> {
        let repo = self.repository.as_ref()?;
        let url = redact_urls(&repo.url);
        Some(match &self.revisions {
            Some(given) => RepositoryView {
                url,
                revision: given.head.clone(),
                commit: Some(repo.commit.clone()),
                base_revision: given.base.clone(),
                base: repo.base.clone(),
            },
            None => RepositoryView {
                url,
                revision: repo.commit.clone(),
                commit: None,
                base_revision: repo.base.clone(),
                base: None,
            },
        })
    }
}

fn stage_view(s: &StageRecord) -> StageView {
    StageView {
        id: s.id.clone(),
        stage: s.kind,
        required: s.required,
        status: match s.status {
            StageStatus::Planned => "pending",
            StageStatus::Dispatched => "running",
            StageStatus::Done => "done",
        }
        .to_owned(),
        outcome: s.outcome.as_ref().map(|o| o.label().to_owned()),
        failure_kind: s.outcome.as_ref().and_then(StageOutcome::failure_kind),
        detail: s.outcome.clone(),
        attempts: s.attempts,
        usage: s.usage,
        started_unix_ms: Some(s.planned_unix_ms),
        finished_unix_ms: s.finished_unix_ms,
    }
}
