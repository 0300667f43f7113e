//! Redis Sentinel: a master, a replica and three sentinels (real
//! `redis-server` processes), and `SENTINEL FAILOVER` in the middle of a
//! run with a lock held and a waiter queued.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockguard_core::Client;
use lockguard_redis::BuilderExt as _;
use lockguard_testing::{SENTINEL_SERVICE, SentinelGroup, faults};

use lockguard_testing::conformance::eventually;

/// A client whose waiters, when `patient`, try again on their own only
/// 10 to 20 s apart (so a quicker acquisition was a handoff they were told
/// of).
async fn connect(group: &SentinelGroup, patient: bool) -> Client {
    let b = Client::builder()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500));
    let b = if patient {
        b.waiter_timeout(Duration::from_secs(60))
            .retry_interval(Duration::from_secs(30))
    } else {
        b
    };
    b.connect_sentinel(group.sentinel_urls(), SENTINEL_SERVICE)
        .await
        .expect("connect through the sentinels")
}

/// The client keeps working on the new master without being rebuilt: the
/// holder keeps its lock (its renewals switch over), counter updates resume
/// within seconds, the queued waiter is not stranded (it gets the lock when
/// the holder releases on the new master, told over its pub/sub connection,
/// which followed the master too), and tokens keep increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_follows_the_master_across_a_failover() {
    let mut group = SentinelGroup::start(1, 3);
    let first_master = group.master_port().expect("a master");
    let holder = connect(&group, false).await;
    // The handoff must reach the waiter over its pub/sub connection, which
    // must have followed the master.
    let waiter = connect(&group, true).await;

    let guard = holder
        .lock("failover")
        .watchdog(Duration::from_secs(6))
        .acquire()
        .await
        .unwrap();
    let w = waiter.clone();
    let waiting = tokio::spawn(async move {
        let g = w
            .lock("failover")
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .expect("the waiter was stranded");
        (Instant::now(), g)
    });
    let queued = eventually(Duration::from_secs(10), || async {
        holder.lock("failover").inspect().await.unwrap().waiters == 1
    })
    .await;
    assert!(queued, "the waiter never queued");

    // Writes run all along, and are counted.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let writer = tokio::spawn({
        let (lg, stop, ok, failed) = (holder.clone(), stop.clone(), ok.clone(), failed.clone());
        async move {
            while !stop.load(Ordering::Relaxed) {
                match lg.counter("writes").incr_by(1).await {
                    Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                };
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;

    let new_master = group.failover();
    assert_ne!(new_master, first_master);
    // The old master, now a replica, goes away: only the new one serves.
    group.servers[0].kill();
    let failed_over = Instant::now();
    let before = ok.load(Ordering::Relaxed);
    let resumed = eventually(Duration::from_secs(15), || async {
        ok.load(Ordering::Relaxed) > before + 10
    })
    .await;
    assert!(
        resumed,
        "writes did not resume on the new master ({} failed)",
        failed.load(Ordering::Relaxed)
    );
    println!(
        "writes resumed {:?} after the failover, {} failed",
        failed_over.elapsed(),
        failed.load(Ordering::Relaxed)
    );
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();

    // The holder kept its lock across the failover: a renewal on the new
    // master.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(guard.is_held(), "the holder lost its lock in the failover");
    let held_fence = guard.fencing_token();
    let released = Instant::now();
    assert!(
        guard.release().await.unwrap(),
        "the release found the lock gone"
    );
    let (got_at, next) = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the waiter was stranded")
        .unwrap();
    assert!(
        got_at - released < Duration::from_secs(2),
        "the waiter took {:?} after the release",
        got_at - released
    );
    assert!(next.fencing_token() > held_fence);
    assert!(next.release().await.unwrap());

    // A client made before the failover, never used since, works too.
    let fresh = holder.lock("after").try_acquire().await.unwrap();
    assert!(fresh.release().await.unwrap());
}

/// A master stays writable for a moment after the sentinels promoted its
/// replica, and a renewal it accepts then never reaches the new master,
/// whose copy of the lease is older than the holder counts on: the client
/// renews every lease it renewed on the new master the moment it switches
/// to it, not at the holder's next turn (a third of a lease later, perhaps
/// after the new master's copy ran out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_renews_leases_on_the_new_master_at_once() {
    let group = SentinelGroup::start(1, 3);
    let holder = connect(&group, false).await;
    let lease = Duration::from_secs(30);
    // A fixed lease, extended once: nothing renews it again by itself.
    let guard = holder.lock("renewed").lease(lease).acquire().await.unwrap();
    guard.extend(lease).await.unwrap();
    // Aged, so that the copy the replica has is told from a renewed one.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let new_master = tokio::task::block_in_place(|| group.failover());
    let promoted = redis::Client::open(format!("redis://127.0.0.1:{new_master}")).unwrap();
    let promoted = promoted.get_multiplexed_async_connection().await.unwrap();
    let renewed = eventually(Duration::from_secs(10), || {
        let mut promoted = promoted.clone();
        async move {
            let left: i64 = redis::cmd("PTTL")
                .arg("lockguard:lock:{renewed}")
                .query_async(&mut promoted)
                .await
                .unwrap();
            left > 28_500
        }
    })
    .await;
    assert!(renewed, "the lease was not renewed on the new master");
    assert!(guard.release().await.unwrap());
}

/// The master restarts on its own address (no replica to fail over to),
/// twice: the waiters' pub/sub connection, which the sentinels still name
/// the same master for, comes back and hears the next handoff at once; and
/// clients idle meanwhile do not fail their first request once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restart_loses_neither_wake_ups_nor_requests() {
    let mut group = SentinelGroup::start(0, 1);
    // All made now: for a moment after a restart, the sentinel names no
    // master (until it has seen this one up again).
    let holder = connect(&group, false).await;
    let waiter = connect(&group, true).await;
    let locks = connect(&group, false).await;
    let counts = connect(&group, false).await;
    faults::wake_ups_come_back_after_an_outage(&mut group.servers[0], &holder, &waiter).await;
    faults::first_requests_after_an_outage_succeed(&mut group.servers[0], &locks, &counts).await;
}

/// Sentinels that are not there, and bad settings, are clear errors.
#[tokio::test]
async fn unreachable_sentinels_and_bad_settings_are_clear_errors() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let err = Client::builder()
        .connect_timeout(Duration::from_millis(300))
        .connect_sentinel([format!("redis://127.0.0.1:{port}")], "mymaster")
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    let none: [&str; 0] = [];
    let err = Client::builder()
        .connect_sentinel(none, "mymaster")
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    let err = Client::builder()
        .connect_sentinel(["redis://127.0.0.1:1"], " ")
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    let err = Client::builder()
        .connect_sentinel(["not a url"], "mymaster")
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
}
