//! A service set up in a way that cannot work: the layers answer `500`
//! (not `400`, which blames the client, and not a pass-through, whatever
//! the failure mode) and log the fix at `error` level once, not once per
//! request.

use axum::Router;
use axum::routing::get;
use http::StatusCode;
use lockguard_core::{Client, Quota};
use lockguard_redis::BuilderExt as _;
use lockguard_testing::{CapturedLog, RedisServer};
use lockguard_tower::{ConcurrencyLimitLayer, LockLayer, MissingKey, RateLimitLayer, key};

use crate::support::{HttpClient, Server};

/// `key::PeerIp` (and `key::ClientIp`) on a server served without
/// `into_make_service_with_connect_info`: every request is a `500`, also
/// on a layer that lets requests without a key through
/// (`MissingKey::Pass`), since the key is missing for every request; the
/// fix is logged once per layer, not per request.
#[tokio::test(flavor = "current_thread")]
async fn a_peer_address_key_without_connect_info_is_a_server_error_logged_once() {
    let captured = CapturedLog::default();
    let _log = captured.install();
    let lg = Client::memory();
    let limiter = lg.rate_limiter("no-peer-limit", Quota::per_minute(100));
    let proxies = key::TrustedProxies::parse(["10.0.0.0/8"]).unwrap();
    let app = Router::new()
        .route(
            "/limit",
            get(|| async { "ok" }).route_layer(RateLimitLayer::new(limiter, key::PeerIp::new())),
        )
        .route(
            "/lock",
            get(|| async { "ok" }).route_layer(
                LockLayer::new(
                    lg.clone(),
                    "no-peer-lock",
                    (key::Global, key::PeerIp::new()),
                )
                .on_missing_key(MissingKey::Pass),
            ),
        )
        .route(
            "/slots",
            get(|| async { "ok" }).route_layer(ConcurrencyLimitLayer::new(
                lg.clone(),
                "no-peer-slots",
                3,
                key::ClientIp::x_forwarded_for(proxies),
            )),
        );
    let server = Server::start_without_connect_info(app).await;
    let http = HttpClient::new(&server);
    for _ in 0..3 {
        for path in ["/limit", "/lock", "/slots"] {
            let resp = http.get(path, &[]).await;
            assert_eq!(
                resp.status,
                StatusCode::INTERNAL_SERVER_ERROR,
                "{path}: {resp:?}"
            );
            assert!(resp.body.contains("misconfigured"), "{path}: {resp:?}");
        }
    }
    for name in ["no-peer-limit", "no-peer-lock", "no-peer-slots"] {
        assert_eq!(
            captured.lines_with("ERROR", name),
            1,
            "{name}: the fix must be logged once, at error level"
        );
    }
    assert_eq!(
        captured.lines_with("ERROR", "into_make_service_with_connect_info"),
        3,
        "the log says how to serve the router"
    );

    // Served with connect info, the same layers key by the peer.
    let lg = Client::memory();
    let limiter = lg.rate_limiter("peer-limit", Quota::per_minute(100));
    let app = Router::new().route(
        "/limit",
        get(|| async { "ok" }).route_layer(RateLimitLayer::new(limiter, key::PeerIp::new())),
    );
    let server = Server::start(app).await;
    let resp = HttpClient::new(&server).get("/limit", &[]).await;
    assert_eq!(resp.status, StatusCode::OK, "{resp:?}");
}

/// A store that refuses the service's credentials (a Redis user without
/// the rights lockguard's commands need) is a set-up mistake: `500` even
/// on a fail-open layer, which lets requests through only while the store
/// is unreachable, and the fix logged once per layer.
#[tokio::test(flavor = "current_thread")]
async fn credentials_the_store_refuses_are_a_server_error_even_fail_open() {
    let captured = CapturedLog::default();
    let _log = captured.install();
    let server = RedisServer::start();
    let mut admin = server.connection().await;
    let reader = server.add_read_only_user(&mut admin, "reader", "pw").await;
    let lg = Client::builder()
        .connect_redis(&reader)
        .await
        .expect("the user may connect");
    let limiter = lg.rate_limiter("refused-limit", Quota::per_minute(100));
    let app = Router::new()
        .route(
            "/limit",
            get(|| async { "ok" })
                .route_layer(RateLimitLayer::new(limiter, key::Global).fail_open()),
        )
        .route(
            "/lock",
            get(|| async { "ok" })
                .route_layer(LockLayer::new(lg.clone(), "refused-lock", key::Global).fail_open()),
        );
    let server = Server::start(app).await;
    let http = HttpClient::new(&server);
    for _ in 0..3 {
        for path in ["/limit", "/lock"] {
            let resp = http.get(path, &[]).await;
            assert_eq!(
                resp.status,
                StatusCode::INTERNAL_SERVER_ERROR,
                "{path}: {resp:?}"
            );
        }
    }
    for name in ["refused-limit", "refused-lock"] {
        assert_eq!(captured.lines_with("ERROR", name), 1, "{name}: logged once");
    }
    assert_eq!(
        captured.lines_with("ERROR", "NOPERM"),
        2,
        "the log names the refusal"
    );
}

/// A store with plain locks and no read-write locks: the in-memory store
/// behind a wrapper that forwards only the lock operations.
#[derive(Debug)]
struct LocksOnly(lockguard_core::store::Store);

impl lockguard_core::store::LockStore for LocksOnly {
    fn name(&self) -> &'static str {
        "locks-only"
    }
    fn waiting(&self) -> lockguard_core::store::Waiting {
        self.0.waiting()
    }
    fn confirms_handoffs(&self) -> bool {
        self.0.confirms_handoffs()
    }
    async fn acquire(
        &self,
        keys: &std::sync::Arc<lockguard_core::store::LockKeys>,
        token: &lockguard_core::store::Token,
        lease: std::time::Duration,
        place: Option<lockguard_core::store::Place<'_>>,
    ) -> lockguard_core::Result<lockguard_core::store::Outcome> {
        self.0.acquire(keys, token, lease, place).await
    }
    async fn release(
        &self,
        keys: &std::sync::Arc<lockguard_core::store::LockKeys>,
        token: &lockguard_core::store::Token,
    ) -> lockguard_core::Result<bool> {
        self.0.release(keys, token).await
    }
    async fn extend(
        &self,
        keys: &std::sync::Arc<lockguard_core::store::LockKeys>,
        token: &lockguard_core::store::Token,
        lease: std::time::Duration,
    ) -> lockguard_core::Result<bool> {
        self.0.extend(keys, token, lease).await
    }
    fn attach(&self, inbox: std::sync::Weak<dyn lockguard_core::store::Inbox>) {
        self.0.attach(inbox)
    }
}

impl lockguard_core::store::DataStore for LocksOnly {}

/// `LockLayer::read_write` on a store without read-write locks: every
/// request, read or write, is a `500` even fail-open, logged once; the
/// plain lock on the same store works.
#[tokio::test(flavor = "current_thread")]
async fn read_write_mode_on_a_store_without_it_is_a_server_error_even_fail_open() {
    use lockguard_core::store::Store;
    let captured = CapturedLog::default();
    let _log = captured.install();
    let store = Store::new(std::sync::Arc::new(LocksOnly(Store::memory())), Vec::new());
    let lg = Client::builder().build(store).unwrap();
    let app = Router::new()
        .route(
            "/rw",
            get(|| async { "ok" }).post(|| async { "ok" }).route_layer(
                LockLayer::new(lg.clone(), "rw-unsupported", key::Global)
                    .read_write()
                    .fail_open(),
            ),
        )
        .route(
            "/plain",
            get(|| async { "ok" }).route_layer(LockLayer::new(lg, "plain", key::Global)),
        );
    let server = Server::start(app).await;
    let http = HttpClient::new(&server);
    for _ in 0..2 {
        for method in [http::Method::GET, http::Method::POST] {
            let resp = http.send(method.clone(), "/rw", &[]).await;
            assert_eq!(
                resp.status,
                StatusCode::INTERNAL_SERVER_ERROR,
                "{method}: {resp:?}"
            );
        }
    }
    assert_eq!(http.get("/plain", &[]).await.status, StatusCode::OK);
    assert_eq!(
        captured.lines_with("ERROR", "rw-unsupported"),
        1,
        "logged once"
    );
}
