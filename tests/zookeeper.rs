//! The attribute macros and the tower layers on a ZooKeeper client,
//! unchanged, against a real server the harness starts.
#![cfg(all(feature = "macros", feature = "tower", feature = "zookeeper"))]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http_body_util::BodyExt;
use lockguard::tower::{ConcurrencyLimitLayer, LockLayer, key};
use lockguard::{Client, Error, concurrency_limit, distributed_lock, rate_limit};
use lockguard_testing::ZooKeeperServer;
use tokio::sync::Semaphore;
use tower::ServiceExt;

async fn client(server: &ZooKeeperServer) -> Client {
    Client::connect_zookeeper(&server.hosts())
        .await
        .expect("connect to zookeeper")
}

/// A service of one process: its own client, and a count of the callers
/// inside the locked section, shared by every "process".
struct Shop {
    locks: Client,
    inside: Arc<AtomicU32>,
    most: Arc<AtomicU32>,
}

impl Shop {
    #[distributed_lock(key = "order:{order}", wait = "20s", client = self.locks)]
    async fn pay(&self, order: u64) -> Result<(), Error> {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    #[concurrency_limit(key = "exports", permits = 2, wait = "20s", client = self.locks)]
    async fn export(&self) -> Result<(), Error> {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    #[rate_limit(key = "user:{user}", rate = "3/min", client = self.locks)]
    async fn search(&self, user: &str) -> Result<(), Error> {
        panic!("the body of a rate-limited call ran on a store without limiters: {user}");
    }
}

/// Three processes (clients) pay the same order through the macro: never
/// two inside at once; they export through a concurrency limit of 2: never
/// three inside. A rate limit, which ZooKeeper does not offer, is an error
/// the function returns, and its body does not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_macros_work_on_a_zookeeper_client() {
    let server = &ZooKeeperServer::start();
    let inside = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let shop = Shop {
            locks: client(server).await,
            inside: inside.clone(),
            most: most.clone(),
        };
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                shop.pay(42).await.unwrap();
            }
            shop
        }));
    }
    let mut shops = Vec::new();
    for t in tasks {
        shops.push(t.await.unwrap());
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        1,
        "two payers were inside at once"
    );
    most.store(0, Ordering::SeqCst);
    let mut tasks = Vec::new();
    for shop in shops {
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                shop.export().await.unwrap();
            }
            shop
        }));
    }
    let mut shops = Vec::new();
    for t in tasks {
        shops.push(t.await.unwrap());
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 2, "{most} exporters were inside at once");
    let refused = shops[1].search("ann").await.unwrap_err();
    assert_eq!(
        refused.kind(),
        lockguard::ErrorKind::Unsupported,
        "{refused}"
    );
}

/// A lock layer and a concurrency limit on ZooKeeper: while a request
/// holds the key (or the only permit), another is refused with 409 (503),
/// and once it is done the next is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tower_layers_work_on_a_zookeeper_client() {
    let server = &ZooKeeperServer::start();
    let lg = client(server).await;
    let gate = Arc::new(Semaphore::new(0));
    let handler = {
        let gate = gate.clone();
        move || {
            let gate = gate.clone();
            async move {
                gate.acquire().await.unwrap().forget();
                "done"
            }
        }
    };
    let app = Router::new()
        .route(
            "/locked",
            get(handler.clone()).route_layer(LockLayer::new(lg.clone(), "zk-http", key::Global)),
        )
        .route(
            "/limited",
            get(handler).route_layer(ConcurrencyLimitLayer::new(
                lg.clone(),
                "zk-http",
                1,
                key::Global,
            )),
        );
    for (path, busy) in [("/locked", 409), ("/limited", 503)] {
        let first = tokio::spawn(app.clone().oneshot(request(path)));
        let seen = wait_until_held(&lg, path).await;
        assert!(seen, "{path}: the first request never held its key");
        let refused = app.clone().oneshot(request(path)).await.unwrap();
        assert_eq!(refused.status().as_u16(), busy, "{path}");
        gate.add_permits(1);
        let served = first.await.unwrap().unwrap();
        assert_eq!(served.status().as_u16(), 200, "{path}");
        let body = served.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"done");
        gate.add_permits(1);
        let again = app.clone().oneshot(request(path)).await.unwrap();
        assert_eq!(
            again.status().as_u16(),
            200,
            "{path}: the key was not given back"
        );
    }
}

fn request(path: &str) -> axum::http::Request<Body> {
    axum::http::Request::get(path).body(Body::empty()).unwrap()
}

/// Whether the lock (or the semaphore) of the route came to be held
/// within 10 s, seen through inspection.
async fn wait_until_held(lg: &Client, path: &str) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        let seen = if path == "/locked" {
            lg.lock("zk-http:global").inspect().await
        } else {
            lg.semaphore("zk-http:global", 1).inspect().await
        };
        if seen.unwrap().is_held() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}
