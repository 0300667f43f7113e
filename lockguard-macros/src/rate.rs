//! Rate literals of `#[rate_limit]`: `"10/s"`, `"100/m"`, `"5/250ms"`,
//! read with lockguard's rate grammar and checked against its quota limits
//! (`lockguard_units`), in the words of a compile error.

use lockguard_units::rate::{self, RateError};
use lockguard_units::{MAX_QUOTA, QuotaFault, check_quota};

pub(crate) use lockguard_units::rate::Rate;

const RATE_HELP: &str =
    "a rate is a count, a slash and a period, like \"10/s\", \"100/m\", \"1000/h\" or \"5/250ms\"";

/// Parses and checks a rate: the quota must be one `lockguard::Quota`
/// accepts.
pub(crate) fn parse(text: &str) -> Result<Rate, String> {
    let r = rate::parse(text).map_err(|e| match e {
        RateError::NoSlash => format!("invalid rate {text:?}; {RATE_HELP}"),
        RateError::Count(count) => {
            format!("invalid count {count:?} in rate {text:?}; {RATE_HELP}")
        }
        RateError::CountTooLarge(_) => {
            format!("rate {text:?} allows more than {MAX_QUOTA} requests per period")
        }
        RateError::Period { why, .. } => format!("invalid period in rate {text:?}: {why}"),
        other => format!("invalid rate {text:?} ({other}); {RATE_HELP}"),
    })?;
    let fault = match check_quota(r.count, r.period, None) {
        // The span GCRA tracks is checked with the burst, where the
        // algorithm is known (`attr.rs`).
        Ok(()) | Err(QuotaFault::Untrackable) => return Ok(r),
        Err(fault) => fault,
    };
    Err(match fault {
        QuotaFault::ZeroCount => {
            format!("rate {text:?} allows nothing; the count must be at least 1")
        }
        QuotaFault::CountTooLarge => {
            format!("rate {text:?} allows more than {MAX_QUOTA} requests per period")
        }
        QuotaFault::PeriodTooShort => {
            format!("the period of rate {text:?} must be at least 1ms")
        }
        QuotaFault::PeriodTooLong => {
            format!("the period of rate {text:?} is longer than the maximum of 366d")
        }
        QuotaFault::FinerThanMicrosecond => {
            format!("rate {text:?} is finer than one request per microsecond")
        }
        // A fault added later.
        _ => format!("rate {text:?} cannot work; {RATE_HELP}"),
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn parses_counts_and_periods() {
        assert_eq!(
            parse("3/min"),
            Ok(Rate {
                count: 3,
                period: Duration::from_secs(60)
            })
        );
        let r = |count, ms| Rate {
            count,
            period: Duration::from_millis(ms),
        };
        assert_eq!(parse("10/s"), Ok(r(10, 1000)));
        assert_eq!(parse("100/m"), Ok(r(100, 60_000)));
        assert_eq!(parse("1000/h"), Ok(r(1000, 3_600_000)));
        assert_eq!(parse("5/250ms"), Ok(r(5, 250)));
        assert_eq!(parse("1/d"), Ok(r(1, 86_400_000)));
        assert_eq!(parse("3/2s"), Ok(r(3, 2000)));
    }

    #[test]
    fn rejects_malformed_and_impossible() {
        for bad in [
            "",
            "10",
            "10/",
            "/s",
            "ten/s",
            "10/sec",
            "10 / s",
            "-1/s",
            "0/s",
            "1/0s",
            "1000000001/d",
            "2000/ms",
            "1/367d",
            "1.5/s",
            "10/s/m",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
