use std::fmt;
use std::sync::Arc;

use http::StatusCode;
use lockguard_core::Client;
use tower_layer::Layer;

use super::service::ConcurrencyLimit;
use crate::hold::{HoldOptions, Kind};

/// Serves at most N requests at once per key; see the
/// [module docs](crate::concurrency).
///
/// Clones share the options and the key extractor (behind an `Arc`) and
/// the client; the permits live in the store, so the limit holds across
/// every clone, connection and process on the same Redis.
pub struct ConcurrencyLimitLayer<K> {
    options: Arc<HoldOptions>,
    permits: u32,
    key: Arc<K>,
}

impl<K> ConcurrencyLimitLayer<K> {
    /// At most `permits` requests at once per key: the semaphore
    /// `name:KEY` for each key `key` extracts (a user, an API key, a
    /// route); [`key::Global`](crate::key::Global) for one limit in all.
    ///
    /// By default a request finding every permit taken is refused at once
    /// with `503 Service Unavailable`, permits are leased and renewed by the
    /// watchdog while the response lasts, and a store that cannot be
    /// reached gives `503`. A permit count of 0 or above
    /// [`MAX_PERMITS`](lockguard_core::MAX_PERMITS) cannot work: every
    /// request is answered `500` and an error is logged, unless
    /// [`validate`](Self::validate) caught it at start-up.
    pub fn new(client: Client, name: &str, permits: u32, key: K) -> Self {
        Self {
            options: Arc::new(HoldOptions::new(
                client,
                name,
                StatusCode::SERVICE_UNAVAILABLE,
            )),
            permits,
            key: Arc::new(key),
        }
    }

    /// Checks the configuration now, so that a permit count of 0 or above
    /// [`MAX_PERMITS`](lockguard_core::MAX_PERMITS), a name too long for
    /// any key or a lease the store refuses fails at start-up instead of
    /// answering every request with `500` or `400`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](lockguard_core::ErrorKind::InvalidInput)
    /// naming what cannot work.
    pub fn validate(self) -> Result<Self, lockguard_core::Error> {
        self.options.validate(Kind::Permits(self.permits))?;
        Ok(self)
    }

    fn edit(mut self, f: impl FnOnce(&mut HoldOptions)) -> Self {
        f(Arc::make_mut(&mut self.options));
        self
    }

    crate::builders::builders! {
        /// Waits up to `wait` for a permit before refusing (default: no wait).
        /// Waiters are woken when a permit is given back, without polling.
        wait;

        /// A fixed lease per permit: a permit frees itself `lease` after it
        /// was taken, even if the response is still running. Default: the
        /// client's default lease, renewed by the watchdog until the response
        /// ends.
        lease;

        /// The status of a refusal when every permit is taken (default
        /// `503 Service Unavailable`; `429 Too Many Requests` suits a limit per
        /// client).
        busy_status;

        /// What to do with a request that has no usable key (default: reject
        /// it with `400 Bad Request`).
        on_missing_key;

        /// What to do when the store is down (default:
        /// [`FailureMode::Closed`](crate::FailureMode::Closed)).
        failure_mode;

        /// Serves requests without a permit while the store is down, with a
        /// warning in the log.
        fail_open;

        /// Answers `503 Service Unavailable` while the store is down (the
        /// default).
        fail_closed;

        /// Builds the response of every refusal (busy, no key, store down)
        /// with `hook` instead of the default problem+json body. The layer
        /// still adds `Retry-After` where the refusal knows it (a busy
        /// lock's remaining lease) and the hook's response lacks it.
        on_refusal;

        /// The name in front of every semaphore's key.
        name;
    }

    /// The most requests served at once per key.
    pub fn permits(&self) -> u32 {
        self.permits
    }
}

impl<K> Clone for ConcurrencyLimitLayer<K> {
    fn clone(&self) -> Self {
        Self {
            options: self.options.clone(),
            permits: self.permits,
            key: self.key.clone(),
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for ConcurrencyLimitLayer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimitLayer")
            .field("options", &self.options)
            .field("permits", &self.permits)
            .field("key", &self.key)
            .finish()
    }
}

impl<S, K> Layer<S> for ConcurrencyLimitLayer<K> {
    type Service = ConcurrencyLimit<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        ConcurrencyLimit::new(inner, self.options.clone(), self.permits, self.key.clone())
    }
}
