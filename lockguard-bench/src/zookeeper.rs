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

use crate::stats::{percentile, us};
use crate::{Bench, Contention, HOLD, Recorder, THINK, contend, hold, throughput};

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

async fn uncontended(b: &mut Bench, server: &ZooKeeperServer) {
    b.line("### Uncontended lock + unlock cycles (distinct keys; each side measured twice, alternately, and averaged)\n");
    b.line("| tasks | lockguard cycles/s | raw recipe cycles/s | ratio | requests / cycle (lockguard) | requests / cycle (raw) |");
    b.line("|---:|---:|---:|---:|---:|---:|");
    for tasks in [1, 16] {
        let (mut lg_rate, mut raw_rate) = (0.0, 0.0);
        let (mut lg_packets, mut raw_packets) = (0u64, 0u64);
        let cycles = Arc::new(AtomicU64::new(0));
        let raw_cycles = Arc::new(AtomicU64::new(0));
        for _ in 0..2 {
            let lg = lockguard(server).await;
            let counted = cycles.clone();
            let before = packets(server);
            lg_rate += throughput(tasks, b.run_for, |t, stop, done| {
                let lock = lg.lock(&format!("u:{t}"));
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
            .await
                / 2.0;
            lg_packets += packets(server) - before;
            drop(lg);
            let raw = raw_client(server).await;
            let counted = raw_cycles.clone();
            let before = packets(server);
            raw_rate += throughput(tasks, b.run_for, |t, stop, done| {
                let raw = raw.clone();
                let counted = counted.clone();
                async move {
                    let dir = format!("/raw/u{t}");
                    while !stop.load(Ordering::Relaxed) {
                        raw_cycle(&raw, &dir, None).await;
                        done.fetch_add(1, Ordering::Relaxed);
                        counted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
            .await
                / 2.0;
            raw_packets += packets(server) - before;
        }
        let per = |p: u64, c: &AtomicU64| p as f64 / c.load(Ordering::Relaxed).max(1) as f64;
        let (lg_per, raw_per) = (per(lg_packets, &cycles), per(raw_packets, &raw_cycles));
        let ratio = lg_rate / raw_rate;
        b.line(&format!(
            "| {tasks} | {lg_rate:.0} | {raw_rate:.0} | {ratio:.2}x | {lg_per:.2} | {raw_per:.2} |"
        ));
        b.target(
            &format!("zookeeper: uncontended lock cycles ≥ 0.9x the raw recipe, {tasks} tasks"),
            format!("{ratio:.3}x"),
            ratio >= 0.9,
        );
        b.target(
            &format!("zookeeper: no more requests per cycle than the raw recipe, {tasks} tasks"),
            format!("{lg_per:.2} vs {raw_per:.2}"),
            lg_per <= raw_per + 0.05,
        );
    }
}

async fn contention(b: &mut Bench, server: &ZooKeeperServer) {
    b.line(&format!(
        "\n### Contention: contenders on one key, each with a session of its own, holding it {HOLD:?} and thinking {THINK:?}\n"
    ));
    b.line("Both sides queue in the lock's node and each waiter watches only its predecessor, so a release wakes one waiter. Handoff: from the holder's release call to the next different holder's acquire returning.\n");
    b.line("| contenders | variant | acquisitions/s | handoff p50 | handoff p99 | requests / acquisition | min/max per contender |");
    b.line("|---:|---|---:|---:|---:|---:|---:|");
    for tasks in [4, 16] {
        let mut clients = Vec::new();
        for _ in 0..tasks {
            clients.push(lockguard(server).await);
        }
        let before = packets(server);
        let c = contend(&clients, tasks, b.run_for).await;
        let lg_per = (packets(server) - before) as f64 / c.acquisitions.max(1) as f64;
        drop(clients);
        row(b, tasks, "lockguard", &c, lg_per);

        let mut raws = Vec::new();
        for _ in 0..tasks {
            raws.push(raw_client(server).await);
        }
        let rec = Recorder::new(tasks);
        let before = packets(server);
        let rate = throughput(tasks, b.run_for, |t, stop, done| {
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
        let raw = rec.finish(rate);
        let raw_per = (packets(server) - before) as f64 / raw.acquisitions.max(1) as f64;
        drop(raws);
        row(b, tasks, "raw recipe", &raw, raw_per);
        if tasks == 16 {
            b.target(
                "zookeeper: acquisitions/s ≥ 0.9x the raw recipe's, 16 contenders",
                format!("{:.0}/s vs {:.0}/s", c.rate, raw.rate),
                c.rate >= 0.9 * raw.rate,
            );
            b.target(
                "zookeeper: requests per acquisition ≤ the raw recipe's, 16 contenders",
                format!("{lg_per:.2} vs {raw_per:.2}"),
                lg_per <= raw_per + 0.05,
            );
            let (p50, raw_p50) = (
                percentile(&c.handoffs, 50.0),
                percentile(&raw.handoffs, 50.0),
            );
            b.target(
                "zookeeper: handoff p50 ≤ 1.1x the raw recipe's, 16 contenders",
                format!("{} vs {}", us(p50), us(raw_p50)),
                p50.as_secs_f64() <= 1.1 * raw_p50.as_secs_f64(),
            );
        }
    }
}

fn row(b: &mut Bench, tasks: usize, variant: &str, c: &Contention, per: f64) {
    b.line(&format!(
        "| {tasks} | {variant} | {:.0} | {} | {} | {per:.2} | {:.2} |",
        c.rate,
        us(percentile(&c.handoffs, 50.0)),
        us(percentile(&c.handoffs, 99.0)),
        c.evenness,
    ));
}
