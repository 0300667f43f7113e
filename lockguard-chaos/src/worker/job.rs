//! A scheduled job's run: one process takes the job's lock with
//! `at_least`, does its moment of work, releases the lock and exits, as a
//! replica's job process does; the runner starts the next process. The
//! `at-least` check holds the store to keeping the lock until `at_least`
//! after it was taken, whatever became of the process that took it.

use std::time::Duration;

use super::{Break, Worker};
use crate::clock::now_ns;
use crate::history::{Call, Outcome};

/// The job's lock.
pub(crate) const JOB_KEY: &str = "job";
/// The job's fixed lease (`lockAtMostFor`): under two thirds of the
/// ZooKeeper session the workers use, the longest lease it keeps.
const JOB_LEASE: Duration = Duration::from_millis(1500);
/// The job's `at_least` (`lockAtLeastFor`): long beside the run and the
/// start of the next process, short enough for several runs in a run of
/// the checker.
const JOB_AT_LEAST: Duration = Duration::from_millis(1000);
/// How long a run waits for the lock: past the window of the run before.
const JOB_WAIT: Duration = Duration::from_secs(3);
/// The shortest wait worth starting a run for.
const MIN_WAIT: Duration = Duration::from_millis(100);

impl Worker {
    /// One run of the job, waiting at most until `until`: acquire, a
    /// moment's work, release.
    pub(super) async fn job_run(&mut self, until: u64) {
        let left = Duration::from_nanos(until.saturating_sub(now_ns()));
        let wait = JOB_WAIT.min(left);
        if wait < MIN_WAIT {
            return;
        }
        let lock = self.client.lock(JOB_KEY).wait(wait).lease(JOB_LEASE);
        // The broken job asks for no `at_least`, and records that it did.
        let lock = if self.brk == Some(Break::IgnoreAtLeast) {
            lock
        } else {
            lock.at_least(JOB_AT_LEAST)
        };
        let op = self.rec.invoke(Call::Acquire {
            key: JOB_KEY.to_owned(),
            wait_ms: wait.as_millis() as u64,
            lease_ms: JOB_LEASE.as_millis() as u64,
            watchdog: false,
            read: false,
            permits: None,
            multi: false,
            at_least_ms: Some(JOB_AT_LEAST.as_millis() as u64),
        });
        let guard = match lock.acquire().await {
            Ok(g) => g,
            Err(e) => return self.rec.complete(op, Outcome::error(&e)),
        };
        let fence = guard.fencing_token().get();
        self.rec.complete(op, Outcome::Acquired { fence });
        self.is_held(JOB_KEY, &guard);
        tokio::time::sleep(Duration::from_millis(self.rng.u64(2..10))).await;
        self.is_held(JOB_KEY, &guard);
        let op = self.rec.invoke(Call::Release {
            key: JOB_KEY.to_owned(),
            fence,
        });
        match guard.release().await {
            Ok(was_held) => self.rec.complete(op, Outcome::Released { was_held }),
            Err(e) => self.rec.complete(op, Outcome::error(&e)),
        }
    }
}
