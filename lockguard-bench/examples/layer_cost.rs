//! Each HTTP layer's own cost, without the network: `N` requests (default
//! 200,000) through an axum hello-world router called as a tower service,
//! per variant, on one runtime worker, printing nanoseconds per request
//! (wall and CPU). `TASKS=4 WORKERS=2` runs four request loops at once on
//! two workers, so the layers' shared state is touched from both cores, as
//! in a server. The `-per-ip` variants' requests come from `PEERS`
//! addresses in turn (default 32, as 32 keep-alive connections; `PEERS=65536`
//! is a crowd, each address back only after 65,535 others).
//!
//! Run under valgrind, it counts instructions instead, which do not move
//! with the machine's load: `lockguard-bench/layer-cost.sh` runs each
//! variant twice (2,000 and 12,000 requests) under callgrind and DHAT and
//! prints the difference per request, so start-up costs cancel out.
//!
//! With the `metrics` feature, lockguard records its metrics into an
//! installed recorder (metrics-util's registry-backed debugging recorder),
//! as a service that exports its metrics does.
//!
//! ```sh
//! cargo run --release -p lockguard-bench --example layer_cost -- none rate governor lock concurrency
//! ```

use std::time::Instant;

use axum::Router;
use axum::body::Body;
use http_body_util::BodyExt;
use lockguard_core::Client;
use tower::{Service, ServiceExt};

#[path = "../src/apps.rs"]
mod apps;

fn main() {
    #[cfg(feature = "metrics")]
    metrics_util::debugging::DebuggingRecorder::new()
        .install()
        .expect("no other recorder is installed");
    let variants: Vec<String> = std::env::args().skip(1).collect();
    let n: u32 = std::env::var("N").map_or(200_000, |v| v.parse().expect("N: a number"));
    let rounds: u32 = std::env::var("ROUNDS").map_or(3, |v| v.parse().expect("ROUNDS: a number"));
    // `TASKS` request loops at once on `WORKERS` runtime workers (both 1 by
    // default): with more than one worker the layers' shared state is
    // touched from several cores, as in a server.
    let tasks: u32 = std::env::var("TASKS").map_or(1, |v| v.parse().expect("TASKS: a number"));
    let workers: usize =
        std::env::var("WORKERS").map_or(1, |v| v.parse().expect("WORKERS: a number"));
    let peers: u32 = std::env::var("PEERS").map_or(32, |v| v.parse().expect("PEERS: a number"));
    assert!((1..=1 << 16).contains(&peers), "PEERS: 1 to 65,536");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("runtime");
    // On the workers, as a server's connection tasks run.
    let run = runtime.spawn(async move {
        for round in 0..rounds {
            for v in &variants {
                let app = match apps::app(v, Client::memory()) {
                    Ok(app) => app,
                    Err(e) => {
                        eprintln!("{e}");
                        std::process::exit(2);
                    }
                };
                let started = Instant::now();
                let cpu = cpu_time();
                let loops: Vec<_> = (0..tasks)
                    .map(|t| tokio::spawn(requests(app.clone(), v.clone(), t, n / tasks, peers)))
                    .collect();
                for l in loops {
                    l.await.expect("request loop");
                }
                let per = started.elapsed().as_nanos() / u128::from(n);
                let cpu_per = (cpu_time() - cpu) / u128::from(n);
                println!("round {round} {v}: {per} ns/request, {cpu_per} ns CPU/request");
            }
        }
    });
    runtime.block_on(run).expect("benchmark task");
}

/// `n` requests through `app`, one after the other, keyed `x-conn` by
/// loop `t` and 32 connections each.
async fn requests(app: Router, v: String, t: u32, n: u32, peers: u32) {
    // Routes built once, as `axum::serve` does (`into_make_service` calls
    // `with_state`): otherwise every request would build its route and
    // apply the layer anew, a cost no server pays.
    let mut svc = app.with_state::<()>(()).into_service::<Body>();
    // What `into_make_service_with_connect_info` records, for the
    // `-per-ip` variants: `peers` peers in turn, as connections from
    // addresses of their own.
    let peer_address = apps::needs_peer_address(&v);
    for i in 0..n {
        let mut req = http::Request::get("/")
            .header("x-conn", (t * 1000 + i % 32).to_string())
            .body(Body::empty())
            .expect("request");
        if peer_address {
            // Loop `t`'s peers: 127.t.0.2, 127.t.0.3, ... (a /16 each).
            let p = i % peers;
            let ip = std::net::Ipv4Addr::new(
                127,
                (t % 256) as u8,
                (p >> 8) as u8,
                2u8.wrapping_add(p as u8),
            );
            req.extensions_mut()
                .insert(axum::extract::ConnectInfo(std::net::SocketAddr::from((
                    ip, 40_000,
                ))));
        }
        let ready = svc.ready().await.expect("ready");
        let res = ready.call(req).await.expect("response");
        assert!(res.status().is_success(), "{v}: {}", res.status());
        res.into_body().collect().await.expect("body");
        // As between requests on a connection: other tasks (background
        // releases, renewals) get their turn.
        tokio::task::yield_now().await;
    }
}

/// Nanoseconds of CPU every thread of the process has run, as the
/// scheduler accounts it (0 where `/proc` has no schedstat).
fn cpu_time() -> u128 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u128>().ok())
        .sum()
}
