//! How much a rate limiter lets through.

use std::time::Duration;

use crate::error::{Error, Result};

pub use lockguard_units::{MAX_PERIOD, MAX_QUOTA};
use lockguard_units::{QuotaFault, check_quota, rate};

/// `count` requests per `period`, with a burst for GCRA.
///
/// Built from readable constructors; values that cannot work (zero, too
/// large, a rate finer than a microsecond) are reported by
/// [`Quota::validate`] and by every limiter using the quota.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lockguard_core::Quota;
/// let q = Quota::per_second(10).burst(20);
/// assert_eq!(q.emission_interval(), Duration::from_millis(100));
/// assert_eq!(q.burst_size(), 20);
/// assert!(Quota::per_minute(0).validate().unwrap_err().is_invalid_input());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    count: u64,
    period: Duration,
    burst: Option<u64>,
}

impl Quota {
    /// `count` requests per `period`.
    pub const fn new(count: u64, period: Duration) -> Self {
        Self {
            count,
            period,
            burst: None,
        }
    }

    /// `count` requests per second.
    pub const fn per_second(count: u64) -> Self {
        Self::new(count, Duration::from_secs(1))
    }

    /// `count` requests per minute.
    pub const fn per_minute(count: u64) -> Self {
        Self::new(count, Duration::from_secs(60))
    }

    /// `count` requests per hour.
    pub const fn per_hour(count: u64) -> Self {
        Self::new(count, Duration::from_secs(3600))
    }

    /// How many requests GCRA lets through at once after a quiet spell
    /// (default: `count`). Window algorithms ignore it.
    #[must_use]
    pub const fn burst(mut self, burst: u64) -> Self {
        self.burst = Some(burst);
        self
    }

    /// Requests per period.
    pub const fn count(&self) -> u64 {
        self.count
    }

    /// The period.
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// The burst set with [`Quota::burst`], if any.
    pub(crate) const fn explicit_burst(&self) -> Option<u64> {
        self.burst
    }

    /// The burst: the explicit one, or `count`.
    pub const fn burst_size(&self) -> u64 {
        match self.burst {
            Some(b) => b,
            None => self.count,
        }
    }

    /// The steady spacing of requests, `period / count`, rounded up to the
    /// microsecond so the quota is never exceeded.
    pub fn emission_interval(&self) -> Duration {
        Duration::from_micros(self.emission_interval_us().max(0).unsigned_abs())
    }

    pub(crate) fn period_us(&self) -> i64 {
        i64::try_from(self.period.as_micros()).unwrap_or(i64::MAX)
    }

    pub(crate) fn emission_interval_us(&self) -> i64 {
        let count = i64::try_from(self.count.max(1)).unwrap_or(i64::MAX);
        let p = self.period_us();
        p / count + i64::from(p % count != 0)
    }

    /// Checks that the quota can work.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a zero
    /// or oversized count or burst, a period under a millisecond or over
    /// [`MAX_PERIOD`], or more than one request per microsecond.
    pub fn validate(&self) -> Result<()> {
        let Err(fault) = check_quota(self.count, self.period, self.burst) else {
            return Ok(());
        };
        Err(Error::invalid(match fault {
            QuotaFault::ZeroCount => "quota count must be at least 1".to_owned(),
            QuotaFault::CountTooLarge => format!(
                "quota count {} exceeds the maximum of {MAX_QUOTA}",
                self.count
            ),
            QuotaFault::PeriodTooShort => {
                format!("quota period must be at least 1ms, got {:?}", self.period)
            }
            QuotaFault::PeriodTooLong => format!(
                "quota period {:?} exceeds the maximum of {MAX_PERIOD:?}",
                self.period
            ),
            QuotaFault::FinerThanMicrosecond => format!(
                "quota of {} per {:?} is finer than one request per microsecond",
                self.count, self.period
            ),
            QuotaFault::ZeroBurst => "quota burst must be at least 1".to_owned(),
            QuotaFault::BurstTooLarge => format!(
                "quota burst {} exceeds the maximum of {MAX_QUOTA}",
                self.burst_size()
            ),
            // `Untrackable` (GCRA keeps `T * burst` microseconds of
            // tolerance; Lua numbers are exact to 2^53), or a fault added
            // later.
            _ => format!(
                "quota of {} per {:?} with a burst of {} spans more time than can be tracked",
                self.count,
                self.period,
                self.burst_size()
            ),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_and_validation() {
        assert!(Quota::per_second(10).validate().is_ok());
        assert!(Quota::per_hour(1).burst(5).validate().is_ok());
        for bad in [
            Quota::per_second(0),
            Quota::per_second(MAX_QUOTA + 1),
            Quota::per_second(2_000_000),
            Quota::new(1, Duration::ZERO),
            Quota::new(1, Duration::from_micros(999)),
            Quota::new(1, MAX_PERIOD + Duration::from_secs(1)),
            Quota::new(1, Duration::MAX),
            Quota::per_second(1).burst(0),
            Quota::per_second(1).burst(u64::MAX),
            Quota::new(1, MAX_PERIOD).burst(MAX_QUOTA),
        ] {
            assert!(bad.validate().unwrap_err().is_invalid_input(), "{bad:?}");
        }
    }

    #[test]
    fn emission_interval_rounds_up() {
        assert_eq!(Quota::per_second(3).emission_interval_us(), 333_334);
        assert_eq!(Quota::per_second(4).emission_interval_us(), 250_000);
    }
}

/// The units a quota's period may be written in, with their length in ms.
const QUOTA_HELP: &str = "a quota is a count, a slash and a period, optionally followed by a burst, \
     like \"10/s\", \"100/min\", \"5/250ms\" or \"100/min burst 20\"";

/// Reads a quota as configuration files write it: `"10/s"`, `"100/min"`,
/// `"1000/h"`, `"5/250ms"`, `"1/d"`, with an optional burst for GCRA:
/// `"100/min burst 20"`. The quota is then [validated](Quota::validate).
///
/// ```
/// use std::time::Duration;
/// use lockguard_core::Quota;
/// let q: Quota = "100/min burst 20".parse()?;
/// assert_eq!((q.count(), q.period(), q.burst_size()), (100, Duration::from_secs(60), 20));
/// assert_eq!(q.to_string(), "100/min burst 20");
/// assert!("10 per second".parse::<Quota>().unwrap_err().is_invalid_input());
/// # Ok::<(), lockguard_core::Error>(())
/// ```
impl std::str::FromStr for Quota {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        let bad = |what: &str| Error::invalid(format!("{what} in quota {text:?}; {QUOTA_HELP}"));
        let mut words = text.split_whitespace();
        let rate = words.next().ok_or_else(|| bad("no rate"))?;
        let rate::Rate { count, period } = rate::parse(rate).map_err(|e| bad(&e.to_string()))?;
        let mut quota = Quota::new(count, period);
        match (words.next(), words.next(), words.next()) {
            (None, _, _) => {}
            (Some("burst"), Some(n), None) if n.bytes().all(|b| b.is_ascii_digit()) => {
                let burst = n
                    .parse()
                    .map_err(|_| bad(&format!("burst {n:?} too large")))?;
                quota = quota.burst(burst);
            }
            _ => return Err(bad("unexpected words after the rate")),
        }
        quota.validate()?;
        Ok(quota)
    }
}

/// The quota as [`FromStr`](std::str::FromStr) reads it: `"100/min"`,
/// `"5/250ms"`, `"100/min burst 20"`. A period that is not a whole number
/// of milliseconds is written in microseconds (`"1/1500us"`), which the
/// parser does not read back.
impl std::fmt::Display for Quota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/", self.count)?;
        let period = crate::duration::Text {
            duration: self.period,
            bare_unit: true,
        };
        write!(f, "{period}")?;
        match self.burst {
            Some(b) => write!(f, " burst {b}"),
            None => Ok(()),
        }
    }
}

/// As its text (`"100/min burst 20"`), read with [`FromStr`](std::str::FromStr).
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl serde::Serialize for Quota {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        if !self.period.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(serde::ser::Error::custom(format!(
                "quota period {:?} is not a whole number of milliseconds",
                self.period
            )));
        }
        s.collect_str(self)
    }
}

/// From its text (`"100/min burst 20"`); a quota that cannot work is an
/// error naming it.
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl<'de> serde::Deserialize<'de> for Quota {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod parse_tests {
    use super::*;

    #[test]
    fn reads_rates_periods_and_bursts() {
        let q = |s: &str| s.parse::<Quota>().unwrap();
        assert_eq!(q("10/s"), Quota::per_second(10));
        assert_eq!(q("100/min"), Quota::per_minute(100));
        assert_eq!(q("100/m"), Quota::per_minute(100));
        assert_eq!(q("1000/h"), Quota::per_hour(1000));
        assert_eq!(q("5/250ms"), Quota::new(5, Duration::from_millis(250)));
        assert_eq!(q("3/2s"), Quota::new(3, Duration::from_secs(2)));
        assert_eq!(q("1/d"), Quota::new(1, Duration::from_secs(86_400)));
        assert_eq!(q("  100/min   burst 20 "), Quota::per_minute(100).burst(20));
    }

    #[test]
    fn refuses_what_is_malformed_or_cannot_work() {
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
            "1.5/s",
            "10/s/m",
            "10/s burst",
            "10/s burst x",
            "10/s burst 0",
            "10/s bursts 5",
            "10/s burst 5 more",
            "2000/ms",
            "1/367d",
            "99999999999999999999/s",
        ] {
            let e = bad.parse::<Quota>().unwrap_err();
            assert!(e.is_invalid_input(), "{bad:?}: {e}");
        }
        let e = "10/sec".parse::<Quota>().unwrap_err();
        assert!(e.to_string().contains("\"10/sec\""), "{e}");
    }
}
