//! Client addresses behind trusted proxies.

use axum::Router;
use axum::routing::get;
use lockguard_core::Quota;
use lockguard_tower::RateLimitLayer;
use lockguard_tower::key::{ClientIp, TrustedProxies};

use crate::support::{HttpClient, Server, Store};

async fn app(store: &Store, name: &str, key: ClientIp) -> Server {
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(
            store.lg.rate_limiter(name, Quota::per_minute(2)),
            key,
        ));
    Server::start(app).await
}

/// The test client connects from 127.0.0.1, standing in for a load
/// balancer on loopback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoofed_leftmost_x_forwarded_for_does_not_change_the_key() {
    let store = Store::start().await;
    let server = app(
        &store,
        "xff",
        ClientIp::x_forwarded_for(TrustedProxies::loopback()),
    )
    .await;
    let c = HttpClient::new(&server);
    // The same client forges a different leftmost entry each time; the
    // proxy appended its real address on the right.
    let mut statuses = Vec::new();
    for forged in ["1.1.1.1", "2.2.2.2, 3.3.3.3", "not-an-ip", "198.51.100.99"] {
        let xff = format!("{forged}, 198.51.100.7");
        statuses.push(
            c.get("/", &[("x-forwarded-for", &xff)])
                .await
                .status
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 200, 429, 429]);
    // Another client behind the same proxy has its own budget.
    let other = c
        .get("/", &[("x-forwarded-for", "1.1.1.1, 198.51.100.8")])
        .await;
    assert_eq!(other.status, 200);
    // Several header fields are one list: the last field's entry is the
    // nearest hop.
    let split = c
        .get(
            "/",
            &[
                ("x-forwarded-for", "9.9.9.9"),
                ("x-forwarded-for", "198.51.100.8"),
            ],
        )
        .await;
    assert_eq!(split.status, 200);
    let third = c.get("/", &[("x-forwarded-for", "198.51.100.8")]).await;
    assert_eq!(third.status, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_from_an_untrusted_peer_are_ignored() {
    let store = Store::start().await;
    let trusted = TrustedProxies::parse(["10.0.0.0/8"]).unwrap();
    let server = app(&store, "untrusted", ClientIp::x_forwarded_for(trusted)).await;
    let c = HttpClient::new(&server);
    // Each request claims another client; all are 127.0.0.1's.
    let mut statuses = Vec::new();
    for claimed in ["198.51.100.1", "198.51.100.2", "198.51.100.3"] {
        statuses.push(
            c.get("/", &[("x-forwarded-for", claimed)])
                .await
                .status
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 200, 429]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_header_gives_the_rightmost_untrusted_for() {
    let store = Store::start().await;
    let server = app(
        &store,
        "fwd",
        ClientIp::forwarded(TrustedProxies::loopback()),
    )
    .await;
    let c = HttpClient::new(&server);
    let fwd = |forged: &str| format!("for={forged}, for=\"[2001:db8::1]:4711\";proto=https");
    assert_eq!(
        c.get("/", &[("forwarded", &fwd("1.2.3.4"))]).await.status,
        200
    );
    assert_eq!(
        c.get("/", &[("forwarded", &fwd("5.6.7.8"))]).await.status,
        200
    );
    // Same /64 as 2001:db8::1: same key.
    let same_net = "for=\"[2001:db8::ffff]\"";
    assert_eq!(c.get("/", &[("forwarded", same_net)]).await.status, 429);
    // A hop that cannot be read: no key, 400.
    let hidden = c.get("/", &[("forwarded", "for=_hidden")]).await;
    assert_eq!(hidden.status, 400);
}
