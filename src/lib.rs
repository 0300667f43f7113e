//! lockguard: distributed locks with leases, fencing tokens and a watchdog,
//! atomic counters, rate limiters and semaphores on Redis, with an in-memory
//! store of the same semantics for tests and single-process use.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lockguard::Error> {
//! use std::time::Duration;
//! use lockguard::Client;
//!
//! // Redis when REDIS_URL is set, the in-memory store otherwise.
//! let lg = Client::from_env().await?;
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
//! | (always) | [`lockguard_core`]: locks, fencing, counters, rate limiters, semaphores; the Redis and in-memory stores |
//! | `macros` | `lockguard-macros`: `#[distributed_lock]`, `#[rate_limit]` and `#[concurrency_limit]` around an `async fn` |
//! | `tower` | `lockguard-tower` as `lockguard::tower`: `RateLimitLayer`, `LockLayer`, `ConcurrencyLimitLayer` for axum and hyper |
//! | `axum` | `tower`, plus keys from axum's `ConnectInfo` and `MatchedPath` |
//! | `cluster` | Redis Cluster support (`Client::connect_cluster`) |
//! | `full` | all of the above |
//!
//! See [`lockguard_core`] for the guarantees every lock keeps.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub use lockguard_core::*;

// Attribute macros for `async fn`: a distributed lock, a rate limit or a
// concurrency limit around the body.
#[cfg(feature = "macros")]
pub use lockguard_macros::{concurrency_limit, distributed_lock, rate_limit};

/// Tower layers for HTTP services.
#[cfg(feature = "tower")]
pub use lockguard_tower as tower;

/// Items the macros' generated code refers to. Not a public API: it may
/// change in any release.
///
/// It is compiled without the `macros` feature too, so a crate that
/// depends on `lockguard-macros` directly (as this package's examples do)
/// still finds it.
#[doc(hidden)]
pub mod __private {
    use std::future::{Future, poll_fn};
    use std::pin::pin;
    use std::task::Poll;

    pub use lockguard_core;
    pub use lockguard_core::{Algorithm, Client, Error, LockGuard, Permit, Quota, Result};
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
        /// Whether a lost lease stops the body (the default) or not
        /// (`keep_going_on_lost`).
        pub stop_on_lost: bool,
    }

    /// A held lock or permit: what the body runs under.
    pub trait Held: Send + Sized {
        /// Completes with the lease-lost error when the lease is lost or
        /// about to run out.
        fn lost(&self) -> impl Future<Output = Error> + Send + 'static;
        /// Gives the lock or permit back.
        fn release(self) -> impl Future<Output = Result<bool>> + Send;
    }

    impl Held for LockGuard {
        fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
            LockGuard::lost(self)
        }
        fn release(self) -> impl Future<Output = Result<bool>> + Send {
            LockGuard::release(self)
        }
    }

    impl Held for Permit {
        fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
            Permit::lost(self)
        }
        fn release(self) -> impl Future<Output = Result<bool>> + Send {
            Permit::release(self)
        }
    }

    tokio::task_local! {
        /// The locks held by the `#[distributed_lock]` bodies this code runs
        /// inside: a nested call on one of them is reentrant.
        static HELD: std::sync::Arc<Vec<(Client, String)>>;
    }

    /// `#[distributed_lock]`: takes the lock on `key`, then runs `body`
    /// under it.
    ///
    /// Reentrancy is scoped to the body: a call on the same key (and
    /// client) made from inside the body runs without taking the lock
    /// again, while calls that merely share a task (branches of one
    /// `join!`) exclude each other like calls from anywhere else.
    pub async fn locked<F: Future>(
        client: Result<Client>,
        key: String,
        opts: LeaseOptions,
        body: F,
    ) -> Result<F::Output> {
        let client = client?;
        let outer = HELD.try_with(std::sync::Arc::clone).unwrap_or_default();
        if outer
            .iter()
            .any(|(c, k)| *k == key && c.same_client(&client))
        {
            return Ok(body.await);
        }
        let mut lock = client.lock(&key).reentrant(false);
        if let Some(ttl) = opts.ttl {
            lock = lock.lease(ttl);
        }
        if let Some(lease) = opts.watchdog {
            lock = lock.watchdog(lease);
        }
        let guard = match opts.wait {
            Some(wait) => lock.wait(wait).acquire().await?,
            None => lock.try_acquire().await?,
        };
        let mut held = Vec::with_capacity(outer.len() + 1);
        held.extend(outer.iter().cloned());
        held.push((client, key));
        HELD.scope(
            std::sync::Arc::new(held),
            run_held(guard, opts.stop_on_lost, body),
        )
        .await
    }

    /// `#[concurrency_limit]`: takes a permit of the semaphore `key`, then
    /// runs `body` under it.
    pub async fn limited<F: Future>(
        client: Result<Client>,
        key: String,
        permits: u32,
        opts: LeaseOptions,
        body: F,
    ) -> Result<F::Output> {
        let client = client?;
        let mut semaphore = client.semaphore(&key, permits);
        if let Some(ttl) = opts.ttl {
            semaphore = semaphore.lease(ttl);
        }
        if let Some(lease) = opts.watchdog {
            semaphore = semaphore.watchdog(lease);
        }
        let permit = match opts.wait {
            Some(wait) => semaphore.wait(wait).acquire().await?,
            None => semaphore.try_acquire().await?,
        };
        run_held(permit, opts.stop_on_lost, body).await
    }

    /// Runs `body` while `held` is held. With `stop_on_lost`, a lost lease
    /// drops the body at once (it is not polled again) and is returned as
    /// the error. Once the body is done, `held` is released explicitly; a
    /// failed release is left to the lease, since the work is done.
    pub async fn run_held<H: Held, F: Future>(
        held: H,
        stop_on_lost: bool,
        body: F,
    ) -> Result<F::Output> {
        let out = if stop_on_lost {
            let mut lost = pin!(held.lost());
            let mut body = pin!(body);
            // The lost signal is polled first: once the lease is gone the
            // body never makes another step.
            poll_fn(|cx| {
                if let Poll::Ready(e) = lost.as_mut().poll(cx) {
                    return Poll::Ready(Err(e));
                }
                body.as_mut().poll(cx).map(Ok)
            })
            .await
        } else {
            Ok(body.await)
        };
        // The body (dropped at the end of the block above) is gone before
        // the lock is given back.
        match out {
            Ok(out) => {
                let _ = held.release().await;
                Ok(out)
            }
            Err(lost) => {
                drop(held);
                Err(lost)
            }
        }
    }

    /// `#[rate_limit]`: spends one unit (or `cost`) of `key`'s budget in the
    /// limiter `name`, then runs `body`.
    pub async fn rate_limited<F: Future>(
        client: Result<Client>,
        name: &str,
        quota: Quota,
        algorithm: Algorithm,
        cost: u64,
        key: String,
        body: F,
    ) -> Result<F::Output> {
        let client = client?;
        client
            .rate_limiter(name, quota)
            .algorithm(algorithm)
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

    /// `Err(e.into())` in the function's own return type.
    pub fn fail<R: CarriesError>(e: Error) -> R {
        R::from_error(e)
    }

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
