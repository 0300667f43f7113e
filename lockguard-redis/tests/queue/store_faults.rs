//! The queue when Redis misbehaves: the waiter a lock is handed to loses
//! its connections, and the server restarts empty with a full queue.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockguard_core::Client;
use redis::aio::MultiplexedConnection;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::support::Env;
use crate::{Queue, assert_busy, join_all, queue_ahead, until_queued};

/// The ids of the server's client connections.
async fn client_ids(conn: &mut MultiplexedConnection) -> HashSet<u64> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(conn)
        .await
        .expect("CLIENT LIST");
    list.lines()
        .filter_map(|l| l.strip_prefix("id="))
        .filter_map(|l| l.split(' ').next()?.parse().ok())
        .collect()
}

/// A queued waiter loses its command and pub/sub connections right before
/// the holder releases, and cannot reconnect until the release is done, so
/// the handoff's notification is lost. The waiter reconnects and takes the
/// lock within its waiter timeout plus slack, and nobody holds it
/// meanwhile: not the released holder, not anyone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_target_connection_killed() {
    handoff_target_cut_off(0).await;
}

/// The same with the waiter queued far back, behind three others (its
/// place kept for several waiter timeouts, so it attempts seldom): both the
/// notice that it came near the head and the handoff are lost while its
/// connections are down. It still takes the lock within its waiter timeout
/// plus slack of the release, and nobody holds it meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn far_handoff_target_connection_killed() {
    handoff_target_cut_off(3).await;
}

/// The cut-off waiter's test, with `ahead` live waiters queued before it,
/// each releasing as soon as it acquires.
async fn handoff_target_cut_off(ahead: u64) {
    let env = Env::redis();
    let server = env.server.as_ref().expect("redis");
    let timeout = Duration::from_secs(1);
    let settings = || Client::builder().waiter_timeout(timeout);
    let holder = env.client_with(settings()).await;
    let guard = holder
        .lock("cut")
        .lease(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let mut before = queue_ahead(&env, Queue::Lock("cut"), ahead, settings).await;
    // Every connection open now is spared: the holder's, the waiters'
    // ahead, and this one.
    let mut admin = server.connection().await;
    let spared = client_ids(&mut admin).await;
    let spared_channels = channels(&mut admin).await;
    let target = env.client_with(settings()).await;
    let waiter = tokio::spawn(async move {
        let g = target
            .lock("cut")
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .expect("the cut-off target acquires");
        (Instant::now(), g)
    });
    until_queued(&env, Queue::Lock("cut"), ahead + 1).await;

    // No new connection is let in (the target would resubscribe within a
    // millisecond) until the release is done.
    let (_, maxclients): (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxclients")
        .query_async(&mut admin)
        .await
        .expect("CONFIG GET maxclients");
    config_set(&mut admin, "maxclients", "1").await;
    // Kill every connection opened since (the target's two, and the tests'
    // own short-lived ones); the holder's is kept, so it releases at once.
    let mut killed = 0;
    for id in client_ids(&mut admin).await {
        if spared.contains(&id) {
            continue;
        }
        let n: u64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(id)
            .query_async(&mut admin)
            .await
            .expect("CLIENT KILL");
        killed += n;
    }
    assert!(
        killed >= 2,
        "the target's command and pub/sub connections: killed {killed}"
    );
    let listening = channels(&mut admin).await;
    assert_eq!(
        listening, spared_channels,
        "the target still listens, its notification would not be lost"
    );

    let old = guard.fencing_token();
    let released = Instant::now();
    assert!(
        guard.release().await.unwrap(),
        "the holder lost the lock before releasing it"
    );
    // The waiters ahead take their turns; then it is the target's.
    join_all(&mut before, Duration::from_secs(30)).await;
    // Handed to the target: the released holder does not hold it (its
    // try_acquire is refused, not reentrant), nor can anyone else take it.
    assert_busy(
        holder.lock("cut").try_acquire().await,
        "the released holder",
    );
    config_set(&mut admin, "maxclients", &maxclients).await;
    let other = env.client().await;
    assert_busy(other.lock("cut").try_acquire().await, "another client");

    let (acquired, g) = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the cut-off target was never served")
        .unwrap();
    let delay = acquired - released;
    println!("the cut-off target acquired {delay:?} after the release");
    let bound = timeout + Duration::from_secs(1);
    assert!(delay < bound, "took {delay:?} (bound {bound:?})");
    assert!(g.is_held());
    assert!(g.fencing_token() > old, "the target's fence is not newer");
    assert!(g.release().await.unwrap(), "the target lost the lock");
}

/// The channels someone is subscribed to.
async fn channels(conn: &mut MultiplexedConnection) -> HashSet<String> {
    redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .query_async(conn)
        .await
        .expect("PUBSUB CHANNELS")
}

/// `CONFIG SET name value`.
async fn config_set(conn: &mut MultiplexedConnection, name: &str, value: &str) {
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg(name)
        .arg(value)
        .query_async(conn)
        .await
        .unwrap_or_else(|e| panic!("CONFIG SET {name} {value}: {e}"));
}

/// Redis restarts empty under a holder (watchdog, 2 s lease) and five
/// queued waiters (10 s wait): the waiters queue again and every one
/// acquires, never two at once, well within its wait; the old holder learns
/// it lost the lock within its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_with_a_full_queue() {
    let mut env = Env::redis();
    let queue = Queue::Lock("reborn");
    let lease = Duration::from_secs(2);
    let wait = Duration::from_secs(10);
    let holder = env.client().await;
    let guard = holder
        .lock("reborn")
        .watchdog(lease)
        .acquire()
        .await
        .unwrap();
    let lost = guard.lost();
    let lost = tokio::spawn(async move {
        let err = lost.await;
        (Instant::now(), err)
    });
    let inside = Arc::new(AtomicUsize::new(0));
    let mut waiters = JoinSet::new();
    for i in 0..5 {
        let lg = env.client().await;
        let inside = inside.clone();
        waiters.spawn(async move {
            let g = lg
                .lock("reborn")
                .wait(wait)
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("waiter {i} after the restart: {e}"));
            let at = Instant::now();
            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
            tokio::time::sleep(Duration::from_millis(20)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            assert!(g.release().await.unwrap(), "lost the lock while holding it");
            at
        });
        until_queued(&env, queue, i + 1).await;
    }

    let server = env.server.as_mut().expect("redis");
    let restarted = Instant::now();
    tokio::task::block_in_place(|| server.restart());
    let served = join_all(&mut waiters, wait + Duration::from_secs(5)).await;
    let last = served.iter().map(|at| *at - restarted).max().unwrap();
    println!("the last waiter acquired {last:?} after the restart");
    assert!(
        last < wait / 2,
        "a waiter acquired {last:?} after the restart (its wait is {wait:?})"
    );

    let (at, err) = tokio::time::timeout(Duration::from_secs(10), lost)
        .await
        .expect("the old holder never learned of the loss")
        .unwrap();
    assert!(err.is_lease_lost(), "{err}");
    let after = at - restarted;
    println!("the old holder learned of the loss {after:?} after the restart");
    assert!(
        after <= lease,
        "the old holder learned of the loss {after:?} after the restart (lease {lease:?})"
    );
    assert!(!guard.is_held());
}
