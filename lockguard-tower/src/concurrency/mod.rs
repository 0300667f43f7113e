//! At most N requests at once per key, across every process.
//!
//! [`ConcurrencyLimitLayer`] takes a permit of a lockguard
//! [`Semaphore`](lockguard_core::Semaphore) before the inner service runs
//! and gives it back when the response body ends, streaming bodies
//! included. Unlike tower's `ConcurrencyLimit`, it never applies
//! backpressure through `poll_ready`: a request that finds every permit
//! taken is refused with a response (`503` by default, see
//! [`ConcurrencyLimitLayer::busy_status`]), or waits up to a bound
//! ([`ConcurrencyLimitLayer::wait`]). Permits are leased, so a crashed
//! process gives its permits back when the lease ends.
//!
//! The limit is per key: per user, per API key, per route, or one in all
//! with [`key::Global`](crate::key::Global) (`NAME:global`).
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use axum::{Router, routing::post};
//! use lockguard_core::Client;
//! use lockguard_tower::{ConcurrencyLimitLayer, key};
//!
//! let lg = Client::memory();
//! // At most 2 exports at once per user; others wait up to 5 s.
//! let app: Router = Router::new()
//!     .route("/export", post(|| async { "exported" }))
//!     .route_layer(
//!         ConcurrencyLimitLayer::new(
//!             lg,
//!             "exports",
//!             2,
//!             key::Header::new(http::HeaderName::from_static("x-user-id")),
//!         )
//!         .wait(Duration::from_secs(5))
//!         .busy_status(http::StatusCode::TOO_MANY_REQUESTS),
//!     );
//! # let _ = app;
//! ```

mod future;
mod layer;
mod service;

pub use future::ResponseFuture;
pub use layer::ConcurrencyLimitLayer;
pub use service::ConcurrencyLimit;
