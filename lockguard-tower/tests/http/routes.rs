//! Per-route policies: `route_layer` per route, and one table for all.

use axum::Router;
use axum::routing::{get, post};
use http::{HeaderName, Method, StatusCode};
use lockguard_core::Quota;
use lockguard_tower::{MissingKey, RateLimitLayer, RateLimitTable, Rule, key};

use crate::support::{HttpClient, Server, Store};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_route_has_its_own_policy_through_route_layer() {
    let store = Store::start().await;
    let lg = &store.lg;
    let app = Router::new()
        .route(
            "/search",
            get(|| async { "results" }).route_layer(RateLimitLayer::new(
                lg.rate_limiter("search", Quota::per_minute(3)),
                key::PeerIp::new(),
            )),
        )
        .route(
            "/login",
            post(|| async { "welcome" }).route_layer(RateLimitLayer::new(
                lg.rate_limiter("login", Quota::per_minute(1)),
                key::PeerIp::new(),
            )),
        )
        .route("/health", get(|| async { "ok" }));
    let server = Server::start(app).await;
    let c = HttpClient::new(&server);

    assert_eq!(c.post("/login", &[]).await.status, 200);
    let refused = c.post("/login", &[]).await;
    assert_eq!(refused.status, 429);
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some("\"login\";q=1;w=60")
    );
    // The login budget is spent; search has its own.
    for _ in 0..3 {
        let r = c.get("/search", &[]).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("ratelimit-policy"), Some("\"search\";q=3;w=60"));
    }
    assert_eq!(c.get("/search", &[]).await.status, 429);
    // An unlimited route: no limit, no headers.
    for _ in 0..5 {
        let r = c.get("/health", &[]).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("ratelimit"), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_table_limits_by_method_and_route_pattern() {
    let store = Store::start().await;
    let lg = &store.lg;
    let api_key = key::Header::new(HeaderName::from_static("x-api-key"));
    let table = RateLimitTable::new()
        .route(
            Method::POST,
            "/login",
            Rule::new(
                lg.rate_limiter("login", Quota::per_minute(2)),
                key::PeerIp::new(),
            ),
        )
        .any(
            "/api/*",
            Rule::new(lg.rate_limiter("api", Quota::per_minute(3)), api_key)
                .on_missing_key(MissingKey::Reject(StatusCode::UNAUTHORIZED)),
        )
        .route(
            Method::GET,
            "/items/{id}",
            Rule::new(
                lg.rate_limiter("items", Quota::per_minute(2)),
                key::Route::new(),
            ),
        );
    let app = Router::new()
        .route(
            "/login",
            get(|| async { "form" }).post(|| async { "welcome" }),
        )
        .route("/api/{*rest}", get(|| async { "data" }))
        .route("/items/{id}", get(|| async { "item" }))
        .route("/health", get(|| async { "ok" }))
        .layer(RateLimitLayer::with_policy(table));
    let server = Server::start(app).await;
    let c = HttpClient::new(&server);

    // POST /login: 2 per minute per address.
    assert_eq!(c.post("/login", &[]).await.status, 200);
    assert_eq!(c.post("/login", &[]).await.status, 200);
    let refused = c.post("/login", &[]).await;
    assert_eq!(refused.status, 429);
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some("\"login\";q=2;w=60")
    );
    // GET /login matches no entry.
    let form = c.get("/login", &[]).await;
    assert_eq!(
        (form.status.as_u16(), form.header("ratelimit")),
        (200, None)
    );

    // /api/*: 3 per minute per API key, 401 without one.
    for _ in 0..3 {
        assert_eq!(
            c.get("/api/v1/users", &[("x-api-key", "alpha")])
                .await
                .status,
            200
        );
    }
    let refused = c.get("/api/v1/orders", &[("x-api-key", "alpha")]).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.header("ratelimit-policy"), Some("\"api\";q=3;w=60"));
    assert_eq!(
        c.get("/api/v1/users", &[("x-api-key", "beta")])
            .await
            .status,
        200
    );
    let anonymous = c.get("/api/v1/users", &[]).await;
    assert_eq!(anonymous.status, 401);
    assert_eq!(
        anonymous.header("content-type"),
        Some("application/problem+json")
    );

    // /items/{id} keyed by the matched route: every id shares one budget.
    assert_eq!(c.get("/items/1", &[]).await.status, 200);
    assert_eq!(c.get("/items/2", &[]).await.status, 200);
    assert_eq!(c.get("/items/3", &[]).await.status, 429);

    // Routes outside the table are not limited.
    for _ in 0..5 {
        assert_eq!(c.get("/health", &[]).await.status, 200);
    }
}
