//! GCRA and the sliding window log against independent reference models,
//! over random arrival sequences, on the in-memory store with a manual
//! clock. (The Redis scripts meet the same models in the conformance
//! suite, `tests/conformance/models.rs`.)

use std::time::Duration;

use proptest::prelude::*;

use crate::Client;
use crate::clock::ManualClock;
use crate::rate_limit::{Algorithm, Quota};

/// GCRA as the continuous-state leaky bucket (ITU-T I.371): a bucket level
/// that drains one microsecond per microsecond, where a request of cost
/// `c` adds `T*c` if that keeps the level within `tau`. Equivalent to the
/// virtual-scheduling form the stores run, written independently.
#[derive(Debug, Default)]
struct LeakyBucket {
    level: i128,
    last: i128,
}

impl LeakyBucket {
    /// Returns (allowed, remaining, retry_after µs).
    fn arrive(&mut self, now: i128, cost: i128, t: i128, tau: i128) -> (bool, i128, i128) {
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
struct Window {
    admitted: Vec<(i128, i128)>,
}

impl Window {
    fn arrive(&mut self, now: i128, cost: i128, limit: i128, period: i128) -> bool {
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

fn quota() -> impl Strategy<Value = Quota> {
    (1u64..40, 1u64..5_000, 1u64..12).prop_map(|(count, period_ms, burst)| {
        Quota::new(count, Duration::from_millis(period_ms)).burst(burst)
    })
}

/// Arrivals as (gap since the previous one in µs, cost).
fn arrivals() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec((0u64..400_000, 1u64..12), 1..60)
}

const START_US: i64 = 1_700_000_000_000_000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn check_gcra(
    rt: &tokio::runtime::Runtime,
    lg: &Client,
    clock: &ManualClock,
    key: &str,
    q: Quota,
    seq: &[(u64, u64)],
) -> Result<(), TestCaseError> {
    let limiter = lg.rate_limiter("model", q).algorithm(Algorithm::Gcra);
    let t = i128::from(q.emission_interval_us());
    let tau = t * i128::from(q.burst_size());
    let mut model = LeakyBucket::default();
    let mut now = START_US;
    for (i, &(gap, cost)) in seq.iter().enumerate() {
        let cost = cost.min(q.burst_size());
        now += i64::try_from(gap).unwrap();
        clock.advance(Duration::from_micros(gap));
        let d = rt.block_on(limiter.check_cost(key, cost));
        let d = d.map_err(|e| TestCaseError::fail(e.to_string()))?;
        let (allowed, remaining, retry) = model.arrive(i128::from(now), i128::from(cost), t, tau);
        prop_assert_eq!(d.allowed, allowed, "request {} (cost {})", i, cost);
        prop_assert_eq!(i128::from(d.remaining), remaining, "remaining at {}", i);
        prop_assert_eq!(
            d.retry_after.as_micros() as i128,
            retry,
            "retry_after at {}",
            i
        );
    }
    Ok(())
}

fn check_sliding(
    rt: &tokio::runtime::Runtime,
    lg: &Client,
    clock: &ManualClock,
    key: &str,
    q: Quota,
    seq: &[(u64, u64)],
) -> Result<(), TestCaseError> {
    let limiter = lg
        .rate_limiter("model", q)
        .algorithm(Algorithm::SlidingWindow);
    let mut model = Window::default();
    let mut now = START_US;
    for (i, &(gap, cost)) in seq.iter().enumerate() {
        let cost = cost.min(q.count());
        now += i64::try_from(gap).unwrap();
        clock.advance(Duration::from_micros(gap));
        let d = rt.block_on(limiter.check_cost(key, cost));
        let d = d.map_err(|e| TestCaseError::fail(e.to_string()))?;
        let allowed = model.arrive(
            i128::from(now),
            i128::from(cost),
            i128::from(q.count()),
            i128::from(q.period_us()),
        );
        prop_assert_eq!(d.allowed, allowed, "request {} (cost {})", i, cost);
    }
    Ok(())
}

fn memory(clock: &ManualClock) -> Client {
    Client::builder()
        .clock(clock.clone())
        .memory()
        .expect("valid settings")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn gcra_on_memory_matches_the_leaky_bucket(q in quota(), seq in arrivals()) {
        let rt = runtime();
        let clock = ManualClock::starting_at(Duration::from_micros(START_US as u64));
        check_gcra(&rt, &memory(&clock), &clock, "k", q, &seq)?;
    }

    #[test]
    fn sliding_window_on_memory_matches_its_definition(q in quota(), seq in arrivals()) {
        let rt = runtime();
        let clock = ManualClock::starting_at(Duration::from_micros(START_US as u64));
        check_sliding(&rt, &memory(&clock), &clock, "k", q, &seq)?;
    }
}
