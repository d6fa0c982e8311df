//! Time as GitHub writes it: RFC 3339 UTC timestamps (`2026-12-01T19:40:00Z`) and Unix seconds,
//! from the wall clock — the clock JWTs are signed against and installation tokens expire by.

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch (negative before it).
pub(crate) fn unix_seconds(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

pub(crate) fn now_seconds() -> i64 {
    unix_seconds(SystemTime::now())
}

/// `YYYY-MM-DDTHH:MM:SSZ`, whole seconds, as GitHub's `created_at` and `expires_at` read.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let secs = unix_seconds(t);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar
/// (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(secs: u64) -> String {
        rfc3339(UNIX_EPOCH + Duration::from_secs(secs))
    }

    #[test]
    fn formats_like_github() {
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(1_796_154_000), "2026-12-01T19:40:00Z");
        assert_eq!(at(951_868_799), "2000-02-29T23:59:59Z");
        assert_eq!(at(4_107_542_400), "2100-03-01T00:00:00Z");
        assert_eq!(unix_seconds(UNIX_EPOCH + Duration::from_secs(42)), 42);
    }
}
