//! A real HTTP server on a loopback port, a hyper client, a real Redis, and
//! probes that record what handlers saw.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use lockguard_core::Client;
use lockguard_redis::BuilderExt as _;
use lockguard_testing::RedisServer;
use tokio::sync::{Semaphore, mpsc, watch};

/// How long a test waits for something that must happen before failing.
/// A bound on a hang, never a sleep an assertion depends on.
pub(crate) const PATIENCE: Duration = Duration::from_secs(15);

/// A real Redis for this test, and a client on it.
pub(crate) struct Store {
    pub(crate) server: RedisServer,
    pub(crate) lg: Client,
}

impl Store {
    pub(crate) async fn start() -> Self {
        let server = RedisServer::start();
        let lg = Client::builder()
            .connect_timeout(Duration::from_millis(500))
            .response_timeout(Duration::from_millis(500))
            .connect_redis(&server.url())
            .await
            .expect("connect to the test redis-server");
        Self { server, lg }
    }

    /// Waiters in a lock's or semaphore's queue in the store.
    pub(crate) async fn queued(&self, queue: &str) -> u64 {
        let mut conn = self.server.connection().await;
        redis::cmd("ZCARD")
            .arg(queue)
            .query_async(&mut conn)
            .await
            .unwrap()
    }
}

/// An axum app served on 127.0.0.1, with `ConnectInfo<SocketAddr>`.
pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    pub(crate) async fn start(app: Router) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(
                listener,
                app.into_make_service_with_connect_info::<SocketAddr>(),
            )
            .await
            .unwrap();
        });
        Self { addr, task }
    }

    /// Served with `into_make_service()`: no `ConnectInfo`, the set-up
    /// mistake key::PeerIp cannot work with.
    pub(crate) async fn start_without_connect_info(app: Router) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app.into_make_service())
                .await
                .unwrap();
        });
        Self { addr, task }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A response read to its end.
#[derive(Debug)]
pub(crate) struct Resp {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) version: http::Version,
    pub(crate) body: String,
}

impl Resp {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

/// A hyper client for one server.
#[derive(Clone)]
pub(crate) struct HttpClient {
    inner: HyperClient<HttpConnector, Full<Bytes>>,
    base: String,
}

impl HttpClient {
    pub(crate) fn new(server: &Server) -> Self {
        Self::with_protocol(server, false)
    }

    /// A client speaking HTTP/2 without TLS (h2c, prior knowledge): every
    /// request of the client is a stream on one connection.
    pub(crate) fn http2(server: &Server) -> Self {
        Self::with_protocol(server, true)
    }

    fn with_protocol(server: &Server, http2: bool) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Self {
            inner: HyperClient::builder(TokioExecutor::new())
                .http2_only(http2)
                .build(connector),
            base: format!("http://{}", server.addr),
        }
    }

    /// Sends a request and returns the response with its body still open.
    pub(crate) async fn open(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
    ) -> Response<Incoming> {
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.inner
            .request(req.body(Full::new(Bytes::new())).unwrap())
            .await
            .expect("http request")
    }

    /// Sends a request and reads the whole response.
    pub(crate) async fn send(&self, method: Method, path: &str, headers: &[(&str, &str)]) -> Resp {
        let res = self.open(method, path, headers).await;
        let (parts, body) = res.into_parts();
        let version = parts.version;
        let body = body.collect().await.expect("response body").to_bytes();
        Resp {
            status: parts.status,
            headers: parts.headers,
            version,
            body: String::from_utf8(body.to_vec()).expect("utf-8 body"),
        }
    }

    pub(crate) async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        self.send(Method::GET, path, headers).await
    }

    pub(crate) async fn post(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        self.send(Method::POST, path, headers).await
    }
}

/// What handlers record: how many are inside per key, the most ever
/// inside at once per key and in all, and a gate they wait at.
#[derive(Clone)]
pub(crate) struct Probe {
    inside: Arc<Mutex<HashMap<String, usize>>>,
    max: Arc<Mutex<HashMap<String, usize>>>,
    total_inside: Arc<AtomicUsize>,
    max_total: Arc<AtomicUsize>,
    entered: Arc<watch::Sender<usize>>,
    gate: Arc<Semaphore>,
}

impl Probe {
    pub(crate) fn new() -> Self {
        Self {
            inside: Arc::default(),
            max: Arc::default(),
            total_inside: Arc::default(),
            max_total: Arc::default(),
            entered: Arc::new(watch::Sender::new(0)),
            gate: Arc::new(Semaphore::new(0)),
        }
    }

    /// A handler's visit: enter, wait at the gate, leave.
    pub(crate) async fn visit(&self, key: &str) {
        {
            let mut inside = self.inside.lock().unwrap();
            let n = inside.entry(key.to_owned()).or_default();
            *n += 1;
            let mut max = self.max.lock().unwrap();
            let m = max.entry(key.to_owned()).or_default();
            *m = (*m).max(*n);
        }
        let total = self.total_inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_total.fetch_max(total, Ordering::SeqCst);
        self.entered.send_modify(|n| *n += 1);
        self.gate.acquire().await.unwrap().forget();
        self.total_inside.fetch_sub(1, Ordering::SeqCst);
        *self.inside.lock().unwrap().get_mut(key).unwrap() -= 1;
    }

    /// Waits until `n` visits in all have entered.
    pub(crate) async fn entered(&self, n: usize) {
        let mut rx = self.entered.subscribe();
        tokio::time::timeout(PATIENCE, rx.wait_for(|e| *e >= n))
            .await
            .unwrap_or_else(|_| panic!("{n} handlers never entered"))
            .unwrap();
    }

    pub(crate) fn entered_so_far(&self) -> usize {
        *self.entered.borrow()
    }

    /// Lets `n` waiting visits leave.
    pub(crate) fn open(&self, n: usize) {
        self.gate.add_permits(n);
    }

    pub(crate) fn inside(&self, key: &str) -> usize {
        self.inside.lock().unwrap().get(key).copied().unwrap_or(0)
    }

    pub(crate) fn max_inside(&self, key: &str) -> usize {
        self.max.lock().unwrap().get(key).copied().unwrap_or(0)
    }

    pub(crate) fn max_total(&self) -> usize {
        self.max_total.load(Ordering::SeqCst)
    }
}

/// A response body fed chunk by chunk from the test.
pub(crate) struct ChannelBody(pub mpsc::Receiver<Bytes>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx).map(|c| c.map(|b| Ok(Frame::data(b))))
    }
}

/// Polls `f` until it holds or `PATIENCE` passes (the kit's
/// `eventually`, with this suite's patience).
pub(crate) async fn eventually<F, Fut>(f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    lockguard_testing::conformance::eventually(PATIENCE, f).await
}

/// The store's wait queue of a lock or semaphore `name`.
pub(crate) fn wait_queue(kind: &str, name: &str) -> String {
    format!("lockguard:{kind}:{{{name}}}:queue")
}

/// The items of a `RateLimit` or `RateLimit-Policy` field, parsed as an
/// RFC 9651 structured-field list: each item's name (a string, as the
/// draft requires) and its parameters, which must all be integers.
pub(crate) fn sf_items(value: &str) -> Vec<(String, std::collections::BTreeMap<String, i64>)> {
    let list: sfv::List = sfv::Parser::new(value)
        .parse()
        .unwrap_or_else(|e| panic!("{value:?} is not a structured-field list: {e}"));
    list.into_iter()
        .map(|entry| match entry {
            sfv::ListEntry::Item(item) => {
                let name = item
                    .bare_item
                    .as_string()
                    .unwrap_or_else(|| panic!("item of {value:?} is not a string"))
                    .as_str()
                    .to_owned();
                let params = item
                    .params
                    .iter()
                    .map(|(k, v)| {
                        let v = v.as_integer().unwrap_or_else(|| {
                            panic!("parameter {k:?} of {value:?} is not an integer")
                        });
                        (k.as_str().to_owned(), i64::from(v))
                    })
                    .collect();
                (name, params)
            }
            sfv::ListEntry::InnerList(_) => panic!("inner list in {value:?}"),
        })
        .collect()
}

/// The name and the `r` and `t` parameters of a one-item `RateLimit` field
/// (no other parameter allowed).
pub(crate) fn parse_ratelimit(value: &str) -> (String, u64, u64) {
    let mut items = sf_items(value);
    assert_eq!(items.len(), 1, "{value:?}");
    let (name, params) = items.remove(0);
    assert!(
        params.keys().all(|k| k == "r" || k == "t"),
        "unexpected parameter in {value:?}"
    );
    let get = |k: &str| u64::try_from(params[k]).expect("non-negative");
    (name, get("r"), get("t"))
}
