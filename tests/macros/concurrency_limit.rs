//! `#[concurrency_limit]`.

use std::sync::Arc;

use lockguard::{Client, concurrency_limit};
use tokio::sync::{Barrier, oneshot};

use crate::support::{Env, Tracker, on_both_stores, within};

on_both_stores!(
    never_more_than_n_bodies_run,
    a_caller_past_the_limit_is_refused,
    a_lost_permit_stops_the_body,
);

#[concurrency_limit(key = "exports:{tenant}", permits = 3, wait = "30s", client = lg)]
async fn export(
    lg: &Client,
    tenant: &str,
    tracker: &Tracker,
    barrier: &Barrier,
) -> Result<(), lockguard::Error> {
    let inside = tracker.enter();
    // Three bodies meet here: the limit lets three in at once.
    barrier.wait().await;
    tokio::task::yield_now().await;
    inside.finish();
    Ok(())
}

/// Twelve calls from two clients on a limit of three: the bodies meet in
/// groups of three (so three do run at once), and never more than three
/// run at once.
async fn never_more_than_n_bodies_run(env: Env) {
    let clients = [env.client().await, env.client().await];
    let tracker = Arc::new(Tracker::default());
    let barrier = Arc::new(Barrier::new(3));
    let mut tasks = Vec::new();
    for t in 0..12 {
        let lg = clients[t % 2].clone();
        let (tracker, barrier) = (tracker.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            export(&lg, "acme", &tracker, &barrier).await
        }));
    }
    for t in tasks {
        within("12 limited calls", t).await.unwrap().unwrap();
    }
    assert_eq!(tracker.max(), 3, "more or fewer than 3 bodies ran at once");
    assert_eq!(tracker.finished(), 12);
}

#[concurrency_limit(key = "reports", permits = 2, client = lg)]
async fn report(
    lg: &Client,
    tracker: &Tracker,
    entered: oneshot::Sender<()>,
    leave: oneshot::Receiver<()>,
) -> Result<u32, lockguard::Error> {
    let inside = tracker.enter();
    let _ = entered.send(());
    let _ = leave.await;
    inside.finish();
    Ok(1)
}

#[concurrency_limit(key = "reports", permits = 2, skip_if_busy, client = lg)]
async fn report_if_free(lg: &Client, tracker: &Tracker) -> Result<Option<u32>, lockguard::Error> {
    tracker.enter().finish();
    Ok(Some(2))
}

/// Without `wait`, a third call while two bodies hold both permits is
/// refused as busy (or skipped with `skip_if_busy`) without running; once
/// one finishes, a call goes through.
async fn a_caller_past_the_limit_is_refused(env: Env) {
    let lg = env.client().await;
    let tracker = Arc::new(Tracker::default());
    let mut leaves = Vec::new();
    let mut holders = Vec::new();
    for _ in 0..2 {
        let (entered_tx, entered_rx) = oneshot::channel();
        let (leave_tx, leave_rx) = oneshot::channel();
        let (lg, tracker) = (env.client().await, tracker.clone());
        holders.push(tokio::spawn(async move {
            report(&lg, &tracker, entered_tx, leave_rx).await
        }));
        within("a holder's body to start", entered_rx)
            .await
            .unwrap();
        leaves.push(leave_tx);
    }
    let (tx, _rx) = oneshot::channel();
    let (_leave, rx) = oneshot::channel();
    let refused = within("the refusal", report(&lg, &tracker, tx, rx)).await;
    assert!(refused.unwrap_err().is_busy());
    assert_eq!(report_if_free(&lg, &tracker).await.unwrap(), None);
    assert_eq!(tracker.runs(), 2, "a refused call's body ran");

    leaves.pop().unwrap().send(()).unwrap();
    assert_eq!(
        within("a holder", holders.pop().unwrap())
            .await
            .unwrap()
            .unwrap(),
        1
    );
    assert_eq!(report_if_free(&lg, &tracker).await.unwrap(), Some(2));
    leaves.pop().unwrap().send(()).unwrap();
    assert_eq!(
        within("a holder", holders.pop().unwrap())
            .await
            .unwrap()
            .unwrap(),
        1
    );
    assert_eq!(tracker.max(), 2);
}

#[concurrency_limit(key = "leased", permits = 1, ttl = "300ms", client = lg)]
async fn outlives_its_permit(lg: &Client, tracker: &Tracker) -> Result<(), lockguard::Error> {
    let inside = tracker.enter();
    std::future::pending::<()>().await;
    inside.finish();
    Ok(())
}

/// A body that outlives its permit's fixed lease is stopped with the
/// lease-lost error and its future dropped.
async fn a_lost_permit_stops_the_body(env: Env) {
    let lg = env.client().await;
    let tracker = Tracker::default();
    let err = within("the lease to run out", outlives_its_permit(&lg, &tracker))
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    assert_eq!(tracker.active(), 0, "the body's future was not dropped");
    assert_eq!(tracker.finished(), 0);
}
