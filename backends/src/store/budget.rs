//! The budget ledger (SPEC X5): per organisation and period, what tasks have spent and what the
//! running ones hold. A task reserves its estimate before it starts — refused when spent plus
//! held plus the estimate would pass the limit — and settles when it ends: its hold is dropped
//! and what it really cost is added to the spending. Both steps are idempotent per task, so a
//! second intake or a retried settlement never counts twice. The scheduler decides accounts,
//! estimates and limits (`verdict_policy::budget`); this is only where they are counted.

use serde::{Deserialize, Serialize};
pub use verdict_proto::budget::Account;
use verdict_proto::budget::{Amount, Limit};

use super::StoreError;
use crate::BoxFuture;

/// What an account has spent and what its running tasks hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Standing {
    pub spent: Amount,
    pub held: Amount,
}

impl Standing {
    /// Spent plus held: what a new estimate is added to.
    pub fn committed(&self) -> Amount {
        self.spent.plus(self.held)
    }
}

/// The answer to a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reservation {
    /// The estimate is held (or was already, for this holder); the standing after it.
    Granted(Standing),
    /// The estimate would pass the limit; nothing changed. The standing it was judged against.
    Refused(Standing),
}

/// Counts spending against budgets.
pub trait BudgetLedger: Send + Sync + std::fmt::Debug {
    /// Holds `estimate` for `holder` (a task id) unless `committed + estimate` passes `limit`.
    /// A holder that already reserved (or settled) is granted without change.
    fn reserve<'a>(
        &'a self,
        account: &'a Account,
        holder: &'a str,
        estimate: Amount,
        limit: Limit,
    ) -> BoxFuture<'a, Result<Reservation, StoreError>>;

    /// Ends `holder`'s hold and adds `actual` to the spending. `false` when there was nothing
    /// to settle: never reserved, or settled already.
    fn settle<'a>(
        &'a self,
        account: &'a Account,
        holder: &'a str,
        actual: Amount,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    /// The account's standing (zero when nothing was ever reserved).
    fn standing<'a>(&'a self, account: &'a Account) -> BoxFuture<'a, Result<Standing, StoreError>>;
}
