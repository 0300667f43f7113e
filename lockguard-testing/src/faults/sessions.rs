//! Locks whose lease is their database session's (`LockLeases::Session`,
//! on PostgreSQL and MySQL) under faults: a session's end hands the lock on
//! at once, a crash frees every lock with no wait and tokens keep growing,
//! and a paused holder process loses its lock only after its lease.

use std::time::{Duration, Instant};

use lockguard_core::{Client, FencingToken, LockGuard};

use crate::conformance::eventually;
use crate::{ChildProcess, ServerProcess};

/// Queues `waiter` for `key`, which `holder` holds, then ends the holder's
/// session with `cut` (as an operator's termination of it would): when it
/// was cut, and when the waiter was granted the lock, with its guard.
///
/// # Panics
///
/// When the waiter never queues (10 s), or is not granted the lock within
/// 10 s of the cut.
async fn cut_while_waiting(
    holder: &Client,
    waiter: &Client,
    key: &str,
    cut: impl FnOnce(),
) -> (Instant, Instant, LockGuard) {
    let lock = waiter.lock(key).wait(Duration::from_secs(20));
    let waiting = tokio::spawn(async move { lock.acquire().await.map(|g| (Instant::now(), g)) });
    let queued = eventually(Duration::from_secs(10), || async {
        holder.lock(key).inspect().await.unwrap().waiters == 1
    })
    .await;
    assert!(queued, "the waiter never queued");
    let ended = Instant::now();
    cut();
    let (at, next) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter was not granted the lock")
        .unwrap()
        .unwrap();
    (ended, at, next)
}

/// A holder's session is ended by `cut` (given the key, as an operator's
/// termination of it would) while a waiter waits. With session leases
/// (`session`: the holder's client and the waiter's) the waiter is granted
/// the lock at once, well before the holder's 30 s lease would end, with a
/// greater token; the old holder, told only at its next renewal, still
/// believes it holds, and `write` (the store's fenced write of one
/// resource with a token) succeeds with the new holder's token and is
/// refused with the old one's. With recorded leases (`recorded`) the
/// waiter instead waits out the 2 s lease the holder recorded.
///
/// # Panics
///
/// When the session lease's waiter waits 3 s or more, the old holder is
/// told without a renewal, the old token's write is not refused, or the
/// recorded lease's waiter takes the lock inside the lease.
pub async fn a_cut_holder_is_succeeded_at_once_and_its_writes_refused(
    session: (&Client, &Client),
    recorded: (&Client, &Client),
    cut: impl Fn(&str),
    mut write: impl AsyncFnMut(FencingToken) -> lockguard_core::Result<bool>,
) {
    let (holder, waiter) = session;
    let held = holder
        .lock("order:1")
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let (ended, at, next) = cut_while_waiting(holder, waiter, "order:1", || cut("order:1")).await;
    let took = at - ended;
    assert!(
        took < Duration::from_secs(3),
        "the waiter was granted the lock {took:?} after the holder's session ended"
    );
    assert!(next.fencing_token() > held.fencing_token());
    // The old holder learns nothing until it next speaks to the server:
    // within its fixed lease it still believes it holds.
    assert!(held.is_held(), "the old holder was told without a renewal");
    assert!(write(next.fencing_token()).await.unwrap());
    let stale = write(held.fencing_token()).await.unwrap_err();
    assert!(stale.is_stale_fencing_token(), "{stale}");
    assert!(!held.release().await.unwrap(), "the lock was no longer its");
    assert!(next.release().await.unwrap());

    // Recorded leases: the same cut, and the waiter waits out the 2 s lease
    // the holder recorded.
    let (holder, waiter) = recorded;
    let lease = Duration::from_secs(2);
    let held = holder.lock("order:2").lease(lease).acquire().await.unwrap();
    let taken = Instant::now();
    let (_, at, next) = cut_while_waiting(holder, waiter, "order:2", || cut("order:2")).await;
    // The lease counts from the server's grant, a moment before `taken`.
    assert!(
        at - taken >= lease - Duration::from_millis(300),
        "a recorded lease's successor took the lock {:?} into a {lease:?} lease",
        at - taken
    );
    assert!(next.fencing_token() > held.fencing_token());
    assert!(next.release().await.unwrap());
}

/// `server` crashes (SIGKILL) and comes back on its data while `holder`
/// holds a lock of session leases on a long watchdog lease: `other` (a
/// client of session leases, connected before the crash) takes the lock
/// at once, with no wait for the leases granted before, with a token
/// greater than every token drawn before the crash (on other keys too);
/// the old holder learns of the crash at its next renewal.
///
/// # Panics
///
/// When `other` waits 5 s or more, draws a token not above every earlier
/// one, or the old holder is never told.
pub async fn a_crash_frees_session_leases_at_once_and_tokens_keep_growing(
    server: &mut dyn ServerProcess,
    holder: &Client,
    other: &Client,
) {
    let lease = Duration::from_secs(60);
    // Tokens drawn on other keys too, so the sequence has run ahead.
    let mut before = Vec::new();
    for key in ["crash:a", "crash:b", "crash:c"] {
        let g = holder.lock(key).lease(lease).acquire().await.unwrap();
        before.push(g.fencing_token());
        assert!(g.release().await.unwrap());
    }
    let held = holder
        .lock("crash:a")
        .watchdog(lease)
        .acquire()
        .await
        .unwrap();
    let lost = held.lost();
    server.kill();
    server.restart();

    let started = Instant::now();
    let next = other
        .lock("crash:a")
        .wait(Duration::from_secs(20))
        .acquire()
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(5),
        "a lock of session leases waited {waited:?} after the crash"
    );
    let newest = before
        .iter()
        .copied()
        .chain([held.fencing_token()])
        .max()
        .unwrap();
    assert!(
        next.fencing_token() > newest,
        "token {:?} after the crash, {newest:?} before",
        next.fencing_token()
    );
    // The old holder is told at its next renewal (a third of its lease).
    let err = tokio::time::timeout(lease / 3 + Duration::from_secs(5), lost)
        .await
        .expect("the old holder was never told");
    assert!(err.is_lease_lost(), "{err}");
    assert!(!held.release().await.unwrap());
    assert!(next.release().await.unwrap());
}

/// A holder process (`child`, which prints `held <token>` once it holds
/// lock `name` with session leases on a fixed `lease`, so its client cannot
/// unlock at the lease's end) is frozen (SIGSTOP) right after: its
/// session, idle from the take, is ended by the server once idle for the
/// lease and a slack, which frees the lock for `waiter`: not before the
/// holder's lease has ended (so never while it may still believe it
/// holds), and within `bound` of the freeze.
///
/// # Panics
///
/// When the waiter takes the lock inside the holder's lease, after
/// `bound`, or with a token not above the holder's.
pub async fn a_paused_holder_process_loses_the_lock_after_its_lease(
    mut child: ChildProcess,
    waiter: &Client,
    name: &str,
    lease: Duration,
    bound: Duration,
) {
    let line = child.expect("held ");
    child.pause();
    let frozen = Instant::now();
    let held: u64 = line["held ".len()..].trim().parse().expect("a token");
    let next = waiter
        .lock(name)
        .wait(bound + Duration::from_secs(10))
        .acquire()
        .await
        .expect("the waiter was never granted the lock");
    let after = frozen.elapsed();
    // The take's answer came at most moments before the freeze.
    assert!(
        after >= lease - Duration::from_millis(300),
        "the waiter took the lock {after:?} after the holder froze, inside its {lease:?} lease"
    );
    assert!(
        after < bound,
        "the waiter took the lock only {after:?} after the holder froze"
    );
    assert!(next.fencing_token().get() > held);
    assert!(next.release().await.unwrap());
    child.kill();
}

/// The child side of
/// [`a_paused_holder_process_loses_the_lock_after_its_lease`]: holds lock
/// `name` of `lg` (a client of session leases) on a fixed `lease`, prints
/// `held <token>`, and sleeps until killed.
///
/// # Panics
///
/// When the lock cannot be taken, or the process is not killed within
/// two minutes.
pub async fn hold_paused(lg: &Client, name: &str, lease: Duration) {
    let g = lg
        .lock(name)
        .lease(lease)
        .acquire()
        .await
        .expect("the child takes the lock");
    println!("\nheld {}", g.fencing_token().get());
    tokio::time::sleep(Duration::from_secs(120)).await;
    panic!("the holding child was not killed");
}

/// A job's lock of session leases released early with `at_least` stays
/// kept after its keeper's session ends (`end_holder`, given the key: as
/// its process's death would end it, returning once no session holds the
/// key's lock): each taker's try is refused with the kept time left, and
/// its wait is granted only after the kept time, with a greater token.
/// `takers` are a client of session leases and one of recorded leases,
/// each with a key of its own; each held its key before, so a recorded
/// lease's row of it exists, which the keep did not write. Locks taken
/// meanwhile on other keys are not held up by it.
///
/// # Panics
///
/// When a taker takes the lock inside its kept time, or its refusal does
/// not tell the time left.
pub async fn a_kept_lock_stays_kept_after_its_keepers_session_ends(
    keeper: &Client,
    takers: [(&str, &Client); 2],
    end_holder: impl Fn(&str),
) {
    for (key, taker) in takers {
        let before = taker.lock(key).try_acquire().await.unwrap();
        assert!(before.release().await.unwrap());
        let keep = Duration::from_secs(4);
        let job = keeper.lock(key).at_least(keep).try_acquire().await.unwrap();
        let taken = Instant::now();
        let fence = job.fencing_token();
        assert!(job.release().await.unwrap());
        end_holder(key);

        let busy = taker.lock(key).try_acquire().await.unwrap_err();
        assert!(busy.is_busy(), "{key}: {busy}");
        let left = busy.retry_after().expect("the kept time left");
        assert!(left <= keep, "{key}: {left:?}");
        // Another key is free meanwhile.
        let free = taker.lock("elsewhere").try_acquire().await.unwrap();
        assert!(free.release().await.unwrap());

        let next = taker
            .lock(key)
            .wait(Duration::from_secs(20))
            .acquire()
            .await
            .unwrap();
        assert!(
            taken.elapsed() >= keep,
            "{key}: taken {:?} after the job, inside its kept {keep:?}",
            taken.elapsed()
        );
        assert!(next.fencing_token() > fence);
        assert!(next.release().await.unwrap());
    }
}
