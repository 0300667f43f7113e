//! How long the acquisitions of a contended test waited, and the check that
//! none waited as long as a lost wake-up makes it.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lockguard_core::Client;

use super::Env;

/// The no-lost-wake-up tests' settings: with a 30 s retry interval and a
/// 90 s waiter timeout, a waiter's own timed refresh comes 15 s and more
/// after it last tried, far past [`BOUND`]; leases (40 s, the longest fixed
/// lease a ZooKeeper client of the kit takes) and waits outlast the test.
pub(crate) const RETRY: Duration = Duration::from_secs(30);
/// See [`RETRY`].
pub(crate) const LEASE: Duration = Duration::from_secs(40);
/// See [`RETRY`].
pub(crate) const WAIT: Duration = Duration::from_secs(120);
/// The longest an acquisition of those tests may wait.
pub(crate) const BOUND: Duration = Duration::from_secs(8);
/// How many tasks contend in those tests, over [`patient_clients`].
pub(crate) const TASKS: usize = 16;

/// The 4 clients of the no-lost-wake-up tests (see [`RETRY`]).
pub(crate) async fn patient_clients(env: &Env) -> Vec<Client> {
    let builder = Client::builder()
        .retry_interval(RETRY)
        .waiter_timeout(RETRY * 3);
    env.handles(builder).await
}

/// A release's answer in task `t`'s `round`: it must have held.
pub(crate) fn held(released: lockguard_core::Result<bool>, t: usize, round: usize) {
    let held = released.unwrap_or_else(|e| panic!("task {t}, round {round}: release: {e}"));
    assert!(held, "task {t}, round {round}: lease lost");
}

/// The waits of a test's acquisitions, recorded by its tasks.
#[derive(Debug, Default)]
pub(crate) struct Waits(Mutex<Vec<Duration>>);

impl Waits {
    /// One acquisition's wait.
    pub(crate) fn record(&self, wait: Duration) {
        self.0.lock().unwrap().push(wait);
    }

    /// Asserts that no wait reached `bound`, after printing their spread:
    /// a waiter whose wake-up was lost waits for its own timed refresh,
    /// which the tests set far above `bound`.
    pub(crate) fn assert_below(&self, bound: Duration, what: &str) {
        let mut waits = std::mem::take(&mut *self.0.lock().unwrap());
        waits.sort_unstable();
        let Some(&worst) = waits.last() else {
            panic!("no acquisition was recorded");
        };
        println!(
            "{} acquisitions, {what}: p50 {:?}, p99 {:?}, worst {worst:?}",
            waits.len(),
            waits[waits.len() / 2],
            waits[waits.len() * 99 / 100],
        );
        let late: Vec<_> = waits.iter().filter(|w| **w >= bound).collect();
        assert!(
            late.is_empty(),
            "{} of {} acquisitions waited {bound:?} or more ({what}): a lost wake-up, \
             found by the waiter's refresh: {late:?}",
            late.len(),
            waits.len()
        );
    }
}

/// When each free permit (the lock's one) was freed, oldest first: what
/// an acquisition's wait is timed from, so that a waiter is not blamed for
/// the holds ahead of it, and a store whose waiters line up without a queue
/// (Redlock) is held to what it promises, that a freed lock is taken at
/// once.
#[derive(Debug)]
pub(crate) struct Frees(Mutex<VecDeque<Instant>>);

impl Frees {
    /// `permits` permits, free from now.
    pub(crate) fn new(permits: usize) -> Self {
        Self(Mutex::new(vec![Instant::now(); permits].into()))
    }

    /// A holder is about to release its permit (the release call frees it,
    /// so the permit counts as free from just before).
    pub(crate) fn freeing(&self) {
        self.0.lock().unwrap().push_back(Instant::now());
    }

    /// A task that asked at `asked` took a permit: how long the permit had
    /// been free while the task waited (the oldest freed permit, which
    /// the first waiter gets).
    pub(crate) fn taken(&self, asked: Instant) -> Duration {
        let freed = self.0.lock().unwrap().pop_front().unwrap_or(asked);
        freed.max(asked).elapsed()
    }
}
