//! What Redis keeps per held lock and per queued waiter: `MEMORY USAGE` of
//! the keys, and the server's `used_memory` over many held locks, beside
//! raw `SET NX PX` keys of the same names and values.

use std::time::Duration;

use tokio::task::JoinSet;

use crate::Bench;

/// How many waiters queue on one key for the per-waiter figures.
const WAITERS: usize = 1_000;

/// The server's `used_memory`, after a moment for lazy frees to finish.
async fn used_memory(b: &mut Bench) -> i64 {
    tokio::time::sleep(Duration::from_millis(200)).await;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut b.admin)
        .await
        .expect("INFO memory");
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("used_memory in INFO")
}

/// `MEMORY USAGE key SAMPLES 0` (every element counted), 0 for no key.
async fn usage(b: &mut Bench, key: &str) -> i64 {
    let n: Option<i64> = redis::cmd("MEMORY")
        .arg("USAGE")
        .arg(key)
        .arg("SAMPLES")
        .arg(0)
        .query_async(&mut b.admin)
        .await
        .expect("MEMORY USAGE");
    n.unwrap_or(0)
}

async fn flush(b: &mut Bench) {
    let _: () = redis::cmd("FLUSHALL")
        .arg("SYNC")
        .query_async(&mut b.admin)
        .await
        .expect("FLUSHALL");
}

async fn keys(b: &mut Bench) -> i64 {
    redis::cmd("DBSIZE")
        .query_async(&mut b.admin)
        .await
        .expect("DBSIZE")
}

/// The key lockguard keeps lock `name` under (default prefix).
fn lock_key(name: &str) -> String {
    format!("lockguard:lock:{{{name}}}")
}

pub(crate) async fn section(b: &mut Bench) {
    let locks: usize = if b.quick { 10_000 } else { 100_000 };
    b.line("\n## Redis memory per held lock and per queued waiter\n");
    b.line(&format!("{locks} locks on distinct keys (`order:0`, `order:1`, ...), held with a 10-minute lease, against an empty server: the growth of `used_memory` divided by the locks, and `MEMORY USAGE` of one lock's keys (`SAMPLES 0`). *raw*: `SET key token NX PX 600000` of the same key names with a token of the same length (32 hex digits), pipelined. Then {WAITERS} waiters (tasks over 8 clients) queue on one held key: the growth of `used_memory`, and `MEMORY USAGE` of the queue (a sorted set) and the tickets (a hash), divided by the waiters.\n"));
    b.line("| what | bytes per lock (used_memory) | MEMORY USAGE of one lock's keys | keys in the server |");
    b.line("|---|---:|---:|---:|");

    // Raw: the same key names and value length.
    flush(b).await;
    let before = used_memory(b).await;
    let token = "0123456789abcdef0123456789abcdef";
    for chunk in (0..locks).collect::<Vec<_>>().chunks(1_000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("SET")
                .arg(lock_key(&format!("order:{i}")))
                .arg(token)
                .arg("NX")
                .arg("PX")
                .arg(600_000)
                .ignore();
        }
        let _: () = pipe.query_async(&mut b.admin).await.expect("SET NX PX");
    }
    let raw_per = (used_memory(b).await - before) as f64 / locks as f64;
    let raw_one = usage(b, &lock_key("order:0")).await;
    let raw_keys = keys(b).await;
    b.line(&format!(
        "| raw `SET NX PX` | {raw_per:.0} | {raw_one} | {raw_keys} |"
    ));

    // lockguard: the same locks, held.
    flush(b).await;
    let lg = b.lockguard().await;
    // Load the scripts first, so their memory is not counted.
    let warm = lg.lock("warm").try_acquire().await.expect("warm-up lock");
    assert!(warm.release().await.expect("release"));
    flush(b).await;
    let before = used_memory(b).await;
    let mut tasks = JoinSet::new();
    const TASKS: usize = 32;
    for t in 0..TASKS {
        let lg = lg.clone();
        tasks.spawn(async move {
            let mut guards = Vec::new();
            for i in (t..locks).step_by(TASKS) {
                let g = lg
                    .lock(&format!("order:{i}"))
                    .lease(Duration::from_secs(600))
                    .try_acquire()
                    .await
                    .expect("a free lock");
                guards.push(g);
            }
            guards
        });
    }
    let mut held = Vec::with_capacity(locks);
    while let Some(guards) = tasks.join_next().await {
        held.extend(guards.expect("lockers"));
    }
    let lg_per = (used_memory(b).await - before) as f64 / locks as f64;
    let lg_one = usage(b, &lock_key("order:0")).await;
    let lg_keys = keys(b).await;
    b.line(&format!(
        "| lockguard (the lock's key; the slot's fence sequence, shared by every key of its slot, counted in used_memory) | {lg_per:.0} | {lg_one} | {lg_keys} |"
    ));
    // Given back before the next measurement, not dropped into 100,000
    // background releases.
    let mut releases = JoinSet::new();
    let mut held = held.into_iter();
    for _ in 0..TASKS {
        let part: Vec<_> = held.by_ref().take(locks / TASKS + 1).collect();
        releases.spawn(async move {
            for g in part {
                assert!(g.release().await.expect("release"));
            }
        });
    }
    while let Some(done) = releases.join_next().await {
        done.expect("releases");
    }

    // Waiters queued on one held key.
    flush(b).await;
    let holder = lg
        .lock("queued")
        .lease(Duration::from_secs(600))
        .try_acquire()
        .await
        .expect("the held key");
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(b.lockguard().await);
    }
    let before = used_memory(b).await;
    let mut waiters = JoinSet::new();
    for w in 0..WAITERS {
        let lock = clients[w % clients.len()]
            .lock("queued")
            .wait(Duration::from_secs(120));
        waiters.spawn(async move {
            let _ = lock.acquire().await;
        });
    }
    let queue = format!("{}:queue", lock_key("queued"));
    let tickets = format!("{}:tickets", lock_key("queued"));
    let started = std::time::Instant::now();
    loop {
        let n: usize = redis::cmd("ZCARD")
            .arg(&queue)
            .query_async(&mut b.admin)
            .await
            .expect("ZCARD");
        if n == WAITERS {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "only {n} of {WAITERS} waiters queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let per_waiter = (used_memory(b).await - before) as f64 / WAITERS as f64;
    let queue_per = usage(b, &queue).await as f64 / WAITERS as f64;
    let tickets_per = usage(b, &tickets).await as f64 / WAITERS as f64;
    b.line("\n| queued waiters | bytes per waiter (used_memory) | queue (MEMORY USAGE / waiters) | tickets (MEMORY USAGE / waiters) |");
    b.line("|---:|---:|---:|---:|");
    b.line(&format!(
        "| {WAITERS} | {per_waiter:.0} | {queue_per:.0} | {tickets_per:.0} |"
    ));
    waiters.abort_all();
    while waiters.join_next().await.is_some() {}
    assert!(holder.release().await.expect("release"));
    b.target(
        "Redis memory per held lock ≤ 200 bytes (used_memory over the locks)",
        format!("{lg_per:.0} (raw SET NX PX: {raw_per:.0})"),
        lg_per <= 200.0,
    );
    flush(b).await;
}
