//! Statuses, headers and bodies of the rate-limit layer.

use axum::Router;
use axum::routing::get;
use lockguard_core::Quota;
use lockguard_tower::{RateLimitLayer, key};

use crate::support::{HttpClient, Server, Store, parse_ratelimit};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admitted_and_refused_requests_carry_status_headers_and_problem_body() {
    let store = Store::start().await;
    let app = Router::new().route("/", get(|| async { "hello" })).layer(
        RateLimitLayer::new(
            store.lg.rate_limiter("http", Quota::per_minute(2)),
            key::PeerIp::new(),
        )
        .legacy_headers(true),
    );
    let server = Server::start(app).await;
    let client = HttpClient::new(&server);

    let first = client.get("/", &[]).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.body, "hello");
    assert_eq!(first.header("ratelimit-policy"), Some("\"http\";q=2;w=60"));
    let (name, r, t) = parse_ratelimit(first.header("ratelimit").unwrap());
    assert_eq!((name.as_str(), r), ("http", 1));
    assert!((29..=30).contains(&t), "t={t}");
    assert_eq!(first.header("x-ratelimit-limit"), Some("2"));
    assert_eq!(first.header("x-ratelimit-remaining"), Some("1"));
    assert_eq!(first.header("retry-after"), None);

    let second = client.get("/", &[]).await;
    assert_eq!(second.status, 200);
    assert_eq!(parse_ratelimit(second.header("ratelimit").unwrap()).1, 0);

    let refused = client.get("/", &[]).await;
    assert_eq!(refused.status, 429);
    assert_eq!(
        refused.header("content-type"),
        Some("application/problem+json")
    );
    let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=30).contains(&retry), "Retry-After {retry}");
    assert_eq!(
        refused.header("ratelimit-policy"),
        Some("\"http\";q=2;w=60")
    );
    let (_, r, t) = parse_ratelimit(refused.header("ratelimit").unwrap());
    assert_eq!(r, 0);
    // draft-11 §6: Retry-After SHOULD NOT be earlier than the end of `t`.
    assert!(t <= retry, "t={t} ends after Retry-After {retry}");
    assert_eq!(refused.header("x-ratelimit-remaining"), Some("0"));
    assert!(
        refused.body.starts_with(
            r#"{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Quota Exceeded","status":429,"detail":"rate limit \"http\" exceeded; retry in "#
        ),
        "{}",
        refused.body
    );
    assert!(
        refused.body.contains(r#""violated-policies":["http"]"#),
        "{}",
        refused.body
    );
    assert!(
        refused.body.contains(&format!(",\"retry_after\":{retry},")),
        "{}",
        refused.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_spends_the_same_budget() {
    let store = Store::start().await;
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(RateLimitLayer::new(
            store.lg.rate_limiter("conns", Quota::per_minute(3)),
            key::Global,
        ));
    let server = Server::start(app).await;
    // A client per request: a new connection, a new clone of the service.
    let mut statuses = Vec::new();
    for _ in 0..5 {
        statuses.push(HttpClient::new(&server).get("/", &[]).await.status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
}

/// Over HTTP/2 (h2c, every request a stream of one connection), the budget
/// is per key, not per stream or connection, and refusals carry the same
/// status and headers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_share_one_budget_and_get_the_same_headers() {
    let store = Store::start().await;
    let app = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(RateLimitLayer::new(
            store.lg.rate_limiter("h2", Quota::per_minute(3)),
            key::PeerIp::new(),
        ));
    let server = Server::start(app).await;
    let client = HttpClient::http2(&server);
    let answers = futures_join_all((0..5).map(|_| {
        let client = client.clone();
        async move { client.get("/", &[]).await }
    }))
    .await;
    let mut statuses: Vec<u16> = answers.iter().map(|a| a.status.as_u16()).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
    for a in &answers {
        assert_eq!(a.version, http::Version::HTTP_2);
        assert_eq!(a.header("ratelimit-policy"), Some("\"h2\";q=3;w=60"));
        let (_, r, t) = parse_ratelimit(a.header("ratelimit").unwrap());
        if a.status == 429 {
            let retry: u64 = a.header("retry-after").unwrap().parse().unwrap();
            assert_eq!((r, t), (0, retry));
        }
    }
}

/// Runs the futures at once and collects their outputs in order.
async fn futures_join_all<F: std::future::Future + Send + 'static>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}
