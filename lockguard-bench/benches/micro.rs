//! Micro benchmarks: one operation at a time, lockguard beside raw redis-rs
//! on a `redis-server` the bench starts, and the in-memory store.
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
}

criterion_group!(benches, lock_cycles);
criterion_main!(benches);
