//! What a rate limiter decided.

use std::time::Duration;

/// The outcome of one rate-limit check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Decision {
    /// Whether the request may go ahead.
    pub allowed: bool,
    /// The most requests the limiter lets through at once (the quota for
    /// windows, the burst for GCRA).
    pub limit: u64,
    /// How many more unit-cost requests would be allowed right now.
    pub remaining: u64,
    /// How long until the limiter is back to its full `limit`.
    pub reset_after: Duration,
    /// How long to wait before this request (same cost) would be allowed;
    /// zero when allowed (but for a [`shadowed`](Decision::shadowed) one).
    /// A retry after exactly this long is admitted unless others took the
    /// capacity first.
    pub retry_after: Duration,
    /// Whether a limiter in [shadow mode](crate::RateLimiter::shadow) let
    /// this request through though it was over the quota: `allowed` is
    /// true, and `remaining` and `retry_after` are the refusal's. Always
    /// false outside shadow mode.
    pub shadowed: bool,
    /// Whether this process decided it on its own, for its share of the
    /// quota, because the store could not be reached (see
    /// [`RateLimiter::fallback_locally`](crate::RateLimiter::fallback_locally)).
    pub decided_locally: bool,
}

impl Decision {
    /// Whether the request may go ahead.
    pub fn is_allowed(&self) -> bool {
        self.allowed
    }

    /// This decision let through in shadow mode: a refusal becomes
    /// allowed and [`shadowed`](Decision::shadowed), keeping its
    /// `remaining` and `retry_after`; an allowed decision stays as it is.
    /// What [`RateLimiter::shadow`](crate::RateLimiter::shadow) answers,
    /// and what a layer in shadow mode makes of its limiter's refusals.
    #[must_use]
    pub fn let_through(self) -> Self {
        if self.allowed {
            return self;
        }
        Self {
            allowed: true,
            shadowed: true,
            ..self
        }
    }

    /// `retry_after` in whole seconds, rounded up, for a `Retry-After`
    /// header: never 0 for a refusal, so it never invites a retry that fails.
    pub fn retry_after_secs(&self) -> u64 {
        ceil_secs(self.retry_after)
    }

    /// `reset_after` in whole seconds, rounded up.
    pub fn reset_after_secs(&self) -> u64 {
        ceil_secs(self.reset_after)
    }
}

/// Whole seconds, rounded up: what a `Retry-After` or `RateLimit` header
/// may say without inviting a client back before its time.
///
/// ```
/// use std::time::Duration;
/// use lockguard_core::rate_limit::ceil_secs;
/// assert_eq!(ceil_secs(Duration::from_millis(1)), 1);
/// assert_eq!(ceil_secs(Duration::from_secs(2)), 2);
/// ```
pub fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// Microseconds (never negative) as a duration.
pub(crate) fn us(v: i64) -> Duration {
    Duration::from_micros(v.max(0).unsigned_abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_seconds_round_up() {
        let d = Decision {
            allowed: false,
            limit: 1,
            remaining: 0,
            reset_after: Duration::from_millis(1),
            retry_after: Duration::from_millis(1),
            shadowed: false,
            decided_locally: false,
        };
        assert_eq!(d.retry_after_secs(), 1);
        assert_eq!(d.reset_after_secs(), 1);
        let d = Decision {
            retry_after: Duration::from_secs(2),
            shadowed: false,
            decided_locally: false,
            ..d
        };
        assert_eq!(d.retry_after_secs(), 2);
    }
}
