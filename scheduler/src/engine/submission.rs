//! Submissions validated into new task records, without I/O: required fields, the pipeline name,
//! per-task overrides checked against their limits, and the configured defaults filled in. Every
//! rejection names the field and the fix.

use std::time::Duration;

use rand::RngExt;
use verdict_proto::Language;
use verdict_proto::wire::{EventType, Priority, RepositoryRef};

use super::SchedulerSettings;
use crate::document::TaskState;
use crate::pipeline::{self, Draft, PipelineSettings};
use crate::service::{
    IssueAnalysisSubmission, ReviewSubmission, ScanSubmission, ServiceError, SubmissionOptions,
};
use crate::task::{PipelineKind, TaskInputs, TaskRecord};

/// The configured defaults a submission may override.
#[derive(Debug, Clone)]
pub(super) struct TaskDefaults {
    /// Copied into every task (a configuration snapshot).
    pipeline: PipelineSettings,
    language: Language,
    review_timeout: Duration,
}

/// What a submission decides before the options and defaults are applied.
struct Shape {
    pipeline: PipelineKind,
    repository: Option<RepositoryRef>,
    inputs: TaskInputs,
    /// The priority unless the options name one.
    priority: Priority,
}

impl TaskDefaults {
    pub fn new(settings: &SchedulerSettings) -> TaskDefaults {
        TaskDefaults {
            pipeline: settings.pipeline.clone(),
            language: settings.language,
            review_timeout: settings.review_timeout,
        }
    }

    /// A review task (S1 or S2) submitted at `now`.
    pub fn review(&self, s: ReviewSubmission, now: u64) -> Result<TaskRecord, ServiceError> {
        required("repository", &s.repository)?;
        required("base", &s.base)?;
        required("head", &s.head)?;
        let pipeline = match s.pipeline.as_deref() {
            None | Some("multi") => PipelineKind::Multi,
            Some("single") => PipelineKind::Single,
            Some(other) => {
                return Err(ServiceError::Invalid(format!(
                    "pipeline `{other}` is unknown; use `multi` (staged review) or `single` (one agentic review)"
                )));
            }
        };
        let shape = Shape {
            pipeline,
            repository: Some(RepositoryRef {
                url: s.repository,
                commit: s.head,
                base: Some(s.base),
            }),
            inputs: TaskInputs {
                title: s.title,
                body: s.body,
                ..TaskInputs::default()
            },
            priority: Priority::Interactive,
        };
        self.record(shape, &s.options, now)
    }

    /// An issue analysis task (S3) submitted at `now`.
    pub fn issue_analysis(
        &self,
        s: IssueAnalysisSubmission,
        now: u64,
    ) -> Result<TaskRecord, ServiceError> {
        required("issue.title", &s.issue.title)?;
        let repository = s.repository.map(|url| RepositoryRef {
            url,
            commit: s.revision.clone().unwrap_or_else(|| "HEAD".to_owned()),
            base: None,
        });
        if let Some(r) = &repository
            && r.commit == "HEAD"
        {
            return Err(ServiceError::Invalid(
                "revision is required with repository (a commit, branch or tag)".into(),
            ));
        }
        let shape = Shape {
            pipeline: PipelineKind::IssueAnalysis,
            repository,
            inputs: TaskInputs {
                issue: Some(s.issue),
                ..TaskInputs::default()
            },
            priority: Priority::Interactive,
        };
        let mut task = self.record(shape, &s.options, now)?;
        if let Some(c) = s.categories {
            if c.is_empty() || c.iter().any(|x| x.trim().is_empty()) {
                return Err(ServiceError::Invalid(
                    "categories must be non-empty names".into(),
                ));
            }
            task.settings.issue_categories = Some(c);
        }
        Ok(task)
    }

    /// A repository scan task (S4) submitted at `now`.
    pub fn scan(&self, s: ScanSubmission, now: u64) -> Result<TaskRecord, ServiceError> {
        required("repository", &s.repository)?;
        required("revision", &s.revision)?;
        let shape = Shape {
            pipeline: PipelineKind::Scan,
            repository: Some(RepositoryRef {
                url: s.repository,
                commit: s.revision,
                base: None,
            }),
            inputs: TaskInputs::default(),
            priority: Priority::Bulk,
        };
        self.record(shape, &s.options, now)
    }

    /// A new queued record of `shape` with `options` applied over the defaults.
    fn record(
        &self,
        shape: Shape,
        options: &SubmissionOptions,
        now: u64,
    ) -> Result<TaskRecord, ServiceError> {
        let language = match options.language.as_deref() {
            Some(l) => Language::normalise(l),
            None => self.language,
        };
        let timeout = options
            .timeout_seconds
            .map(Duration::from_secs)
            .unwrap_or(self.review_timeout);
        if timeout.is_zero() {
            return Err(ServiceError::Invalid(
                "options.timeout_seconds must be greater than 0".into(),
            ));
        }
        let mut settings = self.pipeline.clone();
        if let Some(n) = options.reviewers {
            if n == 0 || usize::from(n) > pipeline::MAX_REVIEWERS {
                return Err(ServiceError::Invalid(format!(
                    "options.reviewers must be between 1 and {}",
                    pipeline::MAX_REVIEWERS
                )));
            }
            settings.reviewers = n;
        }
        Ok(TaskRecord {
            id: new_id(),
            pipeline: shape.pipeline,
            state: TaskState::Queued,
            reason: None,
            language,
            priority: options.priority.unwrap_or(shape.priority),
            repository: shape.repository,
            inputs: shape.inputs,
            settings,
            stages: Vec::new(),
            result: None,
            coverage: Default::default(),
            created_unix_ms: now,
            started_unix_ms: None,
            finished_unix_ms: None,
            deadline_unix_ms: now
                .saturating_add(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
            triage_fallback: false,
        })
    }
}

/// The event that opens every task's stream.
pub(super) fn queued_event(task: &TaskRecord) -> Draft {
    Draft {
        kind: EventType::TaskQueued,
        stage_id: None,
        message: task
            .language
            .pick("Task queued.", "任务已排队。")
            .to_owned(),
        data: serde_json::json!({"pipeline": task.pipeline.as_str()}),
    }
}

/// A random task id (UUID v4 text form).
pub fn new_id() -> String {
    let b: [u8; 16] = rand::rng().random();
    let mut b = b;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn required(field: &str, value: &str) -> Result<(), ServiceError> {
    if value.trim().is_empty() {
        Err(ServiceError::Invalid(format!(
            "{field} is required and must not be empty"
        )))
    } else {
        Ok(())
    }
}
