//! Distributed locks with leases, fencing tokens and a watchdog, atomic
//! counters, rate limiters and semaphores, on Redis or in memory, with the
//! same semantics on both.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lockguard_core::Error> {
//! use lockguard_core::Client;
//!
//! // Redis when REDIS_URL is set, the in-memory store otherwise.
//! let lg = Client::from_env().await?;
//!
//! // Waits up to 10 s for the lock; a watchdog renews its 30 s lease while
//! // the guard lives, and dropping the guard releases it.
//! let guard = lg.lock("order:42").acquire().await?;
//! println!("holding {} with fencing token {}", guard.name(), guard.fencing_token());
//!
//! // Writes to a fenced resource carry the token; older tokens are refused.
//! lg.fenced("order:42:state").write(guard.fencing_token(), "paid").await?;
//!
//! // The explicit release says whether the lock was still ours.
//! assert!(guard.release().await?);
//! # Ok(()) }
//! ```
//!
//! # Guarantees
//!
//! - **Mutual exclusion** while leases are respected: acquire is
//!   `SET key token NX PX lease` (with the fencing token in the same Lua
//!   script), the token is 128 random bits per acquisition.
//! - **No deadlock**: every lock has a lease; a crashed holder frees the key
//!   when it ends, at most [`MAX_LEASE`] later.
//! - **Only the holder releases or extends**: both compare the token first.
//! - **Watchdog**: without an explicit lease, the lease is renewed every
//!   third of it while the guard lives and stops the moment it goes.
//! - **Lease-loss signal**: [`LockGuard::is_held`] and [`LockGuard::lost`].
//! - **Fencing tokens**: strictly increasing per key; [`FencedResource`]
//!   rejects writes carrying an older one.
//! - **Fair waiting without a herd**: waiters queue in the store, first come
//!   first served across clients and processes; a release hands the lock to
//!   the first live waiter and wakes it alone. A dead waiter delays the
//!   queue by at most [`Builder::waiter_timeout`]; see [`safety`].
//! - **Reentrancy**: a task that holds a lock and asks again gets a
//!   reentrant guard without a round trip. The unit is the tokio task (or,
//!   for the future `block_on` runs, its thread): branches of one `join!` or
//!   `select!` share it, and a guard moved to another task still counts as
//!   held by the task that took it. Where one task acts for many independent
//!   requests, use [`Lock::reentrant`]`(false)`.
//! - **Cancellation safety**: dropping an `acquire` future never leaves a lock
//!   held by nobody for longer than the request in flight takes to answer.
//!
//! # Counters, rate limiters, semaphores
//!
//! - [`Counter`]: `incr_by`, `decr_by`, `get`, `set`, optional expiry,
//!   [`Counter::decr_if_at_least`] (stock that is never oversold),
//!   [`Counter::mark_once`] (once per user), [`Counter::compare_and_set`] and
//!   the optimistic [`Counter::update`] loop. One round trip each, atomic.
//! - [`RateLimiter`]: GCRA (default), fixed window and sliding window log,
//!   with a cost per request and the store's time; see [`rate_limit`] for
//!   each algorithm's accuracy.
//! - [`Semaphore`]: at most N holders of a key, with leased permits renewed
//!   by the lock watchdog and the same waiting.
//!
//! # Backends
//!
//! | constructor | store |
//! |---|---|
//! | [`Client::memory`] | this process only; tests, single-process use |
//! | [`Client::connect`] | one Redis server (6.2 or newer) |
//! | [`Client::from_env`] | Redis at `REDIS_URL`, else memory |
//! | [`Client::redlock`] | N independent Redis masters with quorum (locks and semaphores) |
//!
//! See [`safety`] for what each mode guarantees, what it does not (pauses
//! past the lease, clock jumps, restarts without persistence), and how to
//! run Redis for locks.
//!
//! # Observability
//!
//! `tracing` events at `debug` for acquire, wait and release, `trace` for
//! renewals, `warn` for lease loss and failed releases, each with the lock
//! name and the fencing token as fields.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

mod backend;
mod client;
mod clock;
mod counter;
mod error;
mod fence;
mod guard;
mod key;
mod lock;
mod notify;
pub mod rate_limit;
mod semaphore;

/// What each mode guarantees and what it does not; operational advice.
#[doc = include_str!("docs/safety.md")]
pub mod safety {}
mod token;
mod watchdog;

pub use backend::redlock::{DEFAULT_NODE_TIMEOUT, MAX_REDLOCK_PERMITS};
pub use client::{
    Builder, Client, DEFAULT_CONNECT_TIMEOUT, DEFAULT_LEASE, DEFAULT_PREFIX,
    DEFAULT_RESPONSE_TIMEOUT, DEFAULT_RETRY_INTERVAL, DEFAULT_WAIT, DEFAULT_WAITER_TIMEOUT,
    MAX_LEASE, MIN_LEASE, MIN_WAITER_TIMEOUT, MIN_WATCHDOG_LEASE,
};
pub use clock::{Clock, ManualClock, MonotonicClock};
pub use counter::{Counter, MAX_UPDATE_ATTEMPTS, Versioned};
pub use error::{Error, ErrorKind, Result};
pub use fence::{FencedResource, FencedValue, FencingToken};
pub use guard::{LeaseWatch, LockGuard};
pub use key::MAX_KEY_LEN;
pub use lock::Lock;
pub use rate_limit::{Algorithm, Decision, Quota, RateLimiter};
pub use semaphore::{MAX_PERMITS, Permit, Semaphore};
