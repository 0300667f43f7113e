//! The wait queue: FIFO order across clients and processes, no starvation
//! of one client's tasks, waiters that die or give up, a handoff target
//! losing its connections, a restart with a full queue, and semaphore
//! permits in order.
//!
//! On Redis each client is its own `Client` with its own connections, as
//! separate processes have, and one test runs a real child process. The
//! order tests also run on the in-memory store, with peers for processes
//! and paused time, so that the order of arrivals is exact.

#[path = "../support/mod.rs"]
mod support;

mod departures;
mod order;
mod store_faults;

use std::time::Duration;

use lockguard_core::LockGuard;
use lockguard_testing::RedisServer;
use tokio::task::JoinSet;

use support::{Env, eventually};

/// The wait queue of a lock or a semaphore, by name. Its key (default
/// prefix) is spelled in [`Queue::key`] only, so a change of layout is one
/// edit.
#[derive(Debug, Clone, Copy)]
enum Queue<'a> {
    Lock(&'a str),
    /// A semaphore and its permits (ZooKeeper counts its waiters by them).
    Semaphore(&'a str, u32),
}

impl Queue<'_> {
    /// The sorted set of waiter tokens: `lockguard:lock:{k}:queue` beside
    /// the lock key `lockguard:lock:{k}` (and `lockguard:lock:{k}:tickets`),
    /// `lockguard:sem:{s}:queue` beside the semaphore `lockguard:sem:{s}`.
    fn key(self) -> String {
        match self {
            Self::Lock(name) => format!("lockguard:lock:{{{name}}}:queue"),
            Self::Semaphore(name, _) => format!("lockguard:sem:{{{name}}}:queue"),
        }
    }

    /// How many waiters the Redis store has queued (`ZCARD`), on a
    /// connection of its own (so it works after a restart or a kill).
    async fn len(self, server: &RedisServer) -> u64 {
        let mut conn = server.connection().await;
        redis::cmd("ZCARD")
            .arg(self.key())
            .query_async(&mut conn)
            .await
            .expect("ZCARD of the queue")
    }
}

/// How long the memory tests let freshly spawned waiters run. With paused
/// time the runtime moves the clock only once every task is idle, so after
/// this sleep each waiter spawned before it has made its first attempt and
/// is queued: arrivals are ordered exactly, not by luck.
const SETTLE: Duration = Duration::from_millis(10);

impl Queue<'_> {
    /// How many waiters a store with its own clock has queued, seen through
    /// a client's inspection (one round trip); `None` on memory.
    async fn waiting(self, env: &Env) -> Option<u64> {
        if env.queues_by_inspection() {
            let lg = env.client().await;
            let seen = match self {
                Self::Lock(name) => lg.lock(name).inspect().await,
                Self::Semaphore(name, permits) => lg.semaphore(name, permits).inspect().await,
            };
            return Some(seen.expect("inspect").waiters);
        }
        match &env.server {
            Some(server) => Some(self.len(server).await),
            None => None,
        }
    }
}

/// Waits until exactly `n` waiters are queued: on the real stores by
/// watching the queue's size (for at most 10 s); on memory (tests with
/// paused time only) by letting the waiters spawned so far run until they
/// wait.
async fn until_queued(env: &Env, queue: Queue<'_>, n: u64) {
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
        "{n} waiters never queued in {} (now {:?})",
        queue.key(),
        queue.waiting(env).await
    );
}

/// Waits until the queue holds `n` waiters (for at most `within`) on the
/// real stores; on memory, where the queue cannot be seen, a caller checks
/// with a `try_acquire`.
async fn until_queue_holds(env: &Env, queue: Queue<'_>, n: u64, within: Duration) {
    if !env.real_time() {
        return;
    }
    let reached = eventually(within, || async { queue.waiting(env).await == Some(n) }).await;
    assert!(
        reached,
        "{} holds {:?} waiters, not {n}",
        queue.key(),
        queue.waiting(env).await
    );
}

/// Joins every task of `tasks` within `within`, passing their panics on.
async fn join_all<T: 'static>(tasks: &mut JoinSet<T>, within: Duration) -> Vec<T> {
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
fn assert_busy(attempt: lockguard_core::Result<LockGuard>, why: &str) {
    match attempt {
        Ok(g) => panic!(
            "{why}: try_acquire got the lock (fence {:?})",
            g.fencing_token()
        ),
        Err(e) => assert!(e.is_busy(), "{why}: expected busy, got {e}"),
    }
}
