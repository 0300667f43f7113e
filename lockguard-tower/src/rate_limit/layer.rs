use std::fmt;
use std::sync::Arc;

use lockguard_core::RateLimiter;
use tower_layer::Layer;

use super::headers::HeaderOptions;
use super::policy::Rule;
use super::service::RateLimit;
use crate::outcome::{FailureMode, MissingKey};

/// Settings a rate-limit layer applies to every request.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Options {
    pub(crate) on_missing_key: MissingKey,
    pub(crate) failure: FailureMode,
    pub(crate) headers: HeaderOptions,
}

/// Applies a rate limit to every request of a service; see the
/// [module docs](crate::rate_limit).
///
/// Clones share the policy (behind an `Arc`) and the limiter's state, which
/// lives in the store: every clone, every connection's copy of the service
/// and every process on the same Redis spends the same budget per key.
pub struct RateLimitLayer<P> {
    policy: Arc<P>,
    options: Options,
}

impl<K> RateLimitLayer<Rule<K>> {
    /// Limits every request with `limiter`, keyed by `key`.
    pub fn new(limiter: RateLimiter, key: K) -> Self {
        Self::with_policy(Rule::new(limiter, key))
    }
}

impl<P> RateLimitLayer<P> {
    /// Limits requests as `policy` selects: a [`Rule`], a
    /// [`RateLimitTable`](crate::RateLimitTable), or a closure.
    pub fn with_policy(policy: P) -> Self {
        Self {
            policy: Arc::new(policy),
            options: Options::default(),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut Options)) -> Self {
        f(&mut self.options);
        self
    }

    crate::builders::builders! {
        /// What to do with a request that has no usable key (default: reject
        /// it with `400 Bad Request`).
        on_missing_key;

        /// What to do when the store is down (default: [`FailureMode::Closed`]).
        failure_mode;

        /// Lets requests through unchecked while the store is down, with a
        /// warning in the log.
        fail_open;

        /// Answers `503 Service Unavailable` while the store is down (the
        /// default).
        fail_closed;
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

    /// The policy.
    pub fn policy(&self) -> &P {
        &self.policy
    }
}

impl<P> Clone for RateLimitLayer<P> {
    fn clone(&self) -> Self {
        Self {
            policy: self.policy.clone(),
            options: self.options,
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
        RateLimit::new(inner, self.policy.clone(), self.options)
    }
}
