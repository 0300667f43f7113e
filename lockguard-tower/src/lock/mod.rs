//! One request per key at a time: a distributed lock held for the whole
//! response.
//!
//! [`LockLayer`] takes the lock `NAME:KEY` before the inner service runs,
//! where the key comes from a [`KeyExtractor`](crate::KeyExtractor) (the
//! order id in the path, the user, the route). The response body holds the
//! lock and releases it when the body ends, streaming bodies included, so
//! the next request on the key starts only after the previous response is
//! complete. Requests on different keys run in parallel.
//!
//! A busy lock is refused at once with `409 Conflict` (or `423 Locked`,
//! see [`LockLayer::busy_status`]) and a problem body, or waited for up to
//! a bound ([`LockLayer::wait`]). A store that cannot be reached gives
//! `503` (fail-closed, the default); fail-open runs the request without the
//! lock and logs a warning.
//!
//! In read-write mode ([`LockLayer::read_write`]) the key's lock is a
//! [`RwLock`](lockguard_core::RwLock): requests with a safe method (`GET`,
//! `HEAD`, `OPTIONS`, `TRACE`) share it as readers, the others take it
//! alone as its writer, so reads of a resource run in parallel and a change
//! runs with nothing else on the resource beside it.
//!
//! Each request takes the lock as its own owner, with a non-reentrant
//! [`Lock`](lockguard_core::Lock): the core's reentrancy (a task that holds
//! a lock gets it again) does not apply between requests, even two served
//! by one connection's task. A handler that takes the same lock again
//! through its own client waits for the request's lock like anyone else.
//!
//! # Examples
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use std::time::Duration;
//! use axum::{Router, body::Body, routing::post};
//! use http::Request;
//! use lockguard_core::Client;
//! use lockguard_tower::LockLayer;
//!
//! let lg = Client::memory();
//! // `POST /orders/42/pay` locks `pay:order:42` while it runs.
//! let order = |req: &Request<Body>| {
//!     let id = req.uri().path().strip_prefix("/orders/")?.split('/').next()?;
//!     Some(format!("order:{id}"))
//! };
//! let app: Router = Router::new()
//!     .route("/orders/{id}/pay", post(|| async { "paid" }))
//!     .route_layer(
//!         LockLayer::new(lg, "pay", order)
//!             .wait(Duration::from_millis(500))
//!             .busy_status(http::StatusCode::LOCKED),
//!     );
//! # let _ = app;
//! # }
//! ```

mod future;
mod layer;
mod service;

pub use future::ResponseFuture;
pub use layer::LockLayer;
pub use service::Lock;
