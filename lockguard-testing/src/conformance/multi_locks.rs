//! Multi-key locks: every key or none, no deadlock between multi-locks
//! that share keys in any order, no overlap with single locks on their
//! keys, a fencing token per key, nothing left held by a failed or dropped
//! attempt. Run with the `locks` group.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use lockguard_core::{Client, MAX_MULTI_LOCK_KEYS};

use super::{Env, eventually};

/// Whether `key` is free: another client takes it and gives it back.
async fn is_free(lg: &Client, key: &str) -> bool {
    match lg.lock(key).try_acquire().await {
        Ok(g) => g.release().await.expect("release"),
        Err(e) if e.is_busy() => false,
        Err(e) => panic!("try_acquire({key:?}): {e}"),
    }
}

/// A multi-lock with one busy key takes none of them; once that key is
/// free it takes all, each then busy for anyone else, each with a fencing
/// token above the key's earlier ones.
pub async fn multi_lock_takes_every_key_or_none(env: Env) {
    let (lg, other) = (env.client().await, env.client().await);
    let b = other.lock("m:b").try_acquire().await.unwrap();
    let before = b.fencing_token();
    let e = lg
        .multi_lock(["m:c", "m:a", "m:b"])
        .try_acquire()
        .await
        .unwrap_err();
    assert!(e.is_busy(), "{e}");
    assert!(e.message().contains("m:b"), "names the busy key: {e}");
    for key in ["m:a", "m:c"] {
        assert!(
            is_free(&other, key).await,
            "{key} left held by a refused multi-lock"
        );
    }
    assert!(b.release().await.unwrap());

    let guard = lg
        .multi_lock(["m:c", "m:a", "m:b", "m:a"])
        .try_acquire()
        .await
        .unwrap();
    assert_eq!(guard.names().collect::<Vec<_>>(), ["m:a", "m:b", "m:c"]);
    assert!(guard.fencing_token("m:b").unwrap() > before);
    assert_eq!(guard.fencing_tokens().count(), 3);
    assert!(guard.fencing_token("m:d").is_none());
    for key in ["m:a", "m:b", "m:c"] {
        assert!(
            !is_free(&other, key).await,
            "{key} not held by the multi-lock"
        );
    }
    assert!(guard.is_held());
    assert!(guard.release().await.unwrap());
    for key in ["m:a", "m:b", "m:c"] {
        assert!(is_free(&other, key).await, "{key} held after the release");
    }
}

/// Clients take overlapping sets of keys, written in opposite orders, and
/// single locks on those keys, all waiting: everyone finishes (no
/// deadlock), and no key ever has two holders.
pub async fn overlapping_multi_locks_never_deadlock_nor_overlap(env: Env) {
    const CLIENTS: usize = 6;
    let rounds = (env.contention_rounds() / 10).max(8);
    let sets: [&[&str]; CLIENTS] = [
        &["o:x", "o:y"],
        &["o:y", "o:x"],
        &["o:z", "o:y", "o:x"],
        &["o:y", "o:z"],
        &["o:x"],
        &["o:z"],
    ];
    let inside: Arc<HashMap<&str, AtomicBool>> = Arc::new(
        ["o:x", "o:y", "o:z"]
            .into_iter()
            .map(|k| (k, AtomicBool::new(false)))
            .collect(),
    );
    let mut tasks = Vec::new();
    for set in sets {
        let lg = env.client().await;
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let guard = lg
                    .multi_lock(set)
                    .lease(Duration::from_secs(10))
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await
                    .expect("acquire");
                for key in set {
                    assert!(
                        !inside[key].swap(true, Ordering::SeqCst),
                        "{key}: two holders"
                    );
                }
                tokio::task::yield_now().await;
                for key in set {
                    inside[key].store(false, Ordering::SeqCst);
                }
                assert!(guard.release().await.expect("release"), "lease lost");
            }
        }));
    }
    let started = Instant::now();
    for t in tasks {
        t.await.unwrap();
    }
    // Each round holds for a moment: a deadlock would last the whole wait.
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "took {:?}",
        started.elapsed()
    );
}

/// A multi-lock whose fixed lease is shorter than its wait returns only
/// holding every key: a key taken early that lapsed while a later one was
/// waited for, and that another client took meanwhile, is taken again once
/// that client's lease has ended, never returned lapsed.
pub async fn a_multi_lock_holds_every_key_when_it_returns(env: Env) {
    let (a, b, c) = (env.client().await, env.client().await, env.client().await);
    let multi = a
        .multi_lock(["l:a", "l:b"])
        .lease(Duration::from_secs(1))
        .wait(Duration::from_secs(20));
    // The key taken first, and the one waited for while it lapses.
    let order: Vec<String> = multi.names().map(str::to_owned).collect();
    let (first, last) = (order[0].clone(), order[1].clone());
    let held = b
        .lock(&last)
        .lease(Duration::from_secs(30))
        .try_acquire()
        .await
        .unwrap();
    let waiting = tokio::spawn(async move { multi.acquire().await });
    // Once the multi-lock has taken its first key and that has lapsed, C
    // takes it for a while (taken before the multi-lock had it, it is
    // given back to it).
    let started = Instant::now();
    let mut seen_taken = false;
    let taken = loop {
        match c
            .lock(&first)
            .lease(Duration::from_millis(1500))
            .try_acquire()
            .await
        {
            Ok(g) if seen_taken => break g,
            Ok(g) => assert!(g.release().await.unwrap()),
            Err(e) => {
                assert!(e.is_busy(), "{e}");
                seen_taken = true;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{first} never lapsed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // The last key is freed after C's hold of the first has ended, so the
    // multi-lock finds its first key lapsed when it gets the last.
    while taken.is_held() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(held.release().await.unwrap());
    let guard = waiting
        .await
        .unwrap()
        .expect("the multi-lock takes both keys");
    let keys: Vec<_> = guard
        .guards()
        .iter()
        .map(|g| (g.name().to_owned(), g.is_held()))
        .collect();
    assert!(guard.is_held(), "returned with a lapsed key: {keys:?}");
    assert!(
        guard.fencing_token(&first).unwrap() > taken.fencing_token(),
        "{first} was not taken again after C's hold"
    );
    assert!(guard.release().await.unwrap());
}

/// The wait of the multi-lock that runs out: long enough that a store
/// slowed by a loaded machine (a MySQL statement taking hundreds of
/// milliseconds) answers the first keys' attempts within it, so the wait
/// runs out on the busy key, as `Busy`, not on an unanswered request.
const WAIT_OUT: Duration = Duration::from_secs(2);

/// A waiting multi-lock that cannot get one key within its wait gives up
/// with `Busy` near the end of the wait, and holds none of the keys.
pub async fn a_multi_lock_that_runs_out_of_wait_leaves_no_key_held(env: Env) {
    let (lg, other) = (env.client().await, env.client().await);
    let held = other.lock("w:c").acquire().await.unwrap();
    let started = Instant::now();
    let e = lg
        .multi_lock(["w:a", "w:b", "w:c"])
        .wait(WAIT_OUT)
        .acquire()
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(e.is_busy(), "{e}");
    assert!(waited >= WAIT_OUT, "gave up after {waited:?}");
    assert!(
        waited < WAIT_OUT + Duration::from_secs(5),
        "gave up after {waited:?}"
    );
    for key in ["w:a", "w:b"] {
        assert!(is_free(&other, key).await, "{key} left held");
    }
    held.release().await.unwrap();
}

/// A multi-lock waiting for a busy key gets every key once that key is
/// released, well before its wait ends.
pub async fn a_waiting_multi_lock_gets_every_key_when_the_last_is_freed(env: Env) {
    let (lg, other) = (env.client().await, env.client().await);
    let held = other.lock("h:b").acquire().await.unwrap();
    let multi = lg.multi_lock(["h:b", "h:a"]).wait(Duration::from_secs(20));
    let waiting = tokio::spawn(async move { multi.acquire().await });
    // Queued behind the holder (or retrying, on a store without a queue).
    assert!(
        eventually(Duration::from_secs(20), || async {
            !is_free(&env.client().await, "h:a").await
        })
        .await,
        "the multi-lock never took its first key"
    );
    let released = Instant::now();
    held.release().await.unwrap();
    let guard = waiting.await.unwrap().expect("acquire");
    assert!(
        released.elapsed() < Duration::from_secs(10),
        "took {:?}",
        released.elapsed()
    );
    assert_eq!(guard.names().count(), 2);
    assert!(guard.release().await.unwrap());
}

/// Dropping a multi-lock's `acquire` while it waits for its last key
/// leaves none of its keys held for long: the taken ones are released in
/// the background, and the awaited one, once released, is not kept for
/// the dropped acquire.
pub async fn a_dropped_multi_lock_acquire_leaves_no_key_held(env: Env) {
    let (lg, other) = (env.client().await, env.client().await);
    let held = other.lock("d:c").acquire().await.unwrap();
    let multi = lg
        .multi_lock(["d:a", "d:b", "d:c"])
        .wait(Duration::from_secs(30));
    let waiting = tokio::spawn(async move { multi.acquire().await });
    let probe = env.client().await;
    assert!(
        eventually(Duration::from_secs(20), || async {
            !is_free(&probe, "d:b").await
        })
        .await,
        "the multi-lock never took its first keys"
    );
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    for key in ["d:a", "d:b"] {
        assert!(
            eventually(Duration::from_secs(20), || async {
                is_free(&probe, key).await
            })
            .await,
            "{key} still held after the acquire was dropped"
        );
    }
    // The busy key is free soon after its release: handed to the dropped
    // acquire's place in its queue, if that place was not yet gone, it is
    // passed on in the background, within the waiter timeout.
    assert!(held.release().await.unwrap());
    assert!(
        eventually(Duration::from_secs(20), || async {
            is_free(&probe, "d:c").await
        })
        .await,
        "d:c still held after its release"
    );
}

/// Inside `run`, each key is reentrant; a lost lease of any key stops the
/// body with `LeaseLost`; afterwards every key is free.
pub async fn multi_lock_run_is_reentrant_and_stops_on_a_lost_lease(env: Env) {
    let (lg, other) = (env.client().await, env.client().await);
    let multi = lg.multi_lock(["r:a", "r:b"]);
    let inner = multi
        .run(async {
            let g = lg.lock("r:b").acquire().await.unwrap();
            g.is_reentrant()
        })
        .await
        .unwrap();
    assert!(inner, "a key of the scope is reentrant inside it");
    assert!(is_free(&other, "r:a").await && is_free(&other, "r:b").await);

    // A fixed lease that runs out while the body runs.
    let lease = Duration::from_millis(300);
    let e = lg
        .multi_lock(["r:a", "r:b"])
        .lease(lease)
        .run(std::future::pending::<()>())
        .await
        .unwrap_err();
    assert!(e.is_lease_lost(), "{e}");
}

/// No keys, too many, a bad name or bad settings are `InvalidInput` before
/// anything is sent.
pub async fn multi_lock_bad_input(env: Env) {
    let lg = env.client().await;
    let too_many: Vec<String> = (0..=MAX_MULTI_LOCK_KEYS).map(|i| format!("k{i}")).collect();
    let cases = [
        lg.multi_lock(Vec::<&str>::new())
            .try_acquire()
            .await
            .unwrap_err(),
        lg.multi_lock(&too_many).acquire().await.unwrap_err(),
        lg.multi_lock(["ok", ""]).acquire().await.unwrap_err(),
        lg.multi_lock(["ok"])
            .lease(Duration::ZERO)
            .acquire()
            .await
            .unwrap_err(),
        lg.multi_lock(["ok"])
            .retry_interval(Duration::ZERO)
            .try_acquire()
            .await
            .unwrap_err(),
    ];
    for e in cases {
        assert!(e.is_invalid_input(), "{e}");
    }
    assert!(lg.multi_lock(["ok", ""]).validate().is_err());
    assert!(lg.multi_lock(["ok", "fine"]).validate().is_ok());
    // Nothing was taken by the refused ones.
    assert!(is_free(&lg, "ok").await);
}
