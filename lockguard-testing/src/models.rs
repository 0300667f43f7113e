//! Reference models of the rate-limit algorithms, written independently
//! of the stores, and the random quotas and arrivals (proptest strategies)
//! a store's limiter is checked over: the memory store's limiter with a
//! [`ManualClock`](lockguard_core::ManualClock), Redis's scripts with the
//! time passed in.

use std::time::Duration;

use proptest::prelude::*;

use lockguard_core::Quota;

/// GCRA as the continuous-state leaky bucket (ITU-T I.371): a bucket level
/// that drains one microsecond per microsecond, where a request of cost
/// `c` adds `T*c` if that keeps the level within `tau`. Equivalent to the
/// virtual-scheduling form the stores run, written independently.
#[derive(Debug, Default)]
pub struct LeakyBucket {
    level: i128,
    last: i128,
}

impl LeakyBucket {
    /// A request of `cost` at `now` (µs), for an emission interval `t` and
    /// a tolerance `tau` (µs). Returns (allowed, remaining, retry_after µs).
    pub fn arrive(&mut self, now: i128, cost: i128, t: i128, tau: i128) -> (bool, i128, i128) {
        let level = (self.level - (now - self.last)).max(0);
        if level + t * cost > tau {
            let remaining = (tau - level) / t;
            (false, remaining, level + t * cost - tau)
        } else {
            self.level = level + t * cost;
            self.last = now;
            (true, (tau - self.level) / t, 0)
        }
    }
}

/// The sliding window as its definition: the costs admitted in
/// `(now - period, now]` plus this one stay within the limit.
#[derive(Debug, Default)]
pub struct Window {
    admitted: Vec<(i128, i128)>,
}

impl Window {
    /// Whether a request of `cost` at `now` (µs) is admitted, for `limit`
    /// per `period` (µs); an admitted one is kept.
    pub fn arrive(&mut self, now: i128, cost: i128, limit: i128, period: i128) -> bool {
        let used: i128 = self
            .admitted
            .iter()
            .filter(|(t, _)| *t > now - period)
            .map(|(_, c)| c)
            .sum();
        let ok = used + cost <= limit;
        if ok {
            self.admitted.push((now, cost));
        }
        ok
    }
}

/// Quotas of 1 to 39 per 1 ms to 5 s, bursts of 1 to 11.
pub fn quota() -> impl Strategy<Value = Quota> {
    (1u64..40, 1u64..5_000, 1u64..12).prop_map(|(count, period_ms, burst)| {
        Quota::new(count, Duration::from_millis(period_ms)).burst(burst)
    })
}

/// Arrivals as (gap since the previous one in µs, cost).
pub fn arrivals() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..400_000, 1u64..12), 1..60)
}

/// The clock's reading, in µs since the epoch, when arrivals start.
pub const START_US: i64 = 1_700_000_000_000_000;
