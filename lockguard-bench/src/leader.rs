//! Leader election on Redis: how long a candidate waits after the leader
//! resigns, and after a leader stops renewing (its process died) and its
//! lease runs out. Each side is a client of its own, as separate processes
//! are.

use std::time::{Duration, Instant};

use crate::Bench;
use crate::stats::{percentile, us};

/// Rounds of each measurement.
const ROUNDS: usize = 10;
/// The fixed lease of a leader that dies.
const LEASE: Duration = Duration::from_millis(500);

pub(crate) async fn section(b: &mut Bench) {
    b.line("\n## Leader election: failover\n");
    b.line(&format!("A leader and one waiting candidate, a client each, {ROUNDS} rounds. *resign*: from the leader's `resign()` call to the candidate's `campaign()` returning. *leader died*: the leader holds a fixed {LEASE:?} lease and never renews nor resigns (its guard is leaked, as a killed process leaves it); the figure is from the end of that lease, counted from before the leader's own request, to the candidate's `campaign()` returning. With the watchdog, a dead leader is replaced within its lease plus this (`lockguard-redis/tests/shapes`, which kills a real child process, serves the candidate 0.67-0.68 s after the kill with a 1 s lease, the rest of the lease the child's watchdog last renewed).\n"));
    b.line("| failover | p50 | max of the rounds |");
    b.line("|---|---:|---:|");
    let (mut resigned, mut died) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let election = format!("bench-election-{round}");
        let (leader, candidate) = (b.lockguard().await, b.lockguard().await);
        // Resign: the candidate queues, the leader resigns.
        let lead = leader.leader(&election).campaign().await.expect("elected");
        let waiting = tokio::spawn({
            let candidate = candidate.clone();
            let election = election.clone();
            async move { candidate.leader(&election).campaign().await }
        });
        until_queued(b, &leader, &election).await;
        let started = Instant::now();
        assert!(lead.resign().await.expect("resign"));
        let next = waiting
            .await
            .expect("candidate")
            .expect("elected after a resign");
        resigned.push(started.elapsed());
        assert!(next.resign().await.expect("resign"));
        // A leader that dies: a fixed lease, never renewed.
        let election = format!("{election}-died");
        let sent = Instant::now();
        let lead = leader
            .leader(&election)
            .lease(LEASE)
            .campaign()
            .await
            .expect("elected");
        std::mem::forget(lead);
        let next = candidate
            .leader(&election)
            .campaign()
            .await
            .expect("elected after the lease");
        died.push((sent + LEASE).elapsed());
        assert!(next.resign().await.expect("resign"));
    }
    for (what, v) in [("resign", &mut resigned), ("leader died", &mut died)] {
        v.sort_unstable();
        b.line(&format!(
            "| {what} | {} | {} |",
            us(percentile(v, 50.0)),
            us(percentile(v, 100.0))
        ));
    }
}

/// Waits until the election's lock has a waiter.
async fn until_queued(_b: &Bench, lg: &lockguard_core::Client, election: &str) {
    let leader = lg.leader(election);
    for _ in 0..1000 {
        if leader.inspect().await.expect("inspect").waiters > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("the candidate never queued");
}
