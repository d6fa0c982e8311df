//! `GET /v1/scans/{id}`: a scan batch as a client sees it — its state, its members' counts and
//! states, and what it left out.

use serde::{Deserialize, Serialize};
use verdict_proto::budget::Amount;

use crate::document::TaskState;

/// The batch's lifecycle: `enumerating` until its members are known, `running` while they are
/// created and scanned, `finished` once every member task ended; `failed` when the repositories
/// could not be listed for a reason another try does not change (an unknown organisation, no
/// code host configured); `refused` when its pre-flight estimate does not fit its
/// organisation's budget (SPEC X5), before any member task exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BatchState {
    Enumerating,
    Running,
    Finished,
    Failed,
    Refused,
}

impl BatchState {
    pub fn as_str(self) -> &'static str {
        match self {
            BatchState::Enumerating => "enumerating",
            BatchState::Running => "running",
            BatchState::Finished => "finished",
            BatchState::Failed => "failed",
            BatchState::Refused => "refused",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            BatchState::Finished | BatchState::Failed | BatchState::Refused
        )
    }
}

/// A repository the batch leaves out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub repository: String,
    pub reason: String,
}

/// How a member stands, as the batch document counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberState {
    /// Its task is not created yet, or waits for intake.
    Queued,
    Running,
    /// Its task ended completed, degraded or skipped.
    Done,
    /// Its task ended incomplete or aborted, or could not be created.
    Failed,
}

impl MemberState {
    pub fn of(task: Option<TaskState>) -> MemberState {
        match task {
            None | Some(TaskState::Queued) => MemberState::Queued,
            Some(TaskState::Running) => MemberState::Running,
            Some(TaskState::Completed | TaskState::Degraded | TaskState::Skipped) => {
                MemberState::Done
            }
            Some(TaskState::Incomplete | TaskState::Aborted) => MemberState::Failed,
        }
    }
}

/// Members by state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub total: usize,
    pub queued: usize,
    pub running: usize,
    pub done: usize,
    pub failed: usize,
}

/// A member as the batch document shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberDocument {
    pub repository: String,
    pub revision: String,
    pub task_id: String,
    pub state: MemberState,
    /// The member task's own state, once it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_state: Option<TaskState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `GET /v1/scans/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScanBatchDocument {
    pub id: String,
    pub state: BatchState,
    /// `organisation` or `manifest`.
    pub source: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub organisation: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub counts: Counts,
    /// In the batch's order (by repository); the report lists them the same way.
    pub members: Vec<MemberDocument>,
    pub skipped: Vec<Skipped>,
    pub created_unix_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_unix_ms: Option<u64>,
    /// The pre-flight estimate (SPEC X5), for an organisation with a budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate: Option<Amount>,
    /// Members whose scan was refused at intake because the budget was reached: the batch
    /// stopped at its budget, and its report is partial.
    #[serde(default)]
    pub over_budget: usize,
}

impl ScanBatchDocument {
    /// The member task ids, in the batch's order.
    pub fn task_ids(&self) -> Vec<&str> {
        self.members.iter().map(|m| m.task_id.as_str()).collect()
    }

    /// Whether the batch has stopped changing.
    pub fn is_settled(&self) -> bool {
        self.state.is_terminal()
    }
}
