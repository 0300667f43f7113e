//! Requests per second through an axum hello-world with each lockguard
//! layer (on the in-memory store or on Redis) and without, over loopback
//! HTTP/1.1 keep-alive.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use lockguard_core::Client;

/// The layer under test.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Variant {
    None,
    RateLimit,
    Lock,
    ConcurrencyLimit,
    /// tower_governor's in-memory GCRA, the crate axum users pick today.
    Governor,
    /// [`Variant::RateLimit`] keyed by the peer's IP address
    /// (`key::PeerIp`), each connection from an address of its own.
    RateLimitPerIp,
    /// [`Variant::Governor`] keyed by the peer's IP address (its
    /// `PeerIpKeyExtractor`).
    GovernorPerIp,
    /// [`Variant::RateLimit`] passing its `Decision` on to the handler.
    RateLimitDecision,
}

impl Variant {
    /// Its name in [`crate::apps::app`].
    fn slug(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::RateLimit => "rate",
            Self::Lock => "lock",
            Self::ConcurrencyLimit => "concurrency",
            Self::Governor => "governor",
            Self::RateLimitPerIp => "rate-per-ip",
            Self::GovernorPerIp => "governor-per-ip",
            Self::RateLimitDecision => "rate-decision",
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::None => "no layer",
            Self::RateLimit => "RateLimitLayer (GCRA, global key)",
            Self::Lock => "LockLayer (a key per connection)",
            Self::ConcurrencyLimit => "ConcurrencyLimitLayer (1000 permits)",
            Self::Governor => "tower_governor GovernorLayer (GCRA, global key, headers on)",
            Self::RateLimitPerIp => "RateLimitLayer (GCRA, a key per client IP: `key::PeerIp`)",
            Self::GovernorPerIp => {
                "tower_governor GovernorLayer (GCRA, a key per client IP: `PeerIpKeyExtractor`, headers on)"
            }
            Self::RateLimitDecision => {
                "RateLimitLayer (GCRA, global key, `decision_extension(true)`)"
            }
        }
    }
}

/// Serves the variant, its layer on `lg`'s store, on a loopback port and
/// drives it with `conns` keep-alive connections for `run_for`; returns
/// requests per second and CPU time per request (the whole process's, and
/// the server's runtime's alone), and every request served (the warm-up's
/// too).
pub(crate) async fn requests_per_second(
    variant: Variant,
    lg: Client,
    conns: usize,
    run_for: Duration,
) -> (crate::Measured, u64) {
    // The server on a runtime of its own, two workers as a server on this
    // machine would have, its threads named so that their CPU time is
    // counted apart from the load generator's.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(crate::SERVER_THREADS)
        .enable_all()
        .build()
        .expect("server runtime");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let addr = listener.local_addr().expect("addr");
    let app = crate::apps::app(variant.slug(), lg).expect("a benchmark variant");
    let peer_address = crate::apps::needs_peer_address(variant.slug());
    let server = runtime.spawn(async move {
        let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
        if peer_address {
            let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
            axum::serve(listener, app).await.expect("serve");
        } else {
            axum::serve(listener, app).await.expect("serve");
        }
    });
    let uri: http::Uri = format!("http://{addr}/").parse().expect("uri");
    let served = Arc::new(AtomicU64::new(0));
    let measured = crate::measure(
        conns,
        run_for,
        |c, stop: Arc<AtomicBool>, done: Arc<AtomicU64>| {
            let uri = uri.clone();
            let served = served.clone();
            async move {
                // One client per task: one keep-alive connection each, from
                // a loopback address of its own (127.0.0.2, .3, ...), so
                // that a key per client IP is a key per connection.
                let mut connector = HttpConnector::new();
                connector.set_local_address(Some(client_address(c)));
                let client =
                    HttpClient::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(connector);
                while !stop.load(Ordering::Relaxed) {
                    let req = http::Request::get(uri.clone())
                        .header("x-conn", c.to_string())
                        .body(Empty::new())
                        .expect("request");
                    let res = client.request(req).await.expect("response");
                    assert!(res.status().is_success(), "{}", res.status());
                    res.into_body().collect().await.expect("body");
                    done.fetch_add(1, Ordering::Relaxed);
                    served.fetch_add(1, Ordering::Relaxed);
                }
            }
        },
    )
    .await;
    server.abort();
    // Waited for, so that no thread of this server outlives the
    // measurement of the next one (the CPU time of threads that end
    // between two readings would be lost from the second).
    tokio::task::spawn_blocking(move || runtime.shutdown_timeout(Duration::from_secs(5)))
        .await
        .expect("server runtime shut down");
    (measured, served.load(Ordering::Relaxed))
}

/// The loopback address connection `c` comes from: 127.0.0.2 onwards.
fn client_address(c: usize) -> std::net::IpAddr {
    let c = u32::try_from(c).expect("fewer connections than addresses");
    std::net::Ipv4Addr::from(u32::from(std::net::Ipv4Addr::new(127, 0, 0, 2)) + c).into()
}
