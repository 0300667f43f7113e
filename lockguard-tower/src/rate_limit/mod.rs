//! Rate limiting: a budget per key, shared through the store.
//!
//! [`RateLimitLayer`] checks each request against a lockguard
//! [`RateLimiter`](lockguard_core::RateLimiter) before the inner service
//! runs. Which limiter and which key is the [`RateLimitPolicy`]'s choice:
//!
//! - one [`Rule`] for every request (`RateLimitLayer::new(limiter, key)`),
//!   added to one route with axum's `route_layer` or to a whole router;
//! - a [`RateLimitTable`] of rules by method and route, so all of a
//!   service's limits are declared in one place;
//! - any closure `Fn(&Request<B>) -> Option<Selection<'static>>`, or a
//!   type of yours that lends the limiters it owns.
//!
//! # Responses
//!
//! An admitted request gets the IETF headers of
//! draft-ietf-httpapi-ratelimit-headers, in structured-field form:
//!
//! ```text
//! RateLimit-Policy: "api";q=100;w=60
//! RateLimit: "api";r=42;t=30
//! ```
//!
//! `q` is the quota's count and `w` its period in seconds; `r` the requests
//! left now and `t` the seconds until the budget is full again (rounded
//! up). Layers stacked on one route each add their item to both lists.
//! With [`RateLimitLayer::legacy_headers`], `X-RateLimit-Limit`,
//! `X-RateLimit-Remaining` and `X-RateLimit-Reset` (seconds from now)
//! describe the policy with the fewest requests left.
//!
//! A refused request gets `429 Too Many Requests` with `Retry-After` in
//! whole seconds, rounded up and never 0, the same headers, and an
//! `application/problem+json` body (RFC 9457):
//!
//! ```text
//! HTTP/1.1 429 Too Many Requests
//! content-type: application/problem+json
//! retry-after: 12
//! ratelimit-policy: "login";q=5;w=60
//! ratelimit: "login";r=0;t=60
//!
//! {"type":"about:blank","title":"Too Many Requests","status":429,
//!  "detail":"rate limit \"login\" exceeded; retry in 12 s","retry_after":12}
//! ```
//!
//! A request without a usable key is refused with `400` by default or let
//! through ([`MissingKey`](crate::MissingKey)); a store that cannot be
//! reached gives `503` (fail-closed, the default) or lets requests through
//! with a warning (fail-open, [`RateLimitLayer::fail_open`]).
//!
//! # Examples
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use axum::{Router, body::Body, routing::post};
//! use http::Request;
//! use lockguard_core::{Client, Quota};
//! use lockguard_tower::{RateLimitLayer, key};
//! use tower::ServiceExt;
//!
//! let lg = Client::memory();
//! let app = Router::new().route("/login", post(|| async { "welcome" })).route_layer(
//!     RateLimitLayer::new(
//!         lg.rate_limiter("login", Quota::per_minute(1)),
//!         key::Header::new(http::HeaderName::from_static("x-user")),
//!     ),
//! );
//! let login = || Request::post("/login").header("x-user", "ada").body(Body::empty()).unwrap();
//! let first = app.clone().oneshot(login()).await.unwrap();
//! assert_eq!(first.status(), 200);
//! assert_eq!(first.headers()["ratelimit"], "\"login\";r=0;t=60");
//! let second = app.oneshot(login()).await.unwrap();
//! assert_eq!(second.status(), 429);
//! assert_eq!(second.headers()["retry-after"], "60");
//! # }
//! ```

#[cfg(feature = "serde")]
mod config;
mod future;
pub(crate) mod headers;
mod layer;
mod options;
mod policy;
mod service;
mod table;

#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub use config::{
    FailureModeConfig, ForwardedFrom, KeyConfig, MissingKeyConfig, PassWord, RouteConfig,
    TableConfig,
};
pub use future::ResponseFuture;
pub use layer::RateLimitLayer;
pub use policy::{RateLimitPolicy, Rule, Selection};
pub use service::RateLimit;
pub use table::RateLimitTable;

#[cfg(test)]
mod tests;
