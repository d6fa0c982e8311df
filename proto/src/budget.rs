//! What tokens cost and how spending is counted (SPEC X5, O1): the price table both processes
//! read (the worker for its cost metric, the scheduler for budgets), and the amounts a budget
//! ledger adds up. Money is counted in whole micro-dollars so that sums are exact and a Redis
//! script can add them as integers.

use std::collections::HashMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// What one million tokens cost on a provider, in US dollars (`[providers.<name>]`
/// `input_usd_per_million_tokens`, `output_usd_per_million_tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TokenPrice {
    pub input_per_million: f64,
    pub output_per_million: f64,
}

impl TokenPrice {
    /// The estimated cost of one call's tokens.
    pub fn cost(&self, input_tokens: u64, output_tokens: u64) -> f64 {
        // Token counts are far below 2^52: the conversion is exact.
        #[allow(clippy::cast_precision_loss)]
        let (input, output) = (input_tokens as f64, output_tokens as f64);
        (input * self.input_per_million + output * self.output_per_million) / 1_000_000.0
    }

    /// [`TokenPrice::cost`] in whole micro-dollars, rounded up (a budget never under-counts).
    pub fn cost_micro_usd(&self, input_tokens: u64, output_tokens: u64) -> u64 {
        usd_to_micro(self.cost(input_tokens, output_tokens))
    }
}

/// The configured prices by provider; a provider without prices has no cost series.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Prices {
    by_provider: HashMap<String, TokenPrice>,
}

impl Prices {
    pub fn set(&mut self, provider: &str, price: TokenPrice) {
        self.by_provider.insert(provider.to_owned(), price);
    }

    pub fn get(&self, provider: &str) -> Option<TokenPrice> {
        self.by_provider.get(provider).copied()
    }
}

/// Dollars as whole micro-dollars, rounded up; negative and non-finite amounts count as 0.
pub fn usd_to_micro(usd: f64) -> u64 {
    let micro = (usd * 1_000_000.0).ceil();
    if micro.is_finite() && micro > 0.0 {
        // Saturating: amounts beyond u64 are not money anybody budgets.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let whole = micro.min(u64::MAX as f64) as u64;
        whole
    } else {
        0
    }
}

/// Micro-dollars as dollars.
pub fn micro_to_usd(micro: u64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let dollars = micro as f64 / 1_000_000.0;
    dollars
}

/// Tokens and money spent, held or estimated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Amount {
    /// Input plus output tokens.
    pub tokens: u64,
    /// US dollars in millionths; 0 when nothing is priced.
    pub micro_usd: u64,
}

impl Amount {
    pub fn new(tokens: u64, micro_usd: u64) -> Amount {
        Amount { tokens, micro_usd }
    }

    pub fn plus(self, other: Amount) -> Amount {
        Amount {
            tokens: self.tokens.saturating_add(other.tokens),
            micro_usd: self.micro_usd.saturating_add(other.micro_usd),
        }
    }

    pub fn usd(self) -> f64 {
        micro_to_usd(self.micro_usd)
    }
}

impl fmt::Display for Amount {
    /// `1,234,567 tokens ($3.21)`, the money only when there is some.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} tokens", group_thousands(self.tokens))?;
        if self.micro_usd > 0 {
            write!(f, " (${:.2})", self.usd())?;
        }
        Ok(())
    }
}

/// A budget's ceilings; an unset one does not limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Limit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub micro_usd: Option<u64>,
}

impl Limit {
    /// Whether `total` stays within every ceiling.
    pub fn allows(&self, total: Amount) -> bool {
        self.tokens.is_none_or(|t| total.tokens <= t)
            && self.micro_usd.is_none_or(|m| total.micro_usd <= m)
    }

    /// What is left below each ceiling after `used` (an unset ceiling leaves `u64::MAX`).
    pub fn left_after(&self, used: Amount) -> Amount {
        Amount {
            tokens: self
                .tokens
                .map_or(u64::MAX, |t| t.saturating_sub(used.tokens)),
            micro_usd: self
                .micro_usd
                .map_or(u64::MAX, |m| m.saturating_sub(used.micro_usd)),
        }
    }
}

impl fmt::Display for Limit {
    /// `5,000,000 tokens and $20.00`, or whichever ceiling is set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.tokens, self.micro_usd) {
            (Some(t), Some(m)) => write!(
                f,
                "{} tokens and ${:.2}",
                group_thousands(t),
                micro_to_usd(m)
            ),
            (Some(t), None) => write!(f, "{} tokens", group_thousands(t)),
            (None, Some(m)) => write!(f, "${:.2}", micro_to_usd(m)),
            (None, None) => f.write_str("no limit"),
        }
    }
}

/// `1234567` as `1,234,567`.
pub fn group_thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// One organisation's spending in one budget period.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Account {
    /// The organisation, lower-case.
    pub organisation: String,
    /// The period's name, e.g. `2026-12` or `2026-12-02`.
    pub period: String,
    /// When the ledger may forget the account: well after the period ends, so its spending
    /// can still be read in reports.
    pub keep_until_unix_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_is_counted_in_whole_micro_dollars_rounded_up() {
        let price = TokenPrice {
            input_per_million: 2.5,
            output_per_million: 10.0,
        };
        assert_eq!(price.cost_micro_usd(1_000_000, 0), 2_500_000);
        assert_eq!(price.cost_micro_usd(1, 0), 3, "2.5 µ$ rounds up");
        assert_eq!(price.cost_micro_usd(0, 0), 0);
        assert_eq!(usd_to_micro(f64::NAN), 0);
        assert_eq!(usd_to_micro(-1.0), 0);
    }

    #[test]
    fn a_limit_allows_what_stays_within_every_set_ceiling() {
        let limit = Limit {
            tokens: Some(1_000),
            micro_usd: None,
        };
        assert!(limit.allows(Amount::new(1_000, u64::MAX)));
        assert!(!limit.allows(Amount::new(1_001, 0)));
        let both = Limit {
            tokens: Some(1_000),
            micro_usd: Some(5),
        };
        assert!(!both.allows(Amount::new(10, 6)));
        assert_eq!(both.left_after(Amount::new(400, 9)), Amount::new(600, 0));
        assert!(Limit::default().allows(Amount::new(u64::MAX, u64::MAX)));
    }

    #[test]
    fn amounts_read_as_people_write_them() {
        assert_eq!(
            Amount::new(1_234_567, 3_210_000).to_string(),
            "1,234,567 tokens ($3.21)"
        );
        assert_eq!(Amount::new(999, 0).to_string(), "999 tokens");
        assert_eq!(
            Limit {
                tokens: Some(5_000_000),
                micro_usd: Some(20_000_000)
            }
            .to_string(),
            "5,000,000 tokens and $20.00"
        );
        assert_eq!(group_thousands(1_000), "1,000");
        assert_eq!(group_thousands(100), "100");
    }
}
