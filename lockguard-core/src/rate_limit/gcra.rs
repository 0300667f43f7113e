//! GCRA, the generic cell rate algorithm: a token bucket kept as one
//! timestamp, the theoretical arrival time (TAT) of the next request.
//!
//! With emission interval `T = period / count` and tolerance
//! `tau = T * burst`, a request of cost `c` at time `now` is allowed when
//! `now >= max(TAT, now) + T*c - tau`, and then moves the TAT to
//! `max(TAT, now) + T*c`. It lets `burst` requests through at once and one
//! every `T` after that, exactly (integer microseconds, no drift). The state
//! is one integer per key with a TTL of `TAT - now`.
//!
//! The in-memory store runs [`step`] itself. The Redis, PostgreSQL and
//! MySQL stores run the same steps in the server, on the server's clock
//! (a Lua script on Redis, a function or procedure in the database), and
//! make the decision from the numbers it answers with [`decide`]. Their
//! integers are the same, with two differences at the edges: Redis's Lua
//! computes in doubles, exact below 2^53 µs (about 285 years), and the
//! databases' 64-bit arithmetic fails on an overflow where `step`
//! saturates. Stores without rate limiters (ZooKeeper, Redlock) answer
//! `Unsupported`. The conformance kit's `limits` group checks every
//! store's decisions; property tests check the in-memory store and the
//! Redis script against a reference model.

use super::decision::{Decision, us};
use super::quota::Quota;

/// The GCRA constants of a quota, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Params {
    /// The emission interval `T = period / count`, in µs.
    pub t: i64,
    /// The tolerance `tau = T * burst`, in µs.
    pub tau: i64,
    /// The burst: the most requests admitted at once.
    pub limit: u64,
}

impl Params {
    /// The constants of quota `q`.
    pub fn new(q: &Quota) -> Self {
        let t = q.emission_interval_us();
        let burst = i64::try_from(q.burst_size()).unwrap_or(i64::MAX);
        Self {
            t,
            tau: t.saturating_mul(burst),
            limit: q.burst_size(),
        }
    }
}

/// One step at `now` (µs on the store's clock) over the stored TAT.
/// Returns the decision and, when allowed, the TAT to store.
pub fn step(p: Params, tat: Option<i64>, now: i64, cost: u64) -> (Decision, Option<i64>) {
    let cost = i64::try_from(cost).unwrap_or(i64::MAX);
    let tat = tat.unwrap_or(now).max(now);
    let new_tat = tat.saturating_add(p.t.saturating_mul(cost));
    let allow_at = new_tat - p.tau;
    if now < allow_at {
        (decide(p, false, tat - now, allow_at - now), None)
    } else {
        (decide(p, true, new_tat - now, 0), Some(new_tat))
    }
}

/// Builds the decision from the numbers both stores produce: how much of
/// the tolerance is in use after the request (`used`), and the wait.
pub fn decide(p: Params, allowed: bool, used: i64, retry: i64) -> Decision {
    let left = (p.tau - used).max(0);
    Decision {
        allowed,
        limit: p.limit,
        remaining: (left / p.t.max(1)).unsigned_abs(),
        reset_after: us(used),
        retry_after: if allowed { us(0) } else { us(retry) },
        shadowed: false,
        decided_locally: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_one_per_interval() {
        let p = Params::new(&Quota::per_second(10).burst(3));
        let mut tat = None;
        let now = 1_000_000_000;
        for i in 0..3 {
            let (d, t) = step(p, tat, now, 1);
            assert!(d.allowed, "request {i}");
            assert_eq!(d.remaining, 2 - i);
            tat = t;
        }
        let (d, t) = step(p, tat, now, 1);
        assert!(!d.allowed && t.is_none());
        assert_eq!(d.retry_after, std::time::Duration::from_millis(100));
        let (d, _) = step(p, tat, now + 100_000, 1);
        assert!(d.allowed, "retry after retry_after");
    }
}
