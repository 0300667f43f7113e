use std::fmt;
use std::sync::Arc;

use http::StatusCode;
use lockguard_core::Client;
use tower_layer::Layer;

use super::service::Lock;
use crate::hold::{HoldOptions, Kind};

/// Runs one request per key at a time; see the [module docs](crate::lock).
///
/// Clones share the options and the key extractor (behind an `Arc`) and
/// the client; the locks themselves live in the store, so every clone,
/// every connection and every process on the same Redis excludes the
/// others.
pub struct LockLayer<K> {
    options: Arc<HoldOptions>,
    key: Arc<K>,
}

impl<K> LockLayer<K> {
    /// Locks `name:KEY` for each request, where `KEY` comes from `key`.
    ///
    /// By default a busy lock is refused at once with `409 Conflict`, the
    /// lock's lease is renewed by the watchdog while the response lasts, a
    /// request without a key is refused with `400`, and a store that
    /// cannot be reached gives `503`.
    pub fn new(client: Client, name: &str, key: K) -> Self {
        Self {
            options: Arc::new(HoldOptions::new(client, name, StatusCode::CONFLICT)),
            key: Arc::new(key),
        }
    }

    /// Checks the configuration now, so that a name too long for any key
    /// or a lease the store refuses fails at start-up instead of answering
    /// every request with `500` or `400`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](lockguard_core::ErrorKind::InvalidInput)
    /// naming what cannot work.
    pub fn validate(self) -> Result<Self, lockguard_core::Error> {
        self.options.validate(Kind::Lock)?;
        Ok(self)
    }

    /// Read-write mode: requests with a safe method (`GET`, `HEAD`,
    /// `OPTIONS`, `TRACE`) take `name:KEY` as a read lock, any number at
    /// once; the others (`POST`, `PUT`, `PATCH`, `DELETE`, ...) take it as
    /// a write lock, alone. Reads of a resource then run in parallel, and a
    /// change runs with no read or other change beside it. See
    /// [`RwLock`](lockguard_core::RwLock): readers and writers queue in
    /// one line, so a waiting write keeps new reads out and a stream of
    /// reads cannot starve it.
    ///
    /// Everything else is as in the default mode: [`wait`](Self::wait),
    /// [`lease`](Self::lease), the refusal of a busy lock with
    /// [`busy_status`](Self::busy_status), and the failure mode when the
    /// store is down. On a store without read-write locks (see the table
    /// in `docs/stores.md`) every request is refused with `500` and the
    /// mistake is logged once at `error` level, whatever the failure mode.
    ///
    /// ```
    /// use axum::{Router, body::Body, routing::get};
    /// use http::Request;
    /// use lockguard_core::Client;
    /// use lockguard_tower::LockLayer;
    ///
    /// let lg = Client::memory();
    /// let doc = |req: &Request<Body>| {
    ///     let id = req.uri().path().strip_prefix("/docs/")?;
    ///     Some(format!("doc:{id}"))
    /// };
    /// // `GET /docs/7` runs beside other reads of doc 7; `PUT /docs/7` alone.
    /// let app: Router = Router::new()
    ///     .route("/docs/{id}", get(|| async { "doc" }).put(|| async { "saved" }))
    ///     .route_layer(LockLayer::new(lg, "docs", doc).read_write());
    /// # let _ = app;
    /// ```
    #[must_use]
    pub fn read_write(self) -> Self {
        self.edit(|s| s.read_write = true)
    }

    fn edit(mut self, f: impl FnOnce(&mut HoldOptions)) -> Self {
        f(Arc::make_mut(&mut self.options));
        self
    }

    crate::builders::builders! {
        /// Waits up to `wait` for a busy lock before refusing (default: no
        /// wait). Waiters are woken by the release, without polling.
        wait;

        /// A fixed lease: the lock frees itself `lease` after it was taken,
        /// even if the response is still running. Default: the client's
        /// default lease, renewed by the watchdog until the response ends.
        lease;

        /// The status of a refusal when the lock is busy: `409 Conflict` (the
        /// default) or `423 Locked`, for instance.
        busy_status;

        /// What to do with a request that has no usable key (default: reject
        /// it with `400 Bad Request`).
        on_missing_key;

        /// What to do when the store is down (default:
        /// [`FailureMode::Closed`](crate::FailureMode::Closed)).
        /// Fail-open runs requests without the lock.
        failure_mode;

        /// Runs requests without the lock while the store is down, with a
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

        /// The name in front of every lock's key.
        name;
    }
}

impl<K> Clone for LockLayer<K> {
    fn clone(&self) -> Self {
        Self {
            options: self.options.clone(),
            key: self.key.clone(),
        }
    }
}

impl<K: fmt::Debug> fmt::Debug for LockLayer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockLayer")
            .field("options", &self.options)
            .field("key", &self.key)
            .finish()
    }
}

impl<S, K> Layer<S> for LockLayer<K> {
    type Service = Lock<S, K>;

    fn layer(&self, inner: S) -> Self::Service {
        Lock::new(inner, self.options.clone(), self.key.clone())
    }
}
