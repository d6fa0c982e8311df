//! The one classified outcome every stage attempt ends in (SPEC E4).
//!
//! The distinction is the product's safety line: only [`StageOutcome::InvalidOutput`] may be
//! turned into a fallback by a pipeline; an [`StageOutcome::ExecutionFailure`] is never converted
//! into a review decision.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::Diagnostics;

/// How a stage attempt ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum StageOutcome {
    /// The response (or a repair of it) satisfied the protocol.
    Ok {
        /// The canonical parsed value (`verdict validate`'s output).
        value: serde_json::Value,
        /// True when a repair round produced the accepted response.
        repaired: bool,
        /// AI calls that produced an answer to parse: 1 + repair rounds used.
        attempts: u32,
    },
    /// The provider answered, but the original response and every repair broke the protocol.
    InvalidOutput {
        stage: String,
        /// The last validation error, as the last repair round quoted it.
        error: String,
        diagnostics: Diagnostics,
        /// A safe preview of the last response: truncated, control characters stripped,
        /// secrets redacted (see [`crate::redact::safe_preview`]).
        preview: String,
        attempts: u32,
    },
    /// The attempt could not produce a response to judge.
    ExecutionFailure {
        kind: FailureKind,
        retryable: bool,
        /// What failed, already free of secrets.
        message: String,
    },
}

impl StageOutcome {
    /// The label used in metrics and logs: `ok`, `invalid_output` or `execution_failure`.
    pub fn label(&self) -> &'static str {
        match self {
            StageOutcome::Ok { .. } => "ok",
            StageOutcome::InvalidOutput { .. } => "invalid_output",
            StageOutcome::ExecutionFailure { .. } => "execution_failure",
        }
    }

    pub fn failure_kind(&self) -> Option<FailureKind> {
        match self {
            StageOutcome::ExecutionFailure { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

/// Why an attempt could not produce a response (SPEC E4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// Connection refused or reset, DNS failure, 5xx.
    ProviderUnavailable,
    /// 429 or an equivalent quota signal.
    RateLimited,
    /// The transport timeout of one HTTP call or subprocess (not the soft task deadline).
    Timeout,
    /// 401/403 or a missing/invalid credential.
    Auth,
    /// 400/404/422: the request itself is wrong (model name, parameters).
    BadRequest,
    /// The `exec` provider's process could not be started.
    ProcessStart,
    /// The `exec` provider's process exited unsuccessfully.
    ProcessExit,
    /// The task was cancelled or the worker is shutting down.
    Cancelled,
    /// The request names something that does not exist: a repository, or a revision in it.
    NotFound,
    /// The request itself is malformed (a reference git would misread, a missing field), as
    /// opposed to [`FailureKind::BadRequest`], a request verdict made to a provider.
    InvalidRequest,
    /// The repository could not be read right now: its host is unreachable, or git or the
    /// local repository cache failed.
    RepositoryUnavailable,
    /// The state store (Redis) could not be written while the task was taken in: a failover
    /// or an outage outlasted the intake's deadline.
    StoreUnavailable,
    /// A bug or an unexpected state in verdict itself.
    Internal,
    /// The task's organisation has not enough budget left for its estimate (SPEC X5): it was
    /// refused before it started.
    BudgetExceeded,
}

impl FailureKind {
    pub const ALL: [FailureKind; 14] = [
        FailureKind::ProviderUnavailable,
        FailureKind::RateLimited,
        FailureKind::Timeout,
        FailureKind::Auth,
        FailureKind::BadRequest,
        FailureKind::ProcessStart,
        FailureKind::ProcessExit,
        FailureKind::Cancelled,
        FailureKind::NotFound,
        FailureKind::InvalidRequest,
        FailureKind::RepositoryUnavailable,
        FailureKind::StoreUnavailable,
        FailureKind::Internal,
        FailureKind::BudgetExceeded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::ProviderUnavailable => "provider_unavailable",
            FailureKind::RateLimited => "rate_limited",
            FailureKind::Timeout => "timeout",
            FailureKind::Auth => "auth",
            FailureKind::BadRequest => "bad_request",
            FailureKind::ProcessStart => "process_start",
            FailureKind::ProcessExit => "process_exit",
            FailureKind::Cancelled => "cancelled",
            FailureKind::NotFound => "not_found",
            FailureKind::InvalidRequest => "invalid_request",
            FailureKind::RepositoryUnavailable => "repository_unavailable",
            FailureKind::StoreUnavailable => "store_unavailable",
            FailureKind::Internal => "internal",
            FailureKind::BudgetExceeded => "budget_exceeded",
        }
    }

    /// Whether a failure of this kind is worth retrying (SPEC E5): transient transport,
    /// provider, repository-host and state-store conditions are; credentials, bad or mistaken
    /// requests, broken processes, cancellation and our own bugs are not.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            FailureKind::ProviderUnavailable
                | FailureKind::RateLimited
                | FailureKind::Timeout
                | FailureKind::RepositoryUnavailable
                | FailureKind::StoreUnavailable
        )
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_serialises_with_a_tag_and_kinds_in_snake_case() {
        let o = StageOutcome::ExecutionFailure {
            kind: FailureKind::ProviderUnavailable,
            retryable: true,
            message: "503 from provider".into(),
        };
        let v = serde_json::to_value(&o).unwrap();
        assert_eq!(v["outcome"], "execution_failure");
        assert_eq!(v["kind"], "provider_unavailable");
        assert_eq!(o.label(), "execution_failure");
        for k in FailureKind::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
            assert_eq!(
                serde_json::from_value::<FailureKind>(k.as_str().into()).unwrap(),
                k
            );
        }
    }

    #[test]
    fn only_transient_kinds_are_retryable() {
        let retryable: Vec<_> = FailureKind::ALL
            .into_iter()
            .filter(|k| k.is_retryable())
            .collect();
        assert_eq!(
            retryable,
            [
                FailureKind::ProviderUnavailable,
                FailureKind::RateLimited,
                FailureKind::Timeout,
                FailureKind::RepositoryUnavailable,
                FailureKind::StoreUnavailable
            ]
        );
    }
}
