//! What an uncontended cycle of each Redis primitive costs the server: the
//! time `redis-server` spends in lockguard's scripts, per script call
//! (`usec_per_call` of `evalsha` in `INFO commandstats`), and the commands
//! the scripts run inside it per cycle. `N` cycles (default 30,000) per
//! variant and round, on 16 names in turn, from one client on a server the
//! harness starts; `ROUNDS` rounds (default 3), the variants interleaved.
//! Variants: `lock`, `semaphore` (4 permits), `rw-read`, `rw-write`,
//! `counter` (a cycle is one `incr_by` and one `set`).
//!
//! ```sh
//! cargo run --release -p lockguard-bench --example script_cost -- lock semaphore rw-read rw-write counter
//! ```

use lockguard_core::Client;
use lockguard_redis::ClientExt as _;
use lockguard_testing::RedisServer;

fn main() {
    let mut variants: Vec<String> = std::env::args().skip(1).collect();
    if variants.is_empty() {
        variants = ["lock", "semaphore", "rw-read", "rw-write"]
            .map(String::from)
            .into();
    }
    let n: usize = std::env::var("N").map_or(30_000, |v| v.parse().expect("N: a number"));
    let rounds: usize = std::env::var("ROUNDS").map_or(3, |v| v.parse().expect("ROUNDS: a number"));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let server = RedisServer::start();
        let lg = Client::connect_redis(&server.url())
            .await
            .expect("connect to redis");
        let mut admin = server.connection().await;
        let mut figures = vec![Vec::new(); variants.len()];
        for _ in 0..rounds {
            for (i, v) in variants.iter().enumerate() {
                // A warm-up cycle loads the scripts.
                cycles(&lg, v, 1).await;
                let _: () = redis::cmd("CONFIG")
                    .arg("RESETSTAT")
                    .query_async(&mut admin)
                    .await
                    .expect("CONFIG RESETSTAT");
                cycles(&lg, v, n).await;
                let info: String = redis::cmd("INFO")
                    .arg("commandstats")
                    .query_async(&mut admin)
                    .await
                    .expect("INFO commandstats");
                figures[i].push(stats(&info, n));
            }
        }
        println!(
            "| variant | server µs per script call (each round) | commands inside per cycle |"
        );
        println!("|---|---|---:|");
        for (v, f) in variants.iter().zip(&figures) {
            let each: Vec<String> = f.iter().map(|(us, _)| format!("{us:.2}")).collect();
            println!("| {v} | {} | {:.1} |", each.join(", "), f[0].1);
        }
    });
}

/// `n` uncontended cycles of `variant`, on 16 names in turn.
async fn cycles(lg: &Client, variant: &str, n: usize) {
    for i in 0..n {
        let name = format!("cost:{}", i % 16);
        match variant {
            "lock" => {
                let g = lg.lock(&name).try_acquire().await.expect("a free lock");
                assert!(g.release().await.expect("release"));
            }
            "semaphore" => {
                let p = lg
                    .semaphore(&name, 4)
                    .try_acquire()
                    .await
                    .expect("a free permit");
                assert!(p.release().await.expect("release"));
            }
            "rw-read" => {
                let g = lg
                    .rw_lock(&name)
                    .read()
                    .try_acquire()
                    .await
                    .expect("a free lock");
                assert!(g.release().await.expect("release"));
            }
            "rw-write" => {
                let g = lg
                    .rw_lock(&name)
                    .write()
                    .try_acquire()
                    .await
                    .expect("a free lock");
                assert!(g.release().await.expect("release"));
            }
            "counter" => {
                let c = lg.counter(&name);
                c.incr_by(1).await.expect("incr_by");
                c.set(0).await.expect("set");
            }
            other => {
                panic!("unknown variant {other:?}: lock, semaphore, rw-read, rw-write, counter")
            }
        }
    }
}

/// The server's µs per script call, and the commands run inside the
/// scripts per cycle, from `INFO commandstats` after `n` cycles.
fn stats(info: &str, n: usize) -> (f64, f64) {
    let (mut us, mut inside) = (0.0, 0u64);
    for line in info.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let field = |key: &str| {
            rest.split(',')
                .find_map(|kv| kv.strip_prefix(key))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        match name {
            "evalsha" => us = field("usec_per_call="),
            "eval" | "info" | "config|resetstat" | "config" => {}
            _ => inside += field("calls=") as u64,
        }
    }
    (us, inside as f64 / n as f64)
}
