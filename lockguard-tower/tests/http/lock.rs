//! One request per key at a time, measured by what handlers saw inside.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::post;
use http::{Request, StatusCode, Uri};
use lockguard_tower::LockLayer;

use crate::support::{HttpClient, PATIENCE, Probe, Server, Store, eventually, wait_queue};

/// `POST /{route}/{key}` visits the probe (as its path) under the lock
/// `NAME:job:{key}`.
fn app(store: &Store, probe: &Probe) -> Router {
    let job = |req: &Request<Body>| {
        let key = req.uri().path().rsplit('/').next()?;
        Some(format!("job:{key}"))
    };
    let handler = {
        let probe = probe.clone();
        move |uri: Uri| {
            let probe = probe.clone();
            async move {
                probe.visit(uri.path()).await;
                "done"
            }
        }
    };
    Router::new()
        .route(
            "/work/{key}",
            post(handler.clone()).route_layer(LockLayer::new(store.lg.clone(), "work", job)),
        )
        .route(
            "/work423/{key}",
            post(handler.clone()).route_layer(
                LockLayer::new(store.lg.clone(), "work423", job).busy_status(StatusCode::LOCKED),
            ),
        )
        .route(
            "/queue/{key}",
            post(handler).route_layer(
                LockLayer::new(store.lg.clone(), "queue", job).wait(Duration::from_secs(30)),
            ),
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_request_on_a_held_key_is_refused_with_the_configured_status() {
    let store = Store::start().await;
    let probe = Probe::new();
    let server = Server::start(app(&store, &probe)).await;
    let c = HttpClient::new(&server);

    let first = tokio::spawn({
        let c = c.clone();
        async move { c.post("/work/a", &[]).await }
    });
    probe.entered(1).await;
    // The first request is inside its handler, holding `work:job:a`.
    let busy = c.post("/work/a", &[]).await;
    assert_eq!(busy.status, StatusCode::CONFLICT);
    assert_eq!(
        busy.header("content-type"),
        Some("application/problem+json")
    );
    assert!(busy.body.contains("\"status\":409"), "{}", busy.body);

    let second = tokio::spawn({
        let c = c.clone();
        async move { c.post("/work423/a", &[]).await }
    });
    probe.entered(2).await;
    assert_eq!(c.post("/work423/a", &[]).await.status, StatusCode::LOCKED);

    probe.open(2);
    assert_eq!(first.await.unwrap().status, 200);
    assert_eq!(second.await.unwrap().status, 200);
    assert_eq!(probe.max_inside("/work/a"), 1);
    assert_eq!(probe.max_inside("/work423/a"), 1);
    // Released with the response: the key is free again.
    probe.open(1);
    assert_eq!(c.post("/work/a", &[]).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_on_two_keys_run_at_the_same_time() {
    let store = Store::start().await;
    let probe = Probe::new();
    let server = Server::start(app(&store, &probe)).await;
    let c = HttpClient::new(&server);
    let a = tokio::spawn({
        let c = c.clone();
        async move { c.post("/work/x", &[]).await }
    });
    let b = tokio::spawn({
        let c = c.clone();
        async move { c.post("/work/y", &[]).await }
    });
    // Both are inside at once: neither waits for the other's lock.
    probe.entered(2).await;
    assert_eq!((probe.inside("/work/x"), probe.inside("/work/y")), (1, 1));
    assert_eq!(probe.max_total(), 2);
    probe.open(2);
    assert_eq!(a.await.unwrap().status, 200);
    assert_eq!(b.await.unwrap().status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_request_runs_after_the_holder_never_alongside() {
    let store = Store::start().await;
    let probe = Probe::new();
    let server = Server::start(app(&store, &probe)).await;
    let c = HttpClient::new(&server);

    let first = tokio::spawn({
        let c = c.clone();
        async move { c.post("/queue/q", &[]).await }
    });
    probe.entered(1).await;
    let second = tokio::spawn({
        let c = c.clone();
        async move { c.post("/queue/q", &[]).await }
    });
    // The second request waits for the lock: it is queued in the store, and
    // it has not entered the handler.
    let queue = wait_queue("lock", "queue:job:q");
    assert!(
        eventually(|| async { store.queued(&queue).await >= 1 }).await,
        "the second request never waited on the lock"
    );
    assert_eq!(probe.inside("/queue/q"), 1);
    assert_eq!(probe.entered_so_far(), 1);

    probe.open(1);
    assert_eq!(first.await.unwrap().status, 200);
    // Released at the end of the first response: the waiter gets it.
    probe.entered(2).await;
    probe.open(1);
    let second = tokio::time::timeout(PATIENCE, second)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.status, 200);
    assert_eq!(
        probe.max_inside("/queue/q"),
        1,
        "two requests held one key at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_concurrent_requests_on_one_key_never_overlap() {
    let store = Store::start().await;
    let probe = Probe::new();
    let server = Server::start(app(&store, &probe)).await;
    let c = HttpClient::new(&server);
    // Handlers leave as soon as they enter.
    probe.open(1000);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.post("/queue/hot", &[]).await.status.as_u16() })
        })
        .collect();
    for t in tasks {
        assert_eq!(t.await.unwrap(), 200);
    }
    assert_eq!(probe.entered_so_far(), 16);
    assert_eq!(probe.max_inside("/queue/hot"), 1);
}

/// A lock layer on Redis answers a small response in one write: the lock
/// is released before the head goes out, so the body does not wait behind
/// Nagle's algorithm for the client's delayed acknowledgement (about 40 ms
/// a request on a server socket without `TCP_NODELAY`, which axum's
/// default is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_responses_under_a_redis_lock_leave_in_one_write() {
    let store = Store::start().await;
    let app = Router::new().route(
        "/",
        axum::routing::get(|| async { "hello" }).route_layer(LockLayer::new(
            store.lg.clone(),
            "quick",
            lockguard_tower::key::Global,
        )),
    );
    let server = Server::start(app).await;
    let c = HttpClient::new(&server);
    let mut took = Vec::new();
    for _ in 0..21 {
        let started = std::time::Instant::now();
        let res = c.get("/", &[]).await;
        assert_eq!(res.status, StatusCode::OK);
        took.push(started.elapsed());
    }
    took.sort();
    // Over loopback a request is well under a millisecond; the stall it
    // must not have is 40 ms each.
    let median = took[took.len() / 2];
    assert!(
        median < Duration::from_millis(20),
        "median {median:?} of {took:?}"
    );
}
