//! At most N requests at once.

use std::time::Duration;

use axum::Router;
use axum::routing::post;
use http::StatusCode;
use lockguard_tower::{ConcurrencyLimitLayer, key};

use crate::support::{HttpClient, Probe, Server, Store, eventually, wait_queue};

fn app(probe: &Probe, layer: ConcurrencyLimitLayer<lockguard_tower::key::Global>) -> Router {
    let probe = probe.clone();
    Router::new().route(
        "/slot",
        post(move || {
            let probe = probe.clone();
            async move {
                probe.visit("slot").await;
                "done"
            }
        })
        .route_layer(layer),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_is_never_exceeded_and_waiters_all_get_served() {
    let store = Store::start().await;
    let probe = Probe::new();
    let layer = ConcurrencyLimitLayer::new(store.lg.clone(), "slots", 3, key::Global)
        .wait(Duration::from_secs(60));
    let server = Server::start(app(&probe, layer)).await;
    let c = HttpClient::new(&server);

    let tasks: Vec<_> = (0..12)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.post("/slot", &[]).await.status.as_u16() })
        })
        .collect();
    // Three are inside; the others wait for a permit.
    probe.entered(3).await;
    let queue = wait_queue("sem", "slots:global");
    assert!(eventually(|| async { store.queued(&queue).await >= 1 }).await);
    assert_eq!(probe.inside("slot"), 3);
    // Let them all through; as each leaves, a waiter takes its permit.
    probe.open(12);
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    assert_eq!(probe.entered_so_far(), 12);
    assert_eq!(
        probe.max_inside("slot"),
        3,
        "more than 3 requests were inside at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_wait_the_request_over_the_limit_is_refused() {
    let store = Store::start().await;
    let probe = Probe::new();
    let layer = ConcurrencyLimitLayer::new(store.lg.clone(), "pair", 2, key::Global);
    let server = Server::start(app(&probe, layer)).await;
    let c = HttpClient::new(&server);
    let held: Vec<_> = (0..2)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.post("/slot", &[]).await.status.as_u16() })
        })
        .collect();
    probe.entered(2).await;
    let refused = c.post("/slot", &[]).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.body.contains("all 2 permits"), "{}", refused.body);
    probe.open(3);
    for t in held {
        assert_eq!(t.await.unwrap(), 200);
    }
    // Both permits came back with the responses.
    assert_eq!(c.post("/slot", &[]).await.status, 200);
    assert_eq!(probe.max_inside("slot"), 2);
}
