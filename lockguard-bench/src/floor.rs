//! Uncontended cycles against the floor of lockguard's guarantees: raw
//! redis-rs running the least a fenced, fair lock needs (an acquire that
//! refuses while others queue, takes the key with `SET NX PX` and draws a
//! fence above both the last one and the server's clock; a release that
//! compares and deletes, and wakes someone only when someone waits), beside
//! bare `SET NX PX` and rslock, with one connection shared by the tasks and
//! with a client per task, in the same rounds.

use std::sync::LazyLock;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lockguard_core::Client;
use lockguard_redis::ClientExt as _;
use redis::Script;
use redis::aio::ConnectionManager;

use crate::{Bench, Measured, measure, median, range, raw};

/// The floor's acquire: nobody queues, the key is free, and a fence above
/// the last one and the server's clock in µs.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local last = tonumber(redis.call('GET', KEYS[3]) or '0')
local fence = math.max(last, now) + 1
redis.call('SET', KEYS[3], fence)
return fence
",
    )
});

/// The floor's release: compare and delete; a wake-up only when someone
/// waits.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
local first = redis.call('LINDEX', KEYS[2], 0)
if first then redis.call('PUBLISH', first, ARGV[1]) end
return 1
",
    )
});

/// One floor cycle on `conn`.
async fn floor_cycle(conn: &mut ConnectionManager, key: &str, token: &str) {
    let (queue, fence) = (format!("{key}:q"), format!("{key}:f"));
    let taken: i64 = ACQUIRE
        .key(key)
        .key(&queue)
        .key(&fence)
        .arg(token)
        .arg(30_000)
        .invoke_async(conn)
        .await
        .expect("floor acquire");
    assert!(taken > 0, "an uncontended floor acquire was refused");
    let released: i64 = RELEASE
        .key(key)
        .key(&queue)
        .arg(token)
        .invoke_async(conn)
        .await
        .expect("floor release");
    assert_eq!(released, 1);
}

/// What each round runs, in turn.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Lockguard,
    Floor,
    SetNx,
    Rslock,
}

const VARIANTS: [Variant; 4] = [
    Variant::Lockguard,
    Variant::Floor,
    Variant::SetNx,
    Variant::Rslock,
];

pub(crate) async fn floor(b: &mut Bench) {
    const TASKS: [usize; 3] = [1, 16, 64];
    let rounds = if b.quick { 1 } else { 5 };
    let each = b.run_for / 2;
    b.line("\n## Uncontended cycles against the floor of the guarantees\n");
    b.line(&format!(
        "The floor: raw redis-rs running the least a fenced, fair lock needs, two scripts (acquire: refuse while others queue, `SET NX PX`, a fence above both the last fence and the server's clock; release: compare and delete, and a wake-up only when someone waits). Beside it, bare `SET NX PX` with a compare-and-delete (no fence, no queue), and rslock 0.10 (`LockManager::lock`/`unlock`, one server). {rounds} rounds; in each, for each set-up and number of tasks, the four run for {each:?} each (after a {:?} warm-up), the order turning by one each round. Shared: one lockguard client, one raw connection, one rslock manager for every task. A client per task: each task its own lockguard client, raw connection and rslock manager, as separate processes have. Ratios are medians over the rounds of lockguard's rate over the other's in the same round, with the range; `redis-server` CPU per cycle is the median.\n",
        each / 5
    ));
    b.line("| set-up | tasks | lockguard cycles/s | floor | `SET NX PX` | rslock | lockguard / floor (range) | lockguard / `SET NX PX` | lockguard / rslock | redis-server µs / cycle, lockguard / floor |");
    b.line("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let url = b.server.url();
    for per_task in [false, true] {
        for &tasks in &TASKS {
            let clients = tasks.max(1);
            let lg: Vec<Client> = if per_task {
                let mut v = Vec::with_capacity(clients);
                for _ in 0..clients {
                    v.push(Client::connect_redis(&url).await.expect("lockguard client"));
                }
                v
            } else {
                vec![b.lockguard().await]
            };
            let conns: Vec<ConnectionManager> = if per_task {
                let mut v = Vec::with_capacity(clients);
                for _ in 0..clients {
                    v.push(raw::connect(&url).await);
                }
                v
            } else {
                vec![raw::connect(&url).await]
            };
            let managers: Vec<std::sync::Arc<rslock::LockManager>> =
                (0..if per_task { clients } else { 1 })
                    .map(|_| std::sync::Arc::new(rslock::LockManager::new(vec![url.clone()])))
                    .collect();
            let mut got: [Vec<Measured>; 4] = Default::default();
            for round in 0..rounds {
                for k in 0..VARIANTS.len() {
                    let v = VARIANTS[(k + round) % VARIANTS.len()];
                    let pick = |t: usize, n: usize| if per_task { t % n } else { 0 };
                    let m = match v {
                        Variant::Lockguard => {
                            measure(tasks, each, |t, stop, done| {
                                let lock = lg[pick(t, lg.len())]
                                    .lock(&format!("floor:lg:{t}"))
                                    .lease(Duration::from_secs(30));
                                async move {
                                    while !stop.load(Ordering::Relaxed) {
                                        let g = lock.try_acquire().await.expect("acquire");
                                        assert!(g.release().await.expect("release"));
                                        done.fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                            })
                            .await
                        }
                        Variant::Floor | Variant::SetNx => {
                            measure(tasks, each, |t, stop, done| {
                                let mut conn = conns[pick(t, conns.len())].clone();
                                async move {
                                    let key = format!("floor:raw:{t}");
                                    let mut n = 0u64;
                                    while !stop.load(Ordering::Relaxed) {
                                        n += 1;
                                        let token = format!("{t}-{n}");
                                        if v == Variant::Floor {
                                            floor_cycle(&mut conn, &key, &token).await;
                                        } else {
                                            assert!(raw::try_lock(&mut conn, &key, &token).await);
                                            raw::unlock(&mut conn, &key, &token).await;
                                        }
                                        done.fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                            })
                            .await
                        }
                        Variant::Rslock => {
                            measure(tasks, each, |t, stop, done| {
                                let manager = managers[pick(t, managers.len())].clone();
                                async move {
                                    let key = format!("floor:rslock:{t}");
                                    while !stop.load(Ordering::Relaxed) {
                                        let lock = manager
                                            .lock(key.as_str(), Duration::from_secs(30))
                                            .await
                                            .expect("rslock lock");
                                        manager.unlock(&lock).await;
                                        done.fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                            })
                            .await
                        }
                    };
                    got[VARIANTS.iter().position(|x| *x == v).unwrap_or(0)].push(m);
                }
            }
            let rate = |i: usize| median(got[i].iter().map(|m| m.rate).collect());
            let ratio = |i: usize| -> (f64, f64, f64) {
                let rs: Vec<f64> = got[0]
                    .iter()
                    .zip(&got[i])
                    .map(|(a, b)| a.rate / b.rate)
                    .collect();
                let (lo, hi) = range(&rs);
                (median(rs), lo, hi)
            };
            let us = |i: usize| {
                median(
                    got[i]
                        .iter()
                        .map(|m| m.redis_cpu_per_cycle.as_secs_f64() * 1e6)
                        .collect(),
                )
            };
            let (to_floor, lo, hi) = ratio(1);
            let setup = if per_task {
                "a client per task"
            } else {
                "shared"
            };
            b.line(&format!(
                "| {setup} | {tasks} | {:.0} | {:.0} | {:.0} | {:.0} | {to_floor:.2}x ({lo:.2}–{hi:.2}x) | {:.2}x | {:.2}x | {:.1} / {:.1} |",
                rate(0),
                rate(1),
                rate(2),
                rate(3),
                ratio(2).0,
                ratio(3).0,
                us(0),
                us(1),
            ));
            b.target(
                &format!("lockguard ≥ 0.9x the floor, {setup}, {tasks} tasks (median of {rounds} rounds; range)"),
                format!("{to_floor:.2}x ({lo:.2}–{hi:.2}x)"),
                to_floor >= 0.9,
            );
            let cpu = us(0) / us(1).max(f64::MIN_POSITIVE);
            b.target(
                &format!("redis-server CPU per cycle ≤ 1.2x the floor's, {setup}, {tasks} tasks"),
                format!("{cpu:.2}x"),
                cpu <= 1.2,
            );
        }
    }
}
