//! A scheduled job's replica: the process schedules the job
//! (`Client::schedule`) and records each run it makes, with its period.
//! The `schedule-once` check holds every replica to one run per period,
//! across kills, pauses past the run's lease and replacements that start
//! mid-period.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockguard_core::{JobRun, Schedule};
use tokio::sync::mpsc;

use super::{Break, Worker};
use crate::clock::now_ns;
use crate::history::{Call, Outcome};

/// The scheduled job.
pub(crate) const SCHEDULE_KEY: &str = "sched";
/// Its period: a few hundred periods in a long run, a dozen in a short
/// one; `at_least` (half) and `at_most` (all of it) as by default.
const EVERY: Duration = Duration::from_millis(400);

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
        let scheduled =
            self.client
                .schedule(SCHEDULE_KEY, Schedule::every(EVERY), move |run: JobRun| {
                    let ran = ran.clone();
                    let period = run.period();
                    let fence = run.fencing_token().get();
                    async move {
                        let _ = ran.send(Ran::Started { period, fence });
                        tokio::time::sleep(Duration::from_millis(fastrand::u64(2..20))).await;
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
