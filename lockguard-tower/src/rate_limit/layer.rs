use std::fmt;
use std::sync::Arc;

use lockguard_core::RateLimiter;
use tower_layer::Layer;

use super::options::RateLimitOptions;
use super::policy::{RateLimitPolicy, Rule};
use super::service::RateLimit;
use super::table::RateLimitTable;

/// Applies a rate limit to every request of a service; see the
/// [module docs](crate::rate_limit).
///
/// Clones share the policy (behind an `Arc`) and the limiter's state, which
/// lives in the store: every clone, every connection's copy of the service
/// and every process on the same Redis spends the same budget per key.
///
/// The service answers in the inner service's own body type, which must
/// be `From<Bytes>` to carry a refusal's body (axum's `Body` and
/// http-body-util's `Full<Bytes>` are): a rate limit holds nothing while
/// the body streams, so it leaves the body as it is, and a framework that
/// boxes foreign bodies (axum does) boxes nothing more. An inner body
/// without that conversion can be mapped to one first (tower-http's
/// `MapResponseBodyLayer`).
pub struct RateLimitLayer<P> {
    policy: Arc<P>,
    options: RateLimitOptions,
}

impl<K> RateLimitLayer<Rule<K>> {
    /// Limits every request with `limiter`, keyed by `key`.
    pub fn new(limiter: RateLimiter, key: K) -> Self {
        Self::with_policy(Rule::new(limiter, key))
    }

    /// Checks the limiter's name and quota and the rule's cost now (see
    /// [`Rule::validate`]), so that a configuration that cannot work fails
    /// at start-up instead of answering every request with `500`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](lockguard_core::ErrorKind::InvalidInput)
    /// naming what cannot work.
    pub fn validate(self) -> Result<Self, lockguard_core::Error> {
        self.policy.validate()?;
        Ok(self)
    }
}

impl<B> RateLimitLayer<RateLimitTable<B>> {
    /// Checks every rule of the table now (see
    /// [`RateLimitPolicy::validate`]), so that a configuration that cannot
    /// work fails at start-up instead of answering `500`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](lockguard_core::ErrorKind::InvalidInput)
    /// naming what cannot work.
    pub fn validate(self) -> Result<Self, lockguard_core::Error> {
        RateLimitPolicy::<B>::validate(&*self.policy)?;
        Ok(self)
    }
}

impl<P> RateLimitLayer<P> {
    /// Limits requests as `policy` selects: a [`Rule`], a
    /// [`RateLimitTable`](crate::RateLimitTable), or a closure.
    pub fn with_policy(policy: P) -> Self {
        Self {
            policy: Arc::new(policy),
            options: RateLimitOptions::default(),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut RateLimitOptions)) -> Self {
        f(&mut self.options);
        self
    }

    crate::builders::builders! {
        /// What to do with a request that has no usable key (default: reject
        /// it with `400 Bad Request`).
        on_missing_key;

        /// What to do when the store is down (default: [`FailureMode::Closed`](crate::FailureMode::Closed)).
        failure_mode;

        /// Lets requests through unchecked while the store is down, with a
        /// warning in the log.
        fail_open;

        /// Answers `503 Service Unavailable` while the store is down (the
        /// default).
        fail_closed;

        /// Builds the response of every refusal (rate limited, no key,
        /// store down) with `hook` instead of the default problem+json
        /// body. The layer still adds `Retry-After` and the `RateLimit`
        /// headers where the hook's response lacks them.
        on_refusal;
    }

    /// Whether to send the IETF `RateLimit-Policy` and `RateLimit` headers
    /// (default: yes).
    #[must_use]
    pub fn standard_headers(self, on: bool) -> Self {
        self.edit(|o| o.headers.standard = on)
    }

    /// Whether to send the legacy `X-RateLimit-Limit`, `X-RateLimit-Remaining`
    /// and `X-RateLimit-Reset` (seconds from now) headers (default: no).
    #[must_use]
    pub fn legacy_headers(self, on: bool) -> Self {
        self.edit(|o| o.headers.legacy = on)
    }

    /// Shadow mode, for rolling a limit out (default: off): every request
    /// is decided, recorded and answered with the rate-limit headers as
    /// usual, but none is refused. A request over the quota goes through,
    /// logged at `DEBUG` ("let through in shadow mode") and counted, as
    /// every refusal the limiter decides, in
    /// `lockguard_rate_limit_decisions_total{outcome="refused"}` (feature
    /// `metrics`): watch what the limit would refuse before it does. A
    /// store that cannot be reached still follows the failure mode.
    ///
    /// ```
    /// use axum::{Router, body::Body, routing::get};
    /// use http::{Request, StatusCode};
    /// use lockguard_core::{Client, Quota};
    /// use lockguard_tower::{RateLimitLayer, key};
    /// use tower::ServiceExt;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let lg = Client::memory();
    /// let app = Router::new().route("/", get(|| async { "ok" })).layer(
    ///     RateLimitLayer::new(lg.rate_limiter("new-limit", Quota::per_minute(1)), key::Global)
    ///         .shadow(true),
    /// );
    /// for _ in 0..3 {
    ///     let res = app.clone().oneshot(Request::new(Body::empty())).await.unwrap();
    ///     assert_eq!(res.status(), StatusCode::OK); // over the quota, but let through
    /// }
    /// # }
    /// ```
    #[must_use]
    pub fn shadow(self, on: bool) -> Self {
        self.edit(|o| o.shadow = on)
    }

    /// Whether an admitted request carries the limiter's
    /// [`Decision`](lockguard_core::Decision) (remaining budget, reset) in
    /// its extensions, for the handler to read; with axum, through the
    /// `Extension<Decision>` extractor (default: no).
    ///
    /// Off by default, as axum's `ConnectInfo` is: the client already
    /// reads the decision in the `RateLimit` headers, and carrying it costs
    /// every request an allocation and, under axum, the growth of its
    /// extension map (the router puts three entries in it, all its first
    /// table holds): about 7% of a hello-world's instructions.
    ///
    /// ```
    /// use axum::{Extension, Router, body::Body, routing::get};
    /// use http::Request;
    /// use http_body_util::BodyExt;
    /// use lockguard_core::{Client, Decision, Quota};
    /// use lockguard_tower::{RateLimitLayer, key};
    /// use tower::ServiceExt;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let lg = Client::memory();
    /// let app = Router::new()
    ///     .route("/", get(|Extension(d): Extension<Decision>| async move {
    ///         format!("{} requests left", d.remaining)
    ///     }))
    ///     .layer(
    ///         RateLimitLayer::new(lg.rate_limiter("api", Quota::per_minute(10)), key::Global)
    ///             .decision_extension(true),
    ///     );
    /// let res = app.oneshot(Request::new(Body::empty())).await.unwrap();
    /// let body = res.into_body().collect().await.unwrap().to_bytes();
    /// assert_eq!(body, "9 requests left");
    /// # }
    /// ```
    #[must_use]
    pub fn decision_extension(self, on: bool) -> Self {
        self.edit(|o| o.decision_extension = on)
    }

    /// The policy.
    pub fn policy(&self) -> &P {
        &self.policy
    }
}

impl<P> Clone for RateLimitLayer<P> {
    fn clone(&self) -> Self {
        Self {
            policy: self.policy.clone(),
            options: self.options.clone(),
        }
    }
}

impl<P: fmt::Debug> fmt::Debug for RateLimitLayer<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("policy", &self.policy)
            .field("options", &self.options)
            .finish()
    }
}

impl<S, P> Layer<S> for RateLimitLayer<P> {
    type Service = RateLimit<S, P>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit::new(inner, self.policy.clone(), self.options.clone())
    }
}
