//! How long the acquisitions of a contended test waited, and the check that
//! none waited as long as a lost wake-up makes it.

use std::sync::Mutex;
use std::time::Duration;

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
