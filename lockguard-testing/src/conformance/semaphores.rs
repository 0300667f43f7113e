//! Semaphores: never more than N inside, crashed holders' permits freed at
//! lease end, release, extend and expiry, wake-ups, bad input.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use lockguard_core::{Client, MAX_PERMITS};

use super::Env;
use super::waits::{BOUND, LEASE, RETRY, TASKS, WAIT, Waits, held, patient_clients};

/// 20 tasks on 4 handles share 3 permits; the number inside, kept in a
/// store counter, never exceeds 3.
pub async fn never_more_than_n_inside(env: Env) {
    let clients = env.handles(Client::builder()).await;
    let max_seen = Arc::new(AtomicI64::new(0));
    let data = env.data_client().await;
    let mut tasks = Vec::new();
    for t in 0..20 {
        let lg = clients[t % 4].clone();
        let max_seen = max_seen.clone();
        let inside = data.counter("exports:inside");
        tasks.push(tokio::spawn(async move {
            let sem = lg.semaphore("exports", 3).wait(Duration::from_secs(60));
            for _ in 0..5 {
                let permit = sem.acquire().await.unwrap();
                let n = inside.incr_by(1).await.unwrap();
                max_seen.fetch_max(n, Ordering::SeqCst);
                assert!(n <= 3, "{n} holders inside");
                tokio::task::yield_now().await;
                inside.decr_by(1).await.unwrap();
                assert!(permit.release().await.unwrap());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let max = max_seen.load(Ordering::SeqCst);
    assert!((1..=3).contains(&max), "max inside {max}");
}

/// A holder whose process dies (its runtime is shut down, so neither the
/// watchdog nor a release runs) frees its permit when the lease ends (on
/// ZooKeeper, when its session, as long as the lease, expires).
pub async fn crashed_holder_frees_its_permit_at_lease_end(env: Env) {
    let env = Arc::new(env);
    // Long enough that the check below lands inside what is left of it on
    // a loaded machine (at 600 ms, about 300 ms were left, and a check
    // was seen to come later).
    let lease = Duration::from_millis(1500);
    // Connected before the crash: what is left of the crashed lease (about
    // half of it) is for the check below, not for a connect under load.
    let lg: Client = env.client().await;
    let env2 = env.clone();
    let crashed_at = std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let lg = env2.client_for_lease(lease).await;
            let permit = lg
                .semaphore("crash", 1)
                .watchdog(lease)
                .acquire()
                .await
                .unwrap();
            // Let the watchdog renew once, so the lease end is its doing.
            tokio::time::sleep(lease / 2).await;
            std::mem::forget(permit);
            std::mem::forget(lg);
        });
        rt.shutdown_background();
        Instant::now()
    })
    .join()
    .unwrap();
    let sem = lg.semaphore("crash", 1).wait(Duration::from_secs(10));
    assert!(
        sem.try_acquire().await.unwrap_err().is_busy(),
        "permit freed before its lease"
    );
    let permit = sem.acquire().await.expect("permit freed at lease end");
    let freed_after = crashed_at.elapsed();
    assert!(
        freed_after < lease * 3,
        "freed {freed_after:?} after the crash"
    );
    permit.release().await.unwrap();
}

/// Two permits held, a third refused (with the holder's lease left as
/// retry-after where the store keeps leases); an extended permit outlives
/// one that expires.
///
/// The short lease is a second: the three requests before the extension
/// must finish inside it on a loaded machine (at 100 ms, a slow new pooled
/// connection could let a permit lapse before its check).
pub async fn permits_release_extend_and_expire(env: Env) {
    let lg = env.client().await;
    let lease = Duration::from_secs(1);
    let sem = lg.semaphore("p", 2).lease(lease);
    let a = sem.acquire().await.unwrap();
    let b = sem.acquire().await.unwrap();
    let busy = sem.try_acquire().await.unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    // The holder's remaining lease, where the store keeps it.
    assert_eq!(
        busy.retry_after().is_some(),
        env.store_keeps_leases(),
        "{busy:?}"
    );
    b.extend(Duration::from_secs(10)).await.unwrap();
    tokio::time::sleep(lease + lease / 2).await;
    assert!(!a.is_held());
    assert!(
        a.extend(Duration::from_secs(1))
            .await
            .unwrap_err()
            .is_lease_lost()
    );
    assert!(
        !a.release().await.unwrap(),
        "an expired permit reports not held"
    );
    assert!(b.is_held());
    // A lease long enough that the release below finds it held however
    // slow the requests between.
    let c = lg
        .semaphore("p", 2)
        .lease(Duration::from_secs(10))
        .try_acquire()
        .await
        .unwrap();
    assert!(sem.try_acquire().await.unwrap_err().is_busy());
    assert!(b.release().await.unwrap());
    assert!(c.release().await.unwrap());
}

/// With a 5 s retry interval and a 30 s waiter timeout, only the release
/// notification can wake the waiter in under a second.
pub async fn permit_waiter_is_woken_by_release(env: Env) {
    let holder = env.client().await;
    let waiter = env
        .client_with(Client::builder().waiter_timeout(Duration::from_secs(30)))
        .await;
    let p = holder
        .semaphore("wake", 1)
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let task = tokio::spawn(async move {
        let p = waiter
            .semaphore("wake", 1)
            .retry_interval(Duration::from_secs(5))
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .unwrap();
        let at = Instant::now();
        p.release().await.unwrap();
        at
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    assert!(p.release().await.unwrap());
    let latency = task.await.unwrap() - released;
    assert!(latency < Duration::from_secs(1), "woken after {latency:?}");
}

/// 16 tasks over 4 clients share 3 permits, taking one up to 48 times each,
/// with a 30 s retry interval and a 90 s waiter timeout (a waiter's own
/// refresh comes 15 s and more after it last tried): every permit passed on
/// must come from a wake-up. No acquisition may wait 8 s: each waits for
/// the few tasks ahead of it in the queue. In a group of its own
/// (`queue_wake_ups`), for stores with a queue: a store
/// whose waiters line up without a queue (Redlock) gives no such bound
/// under load. (See the lock's `no_wake_up_is_lost_under_contention`.)
pub async fn no_permit_wake_up_is_lost_under_contention(env: Env) {
    const PERMITS: u32 = 3;
    let rounds = env.contention_rounds().min(48);
    let clients = patient_clients(&env).await;
    let waits = Arc::new(Waits::default());
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let sem = clients[t % clients.len()]
            .semaphore("handoffs", PERMITS)
            .lease(LEASE)
            .retry_interval(RETRY)
            .wait(WAIT);
        let waits = waits.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..rounds {
                let asked = Instant::now();
                let permit = sem
                    .acquire()
                    .await
                    .unwrap_or_else(|e| panic!("task {t}, round {round}: acquire: {e}"));
                waits.record(asked.elapsed());
                tokio::task::yield_now().await;
                held(permit.release().await, t, round);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    waits.assert_below(BOUND, "from asking");
}

/// Zero or too many permits, an empty name, a zero lease: `InvalidInput`
/// errors.
pub async fn semaphore_bad_input(env: Env) {
    let lg = env.client().await;
    for e in [
        lg.semaphore("s", 0).try_acquire().await.unwrap_err(),
        lg.semaphore("s", MAX_PERMITS + 1)
            .try_acquire()
            .await
            .unwrap_err(),
        lg.semaphore("", 1).try_acquire().await.unwrap_err(),
        lg.semaphore("s", 1)
            .lease(Duration::ZERO)
            .acquire()
            .await
            .unwrap_err(),
    ] {
        assert!(e.is_invalid_input(), "{e}");
    }
}
