//! Leases: their bounds, how they are kept, the safety margin a holder
//! leaves before the store lets a lease go, and what a holder knows of its
//! lease.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::fence::FencingToken;
use crate::token::Token;

pub use lockguard_units::{MAX_LEASE, MIN_LEASE, MIN_WATCHDOG_LEASE};

/// The default lease of a lock renewed by the watchdog.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// How a lock's (or permit's) lease is kept.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lockguard_core::Lease;
///
/// let lg = lockguard_core::Client::memory();
/// // The same as `.lease(Duration::from_secs(5))`.
/// let lock = lg.lock("report").with_lease(Lease::Fixed(Duration::from_secs(5)));
/// # drop(lock);
/// ```
///
/// With the `serde` feature it reads and writes as `{"watchdog": "30s"}` or
/// `{"fixed": "10s"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum Lease {
    /// A lease of this length renewed by the watchdog every third of it
    /// while the guard lives.
    Watchdog(#[cfg_attr(feature = "serde", serde(with = "crate::text::serde_duration"))] Duration),
    /// A lease of this length and no renewal: the lock frees itself when it
    /// ends unless the holder extends it.
    Fixed(#[cfg_attr(feature = "serde", serde(with = "crate::text::serde_duration"))] Duration),
}

impl Lease {
    /// The lease's length.
    pub fn duration(self) -> Duration {
        match self {
            Self::Watchdog(d) | Self::Fixed(d) => d,
        }
    }

    /// Whether the watchdog renews it.
    pub fn is_watchdog(self) -> bool {
        matches!(self, Self::Watchdog(_))
    }

    /// Checks the lease: at least [`MIN_LEASE`] ([`MIN_WATCHDOG_LEASE`]
    /// for the watchdog), at most [`MAX_LEASE`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) naming
    /// the bound it breaks.
    pub fn validate(self) -> Result<Duration> {
        let lease = self.duration();
        if lease < MIN_LEASE {
            return Err(Error::invalid(format!(
                "lease must be at least {MIN_LEASE:?}, got {lease:?}"
            )));
        }
        if lease > MAX_LEASE {
            return Err(Error::invalid(format!(
                "lease of {lease:?} exceeds the maximum of {MAX_LEASE:?}"
            )));
        }
        if self.is_watchdog() && lease < MIN_WATCHDOG_LEASE {
            return Err(Error::invalid(format!(
                "a lease renewed by the watchdog must be at least {MIN_WATCHDOG_LEASE:?}, got {lease:?}"
            )));
        }
        Ok(lease)
    }
}

/// How long before the lease's end the holder stops counting on it: 1% of
/// the lease plus 2 ms, for clock drift and the time a request takes.
pub(crate) fn safety_margin(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// Until when a lease set by a request sent at `sent_at` is certainly ours.
pub(crate) fn valid_until(sent_at: Instant, lease: Duration) -> Instant {
    sent_at + lease.saturating_sub(safety_margin(lease))
}

/// What the holder knows about its lease.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseState {
    /// Until when the lease is certainly ours (measured from before the
    /// request that set it, minus the safety margin).
    pub(crate) valid_until: Instant,
    /// The store said the lock is no longer ours.
    pub(crate) lost: bool,
}

/// A grant: what the store answered to an acquire that succeeded, the
/// token the lock or permit is held with, its fencing token, and until when
/// it is certainly ours. A hold is made from it (see the `hold` module).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) token: Token,
    pub(crate) fence: FencingToken,
    pub(crate) valid_until: Instant,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_validated() {
        let fixed = |ms| Lease::Fixed(Duration::from_millis(ms));
        assert!(Lease::Fixed(Duration::ZERO).validate().is_err());
        assert!(fixed(9).validate().is_err());
        assert!(Lease::Fixed(MIN_LEASE).validate().is_ok());
        // The shortest lease still leaves time to use it.
        assert!(safety_margin(MIN_LEASE) < MIN_LEASE / 2);
        assert!(
            Lease::Watchdog(Duration::from_millis(50))
                .validate()
                .is_err()
        );
        assert!(Lease::Watchdog(MAX_LEASE).validate().is_ok());
        assert!(
            Lease::Fixed(MAX_LEASE + Duration::from_millis(1))
                .validate()
                .is_err()
        );
    }
}
