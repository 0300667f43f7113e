//! Read-write locks on Redis: a workload of 90% reads and 10% writes on
//! one key, under a read-write lock and under the plain lock, with one
//! client per contender as separate processes have.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockguard_core::Client;

use crate::{Bench, hold};

/// Contenders, one client each.
const CLIENTS: usize = 16;
/// Out of 100 operations, how many read.
const READS: u32 = 90;

pub(crate) async fn section(b: &mut Bench) {
    b.line("\n## Read-write locks: 90% readers\n");
    b.line(&format!("{CLIENTS} contenders, one client each, on one key: each operation reads (90%) or writes (10%), holds the lock ~1 ms and releases it, then asks again at once. *read-write lock*: `rw_lock(key).read()` or `.write()`; *upgradeable, read then upgrade*: `upgradeable_rw_lock(key).read()` for the reads, and for the writes `.upgradeable_read()` held ~1 ms, then `upgrade()` and ~1 ms more; *plain lock*: `lock(key)` for every operation. Operations per second over the run, after a warm-up of a fifth of it.\n"));
    b.line("| variant | operations/s | commands sent / operation | ratio to the plain lock |");
    b.line("|---|---:|---:|---:|");
    let (rw, rw_sent) = run(b, Mix::ReadWrite).await;
    let (up, up_sent) = run(b, Mix::Upgradeable).await;
    let (plain, plain_sent) = run(b, Mix::Plain).await;
    b.line(&format!(
        "| read-write lock | {rw:.0} | {rw_sent:.2} | {:.2}x |",
        rw / plain
    ));
    b.line(&format!(
        "| upgradeable, read then upgrade | {up:.0} | {up_sent:.2} | {:.2}x |",
        up / plain
    ));
    b.line(&format!(
        "| plain lock | {plain:.0} | {plain_sent:.2} | 1.00x |"
    ));
    b.target(
        "read-write lock with 90% readers ≥ 2x the plain lock's operations/s",
        format!("{:.2}x", rw / plain),
        rw >= 2.0 * plain,
    );
    upgrades(b).await;
}

/// One read-then-write cycle, as each variant does it.
#[derive(Clone, Copy, PartialEq)]
enum Cycle {
    /// `upgradeable_read()`, `upgrade()`, `release()`.
    Upgrade,
    /// A read released, then a write: the release-and-race an upgrade
    /// replaces.
    ReleaseAndRace,
    /// A write of the upgradeable lock alone (gate and write).
    GatedWrite,
    /// A write of a plain read-write lock.
    PlainWrite,
}

/// What an upgrade costs: read-then-write cycles of one client on one key,
/// uncontended, with the commands each sends.
async fn upgrades(b: &mut Bench) {
    b.line(
        "
### An upgrade's cost: read-then-write cycles, one client, uncontended
",
    );
    b.line("One client, one key, cycles back to back for the run (after a warm-up of a fifth of it). *upgrade*: `upgradeable_rw_lock(key).upgradeable_read()`, `upgrade()`, `release()`; *release and race*: `rw_lock(key).read()` released, then `.write()` taken and released (no guarantee that no writer came in between); *gated write*: `upgradeable_rw_lock(key).write()`; *plain write*: `rw_lock(key).write()`. Commands sent per cycle count each `EVALSHA` as one.\n");
    b.line("| variant | cycles/s | commands sent / cycle |");
    b.line("|---|---:|---:|");
    let mut rates = Vec::new();
    for (cycle, what) in [
        (Cycle::Upgrade, "upgrade"),
        (Cycle::ReleaseAndRace, "release and race"),
        (Cycle::GatedWrite, "gated write"),
        (Cycle::PlainWrite, "plain write"),
    ] {
        let (rate, sent) = cycles(b, cycle).await;
        b.line(&format!("| {what} | {rate:.0} | {sent:.2} |"));
        rates.push(rate);
    }
    b.target(
        "an upgrade cycle ≥ 0.5x the release-and-race cycle it replaces (cycles/s)",
        format!("{:.2}x", rates[0] / rates[1]),
        rates[0] >= 0.5 * rates[1],
    );
}

/// Cycles per second of `cycle`, and commands sent per cycle.
async fn cycles(b: &mut Bench, cycle: Cycle) -> (f64, f64) {
    let lg = b.lockguard().await;
    let one = |lg: Client| async move {
        match cycle {
            Cycle::Upgrade => {
                let mut g = lg
                    .upgradeable_rw_lock("rw:upgrade")
                    .upgradeable_read()
                    .acquire()
                    .await
                    .expect("upgradeable read");
                g.upgrade().await.expect("upgrade");
                assert!(g.release().await.expect("release"));
            }
            Cycle::ReleaseAndRace => {
                let rw = lg.rw_lock("rw:race");
                let r = rw.read().acquire().await.expect("read");
                assert!(r.release().await.expect("release"));
                let w = rw.write().acquire().await.expect("write");
                assert!(w.release().await.expect("release"));
            }
            Cycle::GatedWrite => {
                let g = lg.upgradeable_rw_lock("rw:gated").write().acquire().await;
                assert!(g.expect("gated write").release().await.expect("release"));
            }
            Cycle::PlainWrite => {
                let w = lg.rw_lock("rw:write").write().acquire().await;
                assert!(w.expect("write").release().await.expect("release"));
            }
        }
    };
    let warm = Instant::now();
    while warm.elapsed() < b.run_for / 5 {
        one(lg.clone()).await;
    }
    b.reset_stats().await;
    let (mut n, started) = (0u64, Instant::now());
    while started.elapsed() < b.run_for {
        one(lg.clone()).await;
        n += 1;
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let sent = b
        .commands(&["evalsha", "eval", "script|load", "subscribe", "unsubscribe"])
        .await
        .sent;
    (rate, sent as f64 / n.max(1) as f64)
}

/// What the contenders take.
#[derive(Clone, Copy, PartialEq)]
enum Mix {
    /// Reads and writes of a read-write lock.
    ReadWrite,
    /// Reads of an upgradeable read-write lock, and upgradeable reads that
    /// upgrade in place of the writes.
    Upgradeable,
    /// The plain lock for every operation.
    Plain,
}

/// Operations per second, and commands sent per operation.
async fn run(b: &mut Bench, mix: Mix) -> (f64, f64) {
    let mut clients: Vec<Client> = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(b.lockguard().await);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(c, lg)| {
            let (stop, done) = (stop.clone(), done.clone());
            tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(c as u64);
                let rw = lg.rw_lock("rw:doc");
                let (read, write) = (
                    rw.read().wait(Duration::from_secs(60)),
                    rw.write().wait(Duration::from_secs(60)),
                );
                let plain = lg.lock("rw:plain").wait(Duration::from_secs(60));
                let urw = lg.upgradeable_rw_lock("rw:upgradeable");
                let (up_read, upgradeable) = (
                    urw.read().wait(Duration::from_secs(60)),
                    urw.upgradeable_read().wait(Duration::from_secs(60)),
                );
                while !stop.load(Ordering::Relaxed) {
                    let reads = rng.u32(0..100) < READS;
                    if mix == Mix::Upgradeable {
                        if reads {
                            let g = up_read.acquire().await.expect("read lock");
                            hold().await;
                            assert!(g.release().await.expect("release"));
                        } else {
                            let mut g = upgradeable.acquire().await.expect("upgradeable read");
                            hold().await;
                            g.upgrade().await.expect("upgrade");
                            hold().await;
                            assert!(g.release().await.expect("release"));
                        }
                    } else if mix == Mix::Plain {
                        let g = plain.acquire().await.expect("plain lock");
                        hold().await;
                        assert!(g.release().await.expect("release"));
                    } else if reads {
                        let g = read.acquire().await.expect("read lock");
                        hold().await;
                        assert!(g.release().await.expect("release"));
                    } else {
                        let g = write.acquire().await.expect("write lock");
                        hold().await;
                        assert!(g.release().await.expect("release"));
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(b.run_for / 5).await;
    b.reset_stats().await;
    let (from, started) = (done.load(Ordering::Relaxed), Instant::now());
    tokio::time::sleep(b.run_for).await;
    let n = done.load(Ordering::Relaxed) - from;
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let sent = b
        .commands(&["evalsha", "eval", "script|load", "subscribe", "unsubscribe"])
        .await
        .sent;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.expect("contender");
    }
    (rate, sent as f64 / n.max(1) as f64)
}
