//! How long a waiter pauses between its attempts: jittered, backing off
//! while the store cannot be reached, and never starting an attempt in the
//! last moments of its wait.

use std::time::Duration;

/// The random pause after a round with no winner: long enough to
/// desynchronize contenders (a few round trips), short against any lease.
pub(super) fn contention_backoff() -> Duration {
    Duration::from_micros(fastrand::u64(500..=10_000))
}

/// The pauses between the attempts of a wait that fail to reach the store:
/// 10 ms, doubling up to 1 s, each jittered, so a blip costs a waiter a few
/// quick retries and an outage one attempt a second.
#[derive(Debug, Default)]
pub(super) struct Backoff {
    failures: u32,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_secs(1);

    pub(super) fn next(&mut self) -> Duration {
        let step = Self::FIRST
            .saturating_mul(1 << self.failures.min(10))
            .min(Self::MAX);
        self.failures = self.failures.saturating_add(1);
        jitter(step)
    }
}

/// How close to the end of a wait no new attempt starts: one started later
/// would likely be cut off by the deadline with its outcome unknown.
const FINAL_STRETCH: Duration = Duration::from_millis(50);

/// A nap of at most `remaining`, stretched to all of it when it would end
/// within [`FINAL_STRETCH`] of the deadline.
pub(super) fn final_stretch(nap: Duration, remaining: Duration) -> Duration {
    if remaining.saturating_sub(nap) < FINAL_STRETCH {
        remaining
    } else {
        nap
    }
}

/// A pause between 50% and 100% of `interval`, so waiters of different
/// clients do not retry in lockstep. Never panics on tiny intervals.
pub(super) fn jitter(interval: Duration) -> Duration {
    let nanos = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
    let half = nanos / 2;
    Duration::from_nanos(half + fastrand::u64(0..=nanos - half))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_range_and_handles_tiny_intervals() {
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
        assert!(jitter(Duration::from_nanos(1)) <= Duration::from_nanos(1));
        for _ in 0..1000 {
            let j = jitter(Duration::from_millis(100));
            assert!(j >= Duration::from_millis(50) && j <= Duration::from_millis(100));
        }
        let _ = jitter(Duration::MAX);
    }

    #[test]
    fn backoff_grows_to_its_bound() {
        let mut b = Backoff::default();
        let first = b.next();
        assert!(first >= Duration::from_millis(5) && first <= Duration::from_millis(10));
        for _ in 0..100 {
            assert!(b.next() <= Backoff::MAX);
        }
        assert!(b.next() >= Backoff::MAX / 2);
    }
}
