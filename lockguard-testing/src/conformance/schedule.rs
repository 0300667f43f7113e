//! Scheduled jobs: one run per period across replicas, a replica that
//! starts mid-period does not run it again, a run that outlives `at_most`
//! is cancelled, and bad input.
//!
//! On a store without fenced values (Redlock) the record of runs is not
//! kept: a replica that starts mid-period waits for the next, and the
//! tests expect that.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockguard_core::{Client, JobRun, Schedule, Scheduled};

use super::Env;

/// What the replicas' runs recorded: (period, replica, fencing token).
type Runs = Arc<Mutex<Vec<(u64, usize, u64)>>>;

/// Schedules `name` on `lg` as replica `replica`, recording its runs.
fn replica(lg: &Client, name: &str, schedule: Schedule, replica: usize, runs: &Runs) -> Scheduled {
    let runs = runs.clone();
    lg.schedule(name, schedule, move |run: JobRun| {
        let runs = runs.clone();
        async move {
            let mut runs = runs.lock().unwrap();
            runs.push((run.period(), replica, run.fencing_token().get()));
            Ok::<_, std::convert::Infallible>(())
        }
    })
    .expect("schedule")
}

/// Whether `lg`'s store keeps fenced values (all but Redlock).
async fn keeps_records(lg: &Client) -> bool {
    match lg.fenced("conformance:probe").read().await {
        Err(e) if e.is_unsupported() => false,
        Err(e) => panic!("reading a fenced value: {e}"),
        Ok(_) => true,
    }
}

/// How long until the next period of `every` starts.
fn until_next(every: Duration) -> Duration {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    let into = Duration::from_nanos((now.as_nanos() % every.as_nanos()) as u64);
    every - into
}

/// Three replicas, each a client of its own, schedule one job every
/// 400 ms for about eight periods: no period runs twice, the periods run
/// in order with growing fencing tokens, and nearly every period runs.
pub async fn a_schedule_runs_once_per_period_across_replicas(env: Env) {
    let every = Duration::from_millis(400);
    let runs: Runs = Arc::default();
    let mut replicas = Vec::new();
    for r in 0..3 {
        let lg = env.client().await;
        replicas.push(replica(&lg, "report", Schedule::every(every), r, &runs));
    }
    tokio::time::sleep(every * 8).await;
    for scheduled in replicas {
        scheduled.stop().await;
    }
    let runs = runs.lock().unwrap().clone();
    let mut periods: Vec<u64> = runs.iter().map(|r| r.0).collect();
    periods.dedup();
    assert_eq!(periods.len(), runs.len(), "a period ran twice: {runs:?}");
    assert!(
        runs.windows(2).all(|w| w[0].0 < w[1].0 && w[0].2 < w[1].2),
        "periods or fencing tokens out of order: {runs:?}"
    );
    assert!(
        runs.len() >= 6,
        "only {} of about 8 periods ran: {runs:?}",
        runs.len()
    );
}

/// A replica that starts while its period has already run does not run
/// it again (where the store keeps the record of runs; on Redlock neither
/// replica runs the period it started in).
pub async fn a_replica_that_starts_mid_period_does_not_run_it_again(env: Env) {
    let every = Duration::from_secs(4);
    let schedule = Schedule::every(every).at_least(Duration::from_millis(100));
    // Start early in a period, with time for both before it ends.
    if until_next(every) < Duration::from_secs(3) {
        tokio::time::sleep(until_next(every) + Duration::from_millis(20)).await;
    }
    let runs: Runs = Arc::default();
    let (a, b) = (env.client().await, env.client().await);
    let records = keeps_records(&a).await;
    let first = replica(&a, "mid", schedule, 0, &runs);
    if records {
        let ran = super::eventually(Duration::from_millis(1500), || async {
            !runs.lock().unwrap().is_empty()
        })
        .await;
        assert!(ran, "the first replica did not run its period at once");
    } else {
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Past `at_least`: the lock is free, only the record says it ran.
    tokio::time::sleep(Duration::from_millis(150)).await;
    let second = replica(&b, "mid", schedule, 1, &runs);
    tokio::time::sleep(Duration::from_millis(300)).await;
    second.stop().await;
    first.stop().await;
    let runs = runs.lock().unwrap().clone();
    let replicas: Vec<usize> = runs.iter().map(|r| r.1).collect();
    if records {
        assert_eq!(
            replicas,
            [0],
            "the first replica runs its period at once, the second skips it: {runs:?}"
        );
    } else {
        assert_eq!(
            replicas,
            Vec::<usize>::new(),
            "without a record nobody runs mid-period"
        );
    }
}

/// A run still going when its lock's lease (`at_most`) ends is cancelled,
/// and another replica runs the next period.
pub async fn a_run_that_outlives_at_most_is_cancelled(env: Env) {
    let every = Duration::from_millis(1500);
    let schedule = Schedule::every(every)
        .at_least(Duration::from_millis(100))
        .at_most(Duration::from_millis(500));
    let (done, mut dropped) = tokio::sync::mpsc::unbounded_channel::<bool>();
    let slow_lg = env.client().await;
    /// Says whether the run finished when it is dropped.
    struct Finished(tokio::sync::mpsc::UnboundedSender<bool>, bool);
    impl Finished {
        fn finish(mut self) {
            self.1 = true;
        }
    }
    impl Drop for Finished {
        fn drop(&mut self) {
            let _ = self.0.send(self.1);
        }
    }
    let slow = slow_lg
        .schedule("slow", schedule, move |_run: JobRun| {
            let finished = Finished(done.clone(), false);
            async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                finished.finish();
                Ok::<_, std::convert::Infallible>(())
            }
        })
        .expect("schedule");
    let ended = tokio::time::timeout(every * 2 + Duration::from_secs(1), dropped.recv())
        .await
        .expect("the run was not ended within its at_most")
        .expect("the job's future");
    assert!(
        !ended,
        "the run finished past at_most instead of being cancelled"
    );
    slow.stop().await;
    // The lease ended with the cancelled run: a replica runs the next period.
    let runs: Runs = Arc::default();
    let other = env.client().await;
    let next = replica(&other, "slow", schedule, 1, &runs);
    let ran = super::eventually(every * 3, || async { !runs.lock().unwrap().is_empty() }).await;
    next.stop().await;
    assert!(ran, "no replica ran after the cancelled run");
}

/// An hourly job with the default `at_least` and `at_most` (half an hour
/// and the hour), longer than the longest lease some stores keep
/// (ZooKeeper's and etcd's: two thirds of the session timeout or lease
/// TTL): it starts, and where the store keeps the record of runs, the
/// period under way runs at once, once across two replicas.
pub async fn an_hourly_schedule_runs_on_every_store(env: Env) {
    let (a, b) = (env.client().await, env.client().await);
    let runs: Runs = Arc::default();
    let hourly = Schedule::every(Duration::from_secs(3600));
    let first = replica(&a, "hourly", hourly, 0, &runs);
    let second = replica(&b, "hourly", hourly, 1, &runs);
    if keeps_records(&a).await {
        let ran = super::eventually(Duration::from_secs(5), || async {
            !runs.lock().unwrap().is_empty()
        })
        .await;
        assert!(ran, "the period under way did not run");
    }
    first.stop().await;
    second.stop().await;
    let runs = runs.lock().unwrap().clone();
    assert!(runs.len() <= 1, "the period ran twice: {runs:?}");
}

/// Empty or invalid names, a zero period and an `at_least` not shorter
/// than the period are clear errors.
pub async fn schedule_bad_input(env: Env) {
    let lg = env.client().await;
    let job = |_run: JobRun| async { Ok::<_, std::convert::Infallible>(()) };
    for name in ["", "a\nb"] {
        let e = lg.schedule(name, Duration::from_secs(1), job).unwrap_err();
        assert!(e.is_invalid_input(), "{name:?}: {e}");
    }
    let e = lg.schedule("j", Duration::ZERO, job).unwrap_err();
    assert!(
        e.is_invalid_input() && e.message().contains("period"),
        "{e}"
    );
    let bad = Schedule::every(Duration::from_secs(1)).at_least(Duration::from_secs(2));
    let e = lg.schedule("j", bad, job).unwrap_err();
    assert!(
        e.is_invalid_input() && e.message().contains("at_least"),
        "{e}"
    );
}
