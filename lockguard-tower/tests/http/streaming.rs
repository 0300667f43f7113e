//! A streaming response keeps its lock or permit until its body ends.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use bytes::Bytes;
use http::{Method, Response};
use http_body_util::BodyExt;
use lockguard_tower::{ConcurrencyLimitLayer, LockLayer, key};
use tokio::sync::mpsc;

use crate::support::{ChannelBody, HttpClient, Server, Store};

type Feeds = Arc<Mutex<Vec<mpsc::Receiver<Bytes>>>>;

/// `GET /stream` answers at once with a body the test feeds.
fn streaming_handler(feeds: Feeds) -> axum::routing::MethodRouter {
    get(move || {
        let rx = feeds.lock().unwrap().pop().expect("a feed per request");
        async move { Response::new(Body::new(ChannelBody(rx))) }
    })
}

async fn streaming_case(app: impl FnOnce(Feeds) -> Router, refused: u16, http2: bool) {
    let feeds: Feeds = Arc::default();
    let (tx, rx) = mpsc::channel(4);
    feeds.lock().unwrap().push(rx);
    let server = Server::start(app(feeds.clone())).await;
    // Over HTTP/2, one client's requests are streams of one connection.
    let client = |server: &Server| {
        if http2 {
            HttpClient::http2(server)
        } else {
            HttpClient::new(server)
        }
    };
    let c = client(&server);

    // The headers are out and the body is open.
    let res = c.open(Method::GET, "/stream", &[]).await;
    assert_eq!(res.status(), 200);
    let expected = if http2 {
        http::Version::HTTP_2
    } else {
        http::Version::HTTP_11
    };
    assert_eq!(res.version(), expected);
    let mut body = res.into_body();
    tx.send(Bytes::from_static(b"first ")).await.unwrap();
    let frame = body.frame().await.unwrap().unwrap();
    assert_eq!(frame.into_data().unwrap(), "first ");

    // While the body streams, the key is still held.
    let during = c.get("/stream", &[]).await;
    assert_eq!(during.status.as_u16(), refused, "{}", during.body);
    assert_eq!(during.version, expected);

    // The body ends; the client reads it to its end.
    tx.send(Bytes::from_static(b"last")).await.unwrap();
    drop(tx);
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(rest, "last");

    // Released before the end was sent: the next request gets in at once.
    let (tx, rx) = mpsc::channel(1);
    feeds.lock().unwrap().push(rx);
    drop(tx);
    let after = c.get("/stream", &[]).await;
    assert_eq!(after.status, 200, "{}", after.body);
}

/// Over HTTP/1.1 and over HTTP/2 (h2c), where the requests are streams
/// of one connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_response_keeps_the_lock_until_its_body_ends() {
    let store = Store::start().await;
    for http2 in [false, true] {
        let lg = store.lg.clone();
        streaming_case(
            |feeds| {
                Router::new().route(
                    "/stream",
                    streaming_handler(feeds).route_layer(LockLayer::new(lg, "stream", key::Global)),
                )
            },
            409,
            http2,
        )
        .await;
    }
}

/// Over HTTP/1.1 and over HTTP/2 (h2c).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_response_keeps_the_permit_until_its_body_ends() {
    let store = Store::start().await;
    for http2 in [false, true] {
        let lg = store.lg.clone();
        streaming_case(
            |feeds| {
                Router::new().route(
                    "/stream",
                    streaming_handler(feeds).route_layer(ConcurrencyLimitLayer::new(
                        lg,
                        "stream",
                        1,
                        key::Global,
                    )),
                )
            },
            503,
            http2,
        )
        .await;
    }
}

/// Whatever the shape of the response (a body of known length, no body,
/// a `HEAD`, a body of unknown length), the lock is free by the time the
/// client has the whole response: back-to-back requests on one key, each
/// on a new connection and with no wait, all get in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_to_back_requests_find_the_lock_free_whatever_the_response() {
    let store = Store::start().await;
    let lock = |name: &str| LockLayer::new(store.lg.clone(), name, key::Global);
    let app = Router::new()
        .route(
            "/sized",
            get(|| async { "x".repeat(10_000) }).route_layer(lock("sized")),
        )
        .route(
            "/empty",
            get(|| async { http::StatusCode::NO_CONTENT }).route_layer(lock("empty")),
        )
        .route(
            "/unsized",
            get(|| async {
                let (tx, rx) = mpsc::channel(2);
                tx.send(Bytes::from_static(b"chunk")).await.unwrap();
                Response::new(Body::new(ChannelBody(rx)))
            })
            .route_layer(lock("unsized")),
        );
    let server = Server::start(app).await;
    // A new connection per request: the next request does not wait for the
    // previous connection's task to finish its response.
    let c = || HttpClient::new(&server);
    for _ in 0..20 {
        let sized = c().get("/sized", &[]).await;
        assert_eq!((sized.status.as_u16(), sized.body.len()), (200, 10_000));
        assert_eq!(c().get("/empty", &[]).await.status, 204);
        assert_eq!(c().send(Method::HEAD, "/sized", &[]).await.status, 200);
        assert_eq!(c().get("/unsized", &[]).await.body, "chunk");
    }
}
