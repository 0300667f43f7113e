//! `#[rate_limit]`.

use std::time::Duration;

use lockguard::{Client, rate_limit};

use crate::support::{Env, Tracker, on_both_stores};

on_both_stores!(
    gcra_refuses_calls_past_the_quota,
    fixed_window_refuses_calls_past_the_quota,
    sliding_window_refuses_calls_past_the_quota,
    burst_and_cost_set_what_passes_at_once,
    limiters_are_per_function_unless_named,
    shadow_runs_every_call_and_spends_the_budget,
);

struct User {
    id: u64,
}

#[rate_limit(key = "user:{user.id}", rate = "3/h", client = lg)]
async fn gcra(lg: &Client, user: &User, tracker: &Tracker) -> Result<u64, lockguard::Error> {
    tracker.enter().finish();
    Ok(user.id)
}

#[rate_limit(key = "user:{user.id}", rate = "3/h", algorithm = "fixed_window", client = lg)]
async fn fixed(lg: &Client, user: &User, tracker: &Tracker) -> Result<u64, lockguard::Error> {
    tracker.enter().finish();
    Ok(user.id)
}

#[rate_limit(key = "user:{user.id}", rate = "3/h", algorithm = "sliding_window", client = lg)]
async fn sliding(lg: &Client, user: &User, tracker: &Tracker) -> Result<u64, lockguard::Error> {
    tracker.enter().finish();
    Ok(user.id)
}

/// Calls `f` for user 1 from two clients in turn (two processes sharing
/// one budget): three pass, the fourth is refused with `RateLimited` and
/// a retry time, and its body does not run; user 2 has a budget of its own.
macro_rules! refuses_past_the_quota {
    ($env:expr, $f:ident) => {{
        let clients = [$env.client().await, $env.client().await];
        let tracker = Tracker::default();
        let ann = User { id: 1 };
        for n in 0..3 {
            assert_eq!(
                $f(&clients[n % 2], &ann, &tracker).await.unwrap(),
                1,
                "call {n}"
            );
        }
        let refused = $f(&clients[1], &ann, &tracker).await.unwrap_err();
        assert!(refused.is_rate_limited(), "{refused}");
        assert!(
            refused.retry_after().is_some_and(|r| r > Duration::ZERO),
            "{refused:?}"
        );
        assert_eq!(tracker.runs(), 3, "a refused call's body ran");
        assert_eq!($f(&clients[0], &User { id: 2 }, &tracker).await.unwrap(), 2);
        assert_eq!(tracker.runs(), 4);
    }};
}

async fn gcra_refuses_calls_past_the_quota(env: Env) {
    refuses_past_the_quota!(env, gcra);
}

async fn fixed_window_refuses_calls_past_the_quota(env: Env) {
    refuses_past_the_quota!(env, fixed);
}

async fn sliding_window_refuses_calls_past_the_quota(env: Env) {
    refuses_past_the_quota!(env, sliding);
}

#[rate_limit(key = "burst", rate = "1/h", burst = 3, client = lg)]
async fn bursty(lg: &Client) -> Result<(), lockguard::Error> {
    Ok(())
}

#[rate_limit(key = "costly", rate = "5/h", algorithm = "fixed_window", cost = 2, client = lg)]
async fn costly(lg: &Client) -> Result<(), lockguard::Error> {
    Ok(())
}

/// `burst = 3` on one call an hour lets three through at once; `cost = 2`
/// on five an hour lets two calls through.
async fn burst_and_cost_set_what_passes_at_once(env: Env) {
    let lg = env.client().await;
    for _ in 0..3 {
        bursty(&lg).await.unwrap();
    }
    assert!(bursty(&lg).await.unwrap_err().is_rate_limited());
    costly(&lg).await.unwrap();
    costly(&lg).await.unwrap();
    assert!(costly(&lg).await.unwrap_err().is_rate_limited());
}

#[rate_limit(key = "shared", rate = "1/h", client = lg)]
async fn first(lg: &Client) -> Result<(), lockguard::Error> {
    Ok(())
}

#[rate_limit(key = "shared", rate = "1/h", client = lg)]
async fn second(lg: &Client) -> Result<(), lockguard::Error> {
    Ok(())
}

#[rate_limit(key = "shared", rate = "1/h", name = "exports", client = lg)]
async fn named_a(lg: &Client) -> Result<(), lockguard::Error> {
    Ok(())
}

#[rate_limit(key = "shared", rate = "1/h", name = "exports", client = lg)]
async fn named_b(lg: &Client) -> Result<(), lockguard::Error> {
    Ok(())
}

/// The limiter is named after the function by default, so two functions
/// with the same key have budgets of their own; an explicit `name` shares
/// one, and it is the limiter the client hands out under that name.
async fn limiters_are_per_function_unless_named(env: Env) {
    let lg = env.client().await;
    first(&lg).await.unwrap();
    second(&lg).await.unwrap();
    assert!(first(&lg).await.unwrap_err().is_rate_limited());
    assert!(second(&lg).await.unwrap_err().is_rate_limited());

    named_a(&lg).await.unwrap();
    assert!(named_b(&lg).await.unwrap_err().is_rate_limited());
    let limiter = lg.rate_limiter("exports", lockguard::Quota::per_hour(1));
    assert!(!limiter.check("shared").await.unwrap().allowed);
}

#[rate_limit(key = "exports", rate = "2/h", name = "exports", shadow, client = lg)]
async fn export_shadowed(lg: &Client, tracker: &Tracker) -> Result<(), lockguard::Error> {
    tracker.enter().finish();
    Ok(())
}

#[rate_limit(key = "exports", rate = "2/h", name = "exports", client = lg)]
async fn export_enforced(lg: &Client) -> Result<(), lockguard::Error> {
    Ok(())
}

/// `shadow`: every call runs, the calls past the quota too, while the
/// budget is spent as the enforced limit would spend it: the same limiter
/// without `shadow` then refuses.
async fn shadow_runs_every_call_and_spends_the_budget(env: Env) {
    let lg = env.client().await;
    let tracker = Tracker::default();
    for _ in 0..5 {
        export_shadowed(&lg, &tracker).await.unwrap();
    }
    assert_eq!(tracker.runs(), 5, "a call in shadow mode was refused");
    let refused = export_enforced(&lg).await.unwrap_err();
    assert!(refused.is_rate_limited(), "{refused}");
}
