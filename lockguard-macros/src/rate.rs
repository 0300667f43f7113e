//! Rate literals of `#[rate_limit]`: `"10/s"`, `"100/m"`, `"5/250ms"`.

use std::time::Duration;

use crate::duration;

/// The most requests a quota may allow per period (`lockguard::MAX_QUOTA`).
pub(crate) const MAX_QUOTA: u64 = 1_000_000_000;

/// The longest period a quota may have (`lockguard::MAX_PERIOD`): 366 days.
const MAX_PERIOD: Duration = Duration::from_secs(366 * 24 * 60 * 60);

const RATE_HELP: &str =
    "a rate is a count, a slash and a period, like \"10/s\", \"100/m\", \"1000/h\" or \"5/250ms\"";

/// `count` requests per `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rate {
    pub(crate) count: u64,
    pub(crate) period: Duration,
}

/// Parses and checks a rate: the quota must be one `lockguard::Quota`
/// accepts.
pub(crate) fn parse(text: &str) -> Result<Rate, String> {
    let Some((count, period)) = text.split_once('/') else {
        return Err(format!("invalid rate {text:?}; {RATE_HELP}"));
    };
    if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "invalid count {count:?} in rate {text:?}; {RATE_HELP}"
        ));
    }
    let count: u64 = count
        .parse()
        .map_err(|_| format!("rate {text:?} allows more than {MAX_QUOTA} requests per period"))?;
    let period = duration::parse_period(period)
        .map_err(|e| format!("invalid period in rate {text:?}: {e}"))?;
    if count == 0 {
        return Err(format!(
            "rate {text:?} allows nothing; the count must be at least 1"
        ));
    }
    if count > MAX_QUOTA {
        return Err(format!(
            "rate {text:?} allows more than {MAX_QUOTA} requests per period"
        ));
    }
    if period < Duration::from_millis(1) {
        return Err(format!("the period of rate {text:?} must be at least 1ms"));
    }
    if period > MAX_PERIOD {
        return Err(format!(
            "the period of rate {text:?} is longer than the maximum of 366d"
        ));
    }
    if u128::from(count) > period.as_micros() {
        return Err(format!(
            "rate {text:?} is finer than one request per microsecond"
        ));
    }
    Ok(Rate { count, period })
}

#[cfg(test)]
mod tests {
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
