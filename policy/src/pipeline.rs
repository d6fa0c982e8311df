//! The pipelines and their degradation policy as a pure state machine (SPEC S1–S7): given a task
//! record and what just happened (start, a stage result, a cancellation), update the record and
//! say which stages to dispatch and which progress events to emit. No I/O, so every rule is unit
//! tested; the engine does the storing and publishing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use verdict_proto::contracts::summary::Summary;
use verdict_proto::contracts::triage::{TRIAGE_FALLBACK_REASON, Triage};
use verdict_proto::contracts::validator::ValidatorReport;
use verdict_proto::issue_analysis::IssueAnalysis;
use verdict_proto::outcome::{FailureKind, StageOutcome};
use verdict_proto::review::Review;
use verdict_proto::wire::{
    EventType, EvidenceCut, InputContent, InputRef, RepairPolicy, StageKind, StageRequest,
    StageResult, Tool, WIRE_VERSION, input_name,
};
use verdict_proto::{Language, ValidateOptions};

use crate::merge;
use crate::result::{self, Candidate, ReviewResult, ReviewerAnswer};
use crate::task::{PipelineKind, StageRecord, StageStatus, TaskRecord};
use verdict_api::document::TaskState;

/// How one stage kind runs, copied into the task at submission (a configuration snapshot: a
/// config change never alters a running task).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageSettings {
    /// `None`: the workers' default provider.
    pub provider: Option<String>,
    pub model: Option<String>,
    pub tools: Vec<Tool>,
    pub repair: RepairPolicy,
    /// Overrides the provider's `structured_output` (`None`: the provider's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<verdict_proto::structured::StructuredOutput>,
}

/// The pipeline-shaping part of the configuration, per task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PipelineSettings {
    /// Run the optional triage stage first (S1).
    pub triage: bool,
    /// Reviewers for a multi-stage review (at least this many when the diff allows).
    pub reviewers: u8,
    pub max_diff_bytes_per_reviewer: usize,
    pub max_diff_bytes: usize,
    pub stages: BTreeMap<StageKind, StageSettings>,
    #[serde(default)]
    pub issue_categories: Option<Vec<String>>,
    /// Globs of changed files a review leaves out (listed as not reviewed, with the pattern).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore_paths: Vec<String>,
    /// How a scan shards its repository (`[scan]`).
    #[serde(default)]
    pub scan: crate::scan_shards::ScanSettings,
}

/// A progress event to emit, before the engine stamps it with task id and time.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    pub kind: EventType,
    pub stage_id: Option<String>,
    pub message: String,
    pub data: Value,
}

/// What the engine must do after a transition: emit these events (in order), then publish the
/// stages now [`StageStatus::Planned`], and count the findings merged.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Effects {
    pub events: Vec<Draft>,
    pub planned: Vec<String>,
    pub merged: Vec<MergedFindings>,
}

/// Findings of one stage merged into another finding (`verdict_findings_merged_total`): each is
/// counted against the stage that raised it and the model that answered there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergedFindings {
    pub stage: StageKind,
    /// The model from the stage's result; `unknown` when the worker did not say.
    pub model: String,
    pub findings: u64,
}

/// The metric label of a stage's model when its result did not name one.
pub const UNKNOWN_MODEL: &str = "unknown";

impl Effects {
    /// `next`'s effects after these.
    pub fn then(&mut self, next: Effects) {
        self.events.extend(next.events);
        for stage in next.planned {
            if !self.planned.contains(&stage) {
                self.planned.push(stage);
            }
        }
        self.merged.extend(next.merged);
    }

    fn event(&mut self, kind: EventType, stage_id: Option<&str>, message: String, data: Value) {
        self.events.push(Draft {
            kind,
            stage_id: stage_id.map(str::to_owned),
            message,
            data,
        });
    }
}

/// The most reviewers a diff is split across, whatever the configuration says.
pub const MAX_REVIEWERS: usize = 16;

/// Starts a queued task: plans its first stage(s).
pub fn start(task: &mut TaskRecord, now: u64) -> Effects {
    let mut fx = Effects::default();
    if task.state != TaskState::Queued {
        return fx;
    }
    task.state = TaskState::Running;
    task.started_unix_ms = Some(now);
    let lang = task.language;
    fx.event(
        EventType::TaskStarted,
        None,
        lang.pick(
            match task.pipeline {
                PipelineKind::Multi => "Multi-stage review started.",
                PipelineKind::Single => "Single-pass review started.",
                PipelineKind::IssueAnalysis => "Issue analysis started.",
                PipelineKind::Scan => "Repository scan started.",
            },
            match task.pipeline {
                PipelineKind::Multi => "多阶段评审已开始。",
                PipelineKind::Single => "单轮评审已开始。",
                PipelineKind::IssueAnalysis => "议题分析已开始。",
                PipelineKind::Scan => "仓库扫描已开始。",
            },
        )
        .to_owned(),
        json!({"pipeline": task.pipeline.as_str()}),
    );
    let files = &task.inputs.diff_files;
    let reviewing = matches!(task.pipeline, PipelineKind::Multi | PipelineKind::Single);
    if reviewing && !files.is_empty() && files.iter().all(crate::ignore::is_ignored) {
        // Nothing the configuration wants reviewed: no model is asked.
        let reason = lang
            .pick(
                "every changed file matches pipeline.ignore_paths",
                "所有变更文件都匹配 pipeline.ignore_paths",
            )
            .to_owned();
        finish(task, TaskState::Skipped, reason, None, now, &mut fx);
        return fx;
    }
    match task.pipeline {
        PipelineKind::Multi if task.settings.triage => {
            plan(task, StageKind::Triage, "triage", false, now, &mut fx)
        }
        PipelineKind::Multi => plan(task, StageKind::Summary, "summary", true, now, &mut fx),
        PipelineKind::Single => plan(task, StageKind::Review, "review", true, now, &mut fx),
        PipelineKind::IssueAnalysis => plan(
            task,
            StageKind::IssueAnalysis,
            "issue-analysis",
            true,
            now,
            &mut fx,
        ),
        PipelineKind::Scan => plan_scan(task, now, &mut fx),
    }
    fx
}

/// A scan's stages: one per shard intake packed (SPEC S4), all at once; a scan whose files were
/// never listed gets one stage over the whole repository, and one with no file to scan is
/// skipped without asking a model.
fn plan_scan(task: &mut TaskRecord, now: u64, fx: &mut Effects) {
    let Some(shards) = task.inputs.scan_shards.clone() else {
        return plan(task, StageKind::Scan, "scan", true, now, fx);
    };
    if shards.is_empty() {
        let reason = task
            .language
            .pick(
                "no file to scan: every file of the repository was skipped (see the coverage)",
                "没有可扫描的文件：仓库的所有文件都被跳过（见覆盖范围）",
            )
            .to_owned();
        return finish(task, TaskState::Skipped, reason, None, now, fx);
    }
    let commit = task
        .repository
        .as_ref()
        .map(|r| r.commit.clone())
        .unwrap_or_default();
    let count = shards.len();
    for (k, shard) in shards.iter().enumerate() {
        let id = crate::scan_shards::stage_id(k, count);
        let mut text = if count == 1 {
            format!(
                "Scan the repository at commit {commit} using the tools. These are the files to scan ({} files); report findings in them only, and read other files only for context:\n",
                shard.files.len()
            )
        } else {
            format!(
                "Scan part {} of {count} of the repository at commit {commit} using the tools. Other scans cover the other parts. These are this part's files ({} files); report findings in them only, and read other files only for context:\n",
                k + 1,
                shard.files.len()
            )
        };
        for path in &shard.files {
            text.push_str(path);
            text.push('\n');
        }
        let inputs = vec![inline("scan request", text)];
        plan_with(task, StageKind::Scan, &id, true, inputs, now, fx);
    }
}

/// Ends a task that could not even start (repository unreachable, bad revision): `incomplete`,
/// with the failure's kind.
pub fn fail_intake(task: &mut TaskRecord, reason: String, kind: FailureKind, now: u64) -> Effects {
    let mut fx = Effects::default();
    if task.state.is_terminal() {
        return fx;
    }
    task.failure_kind = Some(kind);
    finish(task, TaskState::Incomplete, reason, None, now, &mut fx);
    fx
}

/// Cancels a task: `aborted` at once; late stage results are ignored and nothing is published.
pub fn cancel(task: &mut TaskRecord, reason: &str, now: u64) -> Effects {
    let mut fx = Effects::default();
    if task.state.is_terminal() {
        return fx;
    }
    finish(
        task,
        TaskState::Aborted,
        reason.to_owned(),
        None,
        now,
        &mut fx,
    );
    fx
}

/// Applies one stage result.
pub fn on_result(task: &mut TaskRecord, result: &StageResult, now: u64) -> Effects {
    let mut fx = Effects::default();
    if task.state.is_terminal() {
        return fx;
    }
    let Some(stage) = task.stage_mut(&result.stage_id) else {
        return fx;
    };
    if stage.status == StageStatus::Done {
        // A duplicate delivery of a result already applied.
        return fx;
    }
    stage.status = StageStatus::Done;
    stage.outcome = Some(result.outcome.clone());
    stage.attempts = stage.attempts.max(result.attempt);
    stage.usage = result.usage;
    stage.model = result.model.clone();
    stage.finished_unix_ms = Some(now);
    let (kind, id) = (stage.kind, stage.id.clone());
    fx.event(
        EventType::StageFinished,
        Some(&id),
        finished_message(&id, &result.outcome, task.language),
        json!({"outcome": result.outcome.label(), "kind": result.outcome.failure_kind()}),
    );
    if let Some(cut) = &result.evidence_cut
        && matches!(
            kind,
            StageKind::Review | StageKind::Reviewer | StageKind::Scan
        )
    {
        note_evidence_cut(task, &id, cut);
    }

    // Execution failures fail closed, whatever the stage (E4): cancelled → aborted, anything
    // else → incomplete. Only invalid output may degrade, and only where the pipeline allows.
    if let StageOutcome::ExecutionFailure {
        kind: failure,
        message,
        ..
    } = &result.outcome
    {
        task.failure_kind = Some(*failure);
        let (state, reason) = if *failure == FailureKind::Cancelled {
            (TaskState::Aborted, format!("stage {id} was cancelled"))
        } else {
            (
                TaskState::Incomplete,
                format!("stage {id} could not run ({failure}): {message}"),
            )
        };
        finish(task, state, reason, None, now, &mut fx);
        return fx;
    }

    match (task.pipeline, kind) {
        (PipelineKind::Multi, StageKind::Triage) => {
            after_triage(task, &result.outcome, now, &mut fx)
        }
        (PipelineKind::Multi, StageKind::Summary) => {
            after_summary(task, &result.outcome, now, &mut fx)
        }
        (PipelineKind::Multi, StageKind::Reviewer) => {
            after_reviewer(task, &result.outcome, now, &mut fx)
        }
        (PipelineKind::Multi, StageKind::Validator) => {
            after_validator(task, &result.outcome, now, &mut fx)
        }
        (PipelineKind::Single, StageKind::Review) => {
            after_review(task, &result.outcome, now, &mut fx)
        }
        (PipelineKind::IssueAnalysis, StageKind::IssueAnalysis) => {
            after_issue_analysis(task, &result.outcome, now, &mut fx)
        }
        (PipelineKind::Scan, StageKind::Scan) => after_scan(task, &result.outcome, now, &mut fx),
        _ => {
            let reason = format!(
                "stage {id} ({}) does not belong to a {} pipeline",
                kind.as_str(),
                task.pipeline.as_str()
            );
            finish(task, TaskState::Incomplete, reason, None, now, &mut fx);
        }
    }
    fx
}

fn after_triage(task: &mut TaskRecord, outcome: &StageOutcome, now: u64, fx: &mut Effects) {
    let triage = match outcome {
        StageOutcome::Ok { value, .. } => serde_json::from_value::<Triage>(value.clone()).ok(),
        _ => None,
    };
    match triage {
        Some(t) if !t.review => {
            let reason = t.reason.as_str().to_owned();
            let result = json!({"skipped": true, "reason": reason});
            finish(
                task,
                TaskState::Skipped,
                format!("triage: {reason}"),
                Some(result),
                now,
                fx,
            );
        }
        Some(_) => plan(task, StageKind::Summary, "summary", true, now, fx),
        None => {
            // S5: triage is only an optimisation; its invalid output means "review".
            task.triage_fallback = true;
            fx.event(
                EventType::TriageFallback,
                Some("triage"),
                TRIAGE_FALLBACK_REASON.to_owned(),
                json!({"review": true, "reason": TRIAGE_FALLBACK_REASON}),
            );
            plan(task, StageKind::Summary, "summary", true, now, fx);
        }
    }
}

fn after_summary(task: &mut TaskRecord, outcome: &StageOutcome, now: u64, fx: &mut Effects) {
    let StageOutcome::Ok { value, .. } = outcome else {
        return required_invalid(task, "summary", now, fx);
    };
    let summary_json = value.to_string();
    let included: Vec<usize> = (0..task.inputs.diff_files.len())
        .filter(|&i| task.inputs.diff_files[i].excluded.is_none())
        .collect();
    if included.is_empty() {
        // Nothing reviewable (only binary or excluded files): an honest empty review.
        let summary = summary_text(value);
        let r = result::assemble(&[], None, &summary, task.language, task.triage_fallback);
        complete_review(task, r, now, fx);
        return;
    }
    let shards = shard(task, &included);
    for (k, files) in shards.iter().enumerate() {
        let id = format!("reviewer-{}", k + 1);
        let mut inputs = base_inputs(task);
        inputs.push(inline(
            "summary (from the summary stage)",
            summary_json.clone(),
        ));
        inputs.extend(files.iter().map(|&i| file_input(task, i)));
        plan_with(task, StageKind::Reviewer, &id, true, inputs, now, fx);
    }
}

fn after_reviewer(task: &mut TaskRecord, outcome: &StageOutcome, now: u64, fx: &mut Effects) {
    if !matches!(outcome, StageOutcome::Ok { .. }) {
        return required_invalid(task, "reviewer", now, fx);
    }
    let reviewers: Vec<&StageRecord> = task
        .stages
        .iter()
        .filter(|s| s.kind == StageKind::Reviewer)
        .collect();
    if reviewers.iter().any(|s| s.status != StageStatus::Done) {
        return;
    }
    let merged = result::merge_candidates(&reviewer_answers(task));
    for (stage, findings) in &merged.absorbed {
        count_merged(task, stage, *findings, fx);
    }
    let candidates = merged.candidates;
    let summary = summary_of(task);
    if candidates.is_empty() {
        let r = result::assemble(&[], None, &summary, task.language, task.triage_fallback);
        complete_review(task, r, now, fx);
        return;
    }
    let mut inputs = base_inputs(task);
    inputs.push(inline(
        "summary (from the summary stage)",
        summary_json_of(task),
    ));
    inputs.push(inline(
        input_name::CANDIDATES,
        serde_json::to_string_pretty(&candidates).unwrap_or_default(),
    ));
    let mentioned: Vec<usize> = (0..task.inputs.diff_files.len())
        .filter(|&i| {
            let f = &task.inputs.diff_files[i];
            f.excluded.is_none()
                && candidates
                    .iter()
                    .any(|c| c.finding.file.as_deref() == Some(f.path.as_str()))
        })
        .collect();
    inputs.extend(mentioned.iter().map(|&i| file_input(task, i)));
    plan_with(
        task,
        StageKind::Validator,
        "validator",
        true,
        inputs,
        now,
        fx,
    );
}

fn after_validator(task: &mut TaskRecord, outcome: &StageOutcome, now: u64, fx: &mut Effects) {
    let StageOutcome::Ok { value, .. } = outcome else {
        return required_invalid(task, "validator", now, fx);
    };
    let Ok(report) = serde_json::from_value::<ValidatorReport>(value.clone()) else {
        return required_invalid(task, "validator", now, fx);
    };
    // The same merge as when the validator was planned, so its verdicts name these ids.
    let candidates: Vec<Candidate> = result::candidates(&reviewer_answers(task));
    let (missing, unknown) = result::verdict_coverage(&candidates, &report);
    if !missing.is_empty() || !unknown.is_empty() {
        fx.event(
            EventType::StageFinished,
            Some("validator"),
            format!(
                "The validator left {} candidate(s) unanswered (kept as reported) and named {} unknown id(s) (ignored).",
                missing.len(),
                unknown.len()
            ),
            json!({"missing": missing, "unknown": unknown}),
        );
    }
    let summary = summary_of(task);
    let r = result::assemble(
        &candidates,
        Some(&report),
        &summary,
        task.language,
        task.triage_fallback,
    );
    complete_review(task, r, now, fx);
}

fn after_review(task: &mut TaskRecord, outcome: &StageOutcome, now: u64, fx: &mut Effects) {
    match outcome {
        StageOutcome::Ok { value, .. } => {
            // The notes first: `Review` would silently drop them.
            let mut value = value.clone();
            let notes = verdict_proto::grounding::take_notes(&mut value);
            read_review(task, value, notes, now, fx)
        }
        StageOutcome::InvalidOutput {
            attempts, error, ..
        } => {
            // S7: a neutral comment, no score, no findings — explained, never an approval.
            let r = ReviewResult::degraded(task.language, *attempts);
            degrade(
                task,
                serde_json::to_value(&r).unwrap_or(Value::Null),
                error,
                now,
                fx,
            );
        }
        StageOutcome::ExecutionFailure { .. } => {}
    }
}

fn read_review(
    task: &mut TaskRecord,
    value: Value,
    notes: Vec<Option<verdict_proto::grounding::LocationNote>>,
    now: u64,
    fx: &mut Effects,
) {
    match serde_json::from_value::<Review>(value) {
        Ok(review) => {
            let answered = review.findings.len();
            let r = ReviewResult::from_review(review, notes, task.triage_fallback);
            let merged = answered.saturating_sub(r.findings.len());
            count_merged(task, "review", merged, fx);
            complete_review(task, r, now, fx);
        }
        Err(e) => finish(
            task,
            TaskState::Incomplete,
            format!("the review value could not be read: {e}"),
            None,
            now,
            fx,
        ),
    }
}

/// Records that `findings` of stage `stage_id` were merged into another finding.
fn count_merged(task: &TaskRecord, stage_id: &str, findings: usize, fx: &mut Effects) {
    let Some(stage) = task.stage(stage_id) else {
        return;
    };
    if findings == 0 {
        return;
    }
    fx.merged.push(MergedFindings {
        stage: stage.kind,
        model: stage
            .model
            .clone()
            .unwrap_or_else(|| UNKNOWN_MODEL.to_owned()),
        findings: u64::try_from(findings).unwrap_or(u64::MAX),
    });
}

fn after_issue_analysis(task: &mut TaskRecord, outcome: &StageOutcome, now: u64, fx: &mut Effects) {
    match outcome {
        StageOutcome::Ok { value, .. } => {
            let mut v = value.clone();
            mark(&mut v, false);
            finish(
                task,
                TaskState::Completed,
                "issue analysed".to_owned(),
                Some(v),
                now,
                fx,
            );
        }
        StageOutcome::InvalidOutput { error, .. } => {
            // SPEC 2a: category other, priority medium, "cannot be assessed", empty lists.
            let mut v =
                serde_json::to_value(IssueAnalysis::degraded(task.language)).unwrap_or(Value::Null);
            mark(&mut v, true);
            degrade(task, v, error, now, fx);
        }
        StageOutcome::ExecutionFailure { .. } => {}
    }
}

fn after_scan(task: &mut TaskRecord, outcome: &StageOutcome, now: u64, fx: &mut Effects) {
    if task.inputs.scan_shards.is_some() {
        return after_scan_shard(task, now, fx);
    }
    match outcome {
        StageOutcome::Ok { value, .. } => {
            // Passed through as the scan wrote it (with its grounding notes), minus repeats.
            let mut v = value.clone();
            let merged = merge::dedupe_value(&mut v);
            count_merged(task, "scan", merged, fx);
            mark(&mut v, false);
            finish(
                task,
                TaskState::Completed,
                "repository scanned".to_owned(),
                Some(v),
                now,
                fx,
            );
        }
        StageOutcome::InvalidOutput { error, .. } => {
            // SPEC 2a: no score, no findings.
            let summary = task.language.pick(
                "The scan could not produce a result in the required format, so no score and no findings are given.",
                "扫描未能按要求的格式给出结果，因此不给出评分和问题列表。",
            );
            let v = json!({"overall_score": null, "summary": summary, "findings": [], "degraded": true});
            degrade(task, v, error, now, fx);
        }
        StageOutcome::ExecutionFailure { .. } => {}
    }
}

/// Once every shard has answered: the valid answers merged (`scan_merge`). Shards whose answer
/// never followed the protocol leave their files listed as not scanned, and the result says how
/// many; when no shard answered validly the scan degrades (SPEC 2a: no score, no findings).
fn after_scan_shard(task: &mut TaskRecord, now: u64, fx: &mut Effects) {
    let shards = task.inputs.scan_shards.clone().unwrap_or_default();
    let count = shards.len();
    let stages: Vec<(String, &crate::scan_shards::ScanShard)> = shards
        .iter()
        .enumerate()
        .map(|(k, s)| (crate::scan_shards::stage_id(k, count), s))
        .collect();
    let done = stages.iter().all(|(id, _)| {
        task.stage(id)
            .is_some_and(|s| s.status == StageStatus::Done)
    });
    if !done {
        return;
    }
    let mut answers = Vec::new();
    let mut failed: Vec<(String, &crate::scan_shards::ScanShard, String)> = Vec::new();
    for (id, shard) in &stages {
        match task.stage(id).and_then(|s| s.outcome.as_ref()) {
            Some(StageOutcome::Ok { value, .. }) => answers.push(crate::scan_merge::ShardAnswer {
                stage: id,
                files: shard.files.len(),
                tokens: shard.tokens,
                value,
            }),
            Some(StageOutcome::InvalidOutput { error, .. }) => failed.push((
                id.clone(),
                shard,
                verdict_proto::redact::safe_preview(error, 300),
            )),
            _ => failed.push((id.clone(), shard, "no answer".to_owned())),
        }
    }
    if answers.is_empty() {
        let error = failed
            .first()
            .map(|(_, _, e)| e.clone())
            .unwrap_or_default();
        let summary = task.language.pick(
            "The scan could not produce a result in the required format, so no score and no findings are given.",
            "扫描未能按要求的格式给出结果，因此不给出评分和问题列表。",
        );
        let v =
            json!({"overall_score": null, "summary": summary, "findings": [], "degraded": true});
        return degrade(task, v, &error, now, fx);
    }
    let merged = crate::scan_merge::merge(&answers);
    let first_ok = answers.first().map(|a| a.stage.to_owned());
    let mut value = merged.value;
    if let Some(stage) = first_ok {
        count_merged(task, &stage, merged.merged_findings, fx);
    }
    for (id, shard, error) in &failed {
        let reason = format!("not scanned: the answer of {id} never followed the scan protocol");
        task.coverage
            .files_reviewed
            .retain(|p| !shard.files.contains(p));
        for path in &shard.files {
            task.coverage
                .files_not_reviewed
                .push(verdict_api::document::NotReviewed::skipped(
                    path,
                    verdict_api::document::SkipReason::ShardFailed,
                    reason.clone(),
                ));
        }
        task.coverage
            .shards_failed
            .push(verdict_api::document::FailedShard {
                stage: id.clone(),
                files: shard.files.len(),
                reason: error.clone(),
            });
    }
    task.coverage
        .files_not_reviewed
        .sort_by(|a, b| a.path.cmp(&b.path));
    if let Some(o) = value.as_object_mut()
        && !failed.is_empty()
    {
        o.insert("shards_failed".to_owned(), json!(failed.len()));
    }
    mark(&mut value, false);
    let reason = if failed.is_empty() {
        "repository scanned".to_owned()
    } else {
        format!(
            "repository scanned; {} of {count} shards gave no valid answer and their files are listed as not scanned",
            failed.len()
        )
    };
    finish(task, TaskState::Completed, reason, Some(value), now, fx);
}

fn mark(value: &mut Value, degraded: bool) {
    if let Some(o) = value.as_object_mut() {
        o.insert("degraded".to_owned(), Value::Bool(degraded));
    }
}

/// S6: a required stage's invalid output makes the task incomplete; nothing is published.
fn required_invalid(task: &mut TaskRecord, what: &str, now: u64, fx: &mut Effects) {
    let reason = format!(
        "the {what} stage did not return output in its required format after every repair round; nothing is published"
    );
    finish(task, TaskState::Incomplete, reason, None, now, fx);
}

fn degrade(task: &mut TaskRecord, result: Value, error: &str, now: u64, fx: &mut Effects) {
    let lang = task.language;
    fx.event(
        EventType::Degraded,
        None,
        lang.pick(
            "The model's answer did not follow the required format after every repair round; the result is a safe non-decision.",
            "模型的回答在所有修复轮次后仍不符合要求的格式；结果为安全的“无结论”。",
        )
        .to_owned(),
        json!({"error": verdict_proto::redact::safe_preview(error, 500)}),
    );
    finish(
        task,
        TaskState::Degraded,
        "protocol repair exhausted; a safe non-decision was recorded".to_owned(),
        Some(result),
        now,
        fx,
    );
}

fn complete_review(task: &mut TaskRecord, r: ReviewResult, now: u64, fx: &mut Effects) {
    let reason = format!("review {}", r.decision.as_str());
    let v = serde_json::to_value(&r).unwrap_or(Value::Null);
    finish(task, TaskState::Completed, reason, Some(v), now, fx);
}

/// Moves the task to a terminal state with its result and the closing events.
fn finish(
    task: &mut TaskRecord,
    state: TaskState,
    reason: String,
    result: Option<Value>,
    now: u64,
    fx: &mut Effects,
) {
    task.state = state;
    task.reason = Some(reason.clone());
    task.result = result;
    task.finished_unix_ms = Some(now);
    // Stages still planned are never published after the end.
    fx.planned.clear();
    // Nor is any other stage published again, so their inputs (each the text a stage was shown,
    // also in its transcript) would only weigh on a record kept for days (issue 14).
    for stage in &mut task.stages {
        stage.request.inputs.clear();
    }
    // In the same write as the end, so a crash after it cannot lose the publication.
    if task.github.as_ref().is_some_and(|g| g.publish) && task.publication.is_none() {
        task.publication = Some(verdict_api::document::PublicationRecord::pending());
    }
    match state {
        TaskState::Incomplete => fx.event(
            EventType::Failed,
            None,
            format!("Task incomplete: {reason}."),
            json!({"reason": reason}),
        ),
        TaskState::Aborted => fx.event(
            EventType::Cancelled,
            None,
            format!("Task aborted: {reason}."),
            json!({"reason": reason}),
        ),
        _ => {}
    }
    fx.event(
        EventType::TaskFinished,
        None,
        format!("Task {}.", state.as_str()),
        json!({"state": state}),
    );
}

fn plan(
    task: &mut TaskRecord,
    kind: StageKind,
    id: &str,
    required: bool,
    now: u64,
    fx: &mut Effects,
) {
    let inputs = match kind {
        StageKind::Triage => {
            let mut i = base_inputs(task);
            if let Some(stat) = &task.inputs.diffstat {
                i.push(inline("changed files", stat.clone()));
            }
            i
        }
        StageKind::Summary | StageKind::Review => {
            let mut i = base_inputs(task);
            let files: Vec<usize> = (0..task.inputs.diff_files.len())
                .filter(|&k| task.inputs.diff_files[k].excluded.is_none())
                .collect();
            i.extend(files.iter().map(|&k| file_input(task, k)));
            i
        }
        StageKind::IssueAnalysis => issue_inputs(task),
        StageKind::Scan => vec![inline(
            "scan request",
            match &task.repository {
                Some(r) => format!(
                    "Scan the repository at commit {} using the tools.",
                    r.commit
                ),
                None => "Scan the repository.".to_owned(),
            },
        )],
        StageKind::Reviewer | StageKind::Validator => base_inputs(task),
    };
    plan_with(task, kind, id, required, inputs, now, fx);
}

fn plan_with(
    task: &mut TaskRecord,
    kind: StageKind,
    id: &str,
    required: bool,
    inputs: Vec<InputRef>,
    now: u64,
    fx: &mut Effects,
) {
    let settings = task
        .settings
        .stages
        .get(&kind)
        .cloned()
        .unwrap_or(StageSettings {
            provider: None,
            model: None,
            tools: Vec::new(),
            repair: RepairPolicy {
                mode: verdict_proto::repair::RepairMode::default_for(kind.default_protocol()),
                max_attempts: verdict_proto::repair::DEFAULT_MAX_ATTEMPTS,
            },
            structured_output: None,
        });
    let validate = ValidateOptions {
        issue_categories: if kind == StageKind::IssueAnalysis {
            task.settings.issue_categories.clone()
        } else {
            None
        },
    };
    let request = StageRequest {
        version: WIRE_VERSION,
        task_id: task.id.clone(),
        stage_id: id.to_owned(),
        stage: kind,
        protocol: kind.default_protocol(),
        required,
        attempt: 1,
        priority: task.priority,
        deadline_unix_ms: task.deadline_unix_ms,
        language: task.language,
        repository: task.repository.clone(),
        inputs,
        tools: settings.tools.clone(),
        provider: settings.provider.clone(),
        model: settings.model.clone(),
        repair: settings.repair,
        structured_output: settings.structured_output,
        validate,
        changed_files: matches!(kind, StageKind::Reviewer | StageKind::Review).then(|| {
            task.inputs
                .diff_files
                .iter()
                .map(|f| f.path.clone())
                .collect()
        }),
    };
    task.stages.push(StageRecord {
        id: id.to_owned(),
        kind,
        required,
        status: StageStatus::Planned,
        request,
        outcome: None,
        attempts: 0,
        usage: Default::default(),
        model: None,
        planned_unix_ms: now,
        dispatched_unix_ms: None,
        finished_unix_ms: None,
    });
    fx.event(
        EventType::StageStarted,
        Some(id),
        format!("{} started.", stage_title(id, task.language)),
        json!({"stage": kind.as_str()}),
    );
    fx.planned.push(id.to_owned());
}

/// Splits the reviewable files across reviewers, balancing bytes: at least the configured number
/// of reviewers (when there are that many files), more when a shard would exceed its budget.
fn shard(task: &TaskRecord, included: &[usize]) -> Vec<Vec<usize>> {
    let total: usize = included
        .iter()
        .map(|&i| task.inputs.diff_files[i].bytes)
        .sum();
    let per = task.settings.max_diff_bytes_per_reviewer.max(1);
    let wanted = usize::from(task.settings.reviewers.max(1)).max(total.div_ceil(per));
    let n = wanted.min(included.len()).clamp(1, MAX_REVIEWERS);
    let mut shards: Vec<(usize, Vec<usize>)> = vec![(0, Vec::new()); n];
    for &i in included {
        if let Some(target) = shards.iter_mut().min_by_key(|(bytes, _)| *bytes) {
            target.0 += task.inputs.diff_files[i].bytes;
            target.1.push(i);
        }
    }
    shards
        .into_iter()
        .map(|(_, files)| files)
        .filter(|f| !f.is_empty())
        .collect()
}

/// Every reviewer's answer, in stage order (the order candidate ids follow).
fn reviewer_answers(task: &TaskRecord) -> Vec<ReviewerAnswer> {
    task.stages
        .iter()
        .filter(|s| s.kind == StageKind::Reviewer)
        .filter_map(|s| match &s.outcome {
            Some(StageOutcome::Ok { value, .. }) => ReviewerAnswer::read(&s.id, value),
            _ => None,
        })
        .collect()
}

fn summary_json_of(task: &TaskRecord) -> String {
    task.stage("summary")
        .and_then(|s| match &s.outcome {
            Some(StageOutcome::Ok { value, .. }) => Some(value.to_string()),
            _ => None,
        })
        .unwrap_or_default()
}

fn summary_of(task: &TaskRecord) -> String {
    task.stage("summary")
        .and_then(|s| match &s.outcome {
            Some(StageOutcome::Ok { value, .. }) => Some(summary_text(value)),
            _ => None,
        })
        .unwrap_or_default()
}

fn summary_text(value: &Value) -> String {
    serde_json::from_value::<Summary>(value.clone())
        .map(|s| s.summary.as_str().to_owned())
        .unwrap_or_default()
}

fn inline(name: &str, text: String) -> InputRef {
    InputRef {
        name: name.to_owned(),
        content: InputContent::Inline { text },
    }
}

/// Files a reviewing stage's model was not shown in full, because the worker cut its evidence to
/// fit the model's context window, leave the reviewed files for the not-reviewed ones, each
/// with that reason: a review never claims what its model did not see.
fn note_evidence_cut(task: &mut TaskRecord, stage: &str, cut: &EvidenceCut) {
    let window = cut.context_window;
    for input in &cut.inputs {
        let reasons = [
            (&input.files_not_shown, task.language.pick(
                "not reviewed: the evidence of {stage} was cut to fit the model's context window of {window} tokens, and this file was not shown",
                "未评审：为适应模型 {window} 个 token 的上下文窗口，{stage} 的材料被截断，此文件未展示给模型",
            )),
            (&input.files_partly_shown, task.language.pick(
                "partly reviewed: the evidence of {stage} was cut to fit the model's context window of {window} tokens, and some hunks of this file were not shown",
                "部分评审：为适应模型 {window} 个 token 的上下文窗口，{stage} 的材料被截断，此文件的部分变更块未展示给模型",
            )),
        ];
        for (files, template) in reasons {
            let reason = template
                .replace("{stage}", stage)
                .replace("{window}", &window.to_string());
            for path in files {
                task.coverage.files_reviewed.retain(|p| p != path);
                if !task
                    .coverage
                    .files_not_reviewed
                    .iter()
                    .any(|n| &n.path == path)
                {
                    task.coverage
                        .files_not_reviewed
                        .push(verdict_api::document::NotReviewed {
                            path: path.clone(),
                            reason: reason.clone(),
                            kind: None,
                        });
                }
            }
        }
    }
}

fn base_inputs(task: &TaskRecord) -> Vec<InputRef> {
    let mut v = Vec::new();
    if let Some(t) = &task.inputs.title {
        v.push(inline("pull request title", t.clone()));
    }
    if let Some(b) = task.inputs.body.as_ref().filter(|b| !b.trim().is_empty()) {
        v.push(inline("pull request description", b.clone()));
    }
    v
}

fn file_input(task: &TaskRecord, i: usize) -> InputRef {
    let f = &task.inputs.diff_files[i];
    InputRef {
        name: format!("{}{}", input_name::DIFF_OF_FILE, f.path),
        content: f.input.content.clone(),
    }
}

fn issue_inputs(task: &TaskRecord) -> Vec<InputRef> {
    let Some(issue) = &task.inputs.issue else {
        return Vec::new();
    };
    let mut text = String::new();
    if let Some(n) = issue.number {
        text.push_str(&format!("#{n} "));
    }
    text.push_str(&issue.title);
    if !issue.labels.is_empty() {
        text.push_str(&format!("\nLabels: {}", issue.labels.join(", ")));
    }
    let mut v = vec![inline("issue title", text)];
    if !issue.body.trim().is_empty() {
        v.push(inline("issue body", issue.body.clone()));
    }
    v
}

/// "Reviewer 2", "Summary", … for milestones.
pub fn stage_title(id: &str, language: Language) -> String {
    let (base, n) = match id.rsplit_once('-') {
        Some((b, n)) if n.chars().all(|c| c.is_ascii_digit()) => (b, Some(n)),
        _ => (id, None),
    };
    let name = match (base, language) {
        ("triage", Language::En) => "Triage",
        ("summary", Language::En) => "Summary",
        ("reviewer", Language::En) => "Reviewer",
        ("validator", Language::En) => "Validator",
        ("review", Language::En) => "Review",
        ("issue-analysis", Language::En) => "Issue analysis",
        ("scan", Language::En) => "Scan",
        ("triage", Language::ZhCn) => "分流",
        ("summary", Language::ZhCn) => "总结",
        ("reviewer", Language::ZhCn) => "评审",
        ("validator", Language::ZhCn) => "验证",
        ("review", Language::ZhCn) => "评审",
        ("issue-analysis", Language::ZhCn) => "议题分析",
        ("scan", Language::ZhCn) => "扫描",
        (other, _) => other,
    };
    match n {
        Some(n) => format!("{name} {n}"),
        None => name.to_owned(),
    }
}

fn finished_message(id: &str, outcome: &StageOutcome, language: Language) -> String {
    let title = stage_title(id, language);
    match outcome {
        StageOutcome::Ok {
            repaired: false, ..
        } => format!("{title} finished."),
        StageOutcome::Ok {
            repaired: true,
            attempts,
            ..
        } => {
            format!(
                "{title} finished after {} repair round(s).",
                attempts.saturating_sub(1)
            )
        }
        StageOutcome::InvalidOutput { .. } => {
            format!("{title} finished: the answer never followed the required format.")
        }
        StageOutcome::ExecutionFailure { kind, .. } => format!("{title} failed to run ({kind})."),
    }
}
