//! `#[distributed_lock]`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lockguard::prelude::*;
use lockguard::{Client, distributed_lock};
use tokio::sync::oneshot;

use crate::support::{Env, Tracker, eventually, on_both_stores, within};

on_both_stores!(
    two_concurrent_calls_never_overlap,
    a_second_caller_is_refused_while_the_body_runs,
    a_waiting_caller_runs_after_the_holder,
    skip_if_busy_returns_none_without_running_the_body,
    at_least_runs_a_scheduled_job_once_per_period,
    a_lost_lease_stops_the_body,
    keep_going_on_lost_finishes_the_body,
    nested_calls_on_the_same_key_do_not_deadlock,
    calls_joined_in_one_task_exclude_each_other,
    methods_take_the_client_and_the_key_from_self,
);

#[distributed_lock(key = "account:{id}", wait = "30s", client = lg)]
async fn exclusive(lg: &Client, id: u32, tracker: &Tracker) -> Result<(), lockguard::Error> {
    let inside = tracker.enter();
    for _ in 0..3 {
        tokio::task::yield_now().await;
    }
    tokio::time::sleep(Duration::from_millis(1)).await;
    inside.finish();
    Ok(())
}

/// Eight tasks on two clients ("processes") call the locked function 80
/// times in all: no two bodies ever run at once, and every call ran.
async fn two_concurrent_calls_never_overlap(env: Env) {
    let clients = [env.client().await, env.client().await];
    let tracker = Arc::new(Tracker::default());
    let mut tasks = Vec::new();
    for t in 0..8 {
        let lg = clients[t % 2].clone();
        let tracker = tracker.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                exclusive(&lg, 7, &tracker)
                    .await
                    .expect("the lock is taken within 30s");
            }
        }));
    }
    for t in tasks {
        within("80 locked calls", t).await.unwrap();
    }
    assert_eq!(tracker.max(), 1, "two bodies ran at once");
    assert_eq!(tracker.finished(), 80);
}

#[distributed_lock(key = "job:{name}", client = lg)]
async fn hold_until(
    lg: &Client,
    name: &str,
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

/// Without `wait`, a caller that finds the lock held gets the busy error
/// at once and its body never runs; once the holder is done, the next call
/// goes through.
async fn a_second_caller_is_refused_while_the_body_runs(env: Env) {
    let (a, b) = (env.client().await, env.client().await);
    let tracker = Arc::new(Tracker::default());
    let (entered_tx, entered_rx) = oneshot::channel();
    let (leave_tx, leave_rx) = oneshot::channel();
    let holder = tokio::spawn({
        let tracker = tracker.clone();
        async move { hold_until(&a, "report", &tracker, entered_tx, leave_rx).await }
    });
    within("the holder's body to start", entered_rx)
        .await
        .unwrap();

    let (tx, _rx) = oneshot::channel();
    let (_leave, never) = oneshot::channel();
    let refused = within("the refusal", hold_until(&b, "report", &tracker, tx, never))
        .await
        .unwrap_err();
    assert!(refused.is_busy(), "{refused}");
    assert_eq!(tracker.runs(), 1, "the refused call's body ran");

    // Another key is not affected.
    let (tx, _rx) = oneshot::channel();
    let (leave, other_rx) = oneshot::channel();
    leave.send(()).unwrap();
    assert_eq!(
        hold_until(&b, "other", &tracker, tx, other_rx)
            .await
            .unwrap(),
        1
    );

    leave_tx.send(()).unwrap();
    assert_eq!(within("the holder", holder).await.unwrap().unwrap(), 1);
    let (tx, _rx) = oneshot::channel();
    let (leave, rx) = oneshot::channel();
    leave.send(()).unwrap();
    assert_eq!(hold_until(&b, "report", &tracker, tx, rx).await.unwrap(), 1);
    assert_eq!(tracker.max(), 2, "only the two different keys overlapped");
}

#[distributed_lock(key = "queue", wait = "30s", client = lg)]
async fn after_the_holder(lg: &Client, holder_done: &AtomicBool) -> Result<bool, lockguard::Error> {
    Ok(holder_done.load(Ordering::SeqCst))
}

#[distributed_lock(key = "queue", client = lg)]
async fn first_holder(
    lg: &Client,
    entered: oneshot::Sender<()>,
    leave: oneshot::Receiver<()>,
    done: &AtomicBool,
) -> Result<(), lockguard::Error> {
    let _ = entered.send(());
    let _ = leave.await;
    done.store(true, Ordering::SeqCst);
    Ok(())
}

/// With `wait`, a caller that finds the lock held waits, and its body
/// starts only after the holder's body has ended.
async fn a_waiting_caller_runs_after_the_holder(env: Env) {
    let (a, b) = (env.client().await, env.client().await);
    let done = Arc::new(AtomicBool::new(false));
    let (entered_tx, entered_rx) = oneshot::channel();
    let (leave_tx, leave_rx) = oneshot::channel();
    let holder = tokio::spawn({
        let done = done.clone();
        async move { first_holder(&a, entered_tx, leave_rx, &done).await }
    });
    within("the holder's body to start", entered_rx)
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let done = done.clone();
        async move { after_the_holder(&b, &done).await }
    });
    tokio::task::yield_now().await;
    leave_tx.send(()).unwrap();
    within("the holder", holder).await.unwrap().unwrap();
    let saw_holder_done = within("the waiter", waiter).await.unwrap().unwrap();
    assert!(
        saw_holder_done,
        "the waiter's body ran while the holder's did"
    );
}

#[distributed_lock(key = "nightly:{day}", skip_if_busy, client = lg)]
async fn nightly(
    lg: &Client,
    day: u32,
    tracker: &Tracker,
) -> Result<Option<u32>, lockguard::Error> {
    tracker.enter().finish();
    Ok(Some(day))
}

/// `skip_if_busy`: a held lock means `Ok(None)` and no body; a free one
/// means the body's value.
async fn skip_if_busy_returns_none_without_running_the_body(env: Env) {
    let (lg, other) = (env.client().await, env.client().await);
    let tracker = Tracker::default();
    let held = other.lock("nightly:12").try_acquire().await.unwrap();
    assert_eq!(nightly(&lg, 12, &tracker).await.unwrap(), None);
    assert_eq!(tracker.runs(), 0, "the body ran although the lock was busy");
    assert!(held.release().await.unwrap());
    assert_eq!(nightly(&lg, 12, &tracker).await.unwrap(), Some(12));
    assert_eq!(tracker.finished(), 1);
}

#[distributed_lock(key = "report", ttl = "10s", at_least = "500ms", skip_if_busy, client = lg)]
async fn report(lg: &Client, tracker: &Tracker) -> Result<Option<()>, lockguard::Error> {
    tracker.enter().finish();
    Ok(Some(()))
}

/// `at_least` with `skip_if_busy`, as a job every replica runs on a
/// schedule: of three clients calling in one period, one runs the body and
/// the others skip it, though its body ended at once; a call later in the
/// period skips it too; once `at_least` has passed, the next call runs it.
async fn at_least_runs_a_scheduled_job_once_per_period(env: Env) {
    let clients = [env.client().await, env.client().await, env.client().await];
    let tracker = Tracker::default();
    let started = tokio::time::Instant::now();
    let mut ran = 0;
    for lg in &clients {
        ran += usize::from(report(lg, &tracker).await.unwrap().is_some());
    }
    assert_eq!(ran, 1, "the job ran {ran} times in one period");
    if started.elapsed() < Duration::from_millis(400) {
        assert_eq!(
            report(&clients[1], &tracker).await.unwrap(),
            None,
            "the job ran again within its at_least"
        );
    }
    let next = &clients[2];
    eventually("the next period's run", || async {
        report(next, &tracker).await.unwrap().is_some()
    })
    .await;
    let period = started.elapsed();
    assert!(
        period + Duration::from_millis(50) >= Duration::from_millis(500),
        "the job ran again {period:?} after the first run, before its at_least"
    );
    assert_eq!(tracker.finished(), 2);
}

#[distributed_lock(key = "lease:{name}", ttl = "300ms", client = lg)]
async fn forever(
    lg: &Client,
    name: &str,
    tracker: &Tracker,
    entered: oneshot::Sender<()>,
) -> Result<(), lockguard::Error> {
    let inside = tracker.enter();
    let _ = entered.send(());
    std::future::pending::<()>().await;
    inside.finish();
    Ok(())
}

/// A body that outlives its fixed lease is stopped before the lease ends:
/// the function returns the lease-lost error, and the body's future has
/// been dropped by then (it never reached its end). The lock is then free
/// for others.
async fn a_lost_lease_stops_the_body(env: Env) {
    let (lg, other) = (env.client().await, env.client().await);
    let tracker = Tracker::default();
    let (tx, _rx) = oneshot::channel();
    let err = within("the lease to run out", forever(&lg, "ttl", &tracker, tx))
        .await
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    assert_eq!(tracker.runs(), 1);
    assert_eq!(tracker.active(), 0, "the body's future was not dropped");
    assert_eq!(tracker.finished(), 0);
    eventually("the lock to be free", || async {
        other.lock("lease:ttl").try_acquire().await.is_ok()
    })
    .await;
}

#[distributed_lock(key = "slow:{name}", ttl = "200ms", keep_going_on_lost, client = lg)]
async fn slow(
    lg: &Client,
    name: &str,
    tracker: &Tracker,
    entered: oneshot::Sender<()>,
    go: oneshot::Receiver<()>,
) -> Result<u32, lockguard::Error> {
    let inside = tracker.enter();
    let _ = entered.send(());
    let _ = go.await;
    inside.finish();
    Ok(7)
}

/// `keep_going_on_lost`: the body goes on after the lease has run out
/// (someone else has even taken the lock meanwhile) and its value is
/// returned.
async fn keep_going_on_lost_finishes_the_body(env: Env) {
    let (lg, other) = (env.client().await, env.client().await);
    let tracker = Arc::new(Tracker::default());
    let (entered_tx, entered_rx) = oneshot::channel();
    let (go_tx, go_rx) = oneshot::channel();
    let call = tokio::spawn({
        let tracker = tracker.clone();
        async move { slow(&lg, "x", &tracker, entered_tx, go_rx).await }
    });
    within("the body to start", entered_rx).await.unwrap();
    // Another client gets the lock once the lease has run out.
    let taken = within("the lease to run out", async {
        loop {
            if let Ok(guard) = other.lock("slow:x").try_acquire().await {
                break guard;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(tracker.active(), 1, "the body was stopped");
    assert!(taken.release().await.unwrap());
    go_tx.send(()).unwrap();
    assert_eq!(within("the call", call).await.unwrap().unwrap(), 7);
    assert_eq!(tracker.finished(), 1);
}

#[distributed_lock(key = "acct:{id}", wait = "5s", client = lg)]
async fn transfer(
    lg: &Client,
    other: &Client,
    id: u32,
    tracker: &Tracker,
) -> Result<u32, lockguard::Error> {
    let _inside = tracker.enter();
    // Still exclusive for everyone else.
    let busy = other
        .lock(&format!("acct:{id}"))
        .try_acquire()
        .await
        .unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    let debited = debit(lg, id, tracker).await?;
    Ok(debited + 1)
}

#[distributed_lock(key = "acct:{id}", client = lg)]
async fn debit(lg: &Client, id: u32, tracker: &Tracker) -> Result<u32, lockguard::Error> {
    let _inside = tracker.enter();
    Ok(id * 10)
}

/// A locked function calling another on the same key in the same task gets
/// a reentrant lock instead of waiting for itself; the lock stays held
/// (and exclusive) until the outer call ends, then it is free.
async fn nested_calls_on_the_same_key_do_not_deadlock(env: Env) {
    let (lg, other) = (env.client().await, env.client().await);
    let tracker = Tracker::default();
    let out = within("the nested calls", transfer(&lg, &other, 4, &tracker))
        .await
        .unwrap();
    assert_eq!(out, 41);
    assert_eq!(tracker.runs(), 2);
    assert_eq!(tracker.max(), 2, "the inner body ran inside the outer one");
    // Released at the end of the outer call: free for everyone.
    let guard = other.lock("acct:4").try_acquire().await.unwrap();
    assert!(guard.release().await.unwrap());
}

/// Two calls joined in one task share the task but not the lock:
/// reentrancy is scoped to a body, so the second call waits for the first.
async fn calls_joined_in_one_task_exclude_each_other(env: Env) {
    let lg = env.client().await;
    let tracker = Tracker::default();
    let (a, b) = within("two joined calls", async {
        tokio::join!(exclusive(&lg, 9, &tracker), exclusive(&lg, 9, &tracker))
    })
    .await;
    a.unwrap();
    b.unwrap();
    assert_eq!(tracker.max(), 1, "joined calls ran inside each other");
    assert_eq!(tracker.finished(), 2);
}

struct Tenant {
    locks: Client,
    name: String,
    invoices: u32,
}

impl Tenant {
    #[distributed_lock(key = "tenant:{self.name}:invoice:{number}", client = self.locks)]
    async fn invoice(&mut self, number: u32) -> Result<u32, lockguard::Error> {
        self.invoices += 1;
        if number == 0 {
            return Ok(0);
        }
        Ok(self.invoices)
    }
}

/// A method locks the key formatted from `self` and its arguments, with
/// the client in `self`: holding exactly that key elsewhere makes it busy.
async fn methods_take_the_client_and_the_key_from_self(env: Env) {
    let other = env.client().await;
    let mut tenant = Tenant {
        locks: env.client().await,
        name: "acme".to_owned(),
        invoices: 0,
    };
    assert_eq!(tenant.invoice(5).await.unwrap(), 1);
    assert_eq!(tenant.invoice(0).await.unwrap(), 0);
    let held = other
        .lock("tenant:acme:invoice:5")
        .try_acquire()
        .await
        .unwrap();
    assert!(tenant.invoice(5).await.unwrap_err().is_busy());
    assert_eq!(
        tenant.invoices, 2,
        "the body ran although the lock was busy"
    );
    assert_eq!(tenant.invoice(6).await.unwrap(), 3);
    assert!(held.release().await.unwrap());
}

/// On Redis, a watchdog-renewed lock whose key disappears (taken over, or
/// the store lost it) is reported lost at the next renewal, and the body
/// is stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_away_on_redis_stops_the_body() {
    let env = Env::redis();
    let lg = env.client().await;
    let tracker = Arc::new(Tracker::default());
    let (entered_tx, entered_rx) = oneshot::channel();
    let call = tokio::spawn({
        let tracker = tracker.clone();
        async move { renewed_forever(&lg, &tracker, entered_tx).await }
    });
    within("the body to start", entered_rx).await.unwrap();
    let mut conn = env.server.as_ref().unwrap().connection().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("lockguard:lock:*")
        .query_async(&mut conn)
        .await
        .unwrap();
    let lock_keys: Vec<&String> = keys.iter().filter(|k| !k.ends_with(":fence")).collect();
    assert_eq!(lock_keys.len(), 1, "{keys:?}");
    let deleted: u32 = redis::cmd("DEL")
        .arg(lock_keys[0])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(deleted, 1);
    let err = within("the loss to be noticed", call)
        .await
        .unwrap()
        .unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    assert_eq!(tracker.active(), 0, "the body's future was not dropped");
    assert_eq!(tracker.finished(), 0);
}

#[distributed_lock(key = "renewed", watchdog = "300ms", client = lg)]
async fn renewed_forever(
    lg: &Client,
    tracker: &Tracker,
    entered: oneshot::Sender<()>,
) -> Result<(), lockguard::Error> {
    let inside = tracker.enter();
    let _ = entered.send(());
    std::future::pending::<()>().await;
    inside.finish();
    Ok(())
}

/// Waits up to a second, as [`exclusive`] waits thirty.
#[distributed_lock(key = "account:{id}", wait = "1s", client = lg)]
async fn exclusive_briefly(
    lg: &Client,
    id: u32,
    tracker: &Tracker,
) -> Result<(), lockguard::Error> {
    let inside = tracker.enter();
    inside.finish();
    Ok(())
}

/// When Redis is down, the function returns the store's error (never a
/// panic) and its body does not run: at the end of its wait, which retries
/// the store while it lasts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_is_down_is_an_error() {
    let mut env = Env::redis();
    let lg = Client::builder()
        .response_timeout(Duration::from_millis(500))
        .connect_redis(&env.server.as_ref().unwrap().url())
        .await
        .unwrap();
    env.server.as_mut().unwrap().kill();
    let tracker = Tracker::default();
    let started = std::time::Instant::now();
    let err = within("the call", exclusive_briefly(&lg, 1, &tracker))
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    assert!(err.to_string().contains("retried"), "{err}");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "gave up before its wait ended"
    );
    assert_eq!(tracker.runs(), 0);
}
