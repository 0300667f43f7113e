//! The Redis rate-limit scripts against the reference models, over random
//! arrival sequences, with the time passed to the scripts in their last
//! argument (the stores leave it empty: the server's clock). The in-memory
//! store meets the same models in lockguard-core's `tests/limiter_models.rs`.

use lockguard_core::Quota;
use lockguard_testing::RedisServer;
use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use redis::Script;

use lockguard_testing::models::{LeakyBucket, START_US, Window, arrivals, quota};

fn gcra() -> Script {
    Script::new(include_str!("../src/store/scripts/gcra.lua"))
}

fn sliding_window() -> Script {
    Script::new(include_str!("../src/store/scripts/sliding_window.lua"))
}

/// GCRA: allowed, remaining and retry-after agree with the leaky bucket.
async fn check_gcra(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
    q: Quota,
    seq: &[(u64, u64)],
) -> Result<(), TestCaseError> {
    let t = i128::try_from(q.emission_interval().as_micros()).unwrap();
    let tau = t * i128::from(q.burst_size());
    let script = gcra();
    let mut model = LeakyBucket::default();
    let mut now = START_US;
    for (i, &(gap, cost)) in seq.iter().enumerate() {
        let cost = cost.min(q.burst_size());
        now += i64::try_from(gap).unwrap();
        // A peek first: the same answer, and (the model agreeing after it)
        // nothing changed.
        let call = |peek: &'static str| {
            let mut inv = script.key(key);
            inv.arg(i64::try_from(t).unwrap())
                .arg(i64::try_from(tau).unwrap())
                .arg(cost)
                .arg(now)
                .arg(peek);
            inv
        };
        let peeked: (i64, i64, i64) = call("1")
            .invoke_async(conn)
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let (allowed, used, retry): (i64, i64, i64) = call("")
            .invoke_async(conn)
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(peeked, (allowed, used, retry), "peek at request {}", i);
        let (m_allowed, m_remaining, m_retry) =
            model.arrive(i128::from(now), i128::from(cost), t, tau);
        prop_assert_eq!(allowed == 1, m_allowed, "request {} (cost {})", i, cost);
        // The store's `remaining` is the room left under tau, in requests.
        let remaining = (tau - i128::from(used)).max(0) / t;
        prop_assert_eq!(remaining, m_remaining, "remaining at {}", i);
        prop_assert_eq!(i128::from(retry), m_retry, "retry_after at {}", i);
    }
    Ok(())
}

/// The sliding window log: admits exactly what its definition admits.
async fn check_sliding(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
    q: Quota,
    seq: &[(u64, u64)],
) -> Result<(), TestCaseError> {
    let period = i64::try_from(q.period().as_micros()).unwrap();
    let script = sliding_window();
    let mut model = Window::default();
    let mut now = START_US;
    for (i, &(gap, cost)) in seq.iter().enumerate() {
        let cost = cost.min(q.count());
        now += i64::try_from(gap).unwrap();
        // A peek first (expired entries left in place): the same answer,
        // and (the model agreeing after it) nothing changed.
        let call = |peek: &'static str| {
            let mut inv = script.key(key);
            inv.key(format!("{key}:sum"))
                .arg(q.count())
                .arg(period)
                .arg(cost)
                .arg(format!("m{i}"))
                .arg(now)
                .arg(peek);
            inv
        };
        let peeked: (i64, i64, i64, i64) = call("1")
            .invoke_async(conn)
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let answer: (i64, i64, i64, i64) = call("")
            .invoke_async(conn)
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(peeked, answer, "peek at request {}", i);
        let allowed = answer.0;
        let m_allowed = model.arrive(
            i128::from(now),
            i128::from(cost),
            i128::from(q.count()),
            i128::from(period),
        );
        prop_assert_eq!(allowed == 1, m_allowed, "request {} (cost {})", i, cost);
    }
    Ok(())
}

/// The same sequences as the memory model tests, on one server for all
/// cases.
#[test]
fn redis_scripts_match_the_models() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let conn = rt.block_on(server.connection());
    let mut runner = TestRunner::new(ProptestConfig::with_cases(64));
    let case = std::cell::Cell::new(0u64);
    runner
        .run(&(quota(), arrivals()), |(q, seq)| {
            case.set(case.get() + 1);
            let case = case.get();
            let mut conn = conn.clone();
            rt.block_on(check_gcra(&mut conn, &format!("gcra-{case}"), q, &seq))?;
            rt.block_on(check_sliding(&mut conn, &format!("sw-{case}"), q, &seq))
        })
        .unwrap();
}
