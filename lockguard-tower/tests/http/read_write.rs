//! `LockLayer::read_write`: reads of a resource together, a write alone,
//! on the in-memory store and on Redis.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use http::{Method, StatusCode, Uri};
use lockguard_core::Client;
use lockguard_tower::{LockLayer, key::PathParam};

use crate::support::{HttpClient, Probe, Server, eventually};

/// `GET` and `POST` on `/docs/{id}` (refused at once when busy) and on
/// `/queued/{id}` (waiting up to 30 s) visit the probe as their path.
fn app(lg: &Client, probe: &Probe) -> Router {
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
            "/docs/{id}",
            get(handler.clone())
                .post(handler.clone())
                .route_layer(LockLayer::new(lg.clone(), "docs", PathParam::new("id")).read_write()),
        )
        .route(
            "/queued/{id}",
            get(handler.clone()).post(handler).route_layer(
                LockLayer::new(lg.clone(), "queued", PathParam::new("id"))
                    .read_write()
                    .wait(Duration::from_secs(30)),
            ),
        )
}

/// Waiters in the queue of the read-write lock `name`.
async fn waiters(lg: &Client, name: &str) -> u64 {
    lg.rw_lock(name).inspect().await.unwrap().waiters
}

/// Two `GET`s of one document run at once; a `POST` to it meanwhile is
/// refused with `409`, and another document is not affected.
async fn concurrent_reads_proceed_and_a_write_is_refused(lg: Client) {
    let probe = Probe::new();
    let server = Server::start(app(&lg, &probe)).await;
    let c = HttpClient::new(&server);

    let reads: Vec<_> = (0..2)
        .map(|_| {
            let c = c.clone();
            tokio::spawn(async move { c.get("/docs/1", &[]).await })
        })
        .collect();
    probe.entered(2).await;
    assert_eq!(probe.inside("/docs/1"), 2, "the reads did not run together");

    let refused = c.post("/docs/1", &[]).await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert_eq!(
        refused.header("content-type"),
        Some("application/problem+json")
    );
    assert!(refused.body.contains("\"status\":409"), "{}", refused.body);
    assert_eq!(probe.entered_so_far(), 2, "the refused write ran");

    probe.open(2);
    for read in reads {
        assert_eq!(read.await.unwrap().status, 200);
    }
    // Released with the responses: the write goes through.
    let write = tokio::spawn({
        let c = c.clone();
        async move { c.send(Method::POST, "/docs/1", &[]).await }
    });
    probe.entered(3).await;
    probe.open(1);
    assert_eq!(write.await.unwrap().status, 200);
    assert_eq!(probe.max_inside("/docs/1"), 2);
}

/// With `wait`, a `POST` waits for the reads in progress, a `GET` that
/// comes after it waits for the write, and the write runs alone.
async fn a_waiting_write_runs_alone_between_reads(lg: Client) {
    let probe = Probe::new();
    let server = Server::start(app(&lg, &probe)).await;
    let c = HttpClient::new(&server);
    let send = |method: Method| {
        let c = c.clone();
        tokio::spawn(async move { c.send(method, "/queued/7", &[]).await })
    };

    let reads = [send(Method::GET), send(Method::HEAD)];
    probe.entered(2).await;
    let write = send(Method::POST);
    assert!(
        eventually(|| async { waiters(&lg, "queued:id:7").await == 1 }).await,
        "the write never queued"
    );
    let late_read = send(Method::GET);
    assert!(
        eventually(|| async { waiters(&lg, "queued:id:7").await == 2 }).await,
        "the read after the write never queued"
    );
    assert_eq!(probe.entered_so_far(), 2, "a queued request ran");

    probe.open(2);
    for read in reads {
        assert_eq!(read.await.unwrap().status, 200);
    }
    probe.entered(3).await;
    assert_eq!(probe.inside("/queued/7"), 1, "the write ran beside a read");
    assert_eq!(
        probe.entered_so_far(),
        3,
        "the late read ran beside the write"
    );
    probe.open(1);
    assert_eq!(write.await.unwrap().status, 200);
    probe.entered(4).await;
    probe.open(1);
    assert_eq!(late_read.await.unwrap().status, 200);
    assert_eq!(probe.max_inside("/queued/7"), 2);
}

/// While a `POST` runs, `GET`s, `HEAD`s and other `POST`s of the same
/// document are refused.
async fn a_write_excludes_reads(lg: Client) {
    let probe = Probe::new();
    let server = Server::start(app(&lg, &probe)).await;
    let c = HttpClient::new(&server);

    let write = tokio::spawn({
        let c = c.clone();
        async move { c.post("/docs/3", &[]).await }
    });
    probe.entered(1).await;
    for method in [Method::GET, Method::HEAD, Method::POST] {
        let res = c.send(method.clone(), "/docs/3", &[]).await;
        assert_eq!(res.status, StatusCode::CONFLICT, "{method}");
    }
    assert_eq!(probe.entered_so_far(), 1, "a refused request ran");
    probe.open(1);
    assert_eq!(write.await.unwrap().status, 200);

    let read = tokio::spawn({
        let c = c.clone();
        async move { c.get("/docs/3", &[]).await }
    });
    probe.entered(2).await;
    probe.open(1);
    assert_eq!(read.await.unwrap().status, 200);
    assert_eq!(probe.max_inside("/docs/3"), 1);
}

macro_rules! on_both_stores {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn memory() {
                    super::$name(lockguard_core::Client::memory()).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn redis() {
                    let store = crate::support::Store::start().await;
                    super::$name(store.lg.clone()).await;
                }
            }
        )*
    };
}

on_both_stores!(
    concurrent_reads_proceed_and_a_write_is_refused,
    a_waiting_write_runs_alone_between_reads,
    a_write_excludes_reads,
);
