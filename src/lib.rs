//! lockguard: distributed locks with leases, fencing tokens and a watchdog,
//! atomic counters, rate limiters and semaphores on Redis (standalone,
//! Sentinel, Cluster, Redlock), PostgreSQL, MySQL/MariaDB or ZooKeeper, with
//! an in-memory store of the same semantics for tests and
//! single-process use.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lockguard::Error> {
//! use std::time::Duration;
//! use lockguard::Client;
//! use lockguard::prelude::*; // the stores' constructors
//!
//! // The store at LOCKGUARD_URL (redis://..., postgres://..., zookeeper://...).
//! // `from_env()` refuses to start without it; this example runs on memory
//! // when it is unset.
//! let lg = Client::from_env_or_memory().await?;
//!
//! let guard = lg
//!     .lock("order:42")
//!     .wait(Duration::from_secs(5))
//!     .acquire()
//!     .await?;
//! // ... only one process in the fleet runs this at a time ...
//! lg.fenced("order:42:status").write(guard.fencing_token(), "paid").await?;
//! assert!(guard.release().await?, "the lease ran out while we worked");
//! # Ok(()) }
//! ```
//!
//! # Crates and features
//!
//! | feature | what it adds |
//! |---|---|
//! | (always) | [`lockguard_core`]: locks, fencing, counters, rate limiters, semaphores; the public store boundary; the in-memory store |
//! | `redis` (default) | the Redis and Redlock stores (`Client::connect`, `Client::redlock`); without it no redis-rs is compiled |
//! | `macros` | `lockguard-macros`: `#[distributed_lock]`, `#[rate_limit]` and `#[concurrency_limit]` around an `async fn` |
//! | `tower` | `lockguard-tower` as `lockguard::tower`: `RateLimitLayer`, `LockLayer`, `ConcurrencyLimitLayer` for axum and hyper |
//! | `axum` | `tower`, plus keys from axum's `ConnectInfo` and `MatchedPath` |
//! | `cluster` | Redis Cluster support (`Client::connect_cluster`) |
//! | `sentinel` | Redis Sentinel (`Builder::connect_sentinel`): the master, followed across failovers |
//! | `postgres` | `lockguard-postgres` as `lockguard::postgres`: the PostgreSQL store (`Client::connect_postgres` with `lockguard::postgres::ClientExt` in scope, or `lockguard::prelude::*`), `FencedTable` |
//! | `sqlx` | `postgres`, plus `Builder::connect_sqlx_pool`: the PostgreSQL store over the application's `sqlx::PgPool` (sqlx 0.8) |
//! | `mysql` | `lockguard-mysql` as `lockguard::mysql`: the MySQL/MariaDB store (`Client::connect_mysql` with `lockguard::prelude::*`) |
//! | `zookeeper` | `lockguard-zookeeper` as `lockguard::zookeeper`: the ZooKeeper store (`Client::connect_zookeeper` with `lockguard::prelude::*`): locks, semaphores, counters and fenced values |
//! | `etcd` | `lockguard-etcd` as `lockguard::etcd`: the etcd store (`Client::connect_etcd` with `lockguard::prelude::*`): locks, semaphores, read-write and multi-key locks, counters, marks, fenced values and rate limits; building it needs `protoc` |
//! | `metrics` | counters, gauges and histograms through the `metrics` facade (see [`lockguard_core`]'s docs) |
//! | `tls-rustls`, `tls-native-tls` | `rediss://` (one server, Cluster, Sentinel, Redlock) through rustls or the platform's TLS library, custom CAs and client certificates; with `tls-rustls`, PostgreSQL over TLS too |
//! | `serde` | serde for `Quota` (`"100/min burst 20"`), `Lease`, `Algorithm`, and `serde_duration` for durations (`"30s"`) |
//! | `full` | all of the above but `tls-native-tls` |
//!
//! See [`lockguard_core`] for the guarantees every lock keeps.

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub use lockguard_core::*;

pub mod check;
pub mod connect;
mod scheme;
pub use connect::{BuilderExt, ClientExt};

// Attribute macros for `async fn`: a distributed lock, a rate limit or a
// concurrency limit around the body.
#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use lockguard_macros::{concurrency_limit, distributed_lock, rate_limit, scheduled};

// The README's Rust snippets, compiled as doctests of this crate (every
// feature they use is in `full`).
#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

// The Rust snippets of the pages in docs/, likewise: one item per page that
// has any.
#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../docs/etcd.md")]
struct DocsEtcdDoctests;
#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../docs/http.md")]
struct DocsHttpDoctests;
#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../docs/limits.md")]
struct DocsLimitsDoctests;
#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../docs/macros.md")]
struct DocsMacrosDoctests;
#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../docs/mysql.md")]
struct DocsMysqlDoctests;
#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../docs/observing.md")]
struct DocsObservingDoctests;
#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../docs/postgres.md")]
struct DocsPostgresDoctests;
#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../docs/redis.md")]
struct DocsRedisDoctests;
#[cfg(all(doctest, feature = "full"))]
#[doc = include_str!("../docs/zookeeper.md")]
struct DocsZookeeperDoctests;

/// The Redis stores (one server, Sentinel, Cluster, Redlock), from the crate
/// `lockguard-redis`.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use lockguard_redis as redis;

/// The PostgreSQL store, from the crate `lockguard-postgres`.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use lockguard_postgres as postgres;

/// The ZooKeeper store, from the crate `lockguard-zookeeper`.
#[cfg(feature = "zookeeper")]
#[cfg_attr(docsrs, doc(cfg(feature = "zookeeper")))]
pub use lockguard_zookeeper as zookeeper;

/// The MySQL/MariaDB store, from the crate `lockguard-mysql`.
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub use lockguard_mysql as mysql;

/// The etcd store, from the crate `lockguard-etcd`.
#[cfg(feature = "etcd")]
#[cfg_attr(docsrs, doc(cfg(feature = "etcd")))]
pub use lockguard_etcd as etcd;

/// The traits that add the constructors to [`Client`] and [`Builder`]:
/// with `use lockguard::prelude::*;`, `Client::connect(url)` (the store
/// chosen by the URL's scheme, see [`connect`](mod@connect)),
/// `Client::from_env()`, and each store's typed constructors
/// (`Client::connect_redis(url)`, `Client::builder().connect_postgres(url)`,
/// `wait_for_replicas`, ...).
pub mod prelude {
    pub use crate::connect::{BuilderExt as _, ClientExt as _};
    #[cfg(feature = "etcd")]
    pub use lockguard_etcd::{BuilderExt as _, ClientExt as _};
    #[cfg(feature = "mysql")]
    pub use lockguard_mysql::{BuilderExt as _, ClientExt as _};
    #[cfg(feature = "postgres")]
    pub use lockguard_postgres::{BuilderExt as _, ClientExt as _};
    #[cfg(feature = "redis")]
    pub use lockguard_redis::{BuilderExt as _, ClientExt as _};
    #[cfg(feature = "zookeeper")]
    pub use lockguard_zookeeper::{BuilderExt as _, ClientExt as _};
}

/// Tower layers for HTTP services.
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use lockguard_tower as tower;

/// Items the macros' generated code refers to. Not a public API: it may
/// change in any release.
///
/// It is compiled without the `macros` feature too, so a crate that
/// depends on `lockguard-macros` directly (as this package's examples do)
/// still finds it.
#[doc(hidden)]
pub mod __private {
    use std::future::Future;

    pub use lockguard_core;
    pub use lockguard_core::{
        Algorithm, Client, Error, JobRun, Lease, LimiterSite, Quota, Result, RwMode, Schedule,
        Scheduled,
    };
    pub use std::clone::Clone;
    pub use std::option::Option::{None, Some};
    pub use std::result::Result::{Err, Ok};
    pub use std::string::String;
    pub use std::time::Duration;
    pub use std::{concat, format, module_path};

    /// The process-wide default client, or the `NoDefaultClient` error.
    pub fn default_client() -> Result<Client> {
        Client::default_client()
    }

    /// The client named by `client = <expr>`.
    pub fn client(client: &Client) -> Result<Client> {
        Ok(client.clone())
    }

    /// How a `#[distributed_lock]` or `#[concurrency_limit]` holds its key.
    #[derive(Debug, Clone, Copy)]
    pub struct LeaseOptions {
        /// `ttl`: a fixed lease, no watchdog.
        pub ttl: Option<Duration>,
        /// `watchdog`: the lease the watchdog renews.
        pub watchdog: Option<Duration>,
        /// `wait`: how long to wait when busy; `None` tries once.
        pub wait: Option<Duration>,
        /// `at_least`: how long after it was taken the lock is kept,
        /// however soon the body ends (`#[distributed_lock]` only).
        pub at_least: Option<Duration>,
        /// Whether a lost lease stops the body (the default) or not
        /// (`keep_going_on_lost`).
        pub stop_on_lost: bool,
        /// The `name` label of its metrics: the key's template, so that
        /// `order:{order_id}` makes one series, not a series per order.
        pub metric_name: &'static str,
    }

    impl LeaseOptions {
        /// The lease asked for, if any (the client's default otherwise).
        fn lease(self) -> Option<Lease> {
            self.ttl
                .map(Lease::Fixed)
                .or(self.watchdog.map(Lease::Watchdog))
        }

        fn wait(self) -> Duration {
            self.wait.unwrap_or(Duration::ZERO)
        }
    }

    /// `#[distributed_lock]`: runs `body` under the lock on `key`.
    ///
    /// Reentrancy is the core's, scoped to the body: a call on the same
    /// key (and client) made from inside the body runs without taking the
    /// lock again, while calls that merely share a task (branches of one
    /// `join!`) exclude each other like calls from anywhere else.
    pub async fn locked<F: Future>(
        client: Result<Client>,
        key: String,
        opts: LeaseOptions,
        body: F,
    ) -> Result<F::Output> {
        let mut lock = client?
            .lock(&key)
            .metric_name(opts.metric_name)
            .wait(opts.wait());
        if let Some(lease) = opts.lease() {
            lock = lock.with_lease(lease);
        }
        if let Some(at_least) = opts.at_least {
            lock = lock.at_least(at_least);
        }
        if opts.stop_on_lost {
            return lock.run(body).await;
        }
        let guard = lock.acquire().await?;
        let out = guard.scope(body).await;
        // The work is done; a failed release is logged and left to the
        // lease.
        let _ = guard.release().await;
        Ok(out)
    }

    /// `#[distributed_lock(mode = "read" | "write")]`: runs `body` holding
    /// the read-write lock on `key` as one of its readers or as its writer.
    ///
    /// Holds of a read-write lock are not reentrant: a call on the same key
    /// made from inside the body takes the lock again, as a second reader
    /// or as a writer that waits for the body's own hold.
    pub async fn rw_locked<F: Future>(
        client: Result<Client>,
        key: String,
        mode: RwMode,
        opts: LeaseOptions,
        body: F,
    ) -> Result<F::Output> {
        let rw = client?.rw_lock(&key);
        match mode {
            RwMode::Read => {
                let mut lock = rw.read().metric_name(opts.metric_name).wait(opts.wait());
                if let Some(lease) = opts.lease() {
                    lock = lock.with_lease(lease);
                }
                if opts.stop_on_lost {
                    return lock.run(body).await;
                }
                let guard = lock.acquire().await?;
                let out = body.await;
                let _ = guard.release().await;
                Ok(out)
            }
            RwMode::Write => {
                let mut lock = rw.write().metric_name(opts.metric_name).wait(opts.wait());
                if let Some(lease) = opts.lease() {
                    lock = lock.with_lease(lease);
                }
                if opts.stop_on_lost {
                    return lock.run(body).await;
                }
                let guard = lock.acquire().await?;
                let out = body.await;
                let _ = guard.release().await;
                Ok(out)
            }
        }
    }

    /// `#[concurrency_limit]`: runs `body` holding a permit of the
    /// semaphore `key`.
    pub async fn limited<F: Future>(
        client: Result<Client>,
        key: String,
        permits: u32,
        opts: LeaseOptions,
        body: F,
    ) -> Result<F::Output> {
        let mut semaphore = client?
            .semaphore(&key, permits)
            .metric_name(opts.metric_name)
            .wait(opts.wait());
        if let Some(lease) = opts.lease() {
            semaphore = semaphore.with_lease(lease);
        }
        if opts.stop_on_lost {
            return semaphore.run(body).await;
        }
        let permit = semaphore.acquire().await?;
        let out = body.await;
        let _ = permit.release().await;
        Ok(out)
    }

    /// `#[rate_limit]`: spends one unit (or `cost`) of `key`'s budget in the
    /// limiter `name` (in shadow mode with `shadow`), then runs `body`. The
    /// limiter is the one `site` (the call site's) kept from its last
    /// call, when it was the same on the same client.
    #[allow(clippy::too_many_arguments)]
    pub async fn rate_limited<F: Future>(
        site: &'static LimiterSite,
        client: Result<Client>,
        name: &str,
        quota: Quota,
        algorithm: Algorithm,
        cost: u64,
        shadow: bool,
        key: String,
        body: F,
    ) -> Result<F::Output> {
        client?
            .rate_limiter_at(site, name, quota, algorithm, shadow)
            .try_acquire_cost(&key, cost)
            .await?;
        Ok(body.await)
    }

    /// A return type that can carry a lockguard error: `Result<T, E>` with
    /// `E: From<lockguard::Error>`.
    #[diagnostic::on_unimplemented(
        message = "`{Self}` cannot carry a `lockguard::Error`",
        label = "this return type cannot carry the error of a lock, rate limit or concurrency limit",
        note = "a function under `#[distributed_lock]`, `#[rate_limit]` or `#[concurrency_limit]` returns `Err(e.into())` when its body cannot run, so it must return `Result<T, E>` where `E: From<lockguard::Error>`"
    )]
    pub trait CarriesError: Sized {
        /// `Err(e.into())`.
        fn from_error(e: Error) -> Self;
    }

    impl<T, E: From<Error>> CarriesError for std::result::Result<T, E> {
        fn from_error(e: Error) -> Self {
            Err(E::from(e))
        }
    }

    /// `Err(e.into())` in the function's own return type. A mistake in
    /// how the service is set up (no default client, bad credentials) is
    /// also logged at `error` level, once per kind of mistake (its message
    /// may name a key): the caller may turn it into a bare `500`.
    pub fn fail<R: CarriesError>(e: Error) -> R {
        if e.is_misconfigured() {
            let cause = format!("attribute macros: {}", e.kind());
            lockguard_core::report_misconfigured(&cause, &e);
        }
        R::from_error(e)
    }

    /// The compile-time check of a function's error type `E` (of a return
    /// type written `Result<T, E>`): `From<lockguard::Error>` or an error
    /// that says so, spanned on `E`. Method resolution picks
    /// [`CheckFrom::verdict`] when `E: From<Error>` and the fallback
    /// [`CheckFallback::verdict`] (one auto-reference further) when not;
    /// the fallback's verdict fails [`assert_error_from`]'s bound with
    /// [`FromLockguardError`]'s explanation rather than a bare `From`
    /// error.
    #[derive(Debug)]
    pub struct ErrorCheck<E>(std::marker::PhantomData<E>);

    impl<E> ErrorCheck<E> {
        /// The check of `E`.
        #[allow(clippy::new_without_default)]
        pub fn new() -> Self {
            Self(std::marker::PhantomData)
        }
    }

    /// The verdict for an error type that implements `From<lockguard::Error>`.
    #[derive(Debug)]
    pub struct HoldsError;

    /// The verdict for an error type `E` without `From<lockguard::Error>`.
    #[derive(Debug)]
    pub struct MissingFrom<E>(std::marker::PhantomData<E>);

    /// The verdict of an error type with `From<lockguard::Error>`.
    pub trait CheckFrom {
        /// [`HoldsError`].
        fn verdict(&self) -> HoldsError {
            HoldsError
        }
    }

    impl<E: From<Error>> CheckFrom for ErrorCheck<E> {}

    /// The verdict of any other error type.
    pub trait CheckFallback<E> {
        /// [`MissingFrom`].
        fn verdict(&self) -> MissingFrom<E> {
            MissingFrom(std::marker::PhantomData)
        }
    }

    impl<E> CheckFallback<E> for &ErrorCheck<E> {}

    /// Implemented by no type: the bound an error type without
    /// `From<lockguard::Error>` fails, with the explanation.
    #[diagnostic::on_unimplemented(
        message = "the error type `{Self}` cannot hold a `lockguard::Error`",
        label = "add `impl From<lockguard::Error> for {Self}`",
        note = "a function under `#[distributed_lock]`, `#[rate_limit]` or `#[concurrency_limit]` returns `Err(e.into())` when its body cannot run (busy, limited, the store down, no default client), so its error type must implement `From<lockguard::Error>`"
    )]
    pub trait FromLockguardError {}

    /// A verdict that passes.
    pub trait Verdict {}

    impl Verdict for HoldsError {}

    impl<E: FromLockguardError> Verdict for MissingFrom<E> {}

    /// Fails to compile for an error type without `From<lockguard::Error>`.
    pub fn assert_error_from<V: Verdict>(_: V) {}

    /// A return type that can say "skipped": `Result<Option<T>, E>`.
    #[diagnostic::on_unimplemented(
        message = "`skip_if_busy` needs a function returning `Result<Option<T>, E>`, not `{Self}`",
        label = "`skip_if_busy` returns `Ok(None)` when the lock is busy, which this type cannot say",
        note = "return `Result<Option<T>, E>`, or drop `skip_if_busy` to return the busy error"
    )]
    pub trait Skippable: Sized {
        /// `Ok(None)`.
        fn skipped() -> Self;
    }

    impl<T, E> Skippable for std::result::Result<Option<T>, E> {
        fn skipped() -> Self {
            Ok(None)
        }
    }

    /// `Ok(None)` in the function's own return type.
    pub fn skipped<R: Skippable>() -> R {
        R::skipped()
    }
}
