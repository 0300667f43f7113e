//! Multi-locks on one Redis server: every key taken, or none, in one
//! script; a free key with live waiters goes to its first waiter, not to
//! the multi-lock. (Their semantics on every store are the conformance
//! kit's `multi_locks` module.)

use std::time::Duration;

use lockguard_core::Client;
use lockguard_redis::BuilderExt as _;

use super::{Queue, reset_stats, until_queued};
use support::Env;

use crate::support;

/// Client-sent `EVALSHA`s since the last `CONFIG RESETSTAT`.
async fn scripts_sent(admin: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|r| r.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// Whether the lock key of `name` exists on the server.
async fn key_exists(admin: &mut redis::aio::MultiplexedConnection, name: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(format!("lockguard:lock:{{{name}}}"))
        .query_async::<i64>(admin)
        .await
        .unwrap()
        == 1
}

/// Three keys taken with one script (not three), each with its own fencing
/// token; with one of them held, one script answers busy and writes none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_takes_or_refuses_every_key_in_one_script() {
    let env = Env::redis();
    let server = env.server.as_ref().unwrap();
    let (lg, other) = (env.client().await, env.client().await);
    let mut admin = server.connection().await;
    // Load the script first, so no SCRIPT LOAD falls inside.
    let warm = lg.multi_lock(["w1", "w2"]).try_acquire().await.unwrap();
    assert!(warm.release().await.unwrap());

    reset_stats(&mut admin).await;
    let guard = lg
        .multi_lock(["k1", "k2", "k3"])
        .try_acquire()
        .await
        .unwrap();
    assert_eq!(
        scripts_sent(&mut admin).await,
        1,
        "one script for three keys"
    );
    let first: Vec<u64> = guard.fencing_tokens().map(|(_, f)| f.get()).collect();
    assert!(guard.release().await.unwrap());
    // Each key's own sequence: the next multi-lock's tokens are greater.
    let again = lg
        .multi_lock(["k3", "k1", "k2"])
        .try_acquire()
        .await
        .unwrap();
    let second: Vec<u64> = again.fencing_tokens().map(|(_, f)| f.get()).collect();
    assert!(
        first.iter().zip(&second).all(|(a, b)| a < b),
        "{first:?} then {second:?}"
    );
    assert!(again.release().await.unwrap());

    let held = other.lock("k2").try_acquire().await.unwrap();
    reset_stats(&mut admin).await;
    let e = lg
        .multi_lock(["k1", "k2", "k3"])
        .try_acquire()
        .await
        .unwrap_err();
    assert!(e.is_busy() && e.message().contains("k2"), "{e}");
    assert_eq!(scripts_sent(&mut admin).await, 1, "one script, busy");
    assert!(!key_exists(&mut admin, "k1").await && !key_exists(&mut admin, "k3").await);
    assert!(held.release().await.unwrap());
}

/// A key whose holder's lease ran out while a waiter queues for it is not
/// free for a multi-lock: one attempt hands it to the waiter, and the
/// multi-lock, which does not queue, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_never_takes_a_key_from_its_queue() {
    let env = Env::redis();
    let server = env.server.as_ref().unwrap();
    let holder = env.client().await;
    // Its first wait is tried once, then queued; refreshes every 10 s, so
    // only the multi-lock's attempt can move the lock to it.
    let waiter = Client::builder()
        .waiter_timeout(Duration::from_secs(30))
        .retry_interval(Duration::from_secs(10))
        .connect_redis(&server.url())
        .await
        .unwrap();
    let lg = env.client().await;
    let mut admin = server.connection().await;
    let held = holder
        .lock("q")
        .lease(Duration::from_millis(300))
        .try_acquire()
        .await
        .unwrap();
    let waiting = tokio::spawn(async move {
        waiter
            .lock("q")
            .wait(Duration::from_secs(20))
            .acquire()
            .await
    });
    until_queued(&env, Queue::Lock("q"), 1).await;
    // A holder that dies: its lease runs out while the waiter queues.
    std::mem::forget(held);
    // Through the end of the lease and after it, every attempt of the
    // multi-lock is refused: the key goes to the waiter (handed over by
    // the multi-lock's own attempt, or claimed by the waiter at the end of
    // the lease), never to the multi-lock.
    let until = tokio::time::Instant::now() + Duration::from_millis(800);
    while tokio::time::Instant::now() < until {
        let e = lg.multi_lock(["p", "q"]).try_acquire().await.unwrap_err();
        assert!(e.is_busy(), "{e}");
        assert!(
            !key_exists(&mut admin, "p").await,
            "the refused multi-lock took p"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got = waiting.await.unwrap().expect("the waiter gets the lock");
    assert!(got.release().await.unwrap());
}
