//! What an uncontended cycle (acquire, then release) costs on one Redis
//! server: the scripts the client sends, and the commands they run inside
//! the server, counted by `INFO commandstats`. These are the hot path's
//! cost (the bench section `uncontended` times them); a change that adds a
//! command to it shows here.

use lockguard_testing::RedisServer;

use support::Env;

use super::reset_stats;
use crate::support;

/// Calls per command since the last `CONFIG RESETSTAT`: the scripts
/// (`evalsha`) and every command run inside them, without the admin's own.
async fn calls(admin: &mut redis::aio::MultiplexedConnection) -> (u64, u64) {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .unwrap();
    let (mut scripts, mut inside) = (0, 0);
    for line in info.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(":calls="))
        else {
            continue;
        };
        let n: u64 = rest.split(',').next().unwrap().parse().unwrap();
        match name {
            "evalsha" | "eval" => scripts += n,
            "info" | "config|resetstat" | "config" => {}
            _ => inside += n,
        }
    }
    (scripts, inside)
}

/// Runs `cycles` of `cycle` after a warm-up one, and returns the scripts
/// sent and the commands run inside them per cycle.
async fn per_cycle<F: AsyncFn()>(server: &RedisServer, cycles: u64, cycle: F) -> (f64, f64) {
    let mut admin = server.connection().await;
    cycle().await;
    reset_stats(&mut admin).await;
    for _ in 0..cycles {
        cycle().await;
    }
    let (scripts, inside) = calls(&mut admin).await;
    (
        scripts as f64 / cycles as f64,
        inside as f64 / cycles as f64,
    )
}

/// A lock: 2 scripts, and 7 commands inside them (acquire: `SET NX PX`,
/// the queue checked, the clock and one draw of the fence sequence;
/// release: `GET`, the queue checked, `DEL`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_lock_cycle_costs_two_scripts_and_seven_commands() {
    let env = Env::redis();
    let lg = env.client().await;
    let server = env.server.as_ref().unwrap();
    let cost = per_cycle(server, 20, async || {
        let g = lg.lock("cost").acquire().await.unwrap();
        assert!(g.release().await.unwrap());
    })
    .await;
    println!("lock cycle: {cost:?} (scripts, commands inside)");
    assert_eq!(cost, (2.0, 7.0));
}

/// A semaphore permit: 2 scripts, and 10 commands inside them (acquire:
/// the clock, the live holders counted, the queue checked, a fence drawn,
/// the permit added, the holders' expiry set; release: the permit read and
/// removed, the queue checked, the clock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_semaphore_cycle_costs_two_scripts_and_ten_commands() {
    let env = Env::redis();
    let lg = env.client().await;
    let server = env.server.as_ref().unwrap();
    let cost = per_cycle(server, 20, async || {
        let p = lg.semaphore("cost", 4).acquire().await.unwrap();
        assert!(p.release().await.unwrap());
    })
    .await;
    println!("semaphore cycle: {cost:?} (scripts, commands inside)");
    assert_eq!(cost, (2.0, 10.0));
}

/// Beside a permit held by another client, a cycle costs the same: the
/// holders' expiry is read (`PTTL`) rather than set, and set again only
/// when it would end within a lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_cycle_beside_another_holder_costs_two_scripts_and_ten_commands() {
    let env = Env::redis();
    let (lg, other) = (env.client().await, env.client().await);
    let server = env.server.as_ref().unwrap();
    let held = other.semaphore("cost", 4).acquire().await.unwrap();
    let cost = per_cycle(server, 20, async || {
        let p = lg.semaphore("cost", 4).acquire().await.unwrap();
        assert!(p.release().await.unwrap());
    })
    .await;
    println!("semaphore cycle beside a holder: {cost:?} (scripts, commands inside)");
    assert_eq!(cost, (2.0, 10.0));
    assert!(held.release().await.unwrap());
}

/// A read-write lock nobody queues for: 2 scripts a cycle either way.
/// A read hold, 15 commands inside them (acquire: the queue checked, the
/// clock, our own hold looked for, the ended readers dropped, the writer
/// checked, the reader added and its set's expiry read and set, a fence
/// drawn; release: the queue checked, our ticket and read mark cleared,
/// our hold read and removed, the clock); a write hold, 13 (acquire: the
/// queue checked, the clock, our own hold looked for, the ended readers
/// dropped, the writer and the readers checked, the writer set, a fence
/// drawn; release: the queue checked, our ticket and read mark cleared,
/// the writer read and deleted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_rw_lock_cycle_costs_two_scripts_and_fifteen_or_thirteen_commands() {
    let env = Env::redis();
    let lg = env.client().await;
    let server = env.server.as_ref().unwrap();
    let read = per_cycle(server, 20, async || {
        let g = lg.rw_lock("cost").read().acquire().await.unwrap();
        assert!(g.release().await.unwrap());
    })
    .await;
    let write = per_cycle(server, 20, async || {
        let g = lg.rw_lock("cost").write().acquire().await.unwrap();
        assert!(g.release().await.unwrap());
    })
    .await;
    println!("rw lock cycles: read {read:?}, write {write:?} (scripts, commands inside)");
    assert_eq!(read, (2.0, 15.0));
    assert_eq!(write, (2.0, 13.0));
}
