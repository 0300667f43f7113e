//! The ZooKeeper store beside the raw `zookeeper-client` lock recipe
//! (`Client::lock`, Curator's layout) doing the same work, against a
//! standalone server the harness starts.
//!
//! Round trips are counted by the server: `zk_packets_received` in `mntr`
//! counts every request it read (and the sessions' pings, a few per second
//! in all, which these counts leave in).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lockguard_core::Client;
use lockguard_testing::ZooKeeperServer;
use lockguard_zookeeper::BuilderExt as _;
use zookeeper_client as zk;

use crate::counters::{self, RawCounter};
use crate::rounds::interleaved;
use crate::stats::{percentile, us};
use crate::{Bench, Contention, HOLD, Recorder, THINK, contend, hold, median, throughput};

/// Both sides' sessions: long enough for the 10 s lease of the shared
/// contention loop (two thirds of it, the longest lease on ZooKeeper).
const SESSION: Duration = Duration::from_secs(20);

async fn lockguard(server: &ZooKeeperServer) -> Client {
    Client::builder()
        .zookeeper_session_timeout(SESSION)
        .connect_zookeeper(&server.hosts())
        .await
        .expect("connect to zookeeper")
}

async fn raw_client(server: &ZooKeeperServer) -> zk::Client {
    zk::Client::connector()
        .with_session_timeout(SESSION)
        .connect(&server.hosts())
        .await
        .expect("connect to zookeeper")
}

/// The requests the server has read so far.
fn packets(server: &ZooKeeperServer) -> u64 {
    let mntr = server.four_letter("mntr").expect("mntr answers");
    mntr.lines()
        .find_map(|l| l.strip_prefix("zk_packets_received"))
        .and_then(|v| v.trim().parse().ok())
        .expect("zk_packets_received in mntr")
}

/// One cycle of the raw recipe on `dir`: take the lock (create the
/// sequential node, list, watch the predecessor until first), then delete
/// the node.
async fn raw_cycle(client: &zk::Client, dir: &str, rec: Option<(&Recorder, usize)>) {
    let prefix = zk::LockPrefix::new_curator(dir, "lock-").expect("prefix");
    let options = zk::LockOptions::new(zk::Acls::anyone_all())
        .with_ancestor_options(zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all()))
        .expect("options");
    let lock = client.lock(prefix, b"", options).await.expect("lock");
    let path = lock.lock_path().to_owned();
    // Deleted here and awaited, as lockguard's release is (the recipe's
    // drop would delete in the background).
    std::mem::forget(lock);
    if let Some((rec, t)) = rec {
        rec.acquired(t);
        hold().await;
        rec.releasing(t);
    }
    client.delete(&path, None).await.expect("unlock");
}

pub(crate) async fn section(b: &mut Bench) {
    // No fsync of the transaction log, as the Redis (no persistence) and
    // PostgreSQL (`fsync=off`) sections run: the disk's latency would
    // otherwise be most of every write, and most of its noise.
    let server = ZooKeeperServer::start_with("forceSync=no\n");
    b.line("\n## ZooKeeper: lockguard beside the raw `zookeeper-client` lock recipe\n");
    b.line("A standalone ZooKeeper (Debian's 3.8, `tickTime=200`, `forceSync=no`: the transaction log is written but not synced, as the other sections run their servers without durable writes) the harness starts, on loopback TCP. The yardstick is `zookeeper-client`'s own lock recipe (`Client::lock` with Curator's node layout: create an ephemeral sequential node, list the children, watch the predecessor until first), unlocked by deleting the node and awaiting the answer, as lockguard's release does. Round trips are the requests the server read (`zk_packets_received` in `mntr`, which also counts the sessions' pings).\n");
    uncontended(b, &server).await;
    contention(b, &server).await;
}

/// Counters under contention on a server of its own (the `counters`
/// section), set up as this section's.
pub(crate) async fn contended_counters(b: &mut Bench) {
    let server = ZooKeeperServer::start_with("forceSync=no\n");
    let mut raws = Vec::new();
    for _ in 0..counters::CLIENTS {
        raws.push(raw_client(&server).await);
    }
    counters::compare(
        b,
        "zookeeper",
        "lockguard's `incr_by(1)` and the raw loop beside it both read the counter's node and write it back with the version read (`setData`; `create` for a missing node), again from a new read when another write came first (the raw loop through `zookeeper-client`'s `get_data` and `set_data`)",
        async || lockguard(&server).await,
        raws,
        || packets(&server),
    )
    .await;
}

/// The raw read-modify-write of a counter through `zookeeper-client`, as a
/// user without lockguard writes it: read the node, write `value + 1` with
/// the version read (create it when missing), and read again when another
/// write came first.
impl RawCounter for zk::Client {
    async fn increment(&mut self, key: &str) {
        let path = format!("/{key}");
        loop {
            let written = match self.get_data(&path).await {
                Ok((data, stat)) => {
                    let value = counted(&data) + 1;
                    self.set_data(&path, value.to_string().as_bytes(), Some(stat.version))
                        .await
                        .map(drop)
                }
                Err(zk::Error::NoNode) => {
                    let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
                    self.create(&path, b"1", &persistent).await.map(drop)
                }
                Err(e) => panic!("get_data {path}: {e}"),
            };
            match written {
                Ok(()) => return,
                Err(zk::Error::BadVersion | zk::Error::NodeExists) => {}
                Err(e) => panic!("writing {path}: {e}"),
            }
        }
    }

    async fn read(&mut self, key: &str) -> i64 {
        match self.get_data(&format!("/{key}")).await {
            Ok((data, _)) => counted(&data),
            Err(zk::Error::NoNode) => 0,
            Err(e) => panic!("get_data /{key}: {e}"),
        }
    }
}

/// A raw counter's value.
fn counted(data: &[u8]) -> i64 {
    std::str::from_utf8(data)
        .ok()
        .and_then(|v| v.parse().ok())
        .expect("a counter in decimal")
}

/// Rounds of the uncontended comparison, as on Redis and PostgreSQL.
const UNCONTENDED_ROUNDS: usize = 7;
/// Rounds of the contention comparison: each a run of every contender.
const CONTENTION_ROUNDS: usize = 3;

async fn uncontended(b: &mut Bench, server: &ZooKeeperServer) {
    let rounds = if b.quick { 1 } else { UNCONTENDED_ROUNDS };
    let each = b.run_for / 2;
    b.line("### Uncontended lock + unlock cycles (distinct keys)\n");
    b.line(&format!(
        "{rounds} interleaved rounds; in each, for each number of tasks, lockguard and the raw recipe run for {each:?} each (after a {:?} warm-up), back to back, lockguard first in odd rounds and second in even ones. The ratio is the median over the rounds of lockguard's rate divided by the raw recipe's in the same round, with the lowest and highest. One lockguard client and one raw session serve every round; requests per cycle are over every round.\n",
        each / 5
    ));
    b.line("| tasks | lockguard cycles/s (median) | raw recipe cycles/s (median) | ratio (median) | range | requests / cycle (lockguard) | requests / cycle (raw) |");
    b.line("|---:|---:|---:|---:|---:|---:|---:|");
    let lg = lockguard(server).await;
    let raw = raw_client(server).await;
    for tasks in [1, 16] {
        // Requests and cycles, each side's, over every round.
        let (lg_packets, raw_packets) = (AtomicU64::new(0), AtomicU64::new(0));
        let (lg_cycles, raw_cycles) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let measured = interleaved(
            rounds,
            async |round| {
                let before = packets(server);
                let counted = lg_cycles.clone();
                let rate = throughput(tasks, each, |t, stop, done| {
                    let lock = lg.lock(&format!("r{round}:{tasks}:u:{t}"));
                    let counted = counted.clone();
                    async move {
                        while !stop.load(Ordering::Relaxed) {
                            let g = lock.acquire().await.expect("uncontended acquire");
                            assert!(g.release().await.expect("release"));
                            done.fetch_add(1, Ordering::Relaxed);
                            counted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
                .await;
                lg_packets.fetch_add(packets(server) - before, Ordering::Relaxed);
                rate
            },
            async |round| {
                let before = packets(server);
                let counted = raw_cycles.clone();
                let rate = throughput(tasks, each, |t, stop, done| {
                    let raw = raw.clone();
                    let counted = counted.clone();
                    async move {
                        let dir = format!("/raw/r{round}/{tasks}/u{t}");
                        while !stop.load(Ordering::Relaxed) {
                            raw_cycle(&raw, &dir, None).await;
                            done.fetch_add(1, Ordering::Relaxed);
                            counted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
                .await;
                raw_packets.fetch_add(packets(server) - before, Ordering::Relaxed);
                rate
            },
        )
        .await;
        let per = |p: &AtomicU64, c: &AtomicU64| {
            p.load(Ordering::Relaxed) as f64 / c.load(Ordering::Relaxed).max(1) as f64
        };
        let (lg_per, raw_per) = (per(&lg_packets, &lg_cycles), per(&raw_packets, &raw_cycles));
        let ratio = measured.ratio(|r| *r);
        b.line(&format!(
            "| {tasks} | {:.0} | {:.0} | {} | {} | {lg_per:.2} | {raw_per:.2} |",
            measured.lockguard_median(|r| *r),
            measured.raw_median(|r| *r),
            ratio.cell(),
            ratio.range_cell(),
        ));
        b.target(
            &format!(
                "zookeeper: uncontended lock cycles ≥ 0.9x the raw recipe, {tasks} tasks (median of {rounds} rounds; range)"
            ),
            ratio.to_string(),
            ratio.median >= 0.9,
        );
        b.target(
            &format!("zookeeper: no more requests per cycle than the raw recipe, {tasks} tasks"),
            format!("{lg_per:.2} vs {raw_per:.2}"),
            lg_per <= raw_per + 0.05,
        );
    }
}

/// One contention run: what the contenders did, and the requests the
/// server read per acquisition.
struct Run {
    c: Contention,
    per: f64,
}

async fn contention(b: &mut Bench, server: &ZooKeeperServer) {
    let rounds = if b.quick { 1 } else { CONTENTION_ROUNDS };
    b.line(&format!(
        "\n### Contention: contenders on one key, each with a session of its own, holding it {HOLD:?} and thinking {THINK:?}\n"
    ));
    b.line(&format!("Both sides queue in the lock's node and each waiter watches only its predecessor, so a release wakes one waiter. Handoff: from the holder's release call to the next different holder's acquire returning. {rounds} interleaved rounds of {:?} runs, on fresh sessions each run; each figure is the median over the rounds, and the ratio (lockguard's acquisitions/s over the raw recipe's in the same round) comes with its range.\n", b.run_for));
    b.line("| contenders | variant | acquisitions/s | ratio (range) | handoff p50 | handoff p99 | requests / acquisition | min/max per contender |");
    b.line("|---:|---|---:|---:|---:|---:|---:|---:|");
    let run_for = b.run_for;
    for tasks in [4, 16] {
        let runs = interleaved(
            rounds,
            async |_| {
                let mut clients = Vec::new();
                for _ in 0..tasks {
                    clients.push(lockguard(server).await);
                }
                let before = packets(server);
                let c = contend(&clients, tasks, run_for).await;
                let per = (packets(server) - before) as f64 / c.acquisitions.max(1) as f64;
                Run { c, per }
            },
            async |_| {
                let mut raws = Vec::new();
                for _ in 0..tasks {
                    raws.push(raw_client(server).await);
                }
                let rec = Recorder::new(tasks);
                let before = packets(server);
                let rate = throughput(tasks, run_for, |t, stop, done| {
                    let raw = raws[t].clone();
                    let rec = rec.clone();
                    async move {
                        while !stop.load(Ordering::Relaxed) {
                            raw_cycle(&raw, "/raw/contended", Some((&*rec, t))).await;
                            done.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(THINK).await;
                        }
                    }
                })
                .await;
                let c = rec.finish(rate);
                let per = (packets(server) - before) as f64 / c.acquisitions.max(1) as f64;
                Run { c, per }
            },
        )
        .await;
        let ratio = runs.ratio(|r| r.c.rate);
        let p50 = |r: &Run| percentile(&r.c.handoffs, 50.0).as_secs_f64();
        let p99 = |r: &Run| percentile(&r.c.handoffs, 99.0).as_secs_f64();
        for (variant, side) in [("lockguard", &runs.lockguard), ("raw recipe", &runs.raw)] {
            let of = |f: &dyn Fn(&Run) -> f64| median(side.iter().map(f).collect());
            let ratio = if variant == "lockguard" {
                format!("{} ({})", ratio.cell(), ratio.range_cell())
            } else {
                String::new()
            };
            b.line(&format!(
                "| {tasks} | {variant} | {:.0} | {ratio} | {} | {} | {:.2} | {:.2} |",
                of(&|r| r.c.rate),
                us(Duration::from_secs_f64(of(&p50))),
                us(Duration::from_secs_f64(of(&p99))),
                of(&|r| r.per),
                of(&|r| r.c.evenness),
            ));
        }
        if tasks == 16 {
            b.target(
                &format!(
                    "zookeeper: acquisitions/s ≥ 0.9x the raw recipe's, 16 contenders (median of {rounds} rounds; range)"
                ),
                ratio.to_string(),
                ratio.median >= 0.9,
            );
            let (lg_per, raw_per) = (runs.lockguard_median(|r| r.per), runs.raw_median(|r| r.per));
            b.target(
                "zookeeper: requests per acquisition ≤ the raw recipe's, 16 contenders (medians)",
                format!("{lg_per:.2} vs {raw_per:.2}"),
                lg_per <= raw_per + 0.05,
            );
            let p50s = runs.ratio(p50);
            b.target(
                &format!(
                    "zookeeper: handoff p50 ≤ 1.1x the raw recipe's, 16 contenders (median of {rounds} rounds' ratios; range)"
                ),
                p50s.to_string(),
                p50s.median <= 1.1,
            );
        }
    }
}
