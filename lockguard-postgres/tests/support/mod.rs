//! What several PostgreSQL test binaries share: the bell's handoff, on a
//! semaphore (a lock's waiter waits in the server, with no bell).

use std::time::{Duration, Instant};

use lockguard_core::Client;
use lockguard_testing::conformance::eventually;

/// A waiter of `waiter` (a [`patient`](lockguard_testing::faults::patient)
/// client) for the one permit of the semaphore `name` is woken by the
/// handoff when `holder` releases it: it holds the permit well before its
/// first refresh (10 s in) could claim it, so the bell rang.
///
/// # Panics
///
/// When the waiter never queues, or is not woken within 5 s.
pub(crate) async fn a_permit_waiter_is_woken_by_the_handoff(
    holder: &Client,
    waiter: Client,
    name: &str,
) {
    let held = holder
        .semaphore(name, 1)
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .expect("the holder takes the permit");
    let owned = name.to_owned();
    let waiting = tokio::spawn(async move {
        let p = waiter
            .semaphore(&owned, 1)
            .wait(Duration::from_secs(25))
            .acquire()
            .await
            .expect("the waiter takes the permit");
        let at = Instant::now();
        p.release().await.expect("release");
        at
    });
    let queued = eventually(Duration::from_secs(10), || async {
        holder
            .semaphore(name, 1)
            .inspect()
            .await
            .expect("inspect")
            .waiters
            == 1
    })
    .await;
    assert!(queued, "the permit's waiter never queued");
    let released = Instant::now();
    assert!(held.release().await.expect("release"));
    let at = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the permit's waiter was not woken")
        .expect("the waiter's task");
    let waited = at - released;
    assert!(
        waited < Duration::from_secs(5),
        "woken by its refresh, not the bell: {waited:?}"
    );
}
