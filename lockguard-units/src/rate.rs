//! The grammar of rates written as text: a count, a slash and a period,
//! like `"10/s"`, `"100/min"`, `"1000/h"` or `"5/250ms"`. The period is a
//! unit alone (one of it) or a duration ([`duration`](mod@crate::duration)).
//!
//! This reads the text only; whether the quota can work is
//! [`check_quota`](crate::check_quota)'s to say.

use std::fmt;
use std::time::Duration;

use crate::duration;

/// `count` requests per `period`, as written.
///
/// A plain value: both fields are all it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// How many requests.
    pub count: u64,
    /// Per how long.
    pub period: Duration,
}

/// Why a text is no rate. Each reader words its own message around it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RateError {
    /// No slash between the count and the period.
    NoSlash,
    /// The count (the text before the slash) is not a whole number.
    Count(String),
    /// The count does not fit in 64 bits.
    CountTooLarge(String),
    /// The period (the text after the slash) is no unit and no duration.
    Period {
        /// The period as written.
        text: String,
        /// Why, from the duration grammar.
        why: String,
    },
}

impl fmt::Display for RateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSlash => f.write_str("no slash"),
            Self::Count(count) => write!(f, "invalid count {count:?}"),
            Self::CountTooLarge(count) => write!(f, "count {count:?} too large"),
            Self::Period { text, why } => write!(f, "invalid period {text:?} ({why})"),
        }
    }
}

impl std::error::Error for RateError {}

/// Reads `<count>/<period>`: `"10/s"`, `"100/m"`, `"5/250ms"`, `"3/2s"`.
///
/// # Errors
///
/// A [`RateError`] saying which part is malformed, count first.
pub fn parse(text: &str) -> Result<Rate, RateError> {
    let (count, period) = text.split_once('/').ok_or(RateError::NoSlash)?;
    if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
        return Err(RateError::Count(count.to_owned()));
    }
    let count: u64 = count
        .parse()
        .map_err(|_| RateError::CountTooLarge(count.to_owned()))?;
    let period = duration::parse_period(period).map_err(|why| RateError::Period {
        text: period.to_owned(),
        why,
    })?;
    Ok(Rate { count, period })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_counts_and_periods() {
        let r = |count, ms| Rate {
            count,
            period: Duration::from_millis(ms),
        };
        assert_eq!(parse("3/min"), Ok(r(3, 60_000)));
        assert_eq!(parse("10/s"), Ok(r(10, 1000)));
        assert_eq!(parse("100/m"), Ok(r(100, 60_000)));
        assert_eq!(parse("1000/h"), Ok(r(1000, 3_600_000)));
        assert_eq!(parse("5/250ms"), Ok(r(5, 250)));
        assert_eq!(parse("1/d"), Ok(r(1, 86_400_000)));
        assert_eq!(parse("3/2s"), Ok(r(3, 2000)));
        // The count's range is the quota check's business.
        assert_eq!(parse("0/s"), Ok(r(0, 1000)));
    }

    #[test]
    fn rejects_malformed() {
        assert_eq!(parse("10"), Err(RateError::NoSlash));
        assert_eq!(parse(""), Err(RateError::NoSlash));
        for bad in ["/s", "ten/s", "-1/s", "1.5/s", "10 / s"] {
            assert!(matches!(parse(bad), Err(RateError::Count(_))), "{bad:?}");
        }
        assert!(matches!(
            parse("99999999999999999999/s"),
            Err(RateError::CountTooLarge(_))
        ));
        for bad in ["10/", "10/sec", "10/s/m", "1/0x"] {
            assert!(
                matches!(parse(bad), Err(RateError::Period { .. })),
                "{bad:?}"
            );
        }
    }
}
