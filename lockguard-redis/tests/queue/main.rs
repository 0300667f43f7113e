//! The wait queue on Redis: no starvation of one client's tasks, a waiter
//! process that dies, a handoff target losing its connections, a restart
//! with a full queue. FIFO order, no barging, permits in order and waiters
//! that give up are the conformance kit's `queue` group, which every store
//! runs.
//!
//! Each client is its own `Client` with its own connections, as separate
//! processes have, and one test runs a real child process.

#[path = "../support/mod.rs"]
mod support;

mod costs;
mod departures;
mod multi;
mod order;
mod permits;
mod store_faults;

use std::time::Duration;

use lockguard_testing::RedisServer;
use lockguard_testing::conformance::queue::{assert_busy, join_all};

use support::{Env, eventually};

/// The wait queue of a lock, by name. Its key (default prefix) is spelled
/// in [`Queue::key`] only, so a change of layout is one edit.
#[derive(Debug, Clone, Copy)]
enum Queue<'a> {
    Lock(&'a str),
    Semaphore(&'a str),
}

impl Queue<'_> {
    /// The sorted set of waiter tokens: `lockguard:lock:{k}:queue` beside
    /// the lock key `lockguard:lock:{k}` (and `lockguard:lock:{k}:tickets`);
    /// a semaphore's beside its holders, `lockguard:sem:{k}`.
    fn key(self) -> String {
        format!("{}:queue", self.holder_key())
    }

    /// The key of the lock, or of the semaphore's holders (a sorted set of
    /// tokens scored by their leases' ends).
    fn holder_key(self) -> String {
        match self {
            Self::Lock(name) => format!("lockguard:lock:{{{name}}}"),
            Self::Semaphore(name) => format!("lockguard:sem:{{{name}}}"),
        }
    }

    /// The hash of the waiters' tickets (their places' deadlines), and of a
    /// semaphore's fence records.
    fn tickets_key(self) -> String {
        format!("{}:tickets", self.holder_key())
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

/// Queues `n` waiters of clients of their own (made with `settings`), one
/// after another, each releasing the lock as soon as it acquires it.
async fn queue_ahead(
    env: &Env,
    queue: Queue<'static>,
    n: u64,
    settings: impl Fn() -> lockguard_core::Builder,
) -> tokio::task::JoinSet<()> {
    let Queue::Lock(name) = queue else {
        panic!("queue_ahead queues for a lock, not {queue:?}");
    };
    let mut waiters = tokio::task::JoinSet::new();
    for i in 0..n {
        let lg = env.client_with(settings()).await;
        waiters.spawn(async move {
            let g = lg
                .lock(name)
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .expect("a waiter ahead acquires");
            assert!(g.release().await.unwrap());
        });
        until_queued(env, queue, i + 1).await;
    }
    waiters
}

/// Waits until exactly `n` waiters are queued (for at most 10 s).
async fn until_queued(env: &Env, queue: Queue<'_>, n: u64) {
    until_queue_holds(env, queue, n, Duration::from_secs(10)).await;
}

/// Waits until the queue holds `n` waiters (for at most `within`).
async fn until_queue_holds(env: &Env, queue: Queue<'_>, n: u64, within: Duration) {
    let server = env.server.as_ref().expect("a redis server");
    let reached = eventually(within, || async { queue.len(server).await == n }).await;
    assert!(
        reached,
        "{} holds {} waiters, not {n}",
        queue.key(),
        queue.len(server).await
    );
}

/// Zeroes the server's command statistics (`CONFIG RESETSTAT`).
async fn reset_stats(admin: &mut redis::aio::MultiplexedConnection) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(admin)
        .await
        .unwrap();
}
