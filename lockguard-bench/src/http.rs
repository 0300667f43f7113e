//! Requests per second through an axum hello-world with each lockguard
//! layer (on the in-memory store or on Redis) and without, over loopback
//! HTTP/1.1 keep-alive.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client as HttpClient;
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
    /// [`Variant::RateLimit`] keyed by connection, as a limit per client is.
    RateLimitPerClient,
    /// [`Variant::Governor`] keyed by connection.
    GovernorPerClient,
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
            Self::RateLimitPerClient => "rate-per-client",
            Self::GovernorPerClient => "governor-per-client",
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
            Self::RateLimitPerClient => "RateLimitLayer (GCRA, a key per connection)",
            Self::GovernorPerClient => {
                "tower_governor GovernorLayer (GCRA, a key per connection, headers on)"
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
    let server = runtime.spawn(async move {
        let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
        axum::serve(listener, app).await.expect("serve");
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
                // One client per task: one keep-alive connection each.
                let client = HttpClient::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
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
