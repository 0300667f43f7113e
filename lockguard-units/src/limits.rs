//! The limits every lease, quota and permit count is held to: checked by
//! the client at run time and by the attribute macros at compile time.

use std::time::Duration;

/// The longest lease a lock accepts: one day. Longer leases are almost
/// always a unit mistake (seconds passed as milliseconds) and would keep a
/// crashed holder's lock for too long.
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);

/// The shortest lease a lock accepts. The holder stops counting on a lease
/// 1% + 2 ms before it ends, so shorter leases would leave no time to use.
pub const MIN_LEASE: Duration = Duration::from_millis(10);

/// The shortest lease the watchdog renews: it renews every third of the
/// lease, and shorter leases would flood the store with renewals.
pub const MIN_WATCHDOG_LEASE: Duration = Duration::from_millis(100);

/// The most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 1_000_000;

/// The most requests a quota may allow per period.
pub const MAX_QUOTA: u64 = 1_000_000_000;

/// The longest period a quota may have: 366 days.
pub const MAX_PERIOD: Duration = Duration::from_secs(366 * 24 * 60 * 60);

/// The most microseconds of tolerance GCRA can track (`T * burst`): the
/// stores' numbers (Lua's among them) are exact up to 2^53.
const MAX_TRACKED_US: u128 = 1 << 53;

/// Why a quota cannot work; see [`check_quota`]. Each reader of quotas
/// words its own message (a run-time error, a compile error on a literal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaFault {
    /// A count of zero.
    ZeroCount,
    /// A count above [`MAX_QUOTA`].
    CountTooLarge,
    /// A period under a millisecond.
    PeriodTooShort,
    /// A period over [`MAX_PERIOD`].
    PeriodTooLong,
    /// More than one request per microsecond.
    FinerThanMicrosecond,
    /// A burst of zero.
    ZeroBurst,
    /// A burst above [`MAX_QUOTA`].
    BurstTooLarge,
    /// The period and burst span more time than GCRA can track.
    Untrackable,
}

/// Checks a quota of `count` requests per `period`, with GCRA's `burst`
/// (`None`: the count), and names the first thing that cannot work, in
/// this order: the count, the period, the rate, the burst, the span.
///
/// # Errors
///
/// The [`QuotaFault`] found first.
pub fn check_quota(count: u64, period: Duration, burst: Option<u64>) -> Result<(), QuotaFault> {
    if count == 0 {
        return Err(QuotaFault::ZeroCount);
    }
    if count > MAX_QUOTA {
        return Err(QuotaFault::CountTooLarge);
    }
    if period < Duration::from_millis(1) {
        return Err(QuotaFault::PeriodTooShort);
    }
    if period > MAX_PERIOD {
        return Err(QuotaFault::PeriodTooLong);
    }
    if u128::from(count) > period.as_micros() {
        return Err(QuotaFault::FinerThanMicrosecond);
    }
    match burst {
        Some(0) => return Err(QuotaFault::ZeroBurst),
        Some(b) if b > MAX_QUOTA => return Err(QuotaFault::BurstTooLarge),
        _ => {}
    }
    // GCRA keeps `T * burst` microseconds of tolerance, `T` the emission
    // interval rounded up to the microsecond.
    let interval = period.as_micros().div_ceil(u128::from(count));
    if interval * u128::from(burst.unwrap_or(count)) > MAX_TRACKED_US {
        return Err(QuotaFault::Untrackable);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_first_fault() {
        let s = Duration::from_secs(1);
        assert_eq!(check_quota(10, s, None), Ok(()));
        assert_eq!(check_quota(10, s, Some(20)), Ok(()));
        assert_eq!(check_quota(0, s, None), Err(QuotaFault::ZeroCount));
        assert_eq!(
            check_quota(MAX_QUOTA + 1, s, None),
            Err(QuotaFault::CountTooLarge)
        );
        assert_eq!(
            check_quota(1, Duration::from_micros(999), None),
            Err(QuotaFault::PeriodTooShort)
        );
        assert_eq!(
            check_quota(1, MAX_PERIOD + s, None),
            Err(QuotaFault::PeriodTooLong)
        );
        assert_eq!(
            check_quota(2_000_000, s, None),
            Err(QuotaFault::FinerThanMicrosecond)
        );
        assert_eq!(check_quota(1, s, Some(0)), Err(QuotaFault::ZeroBurst));
        assert_eq!(
            check_quota(1, s, Some(MAX_QUOTA + 1)),
            Err(QuotaFault::BurstTooLarge)
        );
        assert_eq!(
            check_quota(1, MAX_PERIOD, Some(MAX_QUOTA)),
            Err(QuotaFault::Untrackable)
        );
    }
}
