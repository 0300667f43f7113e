//! A scheduled job's replica: the process schedules the job
//! (`Client::schedule`) and records each run it makes, with its period.
//! The `schedule-once` check holds every replica to one run per period,
//! across kills, pauses past the run's lease and replacements that start
//! mid-period.
//!
//! One run in ten is long, past the run's bound (`at_most`) at times, so
//! that runs are cancelled at it. On a store that keeps no lease as long
//! as `at_most` (ZooKeeper, etcd: their longest is two thirds of the
//! session or lease TTL) `at_most` is set past the longest lease, so the
//! run's lock is renewed by its watchdog and the run cut by its own timer
//! (the path an hourly job takes there).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockguard_core::{JobRun, Schedule};
use tokio::sync::mpsc;

use super::{Break, Worker};
use crate::clock::now_ns;
use crate::history::{Call, Outcome};

/// The scheduled job.
pub(crate) const SCHEDULE_KEY: &str = "sched";
/// Its period: a few hundred periods in a long run, a dozen in a short
/// one; `at_least` (half) and `at_most` (all of it) as by default, on a
/// store with no longest lease.
const EVERY: Duration = Duration::from_millis(400);

/// The job's schedule on a store that keeps leases up to `longest`:
/// `at_most` past it, by a tenth of a second.
fn schedule(longest: Option<Duration>) -> Schedule {
    match longest {
        Some(longest) => Schedule::every(EVERY).at_most(longest + Duration::from_millis(100)),
        None => Schedule::every(EVERY),
    }
}

/// How long a run lasts: mostly a few milliseconds; one in ten from a
/// tenth of `at_most` to one and a half times it.
fn run_length(at_most: Duration) -> Duration {
    if fastrand::u8(0..10) == 0 {
        at_most.mul_f64(0.1 + 1.4 * fastrand::f64())
    } else {
        Duration::from_millis(fastrand::u64(2..20))
    }
}

/// What a run tells the worker.
enum Ran {
    Started { period: u64, fence: u64 },
    Ended { period: u64 },
}

impl Worker {
    /// Schedules the job until `until`, recording each run: invoked when
    /// it starts (its period claimed), completed with its fencing token
    /// when it ends.
    pub(super) async fn schedule_runs(&mut self, until: u64) {
        if self.brk == Some(Break::EveryPeriod) {
            return self.every_period(until).await;
        }
        let (ran, mut runs) = mpsc::unbounded_channel();
        let schedule = schedule(self.client.max_lease());
        let at_most = schedule.kept_at_most();
        let scheduled = self
            .client
            .schedule(SCHEDULE_KEY, schedule, move |run: JobRun| {
                let ran = ran.clone();
                let period = run.period();
                let fence = run.fencing_token().get();
                async move {
                    let _ = ran.send(Ran::Started { period, fence });
                    tokio::time::sleep(run_length(at_most)).await;
                    let _ = ran.send(Ran::Ended { period });
                    Ok::<_, std::convert::Infallible>(())
                }
            });
        let scheduled = match scheduled {
            Ok(s) => s,
            Err(e) => {
                let op = self.rec.invoke(Call::ScheduledRun {
                    key: SCHEDULE_KEY.into(),
                    period: 0,
                });
                return self.rec.complete(op, Outcome::error(&e));
            }
        };
        let mut open = Vec::new();
        let left = || Duration::from_nanos(until.saturating_sub(now_ns()));
        loop {
            let message = tokio::select! {
                m = runs.recv() => m,
                () = tokio::time::sleep(left()) => break,
            };
            match message {
                Some(Ran::Started { period, fence }) => {
                    let op = self.rec.invoke(Call::ScheduledRun {
                        key: SCHEDULE_KEY.into(),
                        period,
                    });
                    open.push((period, fence, op));
                }
                Some(Ran::Ended { period }) => {
                    if let Some(i) = open.iter().position(|(p, ..)| *p == period) {
                        let (_, fence, op) = open.remove(i);
                        self.rec.complete(op, Outcome::Acquired { fence });
                    }
                }
                None => break,
            }
        }
        scheduled.stop().await;
    }

    /// The broken replica: runs the job at the start of every period
    /// without the schedule's lock or record, as a hand-written loop on
    /// every replica would.
    async fn every_period(&mut self, until: u64) {
        loop {
            let since = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            let period = (since.as_nanos() / EVERY.as_nanos()) as u64 + 1;
            let next =
                Duration::from_nanos((period as u128 * EVERY.as_nanos() - since.as_nanos()) as u64);
            if now_ns() + next.as_nanos() as u64 >= until {
                return;
            }
            tokio::time::sleep(next).await;
            let op = self.rec.invoke(Call::ScheduledRun {
                key: SCHEDULE_KEY.into(),
                period,
            });
            self.rec.complete(op, Outcome::Acquired { fence: 0 });
        }
    }
}
