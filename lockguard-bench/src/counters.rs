//! Counters under contention on a store whose updates are compare-and-sets
//! (etcd, ZooKeeper): many tasks adding one to one counter, lockguard's
//! `incr_by(1)` beside the raw read-modify-write loop a user of the store's
//! own client writes, with the tasks spread over a few clients and with a
//! client each.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use lockguard_core::Client;

use crate::rounds::{Spread, turning};
use crate::{Bench, measure, median};

/// The most clients a run uses: a section connects this many raw ones.
pub(crate) const CLIENTS: usize = 16;
/// (clients, tasks per client).
const SETUPS: [(usize, usize); 2] = [(4, 16), (CLIENTS, 1)];
/// Rounds: each a run of both sides.
const ROUNDS: usize = 3;

/// A store's own client, running the raw read-modify-write loop.
pub(crate) trait RawCounter: Clone + Send + Sync + 'static {
    /// Adds one to the counter at `key`, retried until it holds.
    fn increment(&mut self, key: &str) -> impl Future<Output = ()> + Send;
    /// The counter's value (0 when missing).
    fn read(&mut self, key: &str) -> impl Future<Output = i64> + Send;
}

/// One run: updates made (the warm-up's included), their rate after the
/// warm-up, and the requests the server read meanwhile.
struct Updates {
    rate: f64,
    updates: u64,
    requests: u64,
}

/// A task's side of a run.
enum Side<R> {
    Lockguard(lockguard_core::Counter),
    Raw(R),
}

/// The section's heading and what both stores' comparisons share: main
/// then runs etcd's and ZooKeeper's ([`compare`]), each on a server of
/// its own set up as in its store's section.
pub(crate) fn heading(b: &mut Bench) {
    b.line(
        "\n## Counters under contention on etcd and ZooKeeper: tasks adding one to one counter\n",
    );
    b.line("Neither store has an atomic increment, so a counter update is a compare-and-set that another writer can make fail. lockguard's client also remembers what it last wrote of a counter (its next update needs no read), pauses a random moment after a lost race, and takes its own updates of one counter in turn (`store::Turns`), so that the tasks sharing a client race only other clients. The yardstick is the read-modify-write loop a user of the store's own client writes. Two set-ups: 64 tasks on 4 clients (16 each), and 16 tasks with a client each, as separate processes have.\n");
}

/// One store's comparison: `how` says what both sides send; `lockguard`
/// connects a lockguard client, `raws` are [`CLIENTS`] raw clients, and
/// `requests` reads the server's count of requests so far.
pub(crate) async fn compare<R: RawCounter>(
    b: &mut Bench,
    store: &str,
    how: &str,
    lockguard: impl AsyncFn() -> Client,
    raws: Vec<R>,
    requests: impl Fn() -> u64,
) {
    let rounds = if b.quick { 1 } else { ROUNDS };
    let run_for = b.run_for / 2;
    b.line(&format!("\n### {store}\n"));
    b.line(&format!("{how}. {rounds} rounds of {run_for:?} runs (after a {:?} warm-up), the order of the two sides turning each round, one counter per run, the final value checked against the updates made (none lost, none doubled). Ratio: lockguard's updates/s over the raw loop's in the same round, median and range. Requests per update: what the server read over the runs, warm-ups included.\n", run_for / 5));
    b.line("| clients | tasks each | lockguard updates/s | raw loop updates/s | ratio (range) | requests / update, lockguard / raw |");
    b.line("|---:|---:|---:|---:|---:|---:|");
    for (clients, each) in SETUPS {
        let tasks = clients * each;
        let runs = turning(rounds, 2, async |round, variant| {
            let key = format!("count-{clients}x{each}-r{round}-v{variant}");
            let mut lgs = Vec::new();
            if variant == 0 {
                for _ in 0..clients {
                    lgs.push(lockguard().await);
                }
            }
            let updates = Arc::new(AtomicU64::new(0));
            let before = requests();
            let m = measure(tasks, run_for, |t, stop, done| {
                let side = match lgs.get(t % clients) {
                    Some(lg) => Side::Lockguard(lg.counter(&key)),
                    None => Side::Raw(raws[t % clients].clone()),
                };
                let (key, updates) = (key.clone(), updates.clone());
                async move {
                    let mut side = side;
                    while !stop.load(Ordering::Relaxed) {
                        match &mut side {
                            Side::Lockguard(counter) => {
                                counter.incr_by(1).await.expect("incr_by");
                            }
                            Side::Raw(raw) => raw.increment(&key).await,
                        }
                        updates.fetch_add(1, Ordering::Relaxed);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
            .await;
            let requests = requests() - before;
            let updates = updates.load(Ordering::Relaxed);
            let stored = match lgs.first() {
                Some(lg) => lg.counter(&key).get().await.expect("get"),
                None => raws[0].clone().read(&key).await,
            };
            assert_eq!(
                u64::try_from(stored).ok(),
                Some(updates),
                "{store}, {} on {key}: the counter holds {stored} after {updates} updates",
                if variant == 0 {
                    "lockguard"
                } else {
                    "raw loop"
                }
            );
            Updates {
                rate: m.rate,
                updates,
                requests,
            }
        })
        .await;
        let rate = |v: usize| median(runs[v].iter().map(|r| r.rate).collect());
        let per = |v: usize| {
            let requests: u64 = runs[v].iter().map(|r| r.requests).sum();
            let updates: u64 = runs[v].iter().map(|r| r.updates).sum();
            requests as f64 / updates.max(1) as f64
        };
        let ratio = Spread::of(
            runs[0]
                .iter()
                .zip(&runs[1])
                .map(|(l, r)| l.rate / r.rate)
                .collect(),
        );
        b.line(&format!(
            "| {clients} | {each} | {:.0} | {:.0} | {ratio} | {:.2} / {:.2} |",
            rate(0),
            rate(1),
            per(0),
            per(1),
        ));
        b.target(
            &format!(
                "{store}: counter updates/s ≥ the raw compare-and-set loop's, {clients} clients of {each} tasks (median of {rounds} rounds' ratios; range)"
            ),
            ratio.to_string(),
            ratio.median >= 1.0,
        );
    }
}
