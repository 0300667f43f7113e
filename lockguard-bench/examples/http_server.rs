//! The hello-world of the HTTP benchmarks with one layer, served on a
//! loopback port for a load generator in another process:
//! `lockguard-bench/http-wrk.sh` pins it to one core and `wrk` to another,
//! so that the server, not the load generator, is what limits throughput.
//!
//! ```sh
//! cargo run --release -p lockguard-bench --example http_server -- rate 127.0.0.1:3000
//! ```
//!
//! One runtime worker (`WORKERS` to change it), as a server given one core
//! would have. Prints `listening on ADDR` once it accepts connections.

#[path = "../src/apps.rs"]
mod apps;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(variant), Some(addr)) = (args.next(), args.next()) else {
        eprintln!("usage: http_server VARIANT ADDR ({})", apps::VARIANTS);
        std::process::exit(2);
    };
    let workers: usize = match std::env::var("WORKERS").map(|w| w.parse()) {
        Err(_) => 1,
        Ok(Ok(w)) if w > 0 => w,
        Ok(_) => {
            eprintln!("WORKERS: a number of runtime workers, at least 1");
            std::process::exit(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let app = match apps::app(&variant, lockguard_core::Client::memory()) {
            Ok(app) => app,
            Err(e) => {
                eprintln!("{e}");
                std::process::exit(2);
            }
        };
        let listener = match tokio::net::TcpListener::bind(&addr).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("cannot listen on {addr}: {e}");
                std::process::exit(1);
            }
        };
        println!("listening on {}", listener.local_addr().expect("address"));
        if apps::needs_peer_address(&variant) {
            let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
            axum::serve(listener, app).await.expect("serve");
        } else {
            axum::serve(listener, app).await.expect("serve");
        }
    });
}
