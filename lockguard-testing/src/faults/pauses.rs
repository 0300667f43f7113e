//! A paused store against the primitives built on the lock: the read-write
//! lock, the multi-key lock and leader election. Each holder keeps its
//! hold under a watchdog lease while the server is frozen (SIGSTOP); the
//! promise is the lock's: the loss is signalled before the lease ends, the
//! next holder gets in after the pause with a greater fencing token, and a
//! write fenced with the old token is rejected.

use std::time::{Duration, Instant};

use lockguard_core::{Client, Error, FencingToken};

use crate::ServerProcess;

/// How a store's pause scenarios run: the holder's lease, how long the
/// server stays frozen once the loss was signalled, and how long the next
/// holder may wait for the old lease to be gone.
#[derive(Debug, Clone, Copy)]
pub struct PausePlan {
    /// The holder's watchdog lease.
    pub lease: Duration,
    /// How long the server stays paused after the holder signalled its
    /// loss (a store that keeps a lease in a session, ZooKeeper, needs the
    /// session to run out while it is frozen).
    pub frozen: Duration,
    /// How long the next holder waits for the old lease to end.
    pub next_wait: Duration,
}

impl PausePlan {
    /// For a store that keeps a lease on the server's clock (Redis,
    /// PostgreSQL, MySQL): a 600 ms lease, the server resumed at the
    /// loss, the next holder waiting up to 5 s.
    pub fn lease() -> Self {
        Self {
            lease: Duration::from_millis(600),
            frozen: Duration::ZERO,
            next_wait: Duration::from_secs(5),
        }
    }

    /// For a store whose lease is a session of `session` (ZooKeeper): a
    /// lease of three fifths of it, the server frozen twice the session
    /// past the loss, the next holder waiting up to 20 s while the
    /// ensemble expires the old session.
    pub fn session(session: Duration) -> Self {
        Self {
            lease: session * 3 / 5,
            frozen: session * 2,
            next_wait: Duration::from_secs(20),
        }
    }
}

/// Freezes `server` until `lost` completes, checks it completed with a
/// lease loss before `plan.lease` had passed since `taken`, keeps the
/// server frozen `plan.frozen` longer, and no less than until `not_before`,
/// and resumes it.
async fn pause_until_lost(
    server: &mut dyn ServerProcess,
    plan: PausePlan,
    taken: Instant,
    not_before: Instant,
    lost: impl std::future::Future<Output = Error>,
    what: &str,
) {
    server.pause();
    let lost = tokio::time::timeout(plan.lease * 2, lost).await;
    let signalled = taken.elapsed();
    tokio::time::sleep(plan.frozen).await;
    tokio::time::sleep_until(not_before.into()).await;
    server.resume();
    let err = lost.unwrap_or_else(|_| panic!("{what}: loss not signalled within the lease"));
    assert!(err.is_lease_lost(), "{what}: {err}");
    assert!(
        signalled < plan.lease,
        "{what}: loss signalled after {signalled:?}, past the lease"
    );
}

/// Writes "b" fenced with `new` and then "a" with `old` to the fenced
/// value `resource` (both through `b`: the fence is the store's check),
/// and checks the second is rejected as stale.
async fn fences_out(b: &Client, resource: &str, old: FencingToken, new: FencingToken) {
    assert!(
        new > old,
        "{resource}: the new token {new:?} is not above {old:?}"
    );
    b.fenced(resource)
        .write(new, "b")
        .await
        .expect("the new holder's write");
    let stale = b
        .fenced(resource)
        .write(old, "a")
        .await
        .expect_err("the old holder's write");
    assert!(stale.is_stale_fencing_token(), "{stale}");
}

/// A writer of `a` holds the read-write lock "paused-rw" while `server`
/// is paused: it signals the loss within its lease; after the pause a
/// reader of `b` gets in with a greater token, then a writer of `b` with a
/// greater one still, which fences out the old writer's write; the old
/// writer's release finds the lock no longer its own.
///
/// # Panics
///
/// When any of that does not hold.
pub async fn a_pause_takes_the_writers_lease(
    server: &mut dyn ServerProcess,
    plan: PausePlan,
    a: &Client,
    b: &Client,
) {
    let rw = a.rw_lock("paused-rw");
    let writer = rw
        .write()
        .watchdog(plan.lease)
        .acquire()
        .await
        .expect("write");
    let taken = Instant::now();
    pause_until_lost(server, plan, taken, taken, writer.lost(), "writer").await;
    assert!(!writer.is_held());

    let rw = b.rw_lock("paused-rw");
    let reader = rw
        .read()
        .wait(plan.next_wait)
        .acquire()
        .await
        .expect("a reader gets in once the old writer's lease is gone");
    let read = reader.fencing_token();
    assert!(read > writer.fencing_token());
    assert!(reader.release().await.expect("release"));
    let next = rw
        .write()
        .wait(plan.next_wait)
        .acquire()
        .await
        .expect("the next writer");
    assert!(next.fencing_token() > read);
    fences_out(
        b,
        "paused-rw:res",
        writer.fencing_token(),
        next.fencing_token(),
    )
    .await;
    assert!(!writer.release().await.expect("release"));
    assert!(next.release().await.expect("release"));
}

/// A multi-lock of `a` holds "paused-m1" and "paused-m2" while `server` is
/// paused: it signals the loss within its lease; after the pause `b` takes
/// "paused-m2" alone, then both with a multi-lock, each with tokens greater
/// than `a`'s, fencing out `a`'s write; `a`'s release reports the keys
/// lost.
///
/// # Panics
///
/// When any of that does not hold.
pub async fn a_pause_takes_the_multi_locks_lease(
    server: &mut dyn ServerProcess,
    plan: PausePlan,
    a: &Client,
    b: &Client,
) {
    let names = ["paused-m1", "paused-m2"];
    let held = a
        .multi_lock(names)
        .watchdog(plan.lease)
        .acquire()
        .await
        .expect("multi-lock");
    let taken = Instant::now();
    // The multi-lock is lost with its first key's lease; the keys taken
    // after it keep theirs a little longer, and a renewal sent while the
    // server was frozen would keep them if it resumed before they ended:
    // frozen until every key's lease has passed.
    pause_until_lost(
        server,
        plan,
        taken,
        taken + plan.lease,
        held.lost(),
        "multi-lock",
    )
    .await;
    assert!(!held.is_held());

    let old = |name: &str| held.fencing_token(name).expect("a key of the multi-lock");
    let single = b
        .lock("paused-m2")
        .wait(plan.next_wait)
        .acquire()
        .await
        .expect("one key, once the multi-lock's lease is gone");
    assert!(single.fencing_token() > old("paused-m2"));
    assert!(single.release().await.expect("release"));
    let next = b
        .multi_lock(names)
        .wait(plan.next_wait)
        .acquire()
        .await
        .expect("the next multi-lock");
    for name in names {
        let token = next.fencing_token(name).expect("a key of the multi-lock");
        fences_out(b, &format!("{name}:res"), old(name), token).await;
    }
    assert!(!held.release().await.expect("release"));
    assert!(next.release().await.expect("release"));
}

/// A leader of `a` leads "paused-election" while `server` is paused: it
/// signals the loss within its lease; after the pause a candidate of `b`
/// is elected with a greater term, is the one `current()` names, and
/// fences out the old leader's write; the old leader's resignation leaves
/// the new leader's announcement alone.
///
/// # Panics
///
/// When any of that does not hold.
pub async fn a_pause_takes_the_leaders_lease(
    server: &mut dyn ServerProcess,
    plan: PausePlan,
    a: &Client,
    b: &Client,
) {
    let old = a
        .leader("paused-election")
        .identity("a")
        .watchdog(plan.lease)
        .campaign()
        .await
        .expect("campaign");
    let taken = Instant::now();
    pause_until_lost(server, plan, taken, taken, old.lost(), "leader").await;
    assert!(!old.is_held());

    let election = b
        .leader("paused-election")
        .identity("b")
        .wait(plan.next_wait);
    let new = election
        .campaign()
        .await
        .expect("elected once the old leader's lease is gone");
    fences_out(b, "paused-election:res", old.term(), new.term()).await;
    assert!(!old.resign().await.expect("resign"));
    let now = election
        .current()
        .await
        .expect("current")
        .expect("a leader");
    assert_eq!(now.identity_str(), Some("b"));
    assert_eq!(now.term, new.term());
    assert!(new.resign().await.expect("resign"));
}
