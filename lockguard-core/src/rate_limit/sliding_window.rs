//! Sliding window log: every admitted request is logged with its time and
//! cost, and a request is allowed when the costs logged in the last
//! `period` plus its own stay within the quota.
//!
//! Chosen over the two-window counter because it is exact: no rolling
//! period ever admits more than the quota, where the counter's weighted
//! estimate can over- or under-admit around window boundaries. The price is
//! memory: one entry per admitted request in the window (at most `count`
//! per key). A refusal reads only the oldest entries that hold the cost it
//! needs freed (and the newest, for the reset): on Redis, O(log n) for a
//! request of cost 1, never the whole log. On Redis the log is a sorted set
//! and a running sum, in one script.

use std::collections::VecDeque;

use super::decision::{Decision, us};

/// The log of one key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Log {
    entries: VecDeque<(i64, u64)>,
    sum: u64,
}

impl Log {
    /// When the newest entry leaves the window (µs), for expiry.
    pub fn expires_at(&self, period_us: i64) -> Option<i64> {
        self.entries.back().map(|(t, _)| t + period_us)
    }
}

/// One step at `now` (µs on the store's clock), updating `log` in place.
pub fn step(limit: u64, period_us: i64, log: &mut Log, now: i64, cost: u64) -> Decision {
    // An entry counts while now < t + period.
    while let Some(&(t, c)) = log.entries.front() {
        if t + period_us > now {
            break;
        }
        log.entries.pop_front();
        log.sum -= c;
    }
    if log.sum + cost > limit {
        let need = log.sum + cost - limit;
        let mut freed = 0;
        let mut retry = period_us;
        for &(t, c) in &log.entries {
            freed += c;
            if freed >= need {
                retry = t + period_us - now;
                break;
            }
        }
        let reset = log.expires_at(period_us).map_or(0, |e| e - now);
        return decide(limit, false, log.sum, reset, retry);
    }
    log.entries.push_back((now, cost));
    log.sum += cost;
    decide(limit, true, log.sum, period_us, 0)
}

/// The decision from the numbers both stores produce (µs).
/// The decision from a store's own arithmetic (a log kept as rows or a
/// sorted set): whether it was allowed, the cost logged in the window after
/// it, and the µs until the newest entry and until enough of the oldest
/// leave the window.
pub fn decide(limit: u64, allowed: bool, used: u64, reset: i64, retry: i64) -> Decision {
    Decision {
        allowed,
        limit,
        remaining: limit.saturating_sub(used),
        reset_after: us(reset),
        retry_after: if allowed { us(0) } else { us(retry) },
        shadowed: false,
        decided_locally: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_rolling_period_exceeds_the_quota() {
        let (limit, period) = (5, 1_000_000);
        let mut log = Log::default();
        let mut admitted = Vec::new();
        for i in 0..200 {
            let now = i * 37_000;
            if step(limit, period, &mut log, now, 1).allowed {
                admitted.push(now);
            }
        }
        for (i, &t) in admitted.iter().enumerate() {
            let in_window = admitted[i..]
                .iter()
                .take_while(|&&u| u < t + period)
                .count();
            assert!(in_window <= limit as usize);
        }
        assert!(admitted.len() >= 5 * 7);
    }

    #[test]
    fn retry_after_is_exact() {
        let mut log = Log::default();
        assert!(step(2, 1000, &mut log, 0, 1).allowed);
        assert!(step(2, 1000, &mut log, 10, 1).allowed);
        let d = step(2, 1000, &mut log, 500, 1);
        assert!(!d.allowed);
        assert_eq!(d.retry_after, std::time::Duration::from_micros(500));
        assert!(!step(2, 1000, &mut log, 999, 1).allowed);
        assert!(step(2, 1000, &mut log, 1000, 1).allowed);
    }
}
