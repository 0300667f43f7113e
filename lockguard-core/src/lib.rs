//! Distributed locks with leases, fencing tokens and a watchdog, atomic
//! counters, rate limiters and semaphores: the primitives, the public store
//! boundary they run on, and the in-memory store. The stores of other
//! crates (Redis, PostgreSQL, ZooKeeper, MySQL) keep the same semantics.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lockguard_core::Error> {
//! use lockguard_core::Client;
//!
//! // The in-memory store; `lockguard_redis::ClientExt::connect(url)` and
//! // the other store crates' constructors give the same `Client`.
//! let lg = Client::memory();
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
//! # Features
//!
//! | feature | what it adds |
//! |---|---|
//! | (always) | the in-memory store and the public [`store`] boundary |
//! | `metrics` | counters, gauges and histograms through the `metrics` facade (see [Metrics](#metrics)) |
//! | `serde` | serde for [`Quota`], [`Lease`], [`Algorithm`], and `serde_duration` for durations |
//! | `postgres` | `ToSql`/`FromSql` for [`FencingToken`], through `postgres-types` (the PostgreSQL store is the crate `lockguard-postgres`) |
//!
//! # Guarantees
//!
//! - **Mutual exclusion** while leases are respected: acquire is
//!   `SET key token NX PX lease` (with the fencing token in the same Lua
//!   script); the token is unique by construction: 64 bits drawn from the
//!   OS once per process and a per-process counter.
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
//! - **Reentrancy, scoped to a body**: inside the body a lock runs
//!   ([`Lock::run`], [`LockGuard::scope`], a `#[distributed_lock]`
//!   function), taking the same lock on the same client gets a reentrant
//!   guard without a round trip. Outside a body every acquisition is its own
//!   owner: requests served by one task, or the branches of one `join!`,
//!   exclude each other as they would across processes.
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
//! - [`MultiLock`] ([`Client::multi_lock`]): several keys at once, every one
//!   or none, taken in one order all clients share so that multi-locks over
//!   shared keys never deadlock; each key keeps its own lease, watchdog,
//!   fencing token and queue.
//! - [`RwLock`] ([`Client::rw_lock`]): many readers or one writer, with the
//!   lock's leases, watchdog, fencing tokens and loss signal; readers and
//!   writers wait in one FIFO queue, so readers cannot starve a writer, and
//!   a release admits the whole run of readers at its head at once.
//!
//! # Stores
//!
//! | constructor | store |
//! |---|---|
//! | [`Client::memory`] | this process only; tests, single-process use |
//! | `Client::connect(url)` (crate `lockguard`) | the store the URL's scheme names (`redis://`, `postgres://`, `zookeeper://`, `memory://`, ...) |
//! | `Client::from_env` (crate `lockguard`) | the store at `LOCKGUARD_URL` (or `REDIS_URL`); an error when neither is set, never a silent fallback to memory |
//! | `Client::connect_redis` (crate `lockguard-redis`) | one Redis server (6.2 or newer); Sentinel and Cluster with its features |
//! | `Client::redlock` (crate `lockguard-redis`) | N independent Redis masters with quorum (locks and semaphores) |
//! | `Client::connect_postgres` (crate `lockguard-postgres`) | one PostgreSQL (14 or newer): locks as its own session advisory locks, waiting in the server; semaphores and read-write locks in lease tables on the database's clock |
//! | `Client::connect_zookeeper` (crate `lockguard-zookeeper`) | a ZooKeeper ensemble (3.5 or newer): ephemeral sequential nodes, each waiter watching the node it waits on; counters and fenced values by compare-and-set; no rate limiters |
//!
//! See [`safety`] for what each mode guarantees, what it does not (pauses
//! past the lease, clock jumps, restarts without persistence), and how to
//! run Redis for locks.
//!
//! # The layers, and adding a store
//!
//! The modules stand in layers, from the ground up, each using only those
//! under it: values (errors, tokens, fencing tokens, keys, clocks, the
//! rate-limit algorithms, leases); the store boundary, with the in-memory
//! store behind it; waking waiters; the engine (what one client's
//! primitives share: store, prefix, defaults, waiters); holding (a hold,
//! the watchdog, guards, reentrancy scopes); the primitives; the client.
//!
//! Every store sits behind one public boundary, [`store`], of domain
//! operations, each atomic and one round trip where the store allows:
//!
//! 1. **[`store::LockStore`]**, which every store implements: one attempt
//!    to take a lock or a semaphore permit (joining the store's wait queue
//!    when asked), release (handing over to the first live waiter in the
//!    same step), extend, inspect; and how its waiters wait (a queue in the
//!    store, or retries on release announcements) and how many permits it
//!    allows.
//! 2. **[`store::DataStore`]**: counters, rate-limit steps and fenced
//!    values. Each method a store does not implement answers
//!    [`ErrorKind::Unsupported`], naming the store.
//! 3. **[`store::Listener`]**, for a store that announces handoffs over a
//!    message connection (Redis pub/sub, PostgreSQL `LISTEN`): it delivers
//!    them to the client's [`store::Inbox`].
//!
//! [`Builder::build`] makes a client of any [`store::Store`], so a store
//! lives in a crate of its own. A store is done
//! when it passes the conformance kit (`lockguard_testing::conformance`),
//! which every store crate runs from its own tests, the memory store
//! included: write a harness that makes clients of the store, name the
//! groups of tests that apply to what it offers, and every test of locks,
//! semaphores, queues, inspection, counters and limiters runs on it. No Redis command, Lua script or quorum detail
//! appears above the boundary. The in-memory store is the reference
//! implementation; the Redis (with Redlock), PostgreSQL, ZooKeeper and
//! MySQL stores are crates of their own, built on the boundary alone.
//!
//! # Observability
//!
//! `tracing` events at `debug` for acquire, wait and release, `trace` for
//! renewals, `warn` for lease loss and failed releases, each with the lock
//! name and the fencing token as fields.
//!
//! # Metrics
//!
//! With the `metrics` feature, the primitives record through the
//! [`metrics`](https://docs.rs/metrics) facade, to whatever recorder the
//! application installed (a Prometheus or OpenTelemetry exporter):
//!
//! | metric | kind | labels | counts or measures |
//! |---|---|---|---|
//! | `lockguard_acquisitions_total` | counter | `primitive`, `name`, `outcome` | acquisitions asked for, by outcome: `acquired`, `busy`, `timeout`, `invalid`, `error` |
//! | `lockguard_wait_seconds` | histogram | `primitive`, `name` | from asking to holding, for granted acquisitions |
//! | `lockguard_hold_seconds` | histogram | `primitive`, `name` | from holding to giving back (release, drop or loss) |
//! | `lockguard_held` | gauge | `primitive`, `name` | locks and permits this process holds now |
//! | `lockguard_waiting` | gauge | `primitive`, `name` | tasks of this process waiting for one now |
//! | `lockguard_releases_total` | counter | `primitive`, `name` | locks and permits given back (released or dropped) |
//! | `lockguard_leases_lost_total` | counter | `primitive`, `name` | leases found lost while held (the store said the lock is gone, or renewals failed until the lease ran out) |
//! | `lockguard_lease_margin_seconds` | histogram | `primitive`, `name` | how much of a lease was left when it was released or a renewal was sent: how close holders come to losing their locks |
//! | `lockguard_rate_limit_decisions_total` | counter | `limiter`, `outcome` | decisions: `allowed` or `refused` |
//! | `lockguard_scheduled_runs_total` | counter | `schedule`, `outcome` | a scheduled job's periods, by what this process did: `ran`, `failed` (the job's error), `lost` (cancelled when its lock was lost), `skipped` (another replica runs it, or ran it), `error` (the store could not be asked) |
//! | `lockguard_store_errors_total` | counter | `primitive`, `op` | store requests that failed or timed out: `acquire`, `release`, `renew`, `check`, `peek` (a rate limiter's) |
//!
//! `primitive` is `lock`, `semaphore` or `rw_lock` (`rate_limiter` for store errors of
//! a limiter). `name` is the lock's or semaphore's name as given, unless
//! [`Lock::metric_name`] sets another: a name that
//! carries an id (`order:42`) makes a series per id, so give such locks a
//! templated metric name (`order`); the tower layers name theirs for the
//! layer, and the macros for the key's template (`order:{order_id}`).
//! `limiter` is the rate limiter's name, never the key it checks.

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

// The modules from the bottom up: each uses only modules above it here.
//
// Errors.
mod error;
// Lock tokens.
mod token;
// Fencing tokens.
mod fence;
// The key layout and key rules.
mod key;
// Clocks for the in-memory store.
mod clock;
// The grammar of durations as text (shared with lockguard-macros).
mod duration;
// Serde for durations as text.
#[cfg(feature = "serde")]
mod text;
// The rate-limit algorithms, pure.
pub mod rate_limit;
// Leases: bounds, safety margin, what a grant is.
mod lease;
// Metrics (feature `metrics`).
mod meter;
// Running code in the primitives' spans.
mod span;
// Acquisitions in flight over a pool's connections (`store::Flights`).
mod flights;
// The store boundary, and the in-memory store behind it.
pub mod store;
// A deployment check's report.
pub mod check;
// Waking waiting tasks.
mod notify;
// What one client's primitives share.
mod engine;
// One held lock or permit and its lease state.
mod hold;
// Lease renewal.
mod watchdog;
// Guards.
mod guard;
// Reentrancy scopes.
mod reentry;
// Locks and the waiting for them.
mod lock;

mod multi_lock;
// Read-write locks.
mod rw_lock;
// Read-write locks with upgradeable reads, on a read-write lock and a gate.
mod upgradeable;
// Semaphores.
mod semaphore;
// Counters.
mod counter;
// Rate limiters.
mod limiter;
// Fenced values.
mod fenced;
// Leader election, on a lock and a fenced value.
mod leader;

// Scheduled jobs, on a lock kept at least a while and a fenced record.
mod schedule;
// The client handle.
mod client;
// What an operator sees and does across clients.
mod survey;

/// What each mode guarantees and what it does not; operational advice.
#[doc = include_str!("docs/safety.md")]
pub mod safety {}

pub use client::{
    Builder, Client, ConnectionSettings, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT,
};
pub use clock::{Clock, ManualClock, MonotonicClock};
pub use counter::{Counter, MAX_UPDATE_ATTEMPTS, Versioned};
pub use engine::{
    DEFAULT_RETRY_INTERVAL, DEFAULT_WAIT, DEFAULT_WAITER_TIMEOUT, MIN_WAITER_TIMEOUT,
};
pub use error::{Error, ErrorKind, Result, report_misconfigured};
pub use fence::FencingToken;
pub use fenced::{FencedResource, FencedValue};
pub use guard::{LeaseWatch, LockGuard};
pub use key::RwMode;
pub use key::{DEFAULT_PREFIX, MAX_KEY_LEN, MAX_PERMITS, validate_key};
#[allow(deprecated)]
pub use leader::LeaderWatch;
pub use leader::{
    Leader, LeaderInfo, LeaderObserver, Leadership, MAX_IDENTITY_LEN, MAX_PROCLAIMED_LEN,
};
pub use lease::{DEFAULT_LEASE, Lease, MAX_LEASE, MIN_LEASE, MIN_WATCHDOG_LEASE};
#[doc(hidden)]
pub use limiter::LimiterSite;
pub use limiter::RateLimiter;
pub use lock::Lock;
pub use multi_lock::{MAX_MULTI_LOCK_KEYS, MultiLock, MultiLockGuard};
pub use rate_limit::{Algorithm, Decision, Quota};
pub use rw_lock::{ReadGuard, ReadLock, RwLock, WriteGuard, WriteLock};
pub use schedule::{JobRun, Schedule, Scheduled};
pub use semaphore::{Permit, Semaphore};
pub use store::Occupancy;
pub use survey::{Forced, LockKind, LockState};
#[cfg(feature = "serde")]
pub use text::serde_duration;
pub use upgradeable::{UpgradeableGuard, UpgradeableLock, UpgradeableRwLock};
