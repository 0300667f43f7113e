//! Redis killed: fail-closed answers 503 with `Retry-After`, fail-open lets
//! requests through.

use axum::Router;
use axum::routing::get;
use lockguard_core::Quota;
use lockguard_tower::{ConcurrencyLimitLayer, LockLayer, RateLimitLayer, key};

use crate::support::{HttpClient, Server, Store, eventually};

fn app(store: &Store) -> Router {
    let lg = &store.lg;
    let limiter = lg.rate_limiter("down", Quota::per_minute(100));
    Router::new()
        .route(
            "/limit/closed",
            get(|| async { "ok" })
                .route_layer(RateLimitLayer::new(limiter.clone(), key::Global).fail_closed()),
        )
        .route(
            "/limit/open",
            get(|| async { "ok" })
                .route_layer(RateLimitLayer::new(limiter, key::Global).fail_open()),
        )
        .route(
            "/lock/closed",
            get(|| async { "ok" }).route_layer(LockLayer::new(lg.clone(), "l1", key::Global)),
        )
        .route(
            "/lock/open",
            get(|| async { "ok" })
                .route_layer(LockLayer::new(lg.clone(), "l2", key::Global).fail_open()),
        )
        .route(
            "/rwlock/closed",
            get(|| async { "ok" })
                .post(|| async { "ok" })
                .route_layer(LockLayer::new(lg.clone(), "rw1", key::Global).read_write()),
        )
        .route(
            "/rwlock/open",
            get(|| async { "ok" }).post(|| async { "ok" }).route_layer(
                LockLayer::new(lg.clone(), "rw2", key::Global)
                    .read_write()
                    .fail_open(),
            ),
        )
        .route(
            "/slots/closed",
            get(|| async { "ok" }).route_layer(ConcurrencyLimitLayer::new(
                lg.clone(),
                "s1",
                5,
                key::Global,
            )),
        )
        .route(
            "/slots/open",
            get(|| async { "ok" }).route_layer(
                ConcurrencyLimitLayer::new(lg.clone(), "s2", 5, key::Global).fail_open(),
            ),
        )
}

const PATHS: [&str; 8] = [
    "/limit/closed",
    "/limit/open",
    "/lock/closed",
    "/lock/open",
    "/rwlock/closed",
    "/rwlock/open",
    "/slots/closed",
    "/slots/open",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_killed_fail_closed_is_503_and_fail_open_passes() {
    let mut store = Store::start().await;
    let server = Server::start(app(&store)).await;
    let c = HttpClient::new(&server);
    for path in PATHS {
        assert_eq!(c.get(path, &[]).await.status, 200, "{path} with redis up");
    }
    for path in ["/rwlock/closed", "/rwlock/open"] {
        assert_eq!(
            c.post(path, &[]).await.status,
            200,
            "POST {path} with redis up"
        );
    }

    store.server.kill();
    for path in PATHS {
        let res = c.get(path, &[]).await;
        if path.ends_with("/closed") {
            assert_eq!(res.status, 503, "{path}");
            assert_eq!(res.header("retry-after"), Some("1"), "{path}");
            assert_eq!(res.header("content-type"), Some("application/problem+json"));
            assert!(res.body.contains("\"status\":503"), "{}", res.body);
        } else {
            assert_eq!(res.status, 200, "{path}");
            assert_eq!(res.body, "ok");
            assert_eq!(res.header("ratelimit"), None, "no decision, no headers");
        }
    }
    // Writes of the read-write mode follow the same policy as its reads.
    assert_eq!(c.post("/rwlock/closed", &[]).await.status, 503);
    assert_eq!(c.post("/rwlock/open", &[]).await.status, 200);

    // Back up (empty): the layers enforce again once the client reconnects.
    store.server.restart();
    let c2 = c.clone();
    assert!(
        eventually(|| {
            let c = c2.clone();
            async move { c.get("/limit/closed", &[]).await.status == 200 }
        })
        .await,
        "never recovered after the restart"
    );
    let res = c.get("/limit/closed", &[]).await;
    assert!(res.header("ratelimit").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_redis_is_bounded_by_the_response_timeout() {
    let mut store = Store::start().await;
    let server = Server::start(app(&store)).await;
    let c = HttpClient::new(&server);
    assert_eq!(c.get("/limit/closed", &[]).await.status, 200);
    store.server.pause();
    // The client's response timeout (500 ms) bounds the wait; then the
    // failure mode decides.
    let closed = tokio::time::timeout(crate::support::PATIENCE, c.get("/limit/closed", &[]))
        .await
        .expect("a paused store hung the request");
    assert_eq!(closed.status, 503);
    let open = tokio::time::timeout(crate::support::PATIENCE, c.get("/limit/open", &[]))
        .await
        .expect("a paused store hung the request");
    assert_eq!(open.status, 200);
    store.server.resume();
}

/// A store outage is told once per policy, as a warning with its cause,
/// however many requests it refuses or lets through.
#[tokio::test(flavor = "current_thread")]
async fn an_outage_is_told_once() {
    let captured = lockguard_testing::CapturedLog::default();
    let _log = captured.install();
    let mut store = Store::start().await;
    let limiter = store
        .lg
        .rate_limiter("outage-told-once", Quota::per_minute(100));
    let app = Router::new()
        .route(
            "/closed",
            get(|| async { "ok" })
                .route_layer(RateLimitLayer::new(limiter.clone(), key::Global).fail_closed()),
        )
        .route(
            "/open",
            get(|| async { "ok" })
                .route_layer(RateLimitLayer::new(limiter, key::Global).fail_open()),
        );
    let server = Server::start(app).await;
    let c = HttpClient::new(&server);
    assert_eq!(c.get("/closed", &[]).await.status, 200);

    store.server.kill();
    for _ in 0..5 {
        assert_eq!(c.get("/closed", &[]).await.status, 503);
        assert_eq!(c.get("/open", &[]).await.status, 200);
    }
    let name = "name=\"outage-told-once\"";
    assert_eq!(
        captured.lines_with("WARN", name),
        1,
        "one warning for the outage:\n{}",
        captured.text()
    );
    assert_eq!(captured.lines_with("WARN", "cannot be reached"), 1);
    // The warning says which store: its address.
    let address = format!("127.0.0.1:{}", store.server.port());
    assert_eq!(
        captured.lines_with("WARN", &address),
        1,
        "the warning names the store at {address}:\n{}",
        captured.text()
    );

    // (Its end, told once with the counts, is the unit test's in
    // `outage.rs`: a line logged where other tests' threads log too.)
}
