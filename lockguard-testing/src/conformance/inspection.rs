//! Inspection: what the store knows of a lock or a semaphore, read in one
//! round trip from any client, changing nothing.

use std::time::Duration;

use super::{Env, eventually};

/// A lock is seen free, then held with its lease left (where the store
/// keeps leases), its waiters and its latest fencing token; inspecting
/// changes nothing.
pub async fn a_lock_is_seen_held_with_its_lease_waiters_and_fence(env: Env) {
    let a = env.client().await;
    let b = env.client().await;
    let free = b.lock("inspected").inspect().await.unwrap();
    assert!(!free.is_held() && !free.is_full(), "{free:?}");
    assert_eq!((free.holders, free.capacity, free.waiters), (0, 1, 0));
    assert_eq!(free.lease_left, None);

    let guard = a
        .lock("inspected")
        .lease(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    let held = b.lock("inspected").inspect().await.unwrap();
    assert!(held.is_held() && held.is_full(), "{held:?}");
    if env.store_keeps_lock_leases() {
        let left = held.lease_left.expect("a held lock has a lease");
        assert!(
            left > Duration::from_secs(8) && left <= Duration::from_secs(10),
            "{left:?}"
        );
    } else {
        assert_eq!(held.lease_left, None, "the holder's client keeps the lease");
    }
    assert!(held.latest_fence >= Some(guard.fencing_token()), "{held:?}");

    // A waiter of another client is counted while it waits.
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.lock("inspected")
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        }
    });
    let queued = eventually(Duration::from_secs(10), || async {
        a.lock("inspected").inspect().await.unwrap().waiters == 1
    })
    .await;
    assert!(queued, "the waiter was never counted");
    assert!(guard.release().await.unwrap());
    let next = waiter.await.unwrap().unwrap();
    let handed = eventually(Duration::from_secs(10), || async {
        a.lock("inspected").inspect().await.unwrap().waiters == 0
    })
    .await;
    assert!(handed, "the waiter that took the lock is still counted");
    let now = a.lock("inspected").inspect().await.unwrap();
    assert!(now.is_held() && now.latest_fence >= Some(next.fencing_token()));
    // Inspection changed nothing: the holder still holds.
    assert!(next.release().await.unwrap());
    assert!(!a.lock("inspected").inspect().await.unwrap().is_held());
    assert!(a.lock("").inspect().await.unwrap_err().is_invalid_input());
}

/// A semaphore is seen with its holders out of its capacity, full, and
/// with its waiters.
pub async fn a_semaphore_is_seen_with_its_holders_and_waiters(env: Env) {
    let a = env.client().await;
    let b = env.client().await;
    let sem =
        |lg: &lockguard_core::Client| lg.semaphore("exports", 2).lease(Duration::from_secs(10));
    let first = sem(&a).acquire().await.unwrap();
    let one = sem(&b).inspect().await.unwrap();
    assert_eq!((one.holders, one.capacity), (1, 2), "{one:?}");
    assert!(one.is_held() && !one.is_full());
    let second = sem(&b).acquire().await.unwrap();
    let full = sem(&a).inspect().await.unwrap();
    assert!(full.is_full(), "{full:?}");
    if env.store_keeps_leases() {
        let left = full.lease_left.expect("held permits have leases");
        assert!(
            left > Duration::from_secs(8) && left <= Duration::from_secs(10),
            "{left:?}"
        );
    } else {
        assert_eq!(
            full.lease_left, None,
            "the holders' clients keep the leases"
        );
    }
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { sem(&b).wait(Duration::from_secs(30)).acquire().await }
    });
    let queued = eventually(Duration::from_secs(10), || async {
        sem(&a).inspect().await.unwrap().waiters == 1
    })
    .await;
    assert!(queued, "the waiter was never counted");
    assert!(first.release().await.unwrap());
    let third = waiter.await.unwrap().unwrap();
    let after = sem(&a).inspect().await.unwrap();
    assert_eq!(after.holders, 2, "{after:?}");
    assert!(second.release().await.unwrap() && third.release().await.unwrap());
    assert_eq!(sem(&a).inspect().await.unwrap().holders, 0);
}
