//! GCRA and the sliding window log against independent reference models
//! (the kit's `models`), over random arrival sequences, on the in-memory
//! store with a manual clock. (The Redis scripts meet the same models in
//! lockguard-redis's `tests/limit_scripts.rs`.)

use std::time::Duration;

use proptest::prelude::*;

use lockguard_core::{Algorithm, Client, ManualClock, Quota};
use lockguard_testing::models::{LeakyBucket, START_US, Window, arrivals, quota};

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
    let t = i128::try_from(q.emission_interval().as_micros()).unwrap();
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
            i128::try_from(q.period().as_micros()).unwrap(),
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
