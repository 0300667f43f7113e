//! Redis Cluster beside one Redis server: contenders on one key, each a
//! process of its own with its own client, as services run them.
//!
//! On a cluster, a waiter is woken through its client's subscriber on the
//! master that owns the key's slot (one subscriber per master, see
//! `lockguard-redis/src/store/masters.rs`), where a client of one server
//! has one subscriber. The rows run the same contender processes as the
//! tails section's, against the bench's own server and against a
//! three-master cluster started here, in alternating order each round.

use lockguard_testing::RedisCluster;

use crate::stats::us;
use crate::tails::{Figures, contended_processes};
use crate::{Bench, Contention};

/// Rounds: each runs both stores once, the order turning each round.
const ROUNDS: usize = 3;
/// Contenders per row.
const SIZES: [usize; 2] = [16, 64];

/// Where the contenders' lock lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    /// The bench's own `redis-server`.
    Standalone,
    /// A three-master cluster.
    Cluster,
}

impl Store {
    const ALL: [Self; 2] = [Self::Standalone, Self::Cluster];

    fn name(self) -> &'static str {
        match self {
            Self::Standalone => "one Redis server",
            Self::Cluster => "Redis Cluster, 3 masters",
        }
    }
}

pub(crate) async fn section(b: &mut Bench) {
    let cluster = RedisCluster::start(3);
    let cluster_url = cluster.url();
    let rounds = if b.quick { 1 } else { ROUNDS };
    b.line("\n## Redis Cluster: contenders on one key, a process each\n");
    b.line(&format!("The contention workload (hold ~1 ms, think ~0.5 ms), each contender a process of its own with its own client (this binary started again, as in the tails section), on the bench's `redis-server` and on a cluster of three masters (no replicas) on the same machine. On the cluster, each client wakes its waiters through one subscriber per master, the key's master among them. {rounds} rounds; in each, both stores run once (the order turning each round), for {:?} after every contender has held the lock once and a fifth of that has passed. Figures are medians over the rounds; the p99's range is the lowest and highest round.\n", b.run_for));
    b.line("| contenders | store | acquisitions/s | handoff p50 | handoff p99 (range) | handoff max (median) | release round trip p50 / p99 | min/max acquisitions per contender |");
    b.line("|---:|---|---:|---:|---:|---:|---:|---:|");
    for contenders in SIZES {
        let mut found: [Vec<Contention>; 2] = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            for turn in 0..Store::ALL.len() {
                let i = (round + turn) % Store::ALL.len();
                let url = match Store::ALL[i] {
                    Store::Standalone => b.server.url(),
                    Store::Cluster => cluster_url.clone(),
                };
                let (c, _) = contended_processes(b, &url, contenders).await;
                found[i].push(c);
            }
        }
        let mut p99s = Vec::new();
        for (store, cs) in Store::ALL.iter().zip(&found) {
            let f = Figures::of(cs.iter());
            b.line(&format!(
                "| {contenders} | {} | {} | {:.2} |",
                store.name(),
                f.timing_cells(),
                f.evenness,
            ));
            p99s.push(f.p99);
        }
        if contenders == 64 {
            b.target(
                "Redis Cluster handoff p99 within 2x one server's, 64 contenders, a process each (medians of the rounds)",
                format!("{} against {}", us(p99s[1]), us(p99s[0])),
                p99s[1] <= p99s[0] * 2,
            );
        }
    }
}
