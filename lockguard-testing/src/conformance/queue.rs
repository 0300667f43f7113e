//! The wait queue: first come first served across clients, no barging
//! past the queue, semaphore permits in arrival order, and waiters that
//! give up leaving the queue at once.
//!
//! Each client is its own `Client` with its own connections, as separate
//! processes have. On a store with a virtual clock (memory) the tests run
//! with tokio's time paused, so that the order of arrivals is exact.

use std::time::Duration;

use lockguard_core::{Builder, Client, LockGuard};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{Env, eventually};

/// A lock's or a semaphore's wait queue, by name.
#[derive(Debug, Clone, Copy)]
pub enum Queue<'a> {
    /// A lock's.
    Lock(&'a str),
    /// A semaphore's, with its permits.
    Semaphore(&'a str, u32),
}

/// How long the tests on virtual time let freshly spawned waiters run. With
/// paused time the runtime moves the clock only once every task is idle,
/// so after this sleep each waiter spawned before it has made its first
/// attempt and is queued: arrivals are ordered exactly, not by luck.
const SETTLE: Duration = Duration::from_millis(10);

impl<'a> Queue<'a> {
    /// How many waiters the queue holds, seen through a client's
    /// inspection; `None` on virtual time, where the tests let waiters
    /// settle instead.
    pub async fn waiting(self, env: &Env) -> Option<u64> {
        if !env.real_time() {
            return None;
        }
        let lg = env.client().await;
        let seen = match self {
            Self::Lock(name) => lg.lock(name).inspect().await,
            Self::Semaphore(name, permits) => lg.semaphore(name, permits).inspect().await,
        };
        Some(seen.expect("inspect").waiters)
    }

    fn name(self) -> &'a str {
        match self {
            Self::Lock(name) | Self::Semaphore(name, _) => name,
        }
    }
}

/// Waits until exactly `n` waiters are queued: on real time by watching the
/// queue's size (for at most 10 s); on virtual time by letting the waiters
/// spawned so far run until they wait.
pub async fn until_queued(env: &Env, queue: Queue<'_>, n: u64) {
    if !env.real_time() {
        tokio::time::sleep(SETTLE).await;
        return;
    };
    let reached = eventually(Duration::from_secs(10), || async {
        queue.waiting(env).await == Some(n)
    })
    .await;
    assert!(
        reached,
        "{n} waiters never queued for {:?} (now {:?})",
        queue.name(),
        queue.waiting(env).await
    );
}

/// Waits until the queue holds `n` waiters (for at most `within`) on real
/// time; on virtual time, where the queue is not watched, a caller checks
/// with a `try_acquire`.
pub async fn until_queue_holds(env: &Env, queue: Queue<'_>, n: u64, within: Duration) {
    if !env.real_time() {
        return;
    }
    let reached = eventually(within, || async { queue.waiting(env).await == Some(n) }).await;
    assert!(
        reached,
        "{:?} has {:?} waiters, not {n}",
        queue.name(),
        queue.waiting(env).await
    );
}

/// Joins every task of `tasks` within `within`, passing their panics on.
pub async fn join_all<T: 'static>(tasks: &mut JoinSet<T>, within: Duration) -> Vec<T> {
    tokio::time::timeout(within, async {
        let mut out = Vec::new();
        while let Some(done) = tasks.join_next().await {
            out.push(done.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic())));
        }
        out
    })
    .await
    .unwrap_or_else(|_| panic!("tasks still running after {within:?}"))
}

/// Asserts that `attempt` (a `try_acquire`) found the lock taken.
#[track_caller]
pub fn assert_busy(attempt: lockguard_core::Result<LockGuard>, why: &str) {
    match attempt {
        Ok(g) => panic!(
            "{why}: try_acquire got the lock (fence {:?})",
            g.fencing_token()
        ),
        Err(e) => assert!(e.is_busy(), "{why}: expected busy, got {e}"),
    }
}

/// Acquires `name` (waiting up to 60 s), reports `index` on `served`, holds
/// the lock ~5 ms and releases it.
async fn take_turn(lg: Client, name: &'static str, index: u64, served: mpsc::UnboundedSender<u64>) {
    let g = lg
        .lock(name)
        .wait(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("waiter {index}: {e}"));
    served.send(index).expect("the test listens");
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert!(
        g.release().await.expect("release"),
        "waiter {index} lost the lock while holding it"
    );
}

/// Eight clients queue one after another, each only once the one before it
/// is queued, while the lock is held longer than their waiter timeout (so
/// their places are kept by refreshes); the release serves them in exactly
/// the order they arrived.
pub async fn fifo_order_across_8_clients(env: Env) {
    // Longer than the waiter timeout: 1 s by default, 30 s on the memory
    // harness (where time is paused).
    let timeout = if env.real_time() { 1 } else { 30 };
    let hold = Duration::from_secs(timeout) + Duration::from_millis(500);
    served_in_arrival_order(&env, "fifo", 8, None, hold).await;
}

/// Ten clients with a waiter timeout of 300 ms queue one after another
/// while the lock is held for ten times that: those far from the head of
/// the queue, whose places a store may keep longer and refresh less often
/// (see `Outcome::Queued`), keep them as well as those near it, and the
/// release serves all ten in the order they arrived.
pub async fn fifo_order_holds_through_a_hold_of_ten_waiter_timeouts(env: Env) {
    let timeout = Duration::from_millis(300);
    served_in_arrival_order(&env, "long-queue", 10, Some(timeout), timeout * 10).await;
}

/// `n` clients (with `waiter_timeout`, if given) queue for `name` one
/// after another, each only once the one before it is queued, while the
/// lock is held for `hold`; the release serves them in arrival order.
async fn served_in_arrival_order(
    env: &Env,
    name: &'static str,
    n: u64,
    waiter_timeout: Option<Duration>,
    hold: Duration,
) {
    let holder = env.client().await;
    let guard = holder.lock(name).acquire().await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut waiters = JoinSet::new();
    for i in 0..n {
        let builder = match waiter_timeout {
            Some(t) => Client::builder().waiter_timeout(t),
            None => Client::builder(),
        };
        let lg = env.client_with(builder).await;
        waiters.spawn(take_turn(lg, name, i, tx.clone()));
        until_queued(env, Queue::Lock(name), i + 1).await;
    }
    drop(tx);
    tokio::time::sleep(hold).await;
    assert!(guard.release().await.unwrap());
    join_all(&mut waiters, Duration::from_secs(30)).await;
    let mut order = Vec::new();
    while let Some(i) = rx.recv().await {
        order.push(i);
    }
    assert_eq!(
        order,
        (0..n).collect::<Vec<_>>(),
        "served out of arrival order"
    );
}

/// A waiter is queued behind a holder. `try_acquire` of another client is
/// refused and does not join the queue; when the holder releases, the lock
/// goes to the waiter without a moment free in between, so a `try_acquire`
/// right after the release is refused too; once nobody waits, it succeeds.
pub async fn try_acquire_neither_queues_nor_barges(env: Env) {
    let queue = Queue::Lock("strict");
    let holder = env.client().await;
    let outsider = env.client().await;
    let guard = holder.lock("strict").acquire().await.unwrap();
    let waiter = env.client().await;
    let waiting = tokio::spawn(async move {
        waiter
            .lock("strict")
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .expect("the queued waiter acquires")
    });
    until_queued(&env, queue, 1).await;
    assert_busy(outsider.lock("strict").try_acquire().await, "while held");
    if let Some(n) = queue.waiting(&env).await {
        assert_eq!(n, 1, "try_acquire joined the queue");
    }
    let old = guard.fencing_token();
    assert!(guard.release().await.unwrap());
    assert_busy(
        outsider.lock("strict").try_acquire().await,
        "right after a release to a queued waiter",
    );
    let g = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter was served")
        .unwrap();
    assert!(g.fencing_token() > old);
    assert!(g.release().await.unwrap());
    let free = outsider.lock("strict").try_acquire().await;
    assert!(
        free.is_ok(),
        "nobody waits, yet the lock is refused: {free:?}"
    );
}

/// Holds both permits of a 2-permit semaphore, queues six waiters in a
/// known order, then gives back one permit at a time: each goes to the next
/// waiter in arrival order.
pub async fn semaphore_permits_in_fifo_order(env: Env) {
    let owner = env.client().await;
    let sem = owner.semaphore("slots", 2);
    let mut held = vec![sem.acquire().await.unwrap(), sem.acquire().await.unwrap()];
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut waiters = JoinSet::new();
    for i in 0..6u64 {
        let lg = env.client().await;
        let tx = tx.clone();
        waiters.spawn(async move {
            let p = lg
                .semaphore("slots", 2)
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap_or_else(|e| panic!("waiter {i}: {e}"));
            tx.send((i, p)).expect("the test listens");
        });
        until_queued(&env, Queue::Semaphore("slots", 2), i + 1).await;
    }
    drop(tx);
    for expected in 0..6 {
        let p = held.remove(0);
        assert!(p.release().await.unwrap(), "a held permit was lost");
        let (i, permit) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("the permit was not handed on")
            .expect("a waiter failed");
        assert_eq!(i, expected, "permit handed out of arrival order");
        held.push(permit);
    }
    join_all(&mut waiters, Duration::from_secs(10)).await;
    for p in held {
        assert!(p.release().await.unwrap(), "a held permit was lost");
    }
}

/// How a waiter gives up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GiveUp {
    /// Its acquire future is dropped (the task running it is aborted).
    Dropped,
    /// Its wait bound runs out.
    WaitOver,
}

/// Waiter A queues behind a holder, waiter B behind A, then A gives up. A
/// leaves the queue at once, so the release goes straight to B and the
/// queue ends empty. Places are kept 30 s without a refresh: only leaving
/// explains A gone and B served within 2 s.
async fn giving_up_leaves_the_queue(env: Env, how: GiveUp) {
    let queue = Queue::Lock("gone");
    let settings = || Builder::default().waiter_timeout(Duration::from_secs(30));
    let holder = env.client().await;
    let guard = holder.lock("gone").acquire().await.unwrap();
    let first = env.client_with(settings()).await;
    let first_wait = match how {
        GiveUp::Dropped => Duration::from_secs(60),
        GiveUp::WaitOver => Duration::from_secs(3),
    };
    let a = tokio::spawn(async move {
        first
            .lock("gone")
            .wait(first_wait)
            .acquire()
            .await
            .map(drop)
    });
    until_queued(&env, queue, 1).await;
    let second = env.client_with(settings()).await;
    let b = tokio::spawn(async move {
        let g = second
            .lock("gone")
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .expect("the waiter behind the one that gave up acquires");
        let at = Instant::now();
        assert!(g.release().await.unwrap());
        at
    });
    until_queued(&env, queue, 2).await;
    match how {
        GiveUp::Dropped => {
            a.abort();
            assert!(a.await.unwrap_err().is_cancelled());
        }
        GiveUp::WaitOver => {
            let err = a.await.unwrap().expect_err("A's wait ends while held");
            assert!(err.is_busy(), "{err}");
        }
    }
    if env.real_time() {
        // The waiter that gave up leaves the queue.
        until_queue_holds(&env, queue, 1, Duration::from_secs(2)).await;
    } else {
        // Let its leaving, in the background, run.
        tokio::time::sleep(SETTLE).await;
    }
    let released = Instant::now();
    assert!(guard.release().await.unwrap());
    let served = tokio::time::timeout(Duration::from_secs(60), b)
        .await
        .expect("the waiter behind was never served")
        .unwrap();
    let delay = served - released;
    assert!(
        delay < Duration::from_secs(2),
        "the waiter behind waited {delay:?} after the release"
    );
    until_queue_holds(&env, queue, 0, Duration::from_secs(2)).await;
    // Nobody left in the queue (the only check the memory store allows): a
    // try_acquire gets the free lock, not handed to a waiter that is gone.
    let outsider = env.client().await;
    let free = outsider.lock("gone").try_acquire().await;
    assert!(free.is_ok(), "the lock is kept for someone: {free:?}");
}

/// A holder, and three waiters queued one behind another; the first two
/// give up while the lock is held, the one ahead first. Their leaving
/// hands the third nothing: it does not hold while the holder does (on a
/// store whose waiters watch their predecessor, what it learns when the
/// keys ahead of it go must not make it the holder), and it is served
/// once the holder releases, with a greater fencing token.
pub async fn waiters_ahead_that_give_up_hand_over_nothing(env: Env) {
    let queue = Queue::Lock("ahead");
    let settings = || Builder::default().waiter_timeout(Duration::from_secs(30));
    let holder = env.client().await;
    let guard = holder.lock("ahead").acquire().await.unwrap();
    let mut quitters = Vec::new();
    for n in 1..=2 {
        let waiter = env.client_with(settings()).await;
        quitters.push(tokio::spawn(async move {
            waiter
                .lock("ahead")
                .wait(Duration::from_secs(60))
                .acquire()
                .await
                .map(drop)
        }));
        until_queued(&env, queue, n).await;
    }
    let last = env.client_with(settings()).await;
    let (took, mut taken) = tokio::sync::oneshot::channel();
    let third = tokio::spawn(async move {
        let g = last
            .lock("ahead")
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .expect("the third waiter acquires");
        let _ = took.send(g.fencing_token());
        assert!(g.release().await.unwrap());
    });
    until_queued(&env, queue, 3).await;
    for (left, quitter) in quitters.into_iter().enumerate() {
        quitter.abort();
        assert!(quitter.await.unwrap_err().is_cancelled());
        if env.real_time() {
            until_queue_holds(&env, queue, 2 - left as u64, Duration::from_secs(2)).await;
        }
        // Time for the waiters behind to act on the leaving (a queue that
        // hands over wrongly does so within milliseconds).
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A handoff comes within milliseconds of the leaving that made it.
    let early = tokio::time::timeout(Duration::from_millis(500), &mut taken).await;
    assert!(
        early.is_err(),
        "the third waiter took the lock while it was held: {early:?}"
    );
    let held = guard.fencing_token();
    assert!(guard.release().await.unwrap(), "the holder lost the lock");
    let fence = tokio::time::timeout(Duration::from_secs(5), taken)
        .await
        .expect("the third waiter was not served after the release")
        .expect("the third waiter reports its fence");
    assert!(fence > held, "fence {fence:?} after {held:?}");
    tokio::time::timeout(Duration::from_secs(5), third)
        .await
        .expect("the third waiter's release ends")
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
}

/// A waiter whose acquire future is dropped leaves the queue at once.
pub async fn dropped_acquire_leaves_the_queue(env: Env) {
    giving_up_leaves_the_queue(env, GiveUp::Dropped).await;
}

/// A waiter whose wait runs out leaves the queue at once.
pub async fn ended_wait_leaves_the_queue(env: Env) {
    giving_up_leaves_the_queue(env, GiveUp::WaitOver).await;
}
