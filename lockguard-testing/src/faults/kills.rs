//! A holder process killed (SIGKILL: no release, no resignation) while it
//! holds a multi-lock, a read-write lock's write or an election's lead:
//! what it held is freed when its lease ends (on ZooKeeper, its session),
//! to the waiters queued behind it in this process, with greater fencing
//! tokens, and never while it lived.
//!
//! A store's fault tests run both halves from one test binary: a child
//! test, `#[ignore]`d and run only in the process the parent starts, calls
//! [`hold_until_killed`]; each parent test calls
//! [`a_killed_holder_is_replaced`] with the child test's full name.
//!
//! ```ignore
//! #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
//! #[ignore = "the child process of the killed-holder tests"]
//! async fn child_holder() {
//!     hold_until_killed(LEASE, async |url| MyStore::connect(url).await).await;
//! }
//!
//! #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
//! async fn a_killed_writer_frees_the_read_write_lock_within_its_lease() {
//!     let server = MyServer::start();
//!     let lg = MyStore::connect(&server.url()).await.unwrap();
//!     let kill = Kill::new("child_holder", &server.url(), LEASE);
//!     a_killed_holder_is_replaced(Holding::Writer, kill, &lg).await;
//! }
//! ```

use std::fmt;
use std::time::Duration;

use lockguard_core::{Client, Result};
use tokio::time::Instant;

use crate::ChildProcess;

/// Set in the child's environment to `"{holding} {address}"`: what to
/// hold, on which store.
pub const HOLDER_ENV: &str = "LOCKGUARD_KILLED_HOLDER";

/// The names of what the child holds: the keys of its multi-lock (the
/// parent names them the other way round), its read-write lock, its
/// election.
const MULTI: [&str; 2] = ["killed:1", "killed:2"];
const RW: &str = "killed-rw";
const ELECTION: &str = "killed-election";
/// The scheduled job's lock of [`Holding::Job`], its `at_least` and its
/// fixed lease.
const JOB: &str = "exited-job";
const JOB_AT_LEAST: Duration = Duration::from_secs(3);
const JOB_LEASE: Duration = Duration::from_secs(4);
/// The lock [`Holding::Waiter`] waits for (its lease is the child's, with
/// no watchdog), and how long it waits.
const PAUSED: &str = "paused-waiter";
const WAITER_WAIT: Duration = Duration::from_secs(60);

/// What the killed process holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holding {
    /// A multi-lock of two keys; a multi-lock of the same keys, named in
    /// the other order, waits for it.
    MultiLock,
    /// A read-write lock's write; two readers wait for it.
    Writer,
    /// An election's lead; a candidate waits for it.
    Leader,
    /// A scheduled job's lock, taken with `at_least` and released at once,
    /// after which the child exits by itself (see
    /// [`at_least_outlives_the_process_that_took_it`]).
    Job,
    /// A waiter for a lock the parent holds, paused by the parent while it
    /// waits (see [`a_paused_waiter_never_holds_a_grant_it_slept_through`]).
    Waiter,
}

impl fmt::Display for Holding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::MultiLock => "multi-lock",
            Self::Writer => "writer",
            Self::Leader => "leader",
            Self::Job => "job",
            Self::Waiter => "waiter",
        })
    }
}

impl Holding {
    fn parse(s: &str) -> Self {
        match s {
            "multi-lock" => Self::MultiLock,
            "writer" => Self::Writer,
            "leader" => Self::Leader,
            "job" => Self::Job,
            "waiter" => Self::Waiter,
            other => panic!("no such holding: {other:?}"),
        }
    }
}

/// The child half: does nothing unless [`HOLDER_ENV`] is set (the test's
/// own run); otherwise connects with `connect` to the address given,
/// takes what it names under a watchdog of `lease`, prints
/// `held T1 [T2]` (its fencing tokens, or its term), and waits to be
/// killed.
///
/// # Panics
///
/// When it cannot connect or take its hold, or loses it before it is
/// killed.
pub async fn hold_until_killed(lease: Duration, connect: impl AsyncFnOnce(&str) -> Result<Client>) {
    let Ok(spec) = std::env::var(HOLDER_ENV) else {
        return;
    };
    let (holding, address) = spec.split_once(' ').expect("a holding and an address");
    let lg = connect(address).await.expect("the child connects");
    let lost = match Holding::parse(holding) {
        Holding::MultiLock => {
            let g = lg
                .multi_lock(MULTI)
                .watchdog(lease)
                .acquire()
                .await
                .expect("the child takes both keys");
            let tokens: Vec<String> = MULTI
                .iter()
                .map(|k| g.fencing_token(k).expect("a key").get().to_string())
                .collect();
            println!("held {}", tokens.join(" "));
            g.lost().await
        }
        Holding::Writer => {
            let g = lg
                .rw_lock(RW)
                .write()
                .watchdog(lease)
                .acquire()
                .await
                .expect("the child writes");
            println!("held {}", g.fencing_token().get());
            g.lost().await
        }
        Holding::Leader => {
            let lead = lg
                .leader(ELECTION)
                .identity("child")
                .watchdog(lease)
                .campaign()
                .await
                .expect("the child is elected");
            println!("held {}", lead.term().get());
            lead.lost().await
        }
        Holding::Job => {
            let g = lg
                .lock(JOB)
                .lease(JOB_LEASE)
                .at_least(JOB_AT_LEAST)
                .try_acquire()
                .await
                .expect("the child takes the job's lock");
            assert!(g.release().await.expect("release"), "lost before release");
            println!("released");
            // The job is done: the process ends, and its client with it.
            return;
        }
        Holding::Waiter => {
            match lg
                .lock(PAUSED)
                .lease(lease)
                .wait(WAITER_WAIT)
                .acquire()
                .await
            {
                // On a line of its own: libtest may have begun one.
                Ok(g) => println!("\nwaited: held {}", g.fencing_token().get()),
                Err(e) => println!("\nwaited: failed {e}"),
            }
            // Its lease is not renewed: no loss to wait for. The parent
            // kills it; a lease's time later it ends by itself anyway.
            tokio::time::sleep(WAITER_WAIT).await;
            return;
        }
    };
    panic!("the child ({holding}) lost its hold before it was killed: {lost}");
}

/// The child a parent test starts: the store's child test (its full name,
/// module path included), the address the child connects to, the child's
/// lease, and how long after the kill the waiters must be served.
#[derive(Debug, Clone)]
pub struct Kill {
    child_test: String,
    address: String,
    lease: Duration,
    bound: Duration,
}

impl Kill {
    /// The child test `child_test` on `address`, holding under a watchdog
    /// of `lease`, whose waiters must be served within the lease plus
    /// 500 ms of slack for a loaded machine.
    pub fn new(child_test: &str, address: &str, lease: Duration) -> Self {
        Self {
            child_test: child_test.to_owned(),
            address: address.to_owned(),
            lease,
            bound: lease + Duration::from_millis(500),
        }
    }

    /// Serves the waiters within `bound` of the kill instead (a store
    /// whose lease is a session that the server expires).
    pub fn served_within(mut self, bound: Duration) -> Self {
        self.bound = bound;
        self
    }
}

/// The parent half: starts the child holding `holding`, queues this
/// process's waiters on `lg` behind it, checks that none is served while
/// the child lives (its watchdog keeping it for twice its lease), kills
/// it, and checks that every waiter is served within the bound, with
/// greater fencing tokens (a greater term), both readers at once.
///
/// # Panics
///
/// When any of that does not hold.
pub async fn a_killed_holder_is_replaced(holding: Holding, kill: Kill, lg: &Client) {
    let mut child = ChildProcess::spawn(
        &kill.child_test,
        (HOLDER_ENV, &format!("{holding} {}", kill.address)),
    );
    let line = child.expect("held ");
    let old: Vec<u64> = line["held ".len()..]
        .split_whitespace()
        .map(|t| t.parse().expect("a token"))
        .collect();

    // Each waiter says when it got in and its tokens (in the child's
    // order), and keeps its hold until every waiter got in.
    let (served_tx, mut served) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u64>)>();
    let (release, _) = tokio::sync::broadcast::channel::<()>(1);
    let waiters: Vec<_> = match holding {
        Holding::MultiLock => vec![tokio::spawn({
            let (lg, tx, mut done) = (lg.clone(), served_tx.clone(), release.subscribe());
            async move {
                let g = lg
                    .multi_lock([MULTI[1], MULTI[0]])
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                    .expect("the waiting multi-lock takes both keys");
                let tokens = MULTI
                    .iter()
                    .map(|k| g.fencing_token(k).expect("a key").get())
                    .collect();
                let _ = tx.send((Instant::now(), tokens));
                let _ = done.recv().await;
                assert!(g.release().await.expect("release"));
            }
        })],
        Holding::Writer => (0..2)
            .map(|_| {
                let (lg, tx, mut done) = (lg.clone(), served_tx.clone(), release.subscribe());
                tokio::spawn(async move {
                    let g = lg
                        .rw_lock(RW)
                        .read()
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await
                        .expect("a waiting reader gets in");
                    let _ = tx.send((Instant::now(), vec![g.fencing_token().get()]));
                    let _ = done.recv().await;
                    assert!(g.release().await.expect("release"));
                })
            })
            .collect(),
        Holding::Leader => vec![tokio::spawn({
            let (lg, tx, mut done) = (lg.clone(), served_tx.clone(), release.subscribe());
            async move {
                let lead = lg
                    .leader(ELECTION)
                    .identity("parent")
                    .wait(Duration::from_secs(30))
                    .campaign()
                    .await
                    .expect("the waiting candidate is elected");
                let _ = tx.send((Instant::now(), vec![lead.term().get()]));
                let _ = done.recv().await;
                assert!(lead.resign().await.expect("resign"));
            }
        })],
        Holding::Job => panic!(
            "a job's process exits by itself: see at_least_outlives_the_process_that_took_it"
        ),
        Holding::Waiter => panic!(
            "a waiter is paused, not killed: see a_paused_waiter_never_holds_a_grant_it_slept_through"
        ),
    };
    drop(served_tx);
    // The child's watchdog keeps its hold past its lease.
    tokio::time::sleep(kill.lease * 2).await;
    assert!(
        served.is_empty() && waiters.iter().all(|w| !w.is_finished()),
        "a waiter was served while the {holding} lived"
    );
    if holding == Holding::Leader {
        let now = lg.leader(ELECTION).current().await.expect("current");
        let now = now.expect("the child leads");
        assert_eq!(
            (now.identity_str(), now.term.get()),
            (Some("child"), old[0])
        );
    }

    child.kill();
    let killed = Instant::now();
    for _ in 0..waiters.len() {
        let (at, tokens) = tokio::time::timeout(Duration::from_secs(30), served.recv())
            .await
            .unwrap_or_else(|_| panic!("{holding}: a waiter was never served"))
            .unwrap_or_else(|| panic!("{holding}: a waiter failed"));
        let took = at - killed;
        println!(
            "{holding}: a waiter served {took:?} after the kill (lease {:?})",
            kill.lease
        );
        assert!(
            took < kill.bound,
            "{holding}: served {took:?} after the kill, past {:?}",
            kill.bound
        );
        assert!(
            tokens.iter().zip(&old).all(|(new, old)| new > old),
            "{holding}: tokens {tokens:?} after the child's {old:?}"
        );
    }
    // Every waiter holds at once, as the store sees it.
    match holding {
        Holding::MultiLock | Holding::Job | Holding::Waiter => {}
        Holding::Writer => {
            let seen = lg.rw_lock(RW).inspect().await.expect("inspect");
            assert_eq!((seen.readers, seen.writer), (2, false), "{seen:?}");
        }
        Holding::Leader => {
            let now = lg.leader(ELECTION).current().await.expect("current");
            assert_eq!(
                now.expect("the parent leads").identity_str(),
                Some("parent")
            );
        }
    }
    let _ = release.send(());
    for waiter in waiters {
        waiter.await.expect("a waiter's task");
    }
}

/// A scheduled job's process takes its lock with `at_least`, releases it at
/// once and exits (its client, its connections and its session gone with
/// it): the lock stays taken until `at_least` after the process was
/// started, whatever the store. `lg` polls it with `try_acquire`, which
/// must be busy until then and succeed within the lease after it.
///
/// The child is the store's child test that calls [`hold_until_killed`]
/// (`kill` names it and the address; its lease and bound are not used).
///
/// # Panics
///
/// When the lock is free before `at_least` has passed since the child was
/// started, or still taken well after its lease.
pub async fn at_least_outlives_the_process_that_took_it(kill: Kill, lg: &Client) {
    // Before the child asks for the lock: its at_least counts from later.
    let spawned = Instant::now();
    let mut child = ChildProcess::spawn(
        &kill.child_test,
        (HOLDER_ENV, &format!("{} {}", Holding::Job, kill.address)),
    );
    child.expect("released");
    let status = child.wait();
    assert!(status.success(), "the job's process failed: {status}");
    let exited = spawned.elapsed();
    let bound = (spawned + JOB_LEASE + Duration::from_secs(5)).into_std();
    let why = format!("5 s after the job's lease ({JOB_LEASE:?}) had passed");
    let freed = crate::conformance::first_free(lg, JOB, bound, &why).await;
    let after = spawned.elapsed();
    println!(
        "the job's lock was free {after:?} after its process started (it exited after {exited:?})"
    );
    assert!(
        after >= JOB_AT_LEAST,
        "free {after:?} after the job's process started, before its at_least ({JOB_AT_LEAST:?}); the process exited after {exited:?}"
    );
    assert!(freed.release().await.expect("release"));
}

/// A waiter process is frozen (SIGSTOP) while it waits for a lock `lg`
/// holds; `lg` releases it, so that the store may grant it to the frozen
/// waiter (a database store's wait runs in the server, which grants it
/// there), whose lease then runs out while it sleeps; `lg` takes the lock
/// again once it is free. The waiter is resumed while `lg` holds it: it
/// must not count on the grant it slept through. It gets the lock only
/// after `lg` releases it again, with a greater fencing token.
///
/// The child is the store's child test that calls [`hold_until_killed`]
/// (`kill` names it, the address and its lease, a fixed one here; the
/// bound is not used).
///
/// # Panics
///
/// When the waiter says it holds the lock before `lg` released it, or
/// with a token not above `lg`'s, or when `lg` cannot take it back.
pub async fn a_paused_waiter_never_holds_a_grant_it_slept_through(kill: Kill, lg: &Client) {
    let lock = lg.lock(PAUSED).watchdog(Duration::from_secs(3));
    let first = lock.try_acquire().await.expect("the parent takes the lock");
    let mut child = ChildProcess::spawn(
        &kill.child_test,
        (HOLDER_ENV, &format!("{} {}", Holding::Waiter, kill.address)),
    );
    let queued = crate::conformance::eventually(Duration::from_secs(20), || async {
        lg.lock(PAUSED).inspect().await.expect("inspect").waiters == 1
    })
    .await;
    assert!(queued, "the waiter process never queued for the lock");
    child.pause();
    assert!(
        first.release().await.expect("release"),
        "lost before release"
    );
    // Freed once the frozen waiter's lease (and whatever the store keeps
    // for a waiter that does not come) has passed.
    let second = lock
        .wait(WAITER_WAIT)
        .acquire()
        .await
        .expect("the parent takes the lock back");
    let taken = second.fencing_token().get();
    child.resume();
    let answer = tokio::task::spawn_blocking(move || {
        let line = child.expect("waited: ");
        (Instant::now(), line, child)
    });
    // A waiter counting on its old grant says so at once.
    tokio::time::sleep(kill.lease.max(Duration::from_secs(1))).await;
    let released = Instant::now();
    assert!(
        second.release().await.expect("release"),
        "lost before release"
    );
    let (said, line, mut child) = tokio::time::timeout(WAITER_WAIT, answer)
        .await
        .expect("the waiter answers")
        .expect("the waiter's reader");
    let Some(fence) = line.strip_prefix("waited: held ") else {
        panic!("the resumed waiter did not get the lock: {line}");
    };
    let fence: u64 = fence.trim().parse().expect("a token");
    assert!(
        said >= released && fence > taken,
        "the resumed waiter held the lock (token {fence}) {}, while this process held it (token {taken})",
        if said >= released {
            "after its release".to_owned()
        } else {
            format!("{:?} before its release", released - said)
        }
    );
    child.kill();
}

/// The waiter process of [`a_killed_waiter_delays_the_queue_by_less_than`]:
/// on `lg`, says it is about to wait (a line `waiting`), then waits for
/// the lock `victim` (held under a watchdog of `lease` once it has it, so
/// that a lease recorded at its grant would show) until killed.
///
/// # Panics
///
/// When it is not killed within two minutes.
pub async fn wait_until_killed(lg: &Client, lease: Duration) {
    let lock = lg
        .lock("victim")
        .watchdog(lease)
        .wait(Duration::from_secs(120));
    // On a line of its own: libtest may have begun one.
    println!("\nwaiting");
    let outcome = lock.acquire().await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    panic!("the waiting child was not killed: {outcome:?}");
}

/// A waiter process killed (SIGKILL) while first in the queue of the lock
/// `victim` delays the waiter behind it by less than `bound` when
/// `holder`'s hold of it is released: never by the dead waiter's lease.
/// `child` is the waiter process, started by the caller and about to wait
/// for `victim` (it has printed its last line); `second` waits behind it.
///
/// # Panics
///
/// When the child or `second` never queues, or `second` is served
/// `bound` or later after the release.
pub async fn a_killed_waiter_delays_the_queue_by_less_than(
    holder: &Client,
    guard: lockguard_core::LockGuard,
    mut child: ChildProcess,
    second: Client,
    bound: Duration,
) {
    let queued = |n: u64| {
        let holder = holder.clone();
        crate::conformance::eventually(Duration::from_secs(10), move || {
            let holder = holder.clone();
            async move { holder.lock("victim").inspect().await.unwrap().waiters == n }
        })
    };
    assert!(queued(1).await, "the child never queued");
    let waiter = tokio::spawn(async move {
        let g = second
            .lock("victim")
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .expect("the waiter behind the dead one acquires");
        let at = Instant::now();
        assert!(g.release().await.unwrap());
        at
    });
    assert!(queued(2).await, "the second waiter never queued");
    child.kill();
    let released = Instant::now();
    assert!(guard.release().await.unwrap());
    let acquired = tokio::time::timeout(Duration::from_secs(60), waiter)
        .await
        .expect("the waiter behind the dead one was never served")
        .unwrap();
    let delay = acquired - released;
    println!("the waiter behind the killed one acquired {delay:?} after the release");
    assert!(
        delay < bound,
        "the dead waiter held up the queue for {delay:?} (bound {bound:?})"
    );
}
