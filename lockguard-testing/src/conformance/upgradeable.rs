//! Upgradeable read-write locks: one upgradeable reader beside the
//! readers, alone among upgradeable readers and writers, whose upgrade to
//! the write lets no writer in between. Run with the `rw_locks` group.

use std::time::Duration;

use lockguard_core::RwMode;

use super::{Env, eventually};

const LONG: Duration = Duration::from_secs(30);

/// The upgradeable reader shares the lock with readers; a second
/// upgradeable reader and a writer wait until it is gone.
pub async fn an_upgradeable_read_shares_with_readers_alone_among_upgraders(env: Env) {
    let (a, b) = (env.client().await, env.client().await);
    let mine = a.upgradeable_rw_lock("stock");
    let theirs = b.upgradeable_rw_lock("stock");
    let guard = mine.upgradeable_read().acquire().await.unwrap();
    assert_eq!(guard.mode(), RwMode::Read);
    let reader = theirs.read().try_acquire().await.unwrap();
    let now = theirs.inspect().await.unwrap();
    assert_eq!((now.readers, now.writer), (2, false), "{now:?}");
    assert!(
        theirs
            .upgradeable_read()
            .try_acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    assert!(theirs.write().try_acquire().await.unwrap_err().is_busy());
    // A plain read-write lock of the same name is another lock.
    let plain = b.rw_lock("stock").write().try_acquire().await.unwrap();
    assert!(plain.release().await.unwrap());

    assert!(guard.is_held());
    assert!(guard.release().await.unwrap());
    let second = theirs.upgradeable_read().try_acquire().await.unwrap();
    assert!(second.release().await.unwrap() && reader.release().await.unwrap());
    let writer = theirs.write().try_acquire().await.unwrap();
    assert_eq!(writer.mode(), RwMode::Write);
    assert!(mine.read().try_acquire().await.unwrap_err().is_busy());
    assert!(writer.release().await.unwrap());
}

/// An upgrade waits for the other readers; readers that come meanwhile
/// queue behind it; a writer that asked before the upgrade is served only
/// after the upgraded write, whose fencing token is greater than every
/// read's.
pub async fn an_upgrade_lets_no_writer_in_between(env: Env) {
    let (a, b, c) = (env.client().await, env.client().await, env.client().await);
    let lock = |lg: &lockguard_core::Client| lg.upgradeable_rw_lock("ledger");
    let mut guard = lock(&a).upgradeable_read().acquire().await.unwrap();
    let reader = lock(&b).read().acquire().await.unwrap();
    // A writer that asks while the upgradeable reader reads.
    let writer = tokio::spawn({
        let c = c.clone();
        async move { lock(&c).write().wait(LONG).acquire().await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!writer.is_finished(), "a writer came in beside a reader");

    let read_fences = [guard.fencing_token(), reader.fencing_token()];
    let upgrading = tokio::spawn(async move { guard.upgrade().await.map(|()| guard) });
    // The upgrade waits in the queue: a reader that comes now queues
    // behind it, and the upgrade is not done while the reader holds.
    let queued = eventually(Duration::from_secs(10), || async {
        lock(&b).inspect().await.unwrap().waiters >= 1
    })
    .await;
    assert!(queued, "the upgrade's write never queued");
    assert!(lock(&b).read().try_acquire().await.unwrap_err().is_busy());
    assert!(
        !upgrading.is_finished(),
        "the upgrade did not wait for the reader"
    );

    assert!(reader.release().await.unwrap());
    let guard = tokio::time::timeout(Duration::from_secs(10), upgrading)
        .await
        .expect("the upgrade never came")
        .unwrap()
        .unwrap();
    assert_eq!(guard.mode(), RwMode::Write);
    assert!(read_fences.iter().all(|f| guard.fencing_token() > *f));
    assert!(
        !writer.is_finished(),
        "a writer came in before the upgraded write"
    );
    let now = lock(&c).inspect().await.unwrap();
    assert!(now.writer, "{now:?}");

    let upgraded = guard.fencing_token();
    assert!(guard.release().await.unwrap());
    let writer = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("the waiting writer was never served")
        .unwrap()
        .unwrap();
    assert!(writer.fencing_token() > upgraded);
    assert!(writer.release().await.unwrap());
}

/// An upgrade whose readers do not go within the wait fails as busy and
/// leaves the guard reading, still alone among upgraders.
pub async fn a_failed_upgrade_reads_again(env: Env) {
    let (a, b) = (env.client().await, env.client().await);
    let mut guard = a
        .upgradeable_rw_lock("report")
        .upgradeable_read()
        .wait(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let reader = b
        .upgradeable_rw_lock("report")
        .read()
        .acquire()
        .await
        .unwrap();
    let e = guard.upgrade().await.unwrap_err();
    assert!(e.is_busy(), "{e}");
    assert_eq!(guard.mode(), RwMode::Read);
    assert!(guard.is_held());
    // An upgrade that only tries, whatever the lock's wait.
    let e = guard.upgrade_with_wait(Duration::ZERO).await.unwrap_err();
    assert!(e.is_busy(), "{e}");
    assert_eq!(guard.mode(), RwMode::Read);
    assert!(guard.is_held());
    let other = b.upgradeable_rw_lock("report");
    assert!(
        other
            .upgradeable_read()
            .try_acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    let now = other.inspect().await.unwrap();
    assert_eq!((now.readers, now.writer), (2, false), "{now:?}");
    // Once the reader is gone, the upgrade goes through (with a wait of
    // its own: the lock's 300 ms is for the refusal above, and a loaded
    // machine's store may take longer to answer).
    assert!(reader.release().await.unwrap());
    guard
        .upgrade_with_wait(Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(guard.mode(), RwMode::Write);
    assert!(guard.release().await.unwrap());
}
