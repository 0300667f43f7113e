//! Micro benchmarks: one operation at a time, lockguard beside raw redis-rs
//! on a `redis-server` the bench starts, and the in-memory store (with a
//! function under `#[rate_limit]` beside a limiter held across calls).
//!
//! `cargo bench -p lockguard-bench`

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use lockguard_core::{Client, Quota};
use lockguard_redis::ClientExt as _;
use lockguard_testing::RedisServer;
use redis::aio::ConnectionManager;
use redis::io::tcp::TcpSettings;
use redis::{IntoConnectionInfo, Script};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime")
}

async fn raw_conn(url: &str) -> ConnectionManager {
    let info = url
        .into_connection_info()
        .expect("url")
        .set_tcp_settings(TcpSettings::default().set_nodelay(true));
    ConnectionManager::new(redis::Client::open(info).expect("client"))
        .await
        .expect("connect")
}

fn lock_cycles(c: &mut Criterion) {
    let rt = runtime();
    let server = RedisServer::start();
    let lg = rt
        .block_on(Client::connect_redis(&server.url()))
        .expect("connect");
    let mut raw = rt.block_on(raw_conn(&server.url()));
    let release = Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    );
    let mut g = c.benchmark_group("lock+unlock (redis)");
    let lock = lg.lock("micro").lease(Duration::from_secs(30));
    g.bench_function("lockguard", |b| {
        b.to_async(&rt).iter(|| async {
            let guard = lock.try_acquire().await.expect("acquire");
            guard.release().await.expect("release")
        });
    });
    g.bench_function("raw redis-rs", |b| {
        b.to_async(&rt).iter(|| {
            let mut conn = raw.clone();
            let release = &release;
            async move {
                let _: Option<String> = redis::cmd("SET")
                    .arg("raw:micro")
                    .arg("t")
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query_async(&mut conn)
                    .await
                    .expect("SET");
                let n: i64 = release
                    .key("raw:micro")
                    .arg("t")
                    .invoke_async(&mut conn)
                    .await
                    .expect("release");
                n
            }
        });
    });
    g.finish();
    let _ = &mut raw;

    let mem = Client::memory();
    let lock = mem.lock("micro").lease(Duration::from_secs(30));
    let limiter = mem.rate_limiter("micro", Quota::per_second(1_000_000));
    let mut g = c.benchmark_group("memory store");
    g.bench_function("lock+unlock", |b| {
        b.to_async(&rt).iter(|| async {
            let guard = lock.try_acquire().await.expect("acquire");
            guard.release().await.expect("release")
        });
    });
    g.bench_function("GCRA decision", |b| {
        b.to_async(&rt)
            .iter(|| async { limiter.check("k").await.expect("decision") });
    });
    g.finish();

    // A function under `#[rate_limit]` (which makes its limiter at each
    // call, from what its call site kept of the last), beside the same
    // spend through a limiter held across calls.
    rt.block_on(async { mem.install_default() });
    let held = mem.rate_limiter("held", Quota::per_second(1_000_000).burst(BURST));
    let mut g = c.benchmark_group("memory store, a rate-limited call");
    g.bench_function("#[rate_limit]", |b| {
        b.to_async(&rt)
            .iter(|| async { rate_limited().await.expect("allowed") });
    });
    g.bench_function("held limiter", |b| {
        b.to_async(&rt)
            .iter(|| async { held.try_acquire("k").await.expect("allowed") });
    });
    g.finish();
}

/// The burst of the rate-limited calls' quota: more than a run spends, so
/// that every call is let through.
const BURST: u64 = 1_000_000_000;

/// A function under `#[rate_limit]` on the default client, its quota's
/// burst `BURST`.
#[lockguard::rate_limit(key = "k", rate = "1000000/s", burst = 1000000000)]
async fn rate_limited() -> Result<(), lockguard::Error> {
    Ok(())
}

criterion_group!(benches, lock_cycles);
criterion_main!(benches);
