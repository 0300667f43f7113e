//! Tower layers that rate limit, lock and cap the concurrency of HTTP
//! requests, with lockguard's limiters, locks and semaphores on Redis (or
//! in memory) as the shared state.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lockguard_core::Error> {
//! use std::time::Duration;
//! use axum::{Router, body::Body, routing::{get, post}};
//! use http::{Request, StatusCode};
//! use lockguard_core::{Client, Quota};
//! use lockguard_tower::{ConcurrencyLimitLayer, LockLayer, RateLimitLayer, key};
//! use tower::ServiceExt;
//!
//! // A service would connect to its store: `lockguard::Client::from_env()`
//! // reads LOCKGUARD_URL (redis://..., postgres://...).
//! let lg = Client::memory();
//! let user = key::Header::new(http::HeaderName::from_static("x-user-id"));
//!
//! let app = Router::new()
//!     // 2 reports per minute per user.
//!     .route(
//!         "/report",
//!         get(|| async { "report" }).route_layer(RateLimitLayer::new(
//!             lg.rate_limiter("reports", Quota::per_minute(2)),
//!             user.clone(),
//!         )),
//!     )
//!     // One checkout per user at a time.
//!     .route(
//!         "/checkout",
//!         post(|| async { "done" }).route_layer(LockLayer::new(lg.clone(), "checkout", user)),
//!     )
//!     // At most 100 requests in flight across the fleet.
//!     .layer(ConcurrencyLimitLayer::new(lg.clone(), "api", 100, key::Global).wait(Duration::from_secs(1)));
//!
//! let report = || Request::get("/report").header("x-user-id", "ada").body(Body::empty()).unwrap();
//! assert_eq!(app.clone().oneshot(report()).await.unwrap().status(), StatusCode::OK);
//! assert_eq!(app.clone().oneshot(report()).await.unwrap().status(), StatusCode::OK);
//! let refused = app.oneshot(report()).await.unwrap();
//! assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
//! assert_eq!(refused.headers()["ratelimit-policy"], "\"reports\";q=2;w=60");
//! # Ok(()) }
//! ```
//!
//! # Features
//!
//! | feature | what it adds |
//! |---|---|
//! | (always) | the three layers; keys from the peer address (as a `SocketAddr` extension), forwarding headers, a header, the method, a closure |
//! | `axum` | the peer address from axum's `ConnectInfo<SocketAddr>`, `key::Route` from axum's `MatchedPath`, and `IntoResponse` for [`ErrorResponse`] |
//!
//! # The layers
//!
//! | layer | holds | refusal |
//! |---|---|---|
//! | [`RateLimitLayer`] | a budget per key ([`RateLimiter`](lockguard_core::RateLimiter)) | `429` with `Retry-After`, `RateLimit`, `RateLimit-Policy` |
//! | [`LockLayer`] | one request per key ([`Lock`](lockguard_core::Lock)) | `409` (or `423`), or a bounded wait |
//! | [`ConcurrencyLimitLayer`] | N requests per key ([`Semaphore`](lockguard_core::Semaphore)) | `503` (or any status), or a bounded wait |
//!
//! Each is HTTP middleware in tower's sense: `poll_ready` is the inner
//! service's, nothing is queued inside the layer, a refusal is a response
//! with an `application/problem+json` body (RFC 9457), and the error type is
//! the inner service's. Layers are `Clone`, and clones share everything:
//! the state lives in the store, so a limit is never per connection or per
//! clone.
//!
//! A [`RateLimitLayer`] answers in the inner service's body type (which must
//! be `From<Bytes>`, as axum's `Body` is). A [`LockLayer`] or
//! [`ConcurrencyLimitLayer`] answers with a [`ResponseBody`] around it,
//! which holds the request's lock or permit: a lock or permit is held
//! until the response body has ended (streaming bodies included) and
//! released before the end is reported, so a client that has read the
//! whole response can start the next request at once.
//!
//! A body already complete when the handler returns (most small responses)
//! is released before the response goes out, so the head and the body
//! leave in one write: released after the head, on Redis (a round trip),
//! the body would wait behind Nagle's algorithm for the client's delayed
//! acknowledgement, about 40 ms a request on a socket without
//! `TCP_NODELAY`.
//!
//! When the key cannot be extracted, the request is refused (`400` by
//! default) or let through, as [`MissingKey`] says. When the store cannot be
//! reached, the request is refused with `503` ([`FailureMode::Closed`], the
//! default) or let through with a warning ([`FailureMode::Open`]).
//!
//! # What the handler sees
//!
//! An admitted request carries what its admission was, in its extensions
//! (with axum, the `Extension<T>` extractor reads them):
//!
//! - behind a [`LockLayer`] or a [`ConcurrencyLimitLayer`], a
//!   [`LeaseWatch`](lockguard_core::LeaseWatch) of the lock or permit the
//!   request runs under: its fencing token, to pass with every write to a
//!   resource that checks it, and `is_held()` / `lost()`, to stop work the
//!   lock no longer protects (the innermost of these layers is the one seen);
//! - behind a [`RateLimitLayer`] built with
//!   [`decision_extension(true)`](RateLimitLayer::decision_extension), the
//!   [`Decision`](lockguard_core::Decision) (remaining budget, reset). It is
//!   off by default, as axum's `ConnectInfo` is: the client reads the same
//!   in the `RateLimit` headers, and passing it on costs every request an
//!   allocation and, under axum, the growth of its extension map.
//!
//! A handler that uses lockguard itself can return
//! `Result<_, `[`ErrorResponse`]`>` and answer lockguard errors with `?`.
//!
//! # Refusals and start-up checks
//!
//! Every layer takes `on_refusal(hook)`: the hook builds the response from
//! a typed [`Refusal`] (why, the status, the policy, when to retry, the
//! limiter's decision), in place of the default problem+json body; the layer
//! still adds `Retry-After` (on a busy lock, from the holder's remaining
//! lease) and the `RateLimit` headers where the hook's response lacks them.
//! `validate()` checks a layer's settings when the application starts, so
//! a quota, lease or permit count that cannot work is an error then, not a
//! `500` on every request.
//!
//! # Observability
//!
//! Each check runs in a `debug` span (`rate_limit`, `lock`,
//! `concurrency_limit`) with the name and the key; decisions, waits and
//! refusals are `debug` events, store failures `warn`, and misconfiguration
//! (a quota or permit count that cannot work) `error`.

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod admit;
mod body;
mod builders;
pub mod concurrency;
mod error_response;
mod hold;
pub mod key;
pub mod lock;
mod outage;
mod outcome;
mod problem;
pub mod rate_limit;
pub mod refusal;

pub use admit::HasBody;
pub use body::ResponseBody;
pub use concurrency::ConcurrencyLimitLayer;
pub use error_response::ErrorResponse;
pub use key::KeyExtractor;
pub use lock::LockLayer;
pub use outcome::{FailureMode, MissingKey};
pub use rate_limit::{RateLimitLayer, RateLimitPolicy, RateLimitTable, Rule, Selection};
pub use refusal::{OnRefusal, Refusal, RefusalKind};
