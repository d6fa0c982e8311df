//! Budgets as data (SPEC X5): which organisation a task spends for, which period it counts in,
//! what a task or a repository is estimated to cost before it starts, and what a finished task
//! really cost. Pure: the ledger that counts is `verdict_backends::store::BudgetLedger`, and
//! the scheduler's `engine::budgets` reserves and settles against it.
//!
//! Estimates are deliberate upper bounds on content (every reviewer is assumed to read the
//! whole change) plus configurable allowances per stage call for the prompt around the content
//! and for the answer; agentic tool rounds are not foreseen. What a task really spent replaces
//! its estimate when it ends (decision 159).

use std::collections::BTreeMap;

use chrono::{DateTime, Datelike, Months, Utc};
use serde::{Deserialize, Serialize};
use verdict_proto::budget::Account;
use verdict_proto::budget::{Amount, Limit, TokenPrice};
use verdict_proto::wire::StageKind;

use crate::scan_shards::{ScanSettings, estimate_tokens};
use crate::task::{PipelineKind, TaskRecord};

/// How long an account is kept after its period ends, so reports can still read it.
const KEEP_AFTER_PERIOD_MS: u64 = 35 * DAY_MS;
const DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// The span a budget is spent over; periods follow the calendar in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    Day,
    #[default]
    Month,
}

impl Period {
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Month => "month",
        }
    }

    /// The period `now` falls in (`2026-12-02` or `2026-12`) and when it ends (unix ms).
    pub fn at(self, now_unix_ms: u64) -> (String, u64) {
        let now = i64::try_from(now_unix_ms)
            .ok()
            .and_then(DateTime::<Utc>::from_timestamp_millis)
            .unwrap_or(DateTime::<Utc>::MAX_UTC);
        let day = now.date_naive();
        let (name, next) = match self {
            Period::Day => (day.format("%Y-%m-%d").to_string(), day.succ_opt()),
            Period::Month => (
                day.format("%Y-%m").to_string(),
                day.with_day(1)
                    .and_then(|first| first.checked_add_months(Months::new(1))),
            ),
        };
        let ends = next
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .map_or(u64::MAX, |t| {
                u64::try_from(t.and_utc().timestamp_millis()).unwrap_or(0)
            });
        (name, ends)
    }
}

/// `[budgets]` and `[organisations.<name>]`: which organisations have budgets, over which
/// period, and how estimates are made.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BudgetSettings {
    pub period: Period,
    /// Tokens allowed per stage call for the prompt around its content (system prompt,
    /// contract, instructions).
    pub prompt_tokens_per_stage: u64,
    /// Tokens allowed per stage call for the answer.
    pub output_tokens_per_stage: u64,
    /// The budget of every organisation without one of its own.
    pub default: Option<Limit>,
    /// Budgets by organisation, names lower-case.
    pub organisations: BTreeMap<String, Limit>,
    /// The price of each stage's provider, where it has one.
    pub prices: BTreeMap<StageKind, TokenPrice>,
}

/// A task's reservation, kept on its record so that whoever ends the task settles the same
/// account.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BudgetHold {
    pub account: Account,
    pub estimate: Amount,
}

impl BudgetSettings {
    /// Whether any budget is configured (otherwise nothing is estimated or counted).
    pub fn any(&self) -> bool {
        self.default.is_some() || !self.organisations.is_empty()
    }

    /// The budget that applies to `organisation`.
    pub fn limit_of(&self, organisation: &str) -> Option<Limit> {
        self.organisations
            .get(&organisation.to_ascii_lowercase())
            .copied()
            .or(self.default)
    }

    /// The account `organisation` spends in at `now`.
    pub fn account(&self, organisation: &str, now_unix_ms: u64) -> Account {
        let (period, ends) = self.period.at(now_unix_ms);
        Account {
            organisation: organisation.to_ascii_lowercase(),
            period,
            keep_until_unix_ms: ends.saturating_add(KEEP_AFTER_PERIOD_MS),
        }
    }

    /// One stage call of `kind` over `content_tokens` of material.
    pub fn estimate_stage(&self, kind: StageKind, content_tokens: u64) -> Amount {
        let input = content_tokens.saturating_add(self.prompt_tokens_per_stage);
        let output = self.output_tokens_per_stage;
        self.priced(kind, input, output)
    }

    fn priced(&self, kind: StageKind, input: u64, output: u64) -> Amount {
        let micro = self
            .prices
            .get(&kind)
            .map_or(0, |p| p.cost_micro_usd(input, output));
        Amount::new(input.saturating_add(output), micro)
    }

    /// What `task` (taken in: its inputs known) is estimated to cost.
    pub fn estimate_task(&self, task: &TaskRecord) -> Amount {
        let inputs = &task.inputs;
        let text = |s: &Option<String>| estimate_tokens(s.as_ref().map_or(0, |s| s.len() as u64));
        let diff: u64 = inputs
            .diff_files
            .iter()
            .filter(|f| f.excluded.is_none())
            .map(|f| estimate_tokens(f.bytes as u64))
            .sum();
        match task.pipeline {
            PipelineKind::Scan => match &inputs.scan_shards {
                Some(shards) => shards
                    .iter()
                    .map(|s| self.estimate_stage(StageKind::Scan, s.tokens))
                    .fold(Amount::default(), Amount::plus),
                None => self.estimate_stage(StageKind::Scan, 0),
            },
            PipelineKind::Single => self.estimate_stage(StageKind::Review, diff),
            PipelineKind::IssueAnalysis => {
                let issue = inputs.issue.as_ref().map_or(0, |i| {
                    estimate_tokens((i.title.len() + i.body.len()) as u64)
                });
                self.estimate_stage(
                    StageKind::IssueAnalysis,
                    issue + text(&inputs.title) + text(&inputs.body),
                )
            }
            PipelineKind::Multi => {
                let reviewers = u64::from(task.settings.reviewers.max(1));
                let mut total = self.estimate_stage(StageKind::Summary, diff);
                if task.settings.triage {
                    total =
                        total.plus(self.estimate_stage(StageKind::Triage, text(&inputs.diffstat)));
                }
                for _ in 0..reviewers {
                    total = total.plus(self.estimate_stage(StageKind::Reviewer, diff));
                }
                // The validator reads every reviewer's answer.
                let findings = reviewers.saturating_mul(self.output_tokens_per_stage);
                total.plus(self.estimate_stage(StageKind::Validator, findings))
            }
        }
    }

    /// What scanning a repository of `size_kib` (the code host's figure) is estimated to cost,
    /// before its files are listed: its size as content, packed into shards as `scan` packs
    /// files and bounded as a scan is.
    pub fn estimate_repository(&self, size_kib: u64, scan: &ScanSettings) -> Amount {
        let shard = scan.shard_tokens.max(1);
        let most = u64::try_from(scan.max_shards).unwrap_or(u64::MAX).max(1);
        let content =
            estimate_tokens(size_kib.saturating_mul(1024)).min(shard.saturating_mul(most));
        let shards = content.div_ceil(shard).clamp(1, most);
        // Every shard but the last is full; `shards` is at least 1 and covers `content`.
        let full = self.estimate_stage(StageKind::Scan, shard);
        let rest = content.saturating_sub((shards - 1) * shard);
        (1..shards).fold(self.estimate_stage(StageKind::Scan, rest), |sum, _| {
            sum.plus(full)
        })
    }

    /// What `task`'s stages cost in US dollars, when every one of them has a price.
    pub fn cost_usd(&self, task: &TaskRecord) -> Option<f64> {
        let priced = !task.stages.is_empty()
            && task
                .stages
                .iter()
                .all(|s| self.prices.contains_key(&s.kind));
        priced.then(|| {
            task.stages
                .iter()
                .filter_map(|s| {
                    let p = self.prices.get(&s.kind)?;
                    Some(p.cost(s.usage.input_tokens, s.usage.output_tokens))
                })
                .sum()
        })
    }

    /// What `task`'s stages really spent, priced by each stage's provider.
    pub fn actual(&self, task: &TaskRecord) -> Amount {
        task.stages
            .iter()
            .map(|s| self.priced(s.kind, s.usage.input_tokens, s.usage.output_tokens))
            .fold(Amount::default(), Amount::plus)
    }
}

/// The organisation (owner) a repository URL names, lower-case: `OWNER` of
/// `https://host/OWNER/NAME`, `ssh://git@host/OWNER/NAME` or `git@host:OWNER/NAME`; `None` for
/// local paths and URLs without an owner segment.
pub fn organisation_of(url: &str) -> Option<String> {
    let path = if let Some((scheme, rest)) = url.split_once("://") {
        if !matches!(scheme, "https" | "http" | "ssh" | "git") {
            return None;
        }
        rest.split_once('/')?.1
    } else {
        // scp-like `user@host:OWNER/NAME`; a local path has no `:` before its first `/`.
        let (host, path) = url.split_once(':')?;
        if host.contains('/') || host.is_empty() {
            return None;
        }
        path
    };
    let mut segments = path.split('/').filter(|s| !s.is_empty());
    let owner = segments.next()?;
    segments.next()?;
    Some(owner.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEC_2_2026: u64 = 1_796_169_600_000; // 2026-12-02T00:00:00Z

    #[test]
    fn periods_follow_the_utc_calendar() {
        let (name, ends) = Period::Month.at(DEC_2_2026 + 5_000);
        assert_eq!(name, "2026-12");
        assert_eq!(ends, 1_798_761_600_000, "2027-01-01T00:00:00Z");
        let (name, ends) = Period::Day.at(DEC_2_2026 + 5_000);
        assert_eq!(name, "2026-12-02");
        assert_eq!(ends, DEC_2_2026 + DAY_MS);
        assert_eq!(Period::Month.at(0).0, "1970-01");
        assert_eq!(Period::Day.at(951_782_400_000).0, "2000-02-29");
        let (name, ends) = Period::Month.at(951_782_400_000);
        assert_eq!(
            (name.as_str(), ends),
            ("2000-02", 951_868_800_000),
            "a leap February"
        );
    }

    #[test]
    fn a_repository_url_names_its_owner() {
        for (url, owner) in [
            ("https://github.com/Acme/widgets", Some("acme")),
            ("https://github.com/acme/widgets.git", Some("acme")),
            ("http://127.0.0.1:8080/acme/widgets.git", Some("acme")),
            ("ssh://git@github.com/acme/widgets.git", Some("acme")),
            ("git@github.com:acme/widgets.git", Some("acme")),
            ("https://github.com/acme", None),
            ("/srv/git/acme/widgets", None),
            ("file:///srv/git/acme/widgets", None),
            ("./widgets", None),
        ] {
            assert_eq!(organisation_of(url).as_deref(), owner, "{url}");
        }
    }

    fn settings() -> BudgetSettings {
        let mut prices = BTreeMap::new();
        prices.insert(
            StageKind::Scan,
            TokenPrice {
                input_per_million: 1.0,
                output_per_million: 4.0,
            },
        );
        BudgetSettings {
            period: Period::Month,
            prompt_tokens_per_stage: 1_000,
            output_tokens_per_stage: 500,
            default: None,
            organisations: BTreeMap::from([(
                "acme".to_owned(),
                Limit {
                    tokens: Some(10_000),
                    micro_usd: None,
                },
            )]),
            prices,
        }
    }

    #[test]
    fn an_organisation_has_its_own_budget_or_the_default() {
        let mut s = settings();
        assert!(s.limit_of("ACME").is_some());
        assert_eq!(s.limit_of("other"), None);
        s.default = Some(Limit {
            tokens: Some(1),
            micro_usd: None,
        });
        assert_eq!(s.limit_of("other").and_then(|l| l.tokens), Some(1));
        assert_eq!(s.account("Acme", DEC_2_2026).organisation, "acme");
    }

    #[test]
    fn a_stage_costs_its_content_plus_the_allowances_priced_by_its_provider() {
        let s = settings();
        // 2,000 + 1,000 in at $1/M, 500 out at $4/M: 3,000 µ$ + 2,000 µ$.
        assert_eq!(
            s.estimate_stage(StageKind::Scan, 2_000),
            Amount::new(3_500, 5_000)
        );
        assert_eq!(
            s.estimate_stage(StageKind::Reviewer, 2_000),
            Amount::new(3_500, 0),
            "an unpriced provider costs tokens only"
        );
    }

    #[test]
    fn a_repository_is_estimated_as_the_shards_its_size_would_fill() {
        let s = settings();
        let scan = ScanSettings {
            shard_tokens: 10_000,
            max_shards: 3,
            ..ScanSettings::default()
        };
        // 100 KiB = 25,600 tokens: shards of 10,000, 10,000 and 5,600.
        let three = s.estimate_repository(100, &scan);
        assert_eq!(three.tokens, 25_600 + 3 * 1_500);
        // Bounded by max_shards like the scan itself.
        let huge = s.estimate_repository(1_000_000, &scan);
        assert_eq!(huge.tokens, 30_000 + 3 * 1_500);
        // An empty repository is still one stage call.
        assert_eq!(s.estimate_repository(0, &scan).tokens, 1_500);
    }
}
