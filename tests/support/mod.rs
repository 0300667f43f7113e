//! What the store-specific facade tests share: a service of one "process"
//! built with the attribute macros, and the check of the lock and
//! concurrency-limit layers.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use http_body_util::BodyExt;
use lockguard::tower::{ConcurrencyLimitLayer, LockLayer, key};
use lockguard::{Client, Error, concurrency_limit, distributed_lock, rate_limit};
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// A service of one process: its own client, and a count of the callers
/// inside the guarded section, shared by every "process".
pub struct Shop {
    locks: Client,
    inside: Arc<AtomicU32>,
    most: Arc<AtomicU32>,
}

impl Shop {
    /// One shop per client, sharing the count of callers inside.
    pub fn each(clients: Vec<Client>) -> Vec<Shop> {
        let inside = Arc::new(AtomicU32::new(0));
        let most = Arc::new(AtomicU32::new(0));
        clients
            .into_iter()
            .map(|locks| Shop {
                locks,
                inside: inside.clone(),
                most: most.clone(),
            })
            .collect()
    }

    /// The most callers seen inside at once since the last call.
    pub fn most_inside(&self) -> u32 {
        self.most.swap(0, Ordering::SeqCst)
    }

    async fn inside(&self) {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(5)).await;
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }

    #[distributed_lock(key = "order:{order}", wait = "20s", client = self.locks)]
    pub async fn pay(&self, order: u64) -> Result<(), Error> {
        self.inside().await;
        Ok(())
    }

    #[concurrency_limit(key = "exports", permits = 2, wait = "20s", client = self.locks)]
    pub async fn export(&self) -> Result<(), Error> {
        self.inside().await;
        Ok(())
    }

    #[rate_limit(key = "user:{user}", rate = "3/min", client = self.locks)]
    pub async fn search(&self, user: &str) -> Result<(), Error> {
        assert!(!user.is_empty());
        Ok(())
    }
}

/// Every shop calls `call` ten times, all shops at once; the shops back.
pub async fn all_at_once<F, Fut>(shops: Vec<Shop>, call: F) -> Vec<Shop>
where
    F: Fn(Arc<Shop>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), Error>> + Send,
{
    let mut tasks = Vec::new();
    for shop in shops {
        let call = call.clone();
        tasks.push(tokio::spawn(async move {
            let shop = Arc::new(shop);
            for _ in 0..10 {
                call(shop.clone()).await.unwrap();
            }
            shop
        }));
    }
    let mut back = Vec::new();
    for t in tasks {
        let shop = t.await.unwrap();
        back.push(Arc::try_unwrap(shop).unwrap_or_else(|_| panic!("a call kept the shop")));
    }
    back
}

/// A lock layer and a concurrency limit of one permit on `lg`, under
/// `name`: while a request holds the key (or the permit), another is
/// refused with 409 (503), and once it is done the next is served.
pub async fn the_lock_and_limit_layers_refuse_then_serve(lg: &Client, name: &str) {
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
            get(handler.clone()).route_layer(LockLayer::new(lg.clone(), name, key::Global)),
        )
        .route(
            "/limited",
            get(handler).route_layer(ConcurrencyLimitLayer::new(lg.clone(), name, 1, key::Global)),
        );
    for (path, busy) in [("/locked", 409), ("/limited", 503)] {
        let first = tokio::spawn(app.clone().oneshot(request(path)));
        let seen = wait_until_held(lg, name, path).await;
        if !seen {
            // Say what the first request got, if it ended: a refusal or a
            // store error tells a failure apart from a slow machine.
            let outcome = if first.is_finished() {
                let response = first.await.unwrap().unwrap();
                let status = response.status();
                let body = response.into_body().collect().await.unwrap().to_bytes();
                format!("it ended with {status}: {body:?}")
            } else {
                "it is still running".to_owned()
            };
            // The store's own answer now, with its causes: a 503 says only
            // that the store could not be used.
            let key = format!("{name}:global");
            let direct = match lg.lock(&key).try_acquire().await {
                Ok(guard) => format!(
                    "a direct try_acquire took it (fence {})",
                    guard.fencing_token()
                ),
                Err(e) => {
                    let mut causes = e.to_string();
                    let mut source = std::error::Error::source(&e);
                    while let Some(s) = source {
                        causes.push_str(&format!(": {s}"));
                        source = s.source();
                    }
                    format!("a direct try_acquire failed: {causes}")
                }
            };
            panic!("{path}: the first request never held its key; {outcome}; {direct}");
        }
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
async fn wait_until_held(lg: &Client, name: &str, path: &str) -> bool {
    let key = format!("{name}:global");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < deadline {
        let seen = if path == "/locked" {
            lg.lock(&key).inspect().await
        } else {
            lg.semaphore(&key, 1).inspect().await
        };
        if seen.unwrap().is_held() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    false
}
