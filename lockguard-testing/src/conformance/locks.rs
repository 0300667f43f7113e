//! Locks: mutual exclusion under contention, leases that end and fence the
//! old holder, handoff to waiters, the watchdog, reentrancy in a scope,
//! fencing tokens and fenced writes, bad input, bounded waits, and the
//! `_now` methods.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockguard_core::{Client, ErrorKind, MAX_LEASE};

use super::waits::{BOUND, Frees, LEASE, RETRY, TASKS, WAIT, Waits, held, patient_clients};
use super::{Env, WATCHED, eventually, first_free};

/// 32 tasks over 4 client handles take the lock 200 times each (the
/// harness's [`contention_rounds`](super::Harness::contention_rounds)) and
/// do a non-atomic read-modify-write inside it: no update may be lost.
pub async fn mutual_exclusion_under_contention(env: Env) {
    const HANDLES: usize = 4;
    const TASKS: usize = 32;
    let rounds = env.contention_rounds();
    let mut clients = Vec::new();
    for _ in 0..HANDLES {
        clients.push(env.client().await);
    }
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let lg = clients[t % HANDLES].clone();
        let mut value = env.shared_value();
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let guard = lg
                    .lock("counter")
                    .lease(Duration::from_secs(10))
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("acquire");
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                value.racy_increment().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                assert!(guard.release().await.expect("release"), "lease lost");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total = env.shared_value().get().await;
    assert_eq!(total, (TASKS * rounds) as u64, "lost updates");
}

/// 16 tasks over 4 client handles each take and give back a lock of their
/// own, 100 times, at once: locks of different keys never get in each
/// other's way (no acquisition refused, no release failing, as a store
/// whose statements lock more rows than their key's would).
pub async fn distinct_keys_never_interfere(env: Env) {
    const HANDLES: usize = 4;
    const TASKS: usize = 16;
    let mut clients = Vec::new();
    for _ in 0..HANDLES {
        clients.push(env.client().await);
    }
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let lock = clients[t % HANDLES]
            .lock(&format!("own:{t}"))
            .lease(Duration::from_secs(30));
        tasks.push(tokio::spawn(async move {
            for round in 0..100 {
                let g = lock
                    .try_acquire()
                    .await
                    .unwrap_or_else(|e| panic!("task {t}, round {round}: acquire: {e}"));
                let held = g
                    .release()
                    .await
                    .unwrap_or_else(|e| panic!("task {t}, round {round}: release: {e}"));
                assert!(held, "task {t}, round {round}: lost its own lock");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// A holder whose lease is not renewed loses the lock at lease end: a second
/// client acquires, the first guard reports the loss, and a write fenced with
/// the first token is rejected.
pub async fn lease_expiry_hands_over_and_fences_the_old_holder(env: Env) {
    let a = env.client().await;
    let b = env.client().await;
    let lease = Duration::from_millis(300);
    // The lease counts from no earlier than the acquisition was sent.
    let started = Instant::now();
    let first = a.lock("job").lease(lease).acquire().await.unwrap();
    assert!(first.is_held());
    let lost = first.lost();

    let second = b
        .lock("job")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .expect("second client acquires after the lease");
    // A tenth off for a store whose clock runs apart from this one.
    assert!(
        started.elapsed() >= lease * 9 / 10,
        "acquired {:?} after the first holder asked, inside its lease of {lease:?}",
        started.elapsed()
    );
    assert!(second.fencing_token() > first.fencing_token());

    // The loss was signalled before anyone else could hold the lock.
    let err = tokio::time::timeout(Duration::from_millis(1), lost)
        .await
        .expect("lost() completed by the time the lease ended");
    assert!(err.is_lease_lost(), "{err}");
    assert!(!first.is_held());
    assert_eq!(first.valid_for(), Duration::ZERO);

    let data = env.data_client().await;
    let resource = data.fenced("job:output");
    resource
        .write(second.fencing_token(), "second")
        .await
        .unwrap();
    let stale = env
        .data_client()
        .await
        .fenced("job:output")
        .write(first.fencing_token(), "first")
        .await
        .unwrap_err();
    assert_eq!(stale.kind(), ErrorKind::StaleFencingToken, "{stale}");
    let stored = resource.read().await.unwrap().unwrap();
    assert_eq!(stored.value, b"second");
    assert_eq!(stored.token, second.fencing_token());

    assert!(!first.release().await.unwrap(), "old holder released");
    assert!(second.release().await.unwrap());
}

/// A holder whose fixed lease ran out, and another client took the lock,
/// can neither extend (lease lost) nor release it, and the new holder keeps
/// it.
pub async fn non_holder_cannot_release_and_expired_lock_cannot_extend(env: Env) {
    let a = env.client().await;
    let b = env.client().await;
    // Short, so the test does not wait long for it to run out, but long
    // enough for the acquire's own round trips on a loaded machine (a
    // ZooKeeper acquire is several; 50 ms was seen granted too late).
    let old = a
        .lock("k")
        .lease(Duration::from_millis(400))
        .acquire()
        .await
        .unwrap();
    let new = b
        .lock("k")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
        .unwrap();
    let err = old.extend(Duration::from_secs(5)).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    assert!(!old.release().await.unwrap());
    // The new holder still holds it.
    let third = env.client().await;
    let busy = tokio::spawn(async move { third.lock("k").try_acquire().await })
        .await
        .unwrap()
        .unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    // The holder's remaining lease, where the store keeps it.
    assert_eq!(
        busy.retry_after().is_some(),
        env.store_keeps_lock_leases(),
        "{busy:?}"
    );
    new.extend(Duration::from_secs(5)).await.unwrap();
    assert!(new.release().await.unwrap());
}

/// A short lease (a second) kept by the watchdog for three
/// lease lengths: another client is refused throughout, and the lock is
/// free after the release.
pub async fn watchdog_keeps_a_short_lease_alive(env: Env) {
    let a = env.client().await;
    let b = env.client().await;
    let lease = WATCHED;
    let guard = a.lock("w").watchdog(lease).acquire().await.unwrap();
    let until = Instant::now() + lease * 3;
    while Instant::now() < until {
        let b = b.clone();
        let r = tokio::spawn(async move { b.lock("w").try_acquire().await })
            .await
            .unwrap();
        assert!(r.unwrap_err().is_busy(), "lease not renewed");
        assert!(guard.is_held());
        tokio::time::sleep(lease / 4).await;
    }
    assert!(guard.release().await.unwrap(), "watchdog lost the lock");
    let b2 = b.clone();
    let again = tokio::spawn(async move { b2.lock("w").try_acquire().await })
        .await
        .unwrap()
        .expect("free after release");
    assert!(again.release().await.unwrap());
}

/// How long the handed lock's waiter has to confirm a handoff: longer than
/// its lease.
const RESERVATION: Duration = Duration::from_secs(2);

/// A waiter handed the lock by a release keeps it as long as its guard
/// lives: the watchdog renews the lease it confirmed (a second), however
/// long the reservation the handoff made is against it (the waiter's client
/// gives a waiter 2 s to confirm). A first renewal booked from the
/// reservation instead of the grant would come after the lease ended.
///
/// The first holder's lease is long: the lock must pass by the release's
/// handoff, not because a renewal of a short lease came late on a loaded
/// machine (the waiter would then take a free lock, and never queue).
pub async fn a_lock_handed_to_a_waiter_keeps_its_lease(env: Env) {
    let holder = env.client().await;
    let waiter = env
        .client_with(Client::builder().waiter_timeout(RESERVATION))
        .await;
    let probe = env.client().await;
    let lease = WATCHED;
    let held = holder.lock("handed").lease(LEASE).acquire().await.unwrap();
    let waiting = tokio::spawn({
        let waiter = waiter.clone();
        async move {
            waiter
                .lock("handed")
                .watchdog(lease)
                .wait(Duration::from_secs(20))
                .acquire()
                .await
        }
    });
    // Released once the waiter is queued, where the store counts waiters
    // (Redlock's do not queue: it takes the lock by retrying, and the
    // check below holds the same).
    let counted = probe.lock("handed").inspect().await.is_ok();
    if counted {
        let queued = eventually(Duration::from_secs(10), || async {
            probe.lock("handed").inspect().await.unwrap().waiters == 1
        })
        .await;
        if !queued {
            let waited = if waiting.is_finished() {
                format!("{:?}", waiting.await.unwrap().map(|g| g.fencing_token()))
            } else {
                "still waiting".to_owned()
            };
            panic!(
                "the waiter never queued: the holder {}, the waiter's acquire {waited}, \
                 the lock {:?}",
                if held.is_held() {
                    "holds"
                } else {
                    "lost its lease"
                },
                probe.lock("handed").inspect().await
            );
        }
    }
    assert!(held.release().await.unwrap());
    let guard = waiting.await.unwrap().expect("the waiter gets the lock");
    // Past the reservation, with three leases and more: every renewal must
    // have landed in time.
    let until = Instant::now() + RESERVATION.max(lease * 3) + lease;
    while Instant::now() < until {
        assert!(guard.is_held(), "the lock handed over was lost");
        let probe = probe.clone();
        let r = tokio::spawn(async move { probe.lock("handed").try_acquire().await })
            .await
            .unwrap();
        assert!(
            r.unwrap_err().is_busy(),
            "another client took the lock handed over"
        );
        tokio::time::sleep(lease / 4).await;
    }
    assert!(guard.release().await.unwrap(), "the watchdog lost the lock");
}

/// With a 5 s retry interval, a 30 s waiter timeout (refreshes every 5 s)
/// and a 30 s lease, only the release notification can wake the waiter in
/// under a second.
pub async fn waiter_is_woken_by_release_not_by_its_retry_interval(env: Env) {
    let holder = env.client().await;
    let waiter = env
        .client_with(
            Client::builder()
                .retry_interval(Duration::from_secs(5))
                .waiter_timeout(Duration::from_secs(30)),
        )
        .await;
    let guard = holder
        .lock("wake")
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let task = tokio::spawn(async move {
        let g = waiter
            .lock("wake")
            .retry_interval(Duration::from_secs(5))
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .unwrap();
        let at = Instant::now();
        g.release().await.unwrap();
        at
    });
    // Let the waiter make its attempts and start waiting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released_at = Instant::now();
    assert!(guard.release().await.unwrap());
    let acquired_at = task.await.unwrap();
    let latency = acquired_at - released_at;
    println!("wake-up latency after release: {latency:?}");
    assert!(latency < Duration::from_secs(1), "woken after {latency:?}");
}

/// 16 tasks over 4 clients take one lock in turn, up to 48 times each,
/// with a 30 s retry interval and a 90 s waiter timeout (so a waiter's own
/// timed refresh comes 15 s and more after it last tried) and a 40 s lease:
/// every handoff must come from a wake-up. Each acquisition is timed from
/// the moment the lock was freed while it waited (the previous holder's
/// release call, or the start of its own wait if later); none may take 8 s.
/// A wake-up lost under contention (a release whose notification reaches
/// nobody, a listener that stops listening) leaves its waiter to the
/// refresh, and fails this test where the quick refresh of
/// [`mutual_exclusion_under_contention`] would hide it.
pub async fn no_wake_up_is_lost_under_contention(env: Env) {
    let rounds = env.contention_rounds().min(48);
    let clients = patient_clients(&env).await;
    let inside = Arc::new(AtomicUsize::new(0));
    let waits = Arc::new(Waits::default());
    let frees = Arc::new(Frees::new(1));
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let lock = clients[t % clients.len()]
            .lock("handoffs")
            .lease(LEASE)
            .retry_interval(RETRY)
            .wait(WAIT);
        let (inside, frees, waits) = (inside.clone(), frees.clone(), waits.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..rounds {
                let asked = Instant::now();
                let guard = lock
                    .acquire()
                    .await
                    .unwrap_or_else(|e| panic!("task {t}, round {round}: acquire: {e}"));
                waits.record(frees.taken(asked));
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                frees.freeing();
                held(guard.release().await, t, round);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    waits.assert_below(BOUND, "since the lock was freed");
}

/// Dropping `acquire` and `try_acquire` futures at random points, while
/// waiting and around the moment the store grants or refuses the lock,
/// never leaves the lock held: a fresh
/// `try_acquire` succeeds within 2 s, a tenth of the lease. (A grant that
/// lands after the drop is released in the background, usually within a
/// few ms; the bound leaves room for a machine busy with other work, and
/// still fails a lock kept for its lease.)
pub async fn dropped_acquire_futures_never_keep_the_lock(env: Env) {
    let a = env.client().await;
    let probe = env.client().await;
    let lease = Duration::from_secs(20);
    let mut rng = fastrand::Rng::with_seed(7);
    let mut cancelled = 0;
    for round in 0..150 {
        let holder = if round % 3 == 0 {
            Some(probe.lock("cancel").lease(lease).acquire().await.unwrap())
        } else {
            None
        };
        // From 0 to 1.5 ms, so the drop lands before the request is sent,
        // while it is in flight, and after the reply.
        let budget = Duration::from_micros(rng.u64(0..1500));
        let a2 = a.clone();
        let outcome = tokio::spawn(async move {
            let lock = a2.lock("cancel").lease(lease);
            if round % 2 == 0 {
                tokio::time::timeout(budget, lock.acquire()).await.is_err()
            } else {
                tokio::time::timeout(budget, lock.try_acquire())
                    .await
                    .is_err()
            }
        })
        .await
        .unwrap();
        if outcome {
            cancelled += 1;
        }
        if let Some(h) = holder {
            h.release().await.unwrap();
        }
        let probe2 = probe.clone();
        let freed = eventually(Duration::from_secs(2), || {
            let p = probe2.clone();
            async move {
                tokio::spawn(async move {
                    match p.lock("cancel").lease(lease).try_acquire().await {
                        Ok(g) => {
                            g.release().await.unwrap();
                            true
                        }
                        Err(e) if e.is_busy() => false,
                        Err(e) => panic!("{e}"),
                    }
                })
                .await
                .unwrap()
            }
        })
        .await;
        assert!(
            freed,
            "round {round}: lock kept after a dropped acquire ({budget:?})"
        );
    }
    assert!(cancelled > 10, "only {cancelled} futures were dropped");
}

/// A guard dropped without `release` frees the lock in the background,
/// within 500 ms, not at the end of its 30 s lease.
pub async fn dropped_guard_releases_in_the_background(env: Env) {
    let a = env.client().await;
    let b = env.client().await;
    let guard = a
        .lock("drop")
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    drop(guard);
    let freed = eventually(Duration::from_millis(500), || {
        let b = b.clone();
        async move {
            tokio::spawn(async move { b.lock("drop").try_acquire().await.is_ok() })
                .await
                .unwrap()
        }
    })
    .await;
    assert!(freed, "dropped guard kept the lock");
}

/// Inside the scope of a guard, acquiring its lock again on the same client
/// is reentrant (no wait, the same fencing token); every other owner is
/// excluded: other clients, other tasks of the client, and the holding
/// task itself outside the scope.
pub async fn nested_acquisition_in_a_scope_is_reentrant_and_excludes_others(env: Env) {
    let lg = env.client().await;
    let other = env.client().await;
    let busy_elsewhere = |other: Client| async move {
        tokio::spawn(async move { other.lock("nest").try_acquire().await })
            .await
            .unwrap()
            .is_err_and(|e| e.is_busy())
    };
    let outer = lg.lock("nest").acquire().await.unwrap();
    assert!(!outer.is_reentrant());
    let inner = tokio::time::timeout(
        Duration::from_secs(1),
        outer.scope(lg.lock("nest").wait(Duration::from_secs(30)).acquire()),
    )
    .await
    .expect("nested acquire deadlocked")
    .unwrap();
    assert!(inner.is_reentrant());
    // Outside the scope, the holding task is another owner.
    let outside = lg.lock("nest").try_acquire().await.unwrap_err();
    assert!(outside.is_busy(), "{outside}");
    // A nested run is reentrant too, and leaves the lock held.
    let nested = outer
        .scope(async { lg.lock("nest").run(async { 7 }).await })
        .await
        .unwrap();
    assert_eq!(nested, 7);
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    assert!(busy_elsewhere(other.clone()).await);
    // Another task of the same client is excluded too.
    let lg2 = lg.clone();
    let same_client_other_task = tokio::spawn(async move { lg2.lock("nest").try_acquire().await })
        .await
        .unwrap();
    assert!(same_client_other_task.unwrap_err().is_busy());
    assert!(inner.release().await.unwrap(), "inner release reports held");
    assert!(
        busy_elsewhere(other.clone()).await,
        "inner release freed the lock"
    );
    assert!(outer.release().await.unwrap());
    assert!(
        !busy_elsewhere(other).await,
        "outer release did not free the lock"
    );
}

/// Twenty acquisitions alternating between two clients get strictly
/// increasing fencing tokens.
pub async fn fencing_tokens_strictly_increase(env: Env) {
    let a = env.client().await;
    let b = env.client().await;
    let mut last = None;
    for i in 0..20 {
        let lg = if i % 2 == 0 { &a } else { &b };
        let g = lg.lock("fence").acquire().await.unwrap();
        let t = g.fencing_token();
        if let Some(prev) = last {
            assert!(t > prev, "{t} after {prev}");
        }
        last = Some(t);
        g.release().await.unwrap();
    }
}

/// Braces in a key are part of the key: `"a"` and `"{a}"` are two locks,
/// on one client and across clients, and no key names the queue of
/// another or splits one lock's keys across cluster slots.
pub async fn braced_keys_are_locks_of_their_own(env: Env) {
    let a = env.client().await;
    let b = env.client().await;
    let g = a.lock("a").acquire().await.unwrap();
    let other = b.lock("{a}").try_acquire().await;
    assert!(other.is_ok(), "\"{{a}}\" is lock \"a\": {other:?}");
    // In the scope holding "b", "{b}" is another lock, not a reentrant
    // guard of "b": releasing "b" frees "b" and leaves "{b}" held.
    let outer = a.lock("b").acquire().await.unwrap();
    let inner = outer.scope(a.lock("{b}").acquire()).await.unwrap();
    assert!(!inner.is_reentrant());
    assert!(outer.release().await.unwrap());
    let freed = b.lock("b").try_acquire().await;
    assert!(freed.is_ok(), "\"b\" outlived its release: {freed:?}");
    assert!(b.lock("{b}").try_acquire().await.unwrap_err().is_busy());
    for key in [
        "}x",
        "{}",
        "x\\",
        "\\}",
        "{a}:queue",
        "a}:queue",
        "order:{42}",
        "{",
    ] {
        let g = a.lock(key).acquire().await.unwrap();
        assert!(
            b.lock(key).try_acquire().await.unwrap_err().is_busy(),
            "{key:?}"
        );
        assert!(g.release().await.unwrap(), "{key:?}");
    }
    assert!(other.unwrap().release().await.unwrap());
    assert!(freed.unwrap().release().await.unwrap());
    assert!(inner.release().await.unwrap() && g.release().await.unwrap());
}

/// Empty and oversized keys, zero and absurd leases, a watchdog lease too
/// short to renew, braced prefixes and names: each an `InvalidInput` error
/// with a message, never a panic.
pub async fn bad_input_is_a_clear_error(env: Env) {
    let lg = env.client().await;
    let cases = [
        lg.lock("").try_acquire().await.unwrap_err(),
        lg.lock(&"k".repeat(5000)).try_acquire().await.unwrap_err(),
        lg.lock("k")
            .lease(Duration::ZERO)
            .acquire()
            .await
            .unwrap_err(),
        lg.lock("k")
            .lease(MAX_LEASE + Duration::from_secs(1))
            .acquire()
            .await
            .unwrap_err(),
        lg.lock("k")
            .watchdog(Duration::from_millis(10))
            .acquire()
            .await
            .unwrap_err(),
        lg.lock("k")
            .retry_interval(Duration::ZERO)
            .acquire()
            .await
            .unwrap_err(),
        lg.fenced("").read().await.unwrap_err(),
    ];
    for e in cases {
        assert!(e.is_invalid_input(), "{e}");
        assert!(!e.to_string().is_empty());
    }
    let g = lg.lock("k").acquire().await.unwrap();
    assert!(
        g.extend(Duration::ZERO)
            .await
            .unwrap_err()
            .is_invalid_input()
    );
    g.release().await.unwrap();
    let err = Client::builder()
        .retry_interval(Duration::ZERO)
        .memory()
        .unwrap_err();
    assert!(err.is_invalid_input());
    // Braces outside the hash tag would pick every key's cluster slot.
    for prefix in ["app:{x}:", "}", "{"] {
        let err = Client::builder().prefix(prefix).memory().unwrap_err();
        assert!(
            err.is_invalid_input() && err.to_string().contains("brace"),
            "{err}"
        );
    }
    let named = lg.rate_limiter("api{1}", lockguard_core::Quota::per_second(1));
    assert!(named.check("k").await.unwrap_err().is_invalid_input());
}

/// An acquisition with a 1 s wait on a lock held for 30 s gives up as busy
/// after at least 1 s and well before 3 s. (With 300 ms, a Redlock
/// attempt, five nodes each given 250 ms, was seen unanswered within the
/// wait on a loaded two-core machine: a timeout, not a busy lock.)
pub async fn acquire_wait_is_bounded(env: Env) {
    let a = env.client().await;
    let b = env.client().await;
    let _held = a
        .lock("bounded")
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let started = Instant::now();
    let err = tokio::spawn(async move {
        b.lock("bounded")
            .wait(Duration::from_secs(1))
            .acquire()
            .await
    })
    .await
    .unwrap()
    .unwrap_err();
    let waited = started.elapsed();
    assert!(err.is_busy(), "{err}");
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(3),
        "waited {waited:?}"
    );
}

/// Tokens beyond 2^53 are compared exactly: after a write with 2^53 + 1, a
/// write with 2^53 is stale. (Issue 11, item 12: a comparison of Lua
/// numbers took them as equal and let the older token overwrite.)
pub async fn fenced_writes_compare_tokens_exactly(env: Env) {
    use lockguard_core::FencingToken;
    let data = env.data_client().await;
    let resource = data.fenced("big:tokens");
    let newer = FencingToken::new((1 << 53) + 1);
    let older = FencingToken::new(1 << 53);
    resource.write(newer, "newer").await.unwrap();
    let stale = resource.write(older, "older").await.unwrap_err();
    assert_eq!(stale.kind(), ErrorKind::StaleFencingToken, "{stale}");
    let stored = resource.read().await.unwrap().unwrap();
    assert_eq!(stored.token, newer);
    assert_eq!(stored.value, b"newer");
    // Equal and newer tokens still write; the largest token works too.
    resource.write(newer, "again").await.unwrap();
    resource
        .write(FencingToken::new(u64::MAX), "max")
        .await
        .unwrap();
    let stale = resource.write(newer, "late").await.unwrap_err();
    assert_eq!(stale.kind(), ErrorKind::StaleFencingToken, "{stale}");
    assert_eq!(resource.read().await.unwrap().unwrap().value, b"max");
}

/// A removal with the newest token empties the value and keeps the token:
/// a read answers `None`, older tokens stay refused (to write and to
/// remove), the same or a newer token writes again. Removing a value never
/// written records the token all the same.
pub async fn fenced_remove_keeps_the_token(env: Env) {
    use lockguard_core::FencingToken;
    let data = env.data_client().await;
    let resource = data.fenced("remove:written");
    let older = FencingToken::new(9);
    let t1 = FencingToken::new(10);
    let t2 = FencingToken::new(11);
    resource.write(t1, "first").await.unwrap();
    resource.remove(t1).await.unwrap();
    assert_eq!(resource.read().await.unwrap(), None);
    let stale = resource.write(older, "late").await.unwrap_err();
    assert_eq!(stale.kind(), ErrorKind::StaleFencingToken, "{stale}");
    assert_eq!(resource.read().await.unwrap(), None);
    let stale = resource.remove(older).await.unwrap_err();
    assert_eq!(stale.kind(), ErrorKind::StaleFencingToken, "{stale}");
    resource.write(t2, "second").await.unwrap();
    let stored = resource.read().await.unwrap().unwrap();
    assert_eq!(
        (stored.token, stored.value.as_slice()),
        (t2, &b"second"[..])
    );
    // A stale removal removes nothing.
    let stale = resource.remove(t1).await.unwrap_err();
    assert_eq!(stale.kind(), ErrorKind::StaleFencingToken, "{stale}");
    assert_eq!(resource.read().await.unwrap().unwrap().value, b"second");
    // The same token that removed writes again; an empty value is a value.
    resource.remove(t2).await.unwrap();
    resource.write(t2, "").await.unwrap();
    let stored = resource.read().await.unwrap().unwrap();
    assert_eq!((stored.token, stored.value.len()), (t2, 0));

    // A resource never written: the removal records its token.
    let fresh = data.fenced("remove:never-written");
    fresh.remove(t1).await.unwrap();
    assert_eq!(fresh.read().await.unwrap(), None);
    let stale = fresh.write(older, "late").await.unwrap_err();
    assert_eq!(stale.kind(), ErrorKind::StaleFencingToken, "{stale}");
    assert_eq!(fresh.read().await.unwrap(), None);
    // Tokens beyond 2^53 are compared exactly here too.
    let big = FencingToken::new((1 << 53) + 1);
    fresh.remove(big).await.unwrap();
    let stale = fresh
        .write(FencingToken::new(1 << 53), "late")
        .await
        .unwrap_err();
    assert_eq!(stale.kind(), ErrorKind::StaleFencingToken, "{stale}");
    fresh.write(big, "kept").await.unwrap();
    assert_eq!(fresh.read().await.unwrap().unwrap().value, b"kept");
}

/// `try_acquire_now` and `try_release_now` answer at once on the in-memory
/// store, as `try_acquire` and `release` would; on a store that needs a
/// round trip they send nothing (the lock stays free, a guard handed back
/// still holds it). The same for a semaphore's permits.
pub async fn now_methods_answer_at_once_or_send_nothing(env: Env) {
    let lg = env.client().await;
    let other = env.client().await;
    let at_once = lg.store_name() == "memory";
    let lock = lg.lock("now");
    match lock.try_acquire_now() {
        Some(taken) => {
            assert!(at_once, "a {} store answered at once", lg.store_name());
            let guard = taken.unwrap();
            assert!(guard.is_held());
            let busy = other.lock("now").try_acquire_now().unwrap().unwrap_err();
            assert!(busy.is_busy(), "{busy}");
            assert!(busy.retry_after().is_some(), "{busy}");
            let busy = other.lock("now").try_acquire().await.unwrap_err();
            assert!(busy.is_busy(), "{busy}");
            let watch = guard.watch();
            assert!(guard.try_release_now().unwrap().unwrap());
            assert!(!watch.is_held());
        }
        None => {
            assert!(!at_once, "the in-memory store did not answer at once");
            // Nothing was sent: the lock is free.
            let guard = lock.try_acquire().await.unwrap();
            let guard = guard
                .try_release_now()
                .expect_err("a store that needs a round trip released at once");
            assert!(guard.is_held());
            let busy = other.lock("now").try_acquire().await.unwrap_err();
            assert!(busy.is_busy(), "{busy}");
            assert!(guard.release().await.unwrap());
        }
    }
    // Free again, for the next owner.
    let next = other.lock("now").try_acquire().await.unwrap();
    assert!(next.release().await.unwrap());
    // Bad input is an error, not a panic, where the store answers at once.
    if at_once {
        let bad = lg.lock("").try_acquire_now().unwrap().unwrap_err();
        assert!(bad.is_invalid_input(), "{bad}");
    }

    let slots = lg.semaphore("now-slots", 1);
    match slots.try_acquire_now() {
        Some(taken) => {
            let permit = taken.unwrap();
            let full = other.semaphore("now-slots", 1).try_acquire_now().unwrap();
            assert!(full.unwrap_err().is_busy());
            assert!(permit.try_release_now().unwrap().unwrap());
        }
        None => {
            assert!(!at_once);
            let permit = slots.try_acquire().await.unwrap();
            let permit = permit.try_release_now().expect_err("released at once");
            let full = other.semaphore("now-slots", 1).try_acquire().await;
            assert!(full.unwrap_err().is_busy());
            assert!(permit.release().await.unwrap());
        }
    }
    let next = other.semaphore("now-slots", 1).try_acquire().await.unwrap();
    assert!(next.release().await.unwrap());
}

/// A lock taken with `at_least` and released, or dropped, at once stays
/// taken until `at_least` after it was taken, and is free soon after; a
/// release once `at_least` has passed frees it at once; an `at_least`
/// longer than a fixed lease is refused before anything is sent.
pub async fn at_least_keeps_an_early_released_lock_until_it_has_passed(env: Env) {
    let at_least = Duration::from_millis(1500);
    let lg = env.client().await;
    let other = env.client().await;
    for dropped in [false, true] {
        let name = if dropped {
            "at-least-dropped"
        } else {
            "at-least-released"
        };
        let guard = lg
            .lock(name)
            .at_least(at_least)
            .try_acquire()
            .await
            .unwrap();
        let taken = Instant::now();
        if dropped {
            drop(guard);
        } else {
            assert!(
                guard.release().await.unwrap(),
                "{name}: lost before release"
            );
        }
        let busy = other.lock(name).try_acquire().await;
        assert!(
            busy.as_ref().is_err_and(lockguard_core::Error::is_busy),
            "{name}: free right after the release: {busy:?}"
        );
        // Once the release has returned, the refusal tells how long the
        // lock is kept still (a dropped guard's release may still be on
        // its way: the hold's own lease then, where the store keeps one).
        let left = busy
            .as_ref()
            .err()
            .and_then(lockguard_core::Error::retry_after);
        assert!(
            dropped || left.is_some_and(|left| left > Duration::ZERO && left <= at_least),
            "{name}: a kept lock's refusal tells its time left ({left:?})"
        );
        let bound = taken + at_least + Duration::from_secs(3);
        let why = format!("3 s after its at_least ({at_least:?}) had passed");
        let freed = first_free(&other, name, bound, &why).await;
        let after = taken.elapsed();
        assert!(
            after + Duration::from_millis(50) >= at_least,
            "{name}: free {after:?} after it was taken, before its at_least ({at_least:?})"
        );
        assert!(freed.release().await.unwrap());
    }

    let late = lg
        .lock("at-least-passed")
        .at_least(Duration::from_millis(100))
        .try_acquire()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(late.release().await.unwrap());
    let again = other
        .lock("at-least-passed")
        .try_acquire()
        .await
        .expect("a release after at_least frees the lock at once");
    assert!(again.release().await.unwrap());

    let too_long = lg
        .lock("at-least-bad")
        .lease(Duration::from_secs(1))
        .at_least(Duration::from_secs(2));
    let e = too_long.validate().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    let e = too_long.try_acquire().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
}

/// A lock released before its `at_least` has passed stays taken until then
/// even when the client that took it is gone (a scheduled job that ends
/// early and returns from `main`): another client's `try_acquire` is busy
/// until `at_least` after the lock was asked for, and free soon after.
pub async fn at_least_outlives_the_client_that_took_it(env: Env) {
    let at_least = Duration::from_secs(3);
    let other = env.client().await;
    let taker = env.client().await;
    let asked = Instant::now();
    let guard = taker
        .lock("job")
        .lease(Duration::from_secs(4))
        .at_least(at_least)
        .try_acquire()
        .await
        .unwrap();
    assert!(guard.release().await.unwrap(), "lost before its release");
    drop(taker);
    let bound = asked + at_least + Duration::from_secs(5);
    let why = format!("5 s after its at_least ({at_least:?}) had passed");
    let freed = first_free(&other, "job", bound, &why).await;
    let after = asked.elapsed();
    assert!(
        after >= at_least,
        "free {after:?} after it was asked for, before its at_least ({at_least:?}), once its client was gone"
    );
    assert!(freed.release().await.unwrap());
}

/// A waiter queued behind a lock taken with `at_least` is not handed the
/// lock by its early release: it gets it once `at_least` has passed since
/// the lock was asked for, whether or not the holder's client is still
/// there.
pub async fn at_least_holds_against_a_queued_waiter(env: Env) {
    let at_least = Duration::from_secs(2);
    let waiter = env.client().await;
    for gone in [false, true] {
        let name = if gone {
            "job-queued-gone"
        } else {
            "job-queued"
        };
        let taker = env.client().await;
        let asked = Instant::now();
        let guard = taker
            .lock(name)
            .lease(Duration::from_secs(4))
            .at_least(at_least)
            .try_acquire()
            .await
            .unwrap();
        let waiting = tokio::spawn({
            let lock = waiter.lock(name).wait(Duration::from_secs(15));
            async move { lock.acquire().await }
        });
        // Let the waiter queue behind the holder.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            guard.release().await.unwrap(),
            "{name}: lost before release"
        );
        if gone {
            drop(taker);
        }
        let got = waiting.await.unwrap().expect("the waiter takes the lock");
        let after = asked.elapsed();
        assert!(
            after >= at_least,
            "{name}: the queued waiter got the lock {after:?} after it was asked for, before its at_least ({at_least:?})"
        );
        assert!(
            after < at_least + Duration::from_secs(5),
            "{name}: the queued waiter waited {after:?}"
        );
        assert!(got.release().await.unwrap());
    }
}
