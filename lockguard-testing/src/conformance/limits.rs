//! Rate limiters: fixed and sliding windows and GCRA under concurrency,
//! retry-after, what a decision reports, `peek` and `check_now`, keys of
//! their own, bad input.

use std::time::{Duration, Instant};

use lockguard_core::{Algorithm, Client, Quota};

use super::Env;

/// 500 concurrent requests across 4 handles on a quota of 100 per minute.
///
/// The handles wait up to a minute for an answer: the requests queue on one
/// key, and on a database store behind the connections each handle opens
/// first, so the last answer comes after nearly all the others, past the
/// default bound on a loaded machine. What is tested is how many are
/// admitted, not how fast.
async fn admitted(env: &Env, limiter: &str, algorithm: Algorithm, quota: Quota) -> usize {
    let clients = env
        .handles(Client::builder().response_timeout(Duration::from_secs(60)))
        .await;
    let mut tasks = Vec::new();
    for i in 0..500 {
        let l = clients[i % 4]
            .rate_limiter(limiter, quota)
            .algorithm(algorithm);
        tasks.push(tokio::spawn(
            async move { l.check("client-1").await.unwrap() },
        ));
    }
    let mut allowed = 0;
    for t in tasks {
        let d = t.await.unwrap();
        if d.allowed {
            allowed += 1;
        } else {
            assert!(d.retry_after > Duration::ZERO);
        }
    }
    allowed
}

/// Fixed and sliding windows of 100 per minute admit exactly 100 of 500
/// concurrent requests across 4 handles.
pub async fn windows_admit_exactly_the_quota_under_concurrency(env: Env) {
    let q = Quota::per_minute(100);
    assert_eq!(admitted(&env, "fw", Algorithm::FixedWindow, q).await, 100);
    assert_eq!(admitted(&env, "sw", Algorithm::SlidingWindow, q).await, 100);
}

/// GCRA at 100 per minute admits the burst of 100 and at most one more per
/// emission interval that passed during the run.
pub async fn gcra_admits_at_most_burst_plus_rate(env: Env) {
    // 100 per minute with a burst of 100: one more every 600 ms after that.
    let started = Instant::now();
    let n = admitted(&env, "gcra", Algorithm::Gcra, Quota::per_minute(100)).await;
    let elapsed = started.elapsed();
    let bound = 100 + (elapsed.as_millis() / 600) as usize + 1;
    assert!(
        n >= 100 && n <= bound,
        "admitted {n} in {elapsed:?}, bound {bound}"
    );
    if !env.real_time() {
        // The manual clock did not move: exactly the burst.
        assert_eq!(n, 100);
    }
}

/// A request retried after exactly `retry_after` is admitted (on a store
/// that keeps its own time, after at least `retry_after`).
pub async fn retry_after_is_honoured(env: Env) {
    let lg = env.client().await;
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
    ] {
        let l = lg
            .rate_limiter("retry", Quota::per_second(4))
            .algorithm(algorithm);
        // Five requests: the fifth is refused when they come within the
        // quota's second (and, for a fixed window, within one window). A
        // store slow enough (a loaded machine) that they spread over more,
        // or five that straddle a window's end, rightly refuse none: then
        // again on a fresh key. What is tested is the refusal's
        // `retry_after`; other tests hold the limits to their quotas.
        let mut refused = None;
        let mut tries = Vec::new();
        for attempt in 0..5 {
            let key = format!("{algorithm:?}:{attempt}");
            let started = Instant::now();
            let mut denied = None;
            for _ in 0..5 {
                let d = l.check(&key).await.unwrap();
                if !d.allowed {
                    denied = Some(d);
                }
            }
            if let Some(d) = denied {
                refused = Some((key, d));
                break;
            }
            tries.push(started.elapsed());
        }
        let (key, d) = refused.unwrap_or_else(|| {
            panic!(
                "{algorithm:?}: five requests refused none, five times over \
                 (the fives took {tries:?})"
            )
        });
        assert!(d.retry_after > Duration::ZERO && d.retry_after <= Duration::from_millis(1001));
        assert!(d.retry_after_secs() >= 1);
        if env.real_time() {
            tokio::time::sleep(d.retry_after).await;
        } else {
            env.clock().advance(d.retry_after);
        }
        let again = l.check(&key).await.unwrap();
        assert!(
            again.allowed,
            "{algorithm:?}: refused after retry_after {:?}",
            d.retry_after
        );
    }
}

/// `until_ready` refuses at once when the store's `retry_after` runs past
/// its bound, and otherwise waits for its turn and takes it.
pub async fn until_ready_waits_its_turn_within_its_bound(env: Env) {
    let lg = env.client().await;
    // One request per 30 s: a wait of seconds is refused at once, not slept.
    let slow = lg.rate_limiter("until-slow", Quota::per_minute(2));
    while slow.check("k").await.unwrap().allowed {}
    let started = tokio::time::Instant::now();
    let e = slow
        .until_ready("k", Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(e.is_rate_limited(), "{e}");
    assert!(
        e.retry_after().is_some_and(|r| r > Duration::from_secs(1)),
        "{e:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "slept {:?} before refusing",
        started.elapsed()
    );
    if !env.real_time() {
        // A store on a manual clock: time passes only when the test says.
        return;
    }
    // One a second: once the burst is spent, the next waits up to a second.
    let fast = lg.rate_limiter("until-fast", Quota::per_second(1));
    while fast.check("k").await.unwrap().allowed {}
    let started = tokio::time::Instant::now();
    let d = fast.until_ready("k", Duration::from_secs(5)).await.unwrap();
    assert!(d.allowed);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(50) && waited < Duration::from_secs(5),
        "waited {waited:?}"
    );
    // And it took the turn: the next is refused again, unless a whole
    // interval passed between the two answers (a store stalled that long
    // rightly admits it).
    let taken = tokio::time::Instant::now();
    let next = fast.check("k").await.unwrap();
    let gap = taken.elapsed();
    assert!(
        !next.allowed || gap >= Duration::from_secs(1),
        "admitted {gap:?} after until_ready took its turn"
    );
}

/// Every algorithm's decision reports its limit, what remains and when the
/// budget is whole again; a refused cost spends nothing.
pub async fn decisions_report_limit_remaining_and_reset(env: Env) {
    let lg = env.client().await;
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
    ] {
        let l = lg
            .rate_limiter("fields", Quota::per_minute(10))
            .algorithm(algorithm);
        // A fixed window that ends within the checks below would start
        // them over: then they are made on a fresh key in the next window.
        let mut key = String::from("k");
        let d = loop {
            let d = l.check(&key).await.unwrap();
            if matches!(algorithm, Algorithm::FixedWindow) && d.reset_after < Duration::from_secs(2)
            {
                tokio::time::sleep(d.reset_after + Duration::from_millis(50)).await;
                key.push('k');
                continue;
            }
            break d;
        };
        assert!(d.allowed);
        assert_eq!(d.limit, 10, "{algorithm:?}");
        assert_eq!(d.remaining, 9, "{algorithm:?}");
        assert_eq!(d.retry_after, Duration::ZERO);
        assert!(d.reset_after > Duration::ZERO && d.reset_after <= Duration::from_secs(61));
        let d = l.check_cost(&key, 4).await.unwrap();
        assert!(d.allowed);
        assert_eq!(d.remaining, 5, "{algorithm:?}");
        let d = l.check_cost(&key, 6).await.unwrap();
        assert!(!d.allowed, "{algorithm:?}: cost above what is left");
        assert_eq!(d.remaining, 5, "{algorithm:?}: a refusal spends nothing");
        assert!(l.check_cost(&key, 5).await.unwrap().allowed);
    }
}

/// Two keys of one limiter, and one key of two limiters, spend separate
/// budgets.
pub async fn keys_and_limiters_are_independent(env: Env) {
    let lg = env.client().await;
    let a = lg.rate_limiter("a", Quota::per_minute(1));
    let b = lg.rate_limiter("b", Quota::per_minute(1));
    assert!(a.check("user:{1}").await.unwrap().allowed);
    assert!(!a.check("user:{1}").await.unwrap().allowed);
    assert!(a.check("user:{2}").await.unwrap().allowed);
    assert!(b.check("user:{1}").await.unwrap().allowed);
}

/// A zero or absurd quota, a zero burst, a cost above the burst or the
/// window or of zero, empty names and keys: `InvalidInput` errors.
pub async fn limiter_bad_input(env: Env) {
    let lg: Client = env.client().await;
    let cases = [
        lg.rate_limiter("z", Quota::per_second(0)).check("k").await,
        lg.rate_limiter("z", Quota::new(5, Duration::ZERO))
            .check("k")
            .await,
        lg.rate_limiter("z", Quota::new(5, Duration::from_secs(u64::MAX)))
            .check("k")
            .await,
        lg.rate_limiter("z", Quota::per_second(5).burst(0))
            .check("k")
            .await,
        lg.rate_limiter("z", Quota::per_second(5).burst(10))
            .check_cost("k", 11)
            .await,
        lg.rate_limiter("z", Quota::per_second(5))
            .algorithm(Algorithm::FixedWindow)
            .check_cost("k", 6)
            .await,
        lg.rate_limiter("z", Quota::per_second(5))
            .check_cost("k", 0)
            .await,
        lg.rate_limiter("z", Quota::per_second(5)).check("").await,
        lg.rate_limiter("", Quota::per_second(5)).check("k").await,
    ];
    for r in cases {
        let e = r.unwrap_err();
        assert!(e.is_invalid_input(), "{e}");
    }
}
/// `peek` says what a check would decide now and spends nothing: peeked
/// any number of times, the budget is whole; it agrees with the check that
/// follows; and once the budget is spent it says when to retry.
pub async fn peek_tells_the_decision_and_spends_nothing(env: Env) {
    let lg = env.client().await;
    for algorithm in [
        Algorithm::Gcra,
        Algorithm::FixedWindow,
        Algorithm::SlidingWindow,
    ] {
        let limiter = lg
            .rate_limiter(&format!("peek-{algorithm:?}"), Quota::per_minute(3))
            .algorithm(algorithm);
        for _ in 0..10 {
            let d = limiter.peek("ann").await.unwrap();
            assert!(d.allowed, "{algorithm:?}: {d:?}");
            assert_eq!(d.remaining, 2, "{algorithm:?}: a peek spent: {d:?}");
        }
        for left in (0..3).rev() {
            let peeked = limiter.peek("ann").await.unwrap();
            let checked = limiter.check("ann").await.unwrap();
            assert!(peeked.allowed && checked.allowed, "{algorithm:?}");
            assert_eq!(peeked.remaining, left, "{algorithm:?}: {peeked:?}");
            assert_eq!(checked.remaining, left, "{algorithm:?}: {checked:?}");
        }
        let refused = limiter.peek("ann").await.unwrap();
        assert!(!refused.allowed, "{algorithm:?}: {refused:?}");
        // At most the window and the millisecond a store whose keys expire
        // (Redis) adds: a key goes only once its expiry time has passed.
        assert!(
            refused.retry_after > Duration::ZERO
                && refused.retry_after <= Duration::from_millis(60_001),
            "{algorithm:?}: {refused:?}"
        );
        let checked = limiter.check("ann").await.unwrap();
        assert!(!checked.allowed, "{algorithm:?}: {checked:?}");
        // Another key's budget is whole.
        assert_eq!(limiter.peek("bob").await.unwrap().remaining, 2);
        assert!(limiter.peek("").await.unwrap_err().is_invalid_input());
    }
}

/// `check_now` decides at once on the in-memory store, as `check_cost`
/// would; elsewhere it sends nothing (the budget stays whole), except for
/// a refusal cached by `cache_refusals`, which every store answers at once.
pub async fn check_now_answers_at_once_or_sends_nothing(env: Env) {
    let lg = env.client().await;
    let at_once = lg.store_name() == "memory";
    let limiter = lg.rate_limiter("now", Quota::per_minute(2));
    for left in [1, 0] {
        let d = match limiter.check_now("ann", 1) {
            Some(decided) => {
                assert!(at_once, "a {} store answered at once", lg.store_name());
                decided.unwrap()
            }
            None => {
                assert!(!at_once, "the in-memory store did not answer at once");
                // Nothing was spent: the check that follows sees the budget
                // the loop expects.
                limiter.check("ann").await.unwrap()
            }
        };
        assert!(d.allowed, "{d:?}");
        assert_eq!(d.remaining, left, "{d:?}");
    }
    let refused = match limiter.check_now("ann", 1) {
        Some(decided) => decided.unwrap(),
        None => limiter.check("ann").await.unwrap(),
    };
    assert!(!refused.allowed && refused.retry_after > Duration::ZERO);
    if at_once {
        let bad = limiter.check_now("", 1).unwrap().unwrap_err();
        assert!(bad.is_invalid_input(), "{bad}");
        let bad = limiter.check_now("ann", 3).unwrap().unwrap_err();
        assert!(bad.is_invalid_input(), "{bad}");
    }

    // A cached refusal is known without asking the store, on every store.
    let cached = lg
        .rate_limiter("now-cached", Quota::per_minute(1))
        .cache_refusals(16);
    assert!(cached.check("ann").await.unwrap().allowed);
    assert!(!cached.check("ann").await.unwrap().allowed);
    let d = cached
        .check_now("ann", 1)
        .expect("a cached refusal is known at once")
        .unwrap();
    assert!(!d.allowed && d.retry_after > Duration::ZERO, "{d:?}");
    assert_eq!(cached.check_now("bob", 1).is_some(), at_once);
}

/// Keys with braces and backslashes are keys of their own: a counter
/// cannot name another counter's marks, a rate limit key cannot name
/// another's running sum, and keys that end a hash tag early still keep
/// every key of one operation in one cluster slot.
pub async fn braced_counter_and_limiter_keys_are_their_own(env: Env) {
    let lg = env.client().await;
    let n = lg.counter("n");
    assert!(n.mark_once("x").await.unwrap());
    assert_eq!(lg.counter("{n}:marks").incr_by(1).await.unwrap(), 1);
    assert_eq!(lg.counter("n}:marks").incr_by(1).await.unwrap(), 1);
    assert!(!n.mark_once("x").await.unwrap(), "n's marks were touched");
    assert_eq!(n.get().await.unwrap(), 0);
    // A minute's window: alice's first request is still in it at the end
    // however slow the store is today.
    let sliding = lg
        .rate_limiter("api", lockguard_core::Quota::per_minute(10))
        .algorithm(lockguard_core::Algorithm::SlidingWindow);
    assert!(sliding.check("alice").await.unwrap().allowed);
    for key in ["{alice}:sum", "alice}:sum", "}x", "{}", "x\\", "\\}"] {
        assert!(sliding.check(key).await.unwrap().allowed, "{key:?}");
        assert_eq!(lg.counter(key).incr_by(2).await.unwrap(), 2, "{key:?}");
        assert!(lg.counter(key).mark_once("m").await.unwrap(), "{key:?}");
    }
    let alice = sliding.check("alice").await.unwrap();
    assert!(alice.allowed && alice.remaining == 8, "{alice:?}");
}
