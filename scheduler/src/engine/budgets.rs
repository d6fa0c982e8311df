//! Budgets applied (SPEC X5): intake reserves a task's estimate against its organisation's
//! budget before the task starts, and whoever retires an ended task settles it first — the
//! hold swapped for what the task really spent — so a task leaves the active index only once
//! its spending is counted (a replica dying in between leaves the task to the sweeper, which
//! settles it again; settling is idempotent). A scan batch's pre-flight estimate is judged here
//! too, before any member task exists.

use std::sync::Arc;

use verdict_backends::clock::Clock;
use verdict_backends::store::{BudgetLedger, Reservation, Standing, StoreError};
use verdict_proto::budget::{Amount, Limit};

use super::{SchedulerDeps, SchedulerSettings};
use verdict_policy::budget::{BudgetHold, BudgetSettings, organisation_of};
use verdict_policy::task::{PipelineKind, TaskRecord};

/// Why a task or batch may not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Its estimate does not fit the organisation's budget; the reason says by how much.
    OverBudget(String),
    /// The ledger did not answer: try again later.
    Unavailable(StoreError),
}

/// Reserves and settles; cheap to clone.
#[derive(Debug, Clone)]
pub(super) struct Budgets {
    settings: Arc<BudgetSettings>,
    ledger: Arc<dyn BudgetLedger>,
    clock: Arc<dyn Clock>,
}

impl Budgets {
    pub(super) fn new(deps: &SchedulerDeps, settings: &SchedulerSettings) -> Budgets {
        Budgets {
            settings: Arc::new(settings.budgets.clone()),
            ledger: deps.budgets.clone(),
            clock: deps.clock.clone(),
        }
    }

    pub(super) fn settings(&self) -> &BudgetSettings {
        &self.settings
    }

    /// The organisation `task` spends for, when it has a budget.
    fn budgeted(&self, task: &TaskRecord) -> Option<(String, Limit)> {
        let organisation = task
            .organisation
            .clone()
            .or_else(|| task.github.as_ref().map(|g| g.item.repo.owner.clone()))
            .or_else(|| organisation_of(&task.repository.as_ref()?.url))?;
        let limit = self.settings.limit_of(&organisation)?;
        Some((organisation, limit))
    }

    /// Reserves the estimate of `task` (its inputs prepared), or says why it may not start.
    /// `None`: its organisation has no budget.
    pub(super) async fn reserve(&self, task: &TaskRecord) -> Result<Option<BudgetHold>, Refusal> {
        let Some((organisation, limit)) = self.budgeted(task) else {
            return Ok(None);
        };
        let account = self
            .settings
            .account(&organisation, self.clock.now_unix_ms());
        let estimate = self.settings.estimate_task(task);
        match self
            .ledger
            .reserve(&account, &task.id, estimate, limit)
            .await
        {
            Ok(Reservation::Granted(_)) => Ok(Some(BudgetHold { account, estimate })),
            Ok(Reservation::Refused(standing)) => Err(Refusal::OverBudget(over_budget(
                match task.pipeline {
                    PipelineKind::Multi | PipelineKind::Single => "this review",
                    PipelineKind::IssueAnalysis => "this issue analysis",
                    PipelineKind::Scan => "this scan",
                },
                &organisation,
                &account.period,
                estimate,
                limit,
                standing,
            ))),
            Err(e) => Err(Refusal::Unavailable(e)),
        }
    }

    /// Whether scanning with `estimate` for `organisation` fits what its budget has left now;
    /// `Ok` also when it has no budget.
    pub(super) async fn preflight(
        &self,
        organisation: &str,
        what: &str,
        estimate: Amount,
    ) -> Result<(), Refusal> {
        let Some(limit) = self.settings.limit_of(organisation) else {
            return Ok(());
        };
        let account = self
            .settings
            .account(organisation, self.clock.now_unix_ms());
        let standing = self
            .ledger
            .standing(&account)
            .await
            .map_err(Refusal::Unavailable)?;
        if limit.allows(standing.committed().plus(estimate)) {
            Ok(())
        } else {
            Err(Refusal::OverBudget(over_budget(
                what,
                &account.organisation,
                &account.period,
                estimate,
                limit,
                standing,
            )))
        }
    }

    /// Settles ended `task`'s hold with what it spent. `true` when there is nothing left to
    /// settle (the caller may retire the task); `false` when the ledger did not answer.
    pub(super) async fn settle(&self, task: &TaskRecord) -> bool {
        let Some(hold) = &task.budget else {
            return true;
        };
        let actual = self.settings.actual(task);
        match self.ledger.settle(&hold.account, &task.id, actual).await {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(task = %task.id, error = %e, "budget not settled; the sweeper retries");
                false
            }
        }
    }
}

/// The refusal a person reads: the estimate, the budget, what is spent and held, and the ways
/// out.
fn over_budget(
    what: &str,
    organisation: &str,
    period: &str,
    estimate: Amount,
    limit: Limit,
    standing: Standing,
) -> String {
    let left = limit.left_after(standing.committed());
    let mut left_text = Vec::new();
    if limit.tokens.is_some() {
        left_text.push(format!(
            "{} tokens",
            verdict_proto::budget::group_thousands(left.tokens)
        ));
    }
    if limit.micro_usd.is_some() {
        left_text.push(format!("${:.2}", left.usd()));
    }
    format!(
        "refused by the budget: {what} is estimated at {estimate}, but organisation {organisation} has {} left of its budget of {limit} for {period} ({} spent, {} held by running tasks); raise [organisations.{organisation}] budget_tokens/budget_usd, wait for the next period, or scan less (--include/--exclude)",
        left_text.join(" and "),
        standing.spent,
        standing.held,
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use verdict_backends::broker::Route;
    use verdict_backends::repo::MemoryTree;
    use verdict_proto::outcome::{FailureKind, StageOutcome};
    use verdict_proto::wire::{Priority, StageResult, Usage, WIRE_VERSION};

    use super::*;
    use crate::engine::fixture::Fixture;
    use crate::engine::submission::TaskDefaults;
    use verdict_api::document::TaskState;
    use verdict_api::submission::{ScanSubmission, SubmissionOptions};
    use verdict_policy::budget::Period;
    use verdict_policy::pipeline;

    const ACME: &str = "https://example.test/acme/shop.git";
    const COMMIT: &str = "5ca1ab1e00000000000000000000000000000002";

    fn budgets(tokens: u64) -> BudgetSettings {
        BudgetSettings {
            period: Period::Month,
            prompt_tokens_per_stage: 3_000,
            output_tokens_per_stage: 2_000,
            default: None,
            organisations: BTreeMap::from([(
                "acme".to_owned(),
                Limit {
                    tokens: Some(tokens),
                    micro_usd: None,
                },
            )]),
            prices: BTreeMap::new(),
        }
    }

    /// A scan of acme's repository (one small file: one shard), queued.
    async fn queued_acme_scan(fx: &Fixture) -> TaskRecord {
        fx.repositories.insert_revision(ACME, "v1", COMMIT);
        fx.repositories.insert(
            ACME,
            COMMIT,
            MemoryTree::new().file("src/lib.rs", "x".repeat(4_000).as_str()),
        );
        let mut settings = fx.settings.clone();
        settings.repositories = crate::engine::RepositoryAllowlist::hosts(&["example.test"]);
        let task = TaskDefaults::new(&settings)
            .scan(
                ScanSubmission {
                    repository: ACME.to_owned(),
                    revision: "v1".to_owned(),
                    options: SubmissionOptions::default(),
                },
                fx.now(),
            )
            .unwrap();
        fx.parts.records.create(&task).await.unwrap();
        task
    }

    fn account(fx: &Fixture) -> verdict_backends::store::Account {
        fx.settings.budgets.account("acme", fx.now())
    }

    /// SPEC X5: a task whose estimate does not fit is refused before it starts — no stage is
    /// published, nothing is held — and its reason carries the estimate.
    #[tokio::test(start_paused = true)]
    async fn a_scan_over_its_organisations_budget_is_refused_at_intake_with_its_estimate() {
        let fx = Fixture::with_budgets(budgets(5_000));
        let task = queued_acme_scan(&fx).await;

        fx.parts.intake.start(&task.id).await;

        let ended = fx.load(&task.id).await;
        assert_eq!(ended.state, TaskState::Incomplete);
        assert_eq!(ended.failure_kind, Some(FailureKind::BudgetExceeded));
        let reason = ended.reason.unwrap();
        // 1,000 tokens of content + 3,000 prompt + 2,000 answer.
        assert!(
            reason.contains("this scan is estimated at 6,000 tokens"),
            "{reason}"
        );
        assert!(
            reason.contains("5,000 tokens left of its budget of 5,000 tokens"),
            "{reason}"
        );
        assert!(ended.stages.is_empty(), "nothing was started");
        assert_eq!(
            fx.broker.depth(Route::Stages(Priority::Bulk))
                + fx.broker.depth(Route::Stages(Priority::Interactive)),
            0
        );
        assert_eq!(
            fx.store.standing(&account(&fx)).await.unwrap(),
            Standing::default()
        );
    }

    /// A task that fits holds its estimate while it runs; when it ends, the hold is swapped
    /// for what its stages spent (here a stage that spent tokens and then failed), once.
    #[tokio::test(start_paused = true)]
    async fn a_task_within_budget_holds_its_estimate_until_it_ends_then_counts_what_it_spent() {
        let fx = Fixture::with_budgets(budgets(1_000_000));
        let task = queued_acme_scan(&fx).await;

        fx.parts.intake.start(&task.id).await;

        let started = fx.load(&task.id).await;
        assert_eq!(started.state, TaskState::Running);
        let hold = started.budget.clone().expect("the task holds its estimate");
        assert_eq!(hold.estimate, Amount::new(6_000, 0));
        assert_eq!(
            fx.store.standing(&hold.account).await.unwrap(),
            Standing {
                spent: Amount::default(),
                held: Amount::new(6_000, 0),
            }
        );
        let stage = &started.stages[0];
        let result = StageResult {
            version: WIRE_VERSION,
            task_id: task.id.clone(),
            stage_id: stage.id.clone(),
            stage: stage.kind,
            attempt: 1,
            outcome: StageOutcome::ExecutionFailure {
                kind: FailureKind::ProviderUnavailable,
                retryable: false,
                message: "HTTP 503".to_owned(),
            },
            usage: Usage {
                calls: 1,
                input_tokens: 1_200,
                output_tokens: 300,
            },
            started_unix_ms: 0,
            finished_unix_ms: 0,
            model: None,
            evidence_cut: None,
        };
        let now = fx.now();
        let ended = fx
            .parts
            .transitions
            .apply(&task.id, |t| pipeline::on_result(t, &result, now))
            .await
            .unwrap();
        assert!(ended.state.is_terminal());
        let after = Standing {
            spent: Amount::new(1_500, 0),
            held: Amount::default(),
        };
        assert_eq!(fx.store.standing(&hold.account).await.unwrap(), after);
        assert!(
            fx.parts.records.active().await.unwrap().is_empty(),
            "retired once settled"
        );
        // Settling again (the sweeper, another replica) changes nothing.
        assert!(fx.parts.budgets.settle(&ended).await);
        assert_eq!(fx.store.standing(&hold.account).await.unwrap(), after);
    }

    #[test]
    fn a_refusal_names_the_estimate_the_budget_and_what_is_left() {
        let text = over_budget(
            "this scan",
            "acme",
            "2026-12",
            Amount::new(1_500_000, 0),
            Limit {
                tokens: Some(1_000_000),
                micro_usd: None,
            },
            Standing {
                spent: Amount::new(200_000, 0),
                held: Amount::new(100_000, 0),
            },
        );
        assert!(text.contains("estimated at 1,500,000 tokens"), "{text}");
        assert!(
            text.contains("has 700,000 tokens left of its budget of 1,000,000 tokens for 2026-12"),
            "{text}"
        );
        assert!(
            text.contains("200,000 tokens spent, 100,000 tokens held"),
            "{text}"
        );
        assert!(text.contains("[organisations.acme]"), "{text}");
    }
}
