//! The client's own cost of an uncontended lock cycle, lockguard beside
//! the raw driver doing the same work: on PostgreSQL (`postgres`, `raw-postgres`:
//! tokio-postgres calling the same functions) and on Redis (`redis`,
//! `raw-redis`: redis-rs sending `SET NX PX` and the compare-and-delete
//! script), and on etcd (`etcd`, `raw-etcd`: etcd-client's `Lock` and
//! `Unlock` RPCs on a lease, the yardstick of BENCHMARKS.md). On
//! PostgreSQL also `postgres-session` (lockguard with session leases) and
//! `native-postgres` (`pg_try_advisory_lock` and `pg_advisory_unlock`, a
//! connection per task). `N` cycles (default 20,000) from `TASKS` tasks (default 1) on
//! distinct keys, against a server the harness starts (or the one at
//! `URL`), printing cycles per second.
//!
//! Run under valgrind, it counts the client's instructions (the server is
//! another process): `lockguard-bench/cycle-cost.sh` runs each variant
//! twice (1,000 and 3,000 cycles) under callgrind and prints the
//! difference per cycle, so start-up costs cancel out.
//!
//! ```sh
//! cargo run --release -p lockguard-bench --example cycle_cost -- postgres raw-postgres redis raw-redis
//! ```

use std::time::{Duration, Instant};

use lockguard_etcd::BuilderExt as _;
use lockguard_etcd::testing::EtcdServer;
use lockguard_postgres::{BuilderExt as _, ClientExt as _};
use lockguard_redis::ClientExt as _;
use lockguard_testing::{PostgresServer, RedisServer};

#[path = "../src/raw.rs"]
#[allow(dead_code)]
mod raw;
#[path = "../src/raw_pg.rs"]
#[allow(dead_code)]
mod raw_pg;

fn main() {
    let variants: Vec<String> = std::env::args().skip(1).collect();
    let n: u64 = std::env::var("N").map_or(20_000, |v| v.parse().expect("N: a number"));
    let tasks: u64 = std::env::var("TASKS").map_or(1, |v| v.parse().expect("TASKS: a number"));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    for v in &variants {
        let postgres = v.contains("postgres");
        let etcd = v.ends_with("etcd");
        // `URL`: a server of the caller's (so that a tracer of this process
        // traces no server); by default one the harness starts.
        let (pg, redis, etcd_server) = match std::env::var("URL") {
            Ok(_) => (None, None, None),
            Err(_) if postgres => (Some(PostgresServer::start()), None, None),
            Err(_) if etcd => (None, None, Some(EtcdServer::start())),
            Err(_) => (None, Some(RedisServer::start()), None),
        };
        let url = std::env::var("URL").unwrap_or_else(|_| match (&pg, &redis, &etcd_server) {
            (Some(pg), _, _) => pg.url(),
            (_, Some(redis), _) => redis.url(),
            (_, _, Some(etcd)) => format!("etcd://{}", etcd.endpoint()),
            _ => unreachable!("a server was started"),
        });
        runtime.block_on(async {
            if postgres {
                // Lockguard's schema, which the raw variant calls too.
                drop(
                    lockguard_core::Client::connect_postgres(&url)
                        .await
                        .expect("connect"),
                );
            }
            let started = Instant::now();
            match v.as_str() {
                "postgres" => lockguard_postgres(&url, n, tasks).await,
                "postgres-session" => lockguard_postgres_session(&url, n, tasks).await,
                "raw-postgres" => raw_postgres(&url, n, tasks).await,
                "native-postgres" => native_postgres(&url, n, tasks).await,
                "redis" => lockguard_redis(&url, n, tasks).await,
                "raw-redis" => raw_redis(&url, n, tasks).await,
                "etcd" => lockguard_etcd(&url, n, tasks).await,
                "raw-etcd" => raw_etcd(&url, n, tasks).await,
                other => {
                    eprintln!(
                        "unknown variant {other}: postgres, postgres-session, raw-postgres, native-postgres, redis, raw-redis, etcd or raw-etcd"
                    );
                    std::process::exit(2);
                }
            }
            let rate = n as f64 / started.elapsed().as_secs_f64();
            println!("{v}: {rate:.0} cycles/s");
        });
    }
}

/// `tasks` tasks of lockguard lock cycles on `lg`, `n` in all.
async fn lockguard(lg: lockguard_core::Client, n: u64, tasks: u64) {
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

async fn lockguard_postgres(url: &str, n: u64, tasks: u64) {
    let lg = lockguard_core::Client::connect_postgres(url)
        .await
        .expect("connect");
    lockguard(lg, n, tasks).await;
}

async fn lockguard_postgres_session(url: &str, n: u64, tasks: u64) {
    let lg = lockguard_core::Client::builder()
        .postgres_lock_leases(lockguard_postgres::LockLeases::Session)
        .connect_postgres(url)
        .await
        .expect("connect");
    lockguard(lg, n, tasks).await;
}

async fn native_postgres(url: &str, n: u64, tasks: u64) {
    let mut natives = Vec::new();
    for _ in 0..tasks {
        natives.push(raw_pg::Native::connect(url).await);
    }
    let loops: Vec<_> = natives
        .into_iter()
        .enumerate()
        .map(|(t, native)| {
            tokio::spawn(async move {
                let key = i64::from(std::process::id()) * 1000 + t as i64;
                for _ in 0..n / tasks {
                    native.cycle(key).await;
                }
            })
        })
        .collect();
    for l in loops {
        l.await.expect("loop");
    }
}

async fn lockguard_redis(url: &str, n: u64, tasks: u64) {
    let lg = lockguard_core::Client::connect_redis(url)
        .await
        .expect("connect");
    lockguard(lg, n, tasks).await;
}

async fn raw_redis(url: &str, n: u64, tasks: u64) {
    let conn = raw::connect(url).await;
    let loops: Vec<_> = (0..tasks)
        .map(|t| {
            let mut conn = conn.clone();
            tokio::spawn(async move {
                let key = format!("rawcost:{}:{t}", std::process::id());
                for i in 0..n / tasks {
                    let token = format!("{t}-{i}");
                    assert!(raw::try_lock(&mut conn, &key, &token).await);
                    raw::unlock(&mut conn, &key, &token).await;
                }
            })
        })
        .collect();
    for l in loops {
        l.await.expect("loop");
    }
}

async fn raw_postgres(url: &str, n: u64, tasks: u64) {
    let mut sessions = Vec::new();
    for _ in 0..tasks {
        sessions.push(raw_pg::Session::connect(url).await);
    }
    let loops: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(t, session)| {
            tokio::spawn(async move {
                let key = format!("rawcost:{}:{t}", std::process::id());
                for i in 0..n / tasks {
                    let token = format!("{t:016x}{i:016x}");
                    assert!(session.try_lock(&key, &token).await);
                    session.unlock(&key, &token).await;
                }
            })
        })
        .collect();
    for l in loops {
        l.await.expect("loop");
    }
}

async fn lockguard_etcd(url: &str, n: u64, tasks: u64) {
    // A lease TTL that allows the fixed 30 s lease of the other variants.
    let lg = lockguard_core::Client::builder()
        .etcd_lease_ttl(Duration::from_secs(60))
        .connect_etcd(url.trim_start_matches("etcd://"))
        .await
        .expect("connect");
    lockguard(lg, n, tasks).await;
}

async fn raw_etcd(url: &str, n: u64, tasks: u64) {
    let endpoint = url.trim_start_matches("etcd://").to_owned();
    let mut client = etcd_client::Client::connect([format!("http://{endpoint}")], None)
        .await
        .expect("connect");
    let lease = client.lease_grant(60, None).await.expect("lease").id();
    let loops: Vec<_> = (0..tasks)
        .map(|t| {
            let mut client = client.clone();
            tokio::spawn(async move {
                let name = format!("rawcost:{}:{t}", std::process::id());
                for _ in 0..n / tasks {
                    let options = etcd_client::LockOptions::new().with_lease(lease);
                    let locked = client
                        .lock(name.as_str(), Some(options))
                        .await
                        .expect("lock");
                    client.unlock(locked.key()).await.expect("unlock");
                }
            })
        })
        .collect();
    for l in loops {
        l.await.expect("loop");
    }
}
