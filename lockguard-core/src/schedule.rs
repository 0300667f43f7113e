//! Scheduled jobs: a job run once per period across every replica
//! ([`Client::schedule`](crate::Client::schedule)), on a lock of its own
//! kind kept `at_least` after it was taken, and a fenced record of the
//! last period run.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::engine::Engine;
use crate::error::{Error, ErrorKind, Result};
use crate::fence::FencingToken;
use crate::fenced::FencedResource;
use crate::guard::{LeaseWatch, LockGuard};
use crate::lock::Lock;

/// How often a job runs, and how long its lock is kept: what
/// [`Client::schedule`](crate::Client::schedule) takes (a [`Duration`]
/// converts into one with the defaults).
///
/// Periods are counted on the wall clock from the Unix epoch, so every
/// replica agrees on them: with `every(60 s)`, period `n` starts at
/// `n × 60 s` after the epoch, on the minute.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lockguard_core::Schedule;
/// let hourly = Schedule::every(Duration::from_secs(3600))
///     .at_least(Duration::from_secs(60)) // kept at least a minute (default: half the period)
///     .at_most(Duration::from_secs(600)); // a run lasts at most 10 minutes (default: the period)
/// assert_eq!(hourly.period(), Duration::from_secs(3600));
/// let every_minute: Schedule = Duration::from_secs(60).into();
/// assert_eq!(every_minute.kept_at_least(), Duration::from_secs(30));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    every: Duration,
    at_least: Option<Duration>,
    at_most: Option<Duration>,
}

impl Schedule {
    /// A run every `period`, with the default `at_least` (half the period)
    /// and `at_most` (the period).
    pub fn every(period: Duration) -> Self {
        Self {
            every: period,
            at_least: None,
            at_most: None,
        }
    }

    /// How long the job's lock is kept after it was taken, however soon
    /// the run ends (ShedLock's `lockAtLeastFor`), though never past the
    /// end of the run's period: a replica whose clock is behind by less
    /// finds it taken and skips. Shorter than the period; half of it by
    /// default (or `at_most`, when that is shorter).
    pub fn at_least(mut self, at_least: Duration) -> Self {
        self.at_least = Some(at_least);
        self
    }

    /// The lease of the job's lock (ShedLock's `lockAtMostFor`): the
    /// longest a run may take, and how soon a replica whose process died
    /// mid-run is replaced. A run still going when it ends is cancelled
    /// (its lock is lost: another replica may run the next period). The
    /// period by default.
    ///
    /// On a store that keeps no lease that long (ZooKeeper and etcd keep
    /// at most two thirds of the session timeout or lease TTL), the run's
    /// lock is renewed by its watchdog instead, and the run cancelled when
    /// `at_most` has passed since the lock was asked for (where a fixed
    /// lease counts from); a replica whose process died mid-run is then
    /// replaced within the store's longest lease, and the lock is kept
    /// after a run at most that long (`at_least` shortened to it): the
    /// record of runs keeps a period from running twice.
    pub fn at_most(mut self, at_most: Duration) -> Self {
        self.at_most = Some(at_most);
        self
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.every
    }

    /// The `at_least` in force: as set, or half the period (at most
    /// `at_most`).
    pub fn kept_at_least(&self) -> Duration {
        self.at_least
            .unwrap_or_else(|| (self.every / 2).min(self.kept_at_most()))
    }

    /// The `at_most` in force: as set, or the period.
    pub fn kept_at_most(&self) -> Duration {
        self.at_most.unwrap_or(self.every)
    }

    /// The period under way at `now` and its start; `None` before the
    /// epoch.
    fn period_at(&self, now: SystemTime) -> Option<u64> {
        let since = now.duration_since(UNIX_EPOCH).ok()?;
        u64::try_from(since.as_nanos() / self.every.as_nanos()).ok()
    }

    /// What a run's lock is kept short of the next period, for the
    /// acquisition's round trip and the replicas' clocks: a tenth of the
    /// period, at most 100 ms.
    fn margin(&self) -> Duration {
        (self.every / 10).min(Duration::from_millis(100))
    }

    /// Until when a lock taken for period `n` keeps every other replica
    /// from taking it for `n` on a store with no record of runs (Redlock):
    /// a run's lock, taken at or after `n`'s start, is kept `at_least` from
    /// then (or to a margin before the next period, the sooner), so a lock
    /// taken by this instant overlaps every earlier run's of `n`.
    fn unrecorded_window(&self, n: u64) -> SystemTime {
        let kept = self.start_of(n) + self.kept_at_least();
        let next = self
            .start_of(n.saturating_add(1))
            .checked_sub(self.margin())
            .unwrap_or(UNIX_EPOCH);
        kept.min(next)
    }

    /// When period `n` starts.
    fn start_of(&self, n: u64) -> SystemTime {
        let nanos = self.every.as_nanos().saturating_mul(u128::from(n));
        let nanos = u64::try_from(nanos).unwrap_or(u64::MAX);
        UNIX_EPOCH + Duration::from_nanos(nanos)
    }

    fn check(&self, name: &str) -> Result<()> {
        let invalid = |what: String| Err(Error::invalid(format!("scheduled job {name:?}: {what}")));
        if self.every < Duration::from_millis(1) {
            return invalid(format!("the period is {:?}, the least is 1 ms", self.every));
        }
        if self.kept_at_least() >= self.every {
            return invalid(format!(
                "at_least ({:?}) must be shorter than the period ({:?}), or the lock kept from one period would make the next skip",
                self.kept_at_least(),
                self.every
            ));
        }
        if self.kept_at_least() > self.kept_at_most() {
            return invalid(format!(
                "at_least ({:?}) is longer than at_most ({:?})",
                self.kept_at_least(),
                self.kept_at_most()
            ));
        }
        Ok(())
    }
}

impl From<Duration> for Schedule {
    fn from(period: Duration) -> Self {
        Self::every(period)
    }
}

/// One run of a scheduled job: what the job is given.
#[derive(Debug, Clone)]
pub struct JobRun {
    period: u64,
    lease: LeaseWatch,
}

impl JobRun {
    /// The period this run is for: `n` for the period that starts `n`
    /// periods after the Unix epoch. At most one run per period, across
    /// every replica (see [`Client::schedule`](crate::Client::schedule)).
    pub fn period(&self) -> u64 {
        self.period
    }

    /// The fencing token of the job's lock for this run: greater than every
    /// earlier run's. Pass it with the run's writes to a resource that
    /// checks tokens.
    pub fn fencing_token(&self) -> FencingToken {
        self.lease.fencing_token()
    }

    /// The lease of the job's lock: whether it is still held, and a future
    /// that completes when it is lost (the run is cancelled then anyway).
    pub fn lease(&self) -> &LeaseWatch {
        &self.lease
    }
}

/// A job running on its schedule: made by
/// [`Client::schedule`](crate::Client::schedule). Dropping it stops the
/// schedule after the run under way, if any; [`Scheduled::stop`] also
/// waits for that run.
#[derive(Debug)]
#[must_use = "dropping it stops the schedule"]
pub struct Scheduled {
    name: Arc<str>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Scheduled {
    /// The job's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stops the schedule: no run starts after this, and a run under way
    /// is waited for.
    pub async fn stop(mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Scheduled {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}

/// What one period's attempt did: the `outcome` label of
/// `lockguard_scheduled_runs_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// The job ran and returned `Ok`.
    Ran,
    /// The job ran and returned an error.
    Failed,
    /// The run outlived its lock (`at_most`) and was cancelled.
    Lost,
    /// Another replica holds the lock, or has run this period.
    Skipped,
    /// The store could not be asked.
    Error,
}

impl Attempt {
    fn label(self) -> &'static str {
        match self {
            Attempt::Ran => "ran",
            Attempt::Failed => "failed",
            Attempt::Lost => "lost",
            Attempt::Skipped => "skipped",
            Attempt::Error => "error",
        }
    }
}

/// A scheduled job's lock and record of runs.
struct Job {
    name: Arc<str>,
    schedule: Schedule,
    lock: Lock,
    /// How long a run's lock is kept after it was taken, at most.
    at_least: Duration,
    /// When the lock is renewed by its watchdog (a store that keeps no
    /// lease as long as `at_most`), the run's own bound: `at_most`.
    run_for: Option<Duration>,
    runs: FencedResource,
}

/// Starts `job` on `schedule`: see [`Client::schedule`](crate::Client::schedule).
pub(crate) fn start<F, Fut, T, E>(
    engine: Arc<Engine>,
    name: &str,
    schedule: Schedule,
    job: F,
) -> Result<Scheduled>
where
    F: FnMut(JobRun) -> Fut + Send + 'static,
    Fut: Future<Output = std::result::Result<T, E>> + Send + 'static,
    T: Send + 'static,
    E: fmt::Display + Send + 'static,
{
    schedule.check(name)?;
    // A store that keeps no lease as long as `at_most` renews a shorter
    // one, and the run is bounded by its own timer (see `at_most`).
    let at_most = schedule.kept_at_most();
    let longest = engine.store.max_lease();
    let run_for = longest.filter(|l| at_most > *l).map(|_| at_most);
    let at_least = schedule
        .kept_at_least()
        .min(longest.unwrap_or(Duration::MAX));
    let lock = Lock::scheduled(engine.clone(), name);
    let lock = match run_for {
        Some(_) => lock.watchdog(at_most),
        None => lock.lease(at_most),
    }
    .at_least(at_least)
    .wait(Duration::ZERO);
    lock.validate()?;
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("scheduled job {name:?}: Client::schedule runs on a tokio runtime, and was called outside one"),
        )
    })?;
    let name: Arc<str> = name.into();
    let job_state = Job {
        name: name.clone(),
        schedule,
        lock,
        at_least,
        run_for,
        runs: FencedResource::schedule_runs(engine, &name),
    };
    let (stop, stopped) = watch::channel(false);
    let task = runtime.spawn(job_state.run(job, stopped));
    Ok(Scheduled {
        name,
        stop,
        task: Some(task),
    })
}

impl Job {
    /// Attempts each period at its start (the one under way too, at once,
    /// where the store keeps the record of runs), until stopped.
    async fn run<F, Fut, T, E>(self, mut job: F, mut stopped: watch::Receiver<bool>)
    where
        F: FnMut(JobRun) -> Fut + Send + 'static,
        Fut: Future<Output = std::result::Result<T, E>> + Send + 'static,
        E: fmt::Display,
    {
        let Some(mut period) = self.schedule.period_at(SystemTime::now()) else {
            tracing::warn!(schedule = %self.name, "the clock is before 1970: the job never runs");
            return;
        };
        let mut first = true;
        loop {
            if !first {
                let wait = self
                    .schedule
                    .start_of(period)
                    .duration_since(SystemTime::now())
                    .unwrap_or_default();
                tokio::select! {
                    biased;
                    _ = stopped.wait_for(|stop| *stop) => return,
                    () = tokio::time::sleep(wait) => {}
                }
            }
            if *stopped.borrow() {
                return;
            }
            let attempt = self.attempt(period, first, &mut job).await;
            crate::meter::scheduled(&self.name, attempt.label());
            first = false;
            let now = self.schedule.period_at(SystemTime::now()).unwrap_or(period);
            period = (period + 1).max(now);
        }
    }

    /// Period `period`'s attempt: take the lock, check and write the record
    /// of runs, run the job while the lock lasts, release (the lock stays
    /// `at_least`).
    async fn attempt<F, Fut, T, E>(&self, period: u64, at_start: bool, job: &mut F) -> Attempt
    where
        F: FnMut(JobRun) -> Fut,
        Fut: Future<Output = std::result::Result<T, E>>,
        E: fmt::Display,
    {
        let name = &*self.name;
        // Kept `at_least`, but never into the next period: a run late in
        // its period (one started mid-period) must not make the next skip.
        // The keeping counts from the acquisition's answer, so it ends a
        // margin before the next period (a tenth of the period, at most
        // 100 ms), for the acquisition's round trip.
        let margin = self.schedule.margin();
        let left = self
            .schedule
            .start_of(period + 1)
            .duration_since(SystemTime::now())
            .unwrap_or_default()
            .saturating_sub(margin);
        let lock = self.lock.clone().at_least(self.at_least.min(left));
        // `at_most` counts from here, as a fixed lease does.
        let asked = tokio::time::Instant::now();
        let guard = match lock.try_acquire().await {
            Ok(guard) => guard,
            Err(e) if e.is_busy() => {
                tracing::debug!(schedule = name, period, "skipped: another replica runs it");
                return Attempt::Skipped;
            }
            Err(e) => {
                tracing::warn!(schedule = name, period, error = %e, "cannot take the job's lock; this period is skipped");
                return Attempt::Error;
            }
        };
        let attempt = match self.claim(&guard, period, at_start).await {
            Ok(true) => {
                let ends = self.run_for.map(|d| asked + d);
                run_while_held(name, period, &guard, ends, job).await
            }
            Ok(false) => Attempt::Skipped,
            Err(e) => {
                tracing::warn!(schedule = name, period, error = %e, "cannot read or write the job's record of runs; this period is skipped");
                Attempt::Error
            }
        };
        if let Err(e) = guard.release().await {
            tracing::debug!(schedule = name, period, error = %e, "releasing the job's lock failed; it ends with its lease");
        }
        attempt
    }

    /// Whether `period` is still to run, recording it as run when it is:
    /// false when the record names it or a later one, or a newer holder
    /// of the lock wrote the record. On a store without fenced values
    /// (Redlock), `at_least` alone keeps the periods apart: a replica that
    /// starts mid-period waits for the next, and one that took the lock
    /// late in the period (its process paused, or its attempt slow), after
    /// an earlier run's lock may have been let go, skips it.
    async fn claim(&self, guard: &LockGuard, period: u64, at_start: bool) -> Result<bool> {
        let last = match self.runs.read().await {
            Ok(last) => last,
            Err(e) if e.is_unsupported() => {
                let in_time = SystemTime::now() <= self.schedule.unrecorded_window(period);
                if !in_time {
                    tracing::debug!(schedule = %self.name, period, "skipped: the lock was taken too late in the period to exclude an earlier run");
                }
                return Ok(!at_start && in_time);
            }
            Err(e) => return Err(e),
        };
        if let Some(last) = last {
            let ran = std::str::from_utf8(&last.value)
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::Protocol,
                        format!(
                            "scheduled job {:?}: its record of runs is not one lockguard writes",
                            self.name
                        ),
                    )
                })?;
            if ran >= period {
                tracing::debug!(schedule = %self.name, period, ran, "skipped: this period has run");
                return Ok(false);
            }
        }
        match self
            .runs
            .write(guard.fencing_token(), period.to_string())
            .await
        {
            Ok(()) => Ok(true),
            Err(e) if e.is_stale_fencing_token() => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Runs the job for `period` until it ends, the lock is lost, or (a lock
/// renewed by its watchdog) `ends` comes.
async fn run_while_held<F, Fut, T, E>(
    name: &str,
    period: u64,
    guard: &LockGuard,
    ends: Option<tokio::time::Instant>,
    job: &mut F,
) -> Attempt
where
    F: FnMut(JobRun) -> Fut,
    Fut: Future<Output = std::result::Result<T, E>>,
    E: fmt::Display,
{
    let run = JobRun {
        period,
        lease: guard.watch(),
    };
    tracing::debug!(
        schedule = name,
        period,
        term = guard.fencing_token().get(),
        "running"
    );
    let lost = guard.lost();
    // A lock renewed by its watchdog: `at_most` ends the run here.
    let out_of_time = async {
        match ends {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        done = job(run) => match done {
            Ok(_) => Attempt::Ran,
            Err(e) => {
                tracing::warn!(schedule = name, period, error = %e, "the scheduled job failed");
                Attempt::Failed
            }
        },
        e = lost => {
            tracing::warn!(schedule = name, period, error = %e, "the scheduled job's lock was lost (its run outlived at_most, or the store lost it); the run is cancelled");
            Attempt::Lost
        }
        () = out_of_time => {
            tracing::warn!(schedule = name, period, "the scheduled job's run outlived at_most; the run is cancelled");
            Attempt::Lost
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_record_a_period_is_taken_only_while_an_earlier_runs_lock_is_kept() {
        // Kept half the period by default: a lock taken later than that
        // into the period may follow an earlier run's, let go.
        let s = Schedule::every(Duration::from_millis(400));
        assert_eq!(
            s.unrecorded_window(10),
            s.start_of(10) + Duration::from_millis(200)
        );
        // Kept nearly the whole period: only to a margin before the next.
        let s = Schedule::every(Duration::from_secs(1)).at_least(Duration::from_millis(950));
        assert_eq!(
            s.unrecorded_window(10),
            s.start_of(11) - Duration::from_millis(100)
        );
    }

    #[test]
    fn periods_are_counted_from_the_epoch() {
        let s = Schedule::every(Duration::from_secs(60));
        let at = UNIX_EPOCH + Duration::from_secs(60 * 1000 + 59);
        assert_eq!(s.period_at(at), Some(1000));
        assert_eq!(s.start_of(1000), UNIX_EPOCH + Duration::from_secs(60_000));
        assert_eq!(s.period_at(s.start_of(1001)), Some(1001));
    }

    #[test]
    fn bad_schedules_are_clear_errors() {
        for (s, says) in [
            (Schedule::every(Duration::ZERO), "period"),
            (
                Schedule::every(Duration::from_secs(1)).at_least(Duration::from_secs(1)),
                "shorter than the period",
            ),
            (
                Schedule::every(Duration::from_secs(10))
                    .at_least(Duration::from_secs(5))
                    .at_most(Duration::from_secs(2)),
                "longer than at_most",
            ),
        ] {
            let e = s.check("j").unwrap_err();
            assert!(e.is_invalid_input() && e.message().contains(says), "{e}");
        }
        assert!(Schedule::every(Duration::from_secs(1)).check("j").is_ok());
    }

    /// Says when it is dropped (a run cancelled or done).
    struct Dropped(tokio::sync::mpsc::UnboundedSender<&'static str>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            let _ = self.0.send("dropped");
        }
    }

    /// On a store that keeps leases of 300 ms at most, a schedule whose
    /// `at_most` (1 s) is longer starts (it was refused), its run's lock
    /// is renewed past the store's longest lease, and the run is
    /// cancelled when `at_most` has passed.
    #[tokio::test(start_paused = true)]
    async fn a_run_longer_than_the_stores_longest_lease_is_renewed_and_ends_at_at_most() {
        let store = crate::store::forwarding::Forwarding::new(Some(Duration::from_millis(300)));
        let lg = crate::store::forwarding::Forwarding::client(&store);
        let schedule = Schedule::every(Duration::from_secs(3600)).at_most(Duration::from_secs(1));
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let scheduled = lg
            .schedule("long", schedule, move |run: JobRun| {
                let tx = tx.clone();
                async move {
                    let _dropped = Dropped(tx.clone());
                    let _ = tx.send("started");
                    tokio::time::sleep(Duration::from_millis(700)).await;
                    let _ = tx.send(if run.lease().is_held() {
                        "held"
                    } else {
                        "lapsed"
                    });
                    std::future::pending::<()>().await;
                    Ok::<_, std::convert::Infallible>(())
                }
            })
            .expect("a schedule whose at_most is longer than the store's longest lease");
        let mut said = Vec::new();
        let mut started = None;
        while said.len() < 3 {
            let what = tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .unwrap_or_else(|_| panic!("the run said only {said:?}"))
                .unwrap();
            started.get_or_insert_with(tokio::time::Instant::now);
            said.push(what);
        }
        // The period under way ran at once, its lock held past the store's
        // longest lease, until at_most.
        assert_eq!(said, ["started", "held", "dropped"]);
        let started = started.unwrap();
        let ran = started.elapsed();
        assert!(
            ran >= Duration::from_millis(900) && ran < Duration::from_millis(1100),
            "the run was cancelled after {ran:?}, not at at_most (1 s)"
        );
        scheduled.stop().await;
    }

    /// `at_most` counts from the run's acquisition, as a fixed lease
    /// would, not from the run's start: with the record of runs read in
    /// 400 ms, a run whose `at_most` is 1 s is cancelled some 600 ms after
    /// it started.
    #[tokio::test(start_paused = true)]
    async fn a_watchdog_renewed_run_ends_at_most_after_its_acquisition() {
        let read = Duration::from_millis(400);
        let store = crate::store::forwarding::Forwarding::with_read_delay(
            Some(Duration::from_millis(300)),
            read,
        );
        let lg = crate::store::forwarding::Forwarding::client(&store);
        let at_most = Duration::from_secs(1);
        let schedule = Schedule::every(Duration::from_secs(3600)).at_most(at_most);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let scheduled = lg
            .schedule("slow-record", schedule, move |_run: JobRun| {
                let tx = tx.clone();
                async move {
                    let _dropped = Dropped(tx.clone());
                    let _ = tx.send("started");
                    std::future::pending::<()>().await;
                    Ok::<_, std::convert::Infallible>(())
                }
            })
            .unwrap();
        let mut next = async || {
            tokio::time::timeout(Duration::from_secs(5), rx.recv())
                .await
                .expect("the run said nothing in 5 s")
                .unwrap()
        };
        assert_eq!(next().await, "started");
        let started = tokio::time::Instant::now();
        assert_eq!(next().await, "dropped");
        let ran = started.elapsed();
        assert!(
            ran < at_most - read + Duration::from_millis(250),
            "the run was cancelled {ran:?} after it started: at_most counted from its start"
        );
        scheduled.stop().await;
    }
}
