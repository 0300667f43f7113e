//! Multi-key locks on Redis: what a cycle costs uncontended, against raw
//! redis-rs taking the same keys one `SET NX PX` at a time (what a client
//! without a multi-key script sends), and the commands per acquisition
//! when clients contend for overlapping keys.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockguard_core::Client;

use crate::rounds::interleaved;
use crate::{Bench, RAW_SENT, hold, measure, raw};

/// Rounds of the uncontended comparison, for each number of keys.
const ROUNDS: usize = 5;

/// Cycles counted for the commands per cycle.
const CYCLES: u32 = 100;

/// Commands a lockguard client sends on this path.
const SENT: &[&str] = &["evalsha", "eval", "script|load"];

pub(crate) async fn section(b: &mut Bench) {
    let rounds = if b.quick { 1 } else { ROUNDS };
    let each = b.run_for / 2;
    b.line("\n## Multi-key locks\n");
    b.line(&format!("Uncontended: 16 tasks over one client, each locking keys of its own, `k` at a time, and releasing them. *lockguard*: `multi_lock(keys).try_acquire()` (one script takes every key on one server) and the guard's `release()` (a script per key). *raw*: `SET key token NX PX 30000` per key, then the compare-and-delete script per key. For each `k`, {rounds} interleaved rounds of {each:?} runs (after a {:?} warm-up), lockguard first in odd rounds and second in even ones; the ratio is the median of the rounds' ratios, with the lowest and highest. Commands per cycle are those the client sent, counted by the server over 100 cycles of one task.\n", each / 5));
    b.line("| keys | lockguard cycles/s (median) | raw cycles/s (median) | ratio (median) | range | lockguard commands / cycle | raw commands / cycle |");
    b.line("|---:|---:|---:|---:|---:|---:|---:|");
    let lg = b.lockguard().await;
    let conn = raw::connect(&b.server.url()).await;
    for k in [2usize, 4, 8] {
        let rates = interleaved(
            rounds,
            async |_| {
                measure(16, each, |t, stop, done| {
                    let multi = lg
                        .multi_lock((0..k).map(|i| format!("m:{t}:{i}")))
                        .lease(Duration::from_secs(30));
                    async move {
                        while !stop.load(Ordering::Relaxed) {
                            let g = multi.try_acquire().await.expect("uncontended multi-lock");
                            assert!(g.release().await.expect("release"));
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
                .await
                .rate
            },
            async |_| {
                measure(16, each, |t, stop, done| {
                    let mut conn = conn.clone();
                    async move {
                        let keys: Vec<String> = (0..k).map(|i| format!("raw:m:{t}:{i}")).collect();
                        let mut n = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            n += 1;
                            let token = format!("{t}-{n}");
                            for key in &keys {
                                assert!(raw::try_lock(&mut conn, key, &token).await);
                            }
                            for key in &keys {
                                raw::unlock(&mut conn, key, &token).await;
                            }
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
                .await
                .rate
            },
        )
        .await;
        // Commands per cycle, counted exactly over 100 cycles of one task.
        let multi = lg.multi_lock((0..k).map(|i| format!("mn:{i}")));
        b.reset_stats().await;
        for _ in 0..CYCLES {
            let g = multi.try_acquire().await.expect("uncontended multi-lock");
            assert!(g.release().await.expect("release"));
        }
        let lg_cycles = b.commands(SENT).await.sent as f64 / CYCLES as f64;
        let mut c = conn.clone();
        b.reset_stats().await;
        for n in 0..CYCLES {
            let token = format!("n-{n}");
            for i in 0..k {
                assert!(raw::try_lock(&mut c, &format!("raw:mn:{i}"), &token).await);
            }
            for i in 0..k {
                raw::unlock(&mut c, &format!("raw:mn:{i}"), &token).await;
            }
        }
        let raw_cycles = b.commands(RAW_SENT).await.sent as f64 / CYCLES as f64;
        let ratio = rates.ratio(|r| *r);
        b.line(&format!(
            "| {k} | {:.0} | {:.0} | {} | {} | {lg_cycles:.1} | {raw_cycles:.1} |",
            rates.lockguard_median(|r| *r),
            rates.raw_median(|r| *r),
            ratio.cell(),
            ratio.range_cell(),
        ));
        b.target(
            &format!("multi-lock of {k} keys: commands per uncontended cycle ≤ keys + 1"),
            format!("{lg_cycles:.2}"),
            lg_cycles <= k as f64 + 1.05,
        );
    }
    contended(b).await;
}

/// Eight clients (one each, as processes) each take two of four keys at
/// random, hold them ~1 ms and release them.
async fn contended(b: &mut Bench) {
    const CLIENTS: usize = 8;
    const KEYS: usize = 4;
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
                while !stop.load(Ordering::Relaxed) {
                    let a = rng.usize(..KEYS);
                    let b = (a + 1 + rng.usize(..KEYS - 1)) % KEYS;
                    let g = lg
                        .multi_lock([format!("mc:{a}"), format!("mc:{b}")])
                        .lease(Duration::from_secs(10))
                        .wait(Duration::from_secs(60))
                        .acquire()
                        .await
                        .expect("contended multi-lock");
                    hold().await;
                    assert!(g.release().await.expect("release"));
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    tokio::time::sleep(b.run_for / 5).await;
    b.log_every_call(true).await;
    b.reset_stats().await;
    let (from, started) = (done.load(Ordering::Relaxed), Instant::now());
    tokio::time::sleep(b.run_for).await;
    let n = done.load(Ordering::Relaxed) - from;
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let counted = b.commands_by_origin().await;
    b.log_every_call(false).await;
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.await.expect("contender");
    }
    let per = |x: u64| x as f64 / n.max(1) as f64;
    b.line(&format!(
        "\nContended: {CLIENTS} clients (one each) take two of {KEYS} keys at random, hold them ~1 ms and release them: {rate:.0} acquisitions/s; {:.2} commands sent per acquisition, release included ({:.2} calls inside scripts). An attempt that finds a key busy sends one script and then waits in the busy keys' queues in order (a script per key, and the waits' own).",
        per(counted.sent),
        per(counted.internal),
    ));
}
