//! Shared test support: a store to run against, and a tracker of bodies
//! running at once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use lockguard::Client;
use lockguard::prelude::*;
use lockguard_testing::RedisServer;

/// One store under test: in memory, or a real `redis-server` started for
/// this test and killed when it ends.
pub(crate) struct Env {
    pub(crate) server: Option<RedisServer>,
    memory: Option<Client>,
}

impl Env {
    pub(crate) fn memory() -> Self {
        Self {
            server: None,
            memory: Some(Client::memory()),
        }
    }

    pub(crate) fn redis() -> Self {
        Self {
            server: Some(RedisServer::start()),
            memory: None,
        }
    }

    /// A client as if in another process: its own connections on Redis,
    /// a peer (no shared reentrancy) of one handle in memory.
    pub(crate) async fn client(&self) -> Client {
        match (&self.server, &self.memory) {
            (Some(server), _) => Client::connect_redis(&server.url()).await.expect("connect"),
            (None, Some(memory)) => memory.peer(),
            (None, None) => unreachable!("an env has a store"),
        }
    }
}

/// Runs each scenario `name(Env)` on both stores, as the tests
/// `name::memory` and `name::redis`.
macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn memory() {
                    super::$name($crate::support::Env::memory()).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn redis() {
                    super::$name($crate::support::Env::redis()).await;
                }
            }
        )*
    };
}
pub(crate) use on_both_stores;

/// Counts the bodies running at once, the most ever seen, and how many
/// ever started.
#[derive(Debug, Default)]
pub(crate) struct Tracker {
    active: AtomicUsize,
    max: AtomicUsize,
    runs: AtomicUsize,
    finished: AtomicUsize,
}

impl Tracker {
    /// Marks a body as running until the returned value is dropped, which
    /// also happens when the body's future is dropped mid-way.
    pub(crate) fn enter(&self) -> Inside<'_> {
        let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
        self.runs.fetch_add(1, Ordering::SeqCst);
        Inside {
            tracker: self,
            finished: AtomicBool::new(false),
        }
    }

    /// Bodies running now.
    pub(crate) fn active(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    /// The most bodies ever running at once.
    pub(crate) fn max(&self) -> usize {
        self.max.load(Ordering::SeqCst)
    }

    /// Bodies that started.
    pub(crate) fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }

    /// Bodies that reached their end.
    pub(crate) fn finished(&self) -> usize {
        self.finished.load(Ordering::SeqCst)
    }
}

/// One running body.
pub(crate) struct Inside<'a> {
    tracker: &'a Tracker,
    finished: AtomicBool,
}

impl Inside<'_> {
    /// The body reached its end.
    pub(crate) fn finish(self) {
        self.finished.store(true, Ordering::SeqCst);
    }
}

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        if self.finished.load(Ordering::SeqCst) {
            self.tracker.finished.fetch_add(1, Ordering::SeqCst);
        }
        self.tracker.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A bound on anything a test waits for, so a bug fails the test instead
/// of hanging it.
pub(crate) const PATIENCE: Duration = Duration::from_secs(20);

/// `fut`, or a panic naming `what` when it takes longer than [`PATIENCE`].
pub(crate) async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    tokio::time::timeout(PATIENCE, fut)
        .await
        .unwrap_or_else(|_| panic!("{what} took longer than {PATIENCE:?}"))
}

/// Polls `f` every 5 ms until it returns true; panics after [`PATIENCE`].
pub(crate) async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    within(what, async {
        while !f().await {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}
