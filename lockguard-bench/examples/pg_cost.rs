//! The client's own cost of an uncontended PostgreSQL lock cycle, lockguard
//! beside raw tokio-postgres calling the same functions: `N` cycles
//! (default 20,000) from `TASKS` tasks (default 1) on distinct keys,
//! against a server the harness starts (or the one at `URL`), printing
//! cycles per second.
//!
//! Run under valgrind, it counts the client's instructions (the server is
//! another process): `lockguard-bench/pg-cost.sh` runs each variant twice
//! (1,000 and 3,000 cycles) under callgrind and prints the difference per
//! cycle, so start-up costs cancel out.
//!
//! ```sh
//! cargo run --release -p lockguard-bench --example pg_cost -- lockguard raw
//! ```

use std::time::{Duration, Instant};

use deadpool_postgres::{ManagerConfig, RecyclingMethod, Runtime};
use lockguard_postgres::ClientExt as _;
use lockguard_testing::PostgresServer;

const ACQUIRE: &str = "SELECT * FROM lockguard.acquire($1, $2, $3, $4, $5, $6, $7)";
const RELEASE: &str = "SELECT lockguard.release($1, $2, $3)";

fn main() {
    let variants: Vec<String> = std::env::args().skip(1).collect();
    let n: u64 = std::env::var("N").map_or(20_000, |v| v.parse().expect("N: a number"));
    let tasks: u64 = std::env::var("TASKS").map_or(1, |v| v.parse().expect("TASKS: a number"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    // `URL`: a server of the caller's (so that a tracer of this process
    // traces no server); by default one the harness starts.
    let server = std::env::var("URL").is_err().then(PostgresServer::start);
    let url = std::env::var("URL").unwrap_or_else(|_| server.as_ref().expect("server").url());
    runtime.block_on(async move {
        // Lockguard's schema, which the raw variant calls too.
        drop(
            lockguard_core::Client::connect_postgres(&url)
                .await
                .expect("connect"),
        );
        for v in &variants {
            let started = Instant::now();
            match v.as_str() {
                "lockguard" => lockguard(&url, n, tasks).await,
                "raw" => raw(&url, n, tasks).await,
                other => {
                    eprintln!("unknown variant {other}: lockguard or raw");
                    std::process::exit(2);
                }
            }
            let rate = n as f64 / started.elapsed().as_secs_f64();
            println!("{v}: {rate:.0} cycles/s");
        }
    });
}

async fn lockguard(url: &str, n: u64, tasks: u64) {
    let lg = lockguard_core::Client::connect_postgres(url)
        .await
        .expect("connect");
    let loops: Vec<_> = (0..tasks)
        .map(|t| {
            let lock = lg
                .lock(&format!("cost:{}:{t}", std::process::id()))
                .lease(Duration::from_secs(30));
            tokio::spawn(async move {
                for _ in 0..n / tasks {
                    let g = lock.try_acquire().await.expect("acquire");
                    assert!(g.release().await.expect("release"));
                }
            })
        })
        .collect();
    for l in loops {
        l.await.expect("loop");
    }
}

async fn raw(url: &str, n: u64, tasks: u64) {
    let config: tokio_postgres::Config = url.parse().expect("url");
    let manager = deadpool_postgres::Manager::from_config(
        config,
        tokio_postgres::NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(16)
        .runtime(Runtime::Tokio1)
        .build()
        .expect("pool");
    let loops: Vec<_> = (0..tasks)
        .map(|t| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let key = format!("rawcost:{}:{t}", std::process::id());
                for i in 0..n / tasks {
                    let token = format!("{t}-{i}");
                    let none: Option<i64> = None;
                    let no_channel: Option<&str> = None;
                    let conn = pool.get().await.expect("connection");
                    let stmt = conn.prepare_cached(ACQUIRE).await.expect("prepare");
                    let row = conn
                        .query_one(
                            &stmt,
                            &[&key, &token, &30_000i64, &1i32, &none, &no_channel, &none],
                        )
                        .await
                        .expect("acquire");
                    assert!(row.get::<_, bool>(0));
                    drop(conn);
                    let conn = pool.get().await.expect("connection");
                    let stmt = conn.prepare_cached(RELEASE).await.expect("prepare");
                    let released: bool = conn
                        .query_one(&stmt, &[&key, &token, &1i32])
                        .await
                        .expect("release")
                        .get(0);
                    assert!(released);
                }
            })
        })
        .collect();
    for l in loops {
        l.await.expect("loop");
    }
}
