//! Attribute macros that run an `async fn` under a distributed lock, a rate
//! limit or a concurrency limit of [lockguard](https://docs.rs/lockguard),
//! or once per period across replicas ([`scheduled`]).
//!
//! ```
//! use lockguard::prelude::*; // Client::from_env_or_memory
//! use lockguard::{Client, concurrency_limit, distributed_lock, rate_limit};
//!
//! /// Ships an order; one process of the fleet at a time per order.
//! #[distributed_lock(key = "order:{order_id}", wait = "5s")]
//! async fn ship(order_id: u64) -> Result<(), lockguard::Error> {
//!     // ... exclusive work ...
//!     Ok(())
//! }
//!
//! /// Ten sign-ins a minute per user, across the fleet.
//! #[rate_limit(key = "user:{user}", rate = "10/m")]
//! async fn sign_in(user: &str) -> Result<(), lockguard::Error> {
//!     Ok(())
//! }
//!
//! /// At most four exports of a tenant at once.
//! #[concurrency_limit(key = "exports:{tenant}", permits = 4, wait = "2s")]
//! async fn export(tenant: &str) -> Result<(), lockguard::Error> {
//!     Ok(())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lockguard::Error> {
//! // At start-up: the store at LOCKGUARD_URL (`from_env()` in a service,
//! // which refuses to start without it), here memory when it is unset.
//! Client::from_env_or_memory().await?.install_default();
//! ship(42).await?;
//! sign_in("ann").await?;
//! export("acme").await?;
//! # Ok(()) }
//! ```
//!
//! Use them through the `lockguard` facade with its `macros` feature
//! (`lockguard::distributed_lock`); the generated code refers to
//! `::lockguard`, so a crate that renames the dependency says where it is
//! with `crate = "..."`.
//!
//! # The function
//!
//! Each attribute goes on an `async fn` with a body: a free function, an
//! inherent method (`&self`, `&mut self`, `self`), a method of a trait impl
//! (native `async fn` in traits, including traits that promise a `Send`
//! future), a generic function. The function keeps its attributes, docs,
//! visibility and signature; its body becomes an `async move` block, so
//! `?` and `return` in it work as before.
//!
//! When the body cannot run (the lock is busy, the quota is spent, every
//! permit is taken, the store is down, no client is installed), the
//! function returns `Err(e.into())` with the `lockguard::Error`, so it must
//! return `Result<T, E>` where `E: From<lockguard::Error>` (`lockguard::Error`
//! itself, an error enum with a `From` impl, `Box<dyn Error + Send + Sync>`,
//! `anyhow::Error`). Any other return type is a compile error pointing at it.
//!
//! # Keys
//!
//! `key` is a template formatted with `Display` at each call:
//!
//! | placeholder | formats |
//! |---|---|
//! | `{order_id}` | the argument `order_id` (any binding of the arguments' patterns) |
//! | `{user.id}`, `{pair.0}` | a field of an argument |
//! | `{self.tenant}` | a field of `self`, in a method |
//! | `{{`, `}}` | a literal brace (a Redis Cluster hash tag: `"{{tenant}}:{id}"`) |
//!
//! A key without placeholders is one key for every call. A placeholder
//! naming no argument, an unclosed brace or a format spec (`{id:?}`) is a
//! compile error on the key.
//!
//! # The client
//!
//! Without `client`, each call uses the process-wide default installed at
//! start-up with `Client::install_default`; when none is installed, the
//! call returns the `NoDefaultClient` error (it never panics) and the fix
//! is logged once at `error` level, so a handler that turns it into a `500`
//! is not silent about why. With
//! `client = <expr>`, the expression is evaluated in the function's scope
//! before the body, and may be a `Client`, a reference to one, or
//! anything that dereferences to one: `client = self.locks`,
//! `client = lg` for an argument `lg: &Client`, `client = state.lg.clone()`.
//!
//! # Options checked at compile time
//!
//! Durations are strings of a whole number and a unit, `ms`, `s`, `m`,
//! `h` or `d`, summed when there are several: `"250ms"`, `"30s"`,
//! `"1m30s"`. Rates are a count, a slash and a period: `"10/s"`,
//! `"100/m"`, `"1000/h"`, `"5/250ms"`. Malformed or out-of-range values,
//! unknown options, duplicate options and options that exclude each other
//! are compile errors on the option at fault.
//!
//! | option | [`distributed_lock`] | [`rate_limit`] | [`concurrency_limit`] |
//! |---|---|---|---|
//! | `key = "..."` | required | required | required |
//! | `mode = "read"` | a read-write lock: `"read"` shares it with other readers, `"write"` holds it alone (default: the plain lock) | | |
//! | `ttl = "30s"` | fixed lease, no watchdog | | fixed lease per permit |
//! | `watchdog = "30s"` | lease the watchdog renews (default: the client's, 30 s) | | the same, per permit |
//! | `wait = "5s"` | wait when busy (default: try once) | | wait when every permit is taken (default: try once) |
//! | `at_least = "30s"` | keep the lock until this long after it was taken, however soon the body ends (a scheduled job on many replicas runs once per period); at most `ttl`; not with `mode` | | |
//! | `skip_if_busy` | `Ok(None)` when busy | | `Ok(None)` when every permit is taken |
//! | `keep_going_on_lost` | the body goes on when the lease is lost | | the same, for the permit |
//! | `permits = 4` | | | required: bodies at once |
//! | `rate = "10/s"` | | required | |
//! | `burst = 20` | | GCRA's burst (default: the rate's count) | |
//! | `algorithm = "gcra"` | | `"gcra"` (default), `"fixed_window"`, `"sliding_window"` | |
//! | `name = "login"` | | the limiter's name (default: the function's path) | |
//! | `cost = 2` | | units each call spends (default 1) | |
//! | `shadow` | | shadow mode: decide and record, never refuse (for rolling a limit out) | |
//! | `client = <expr>` | the client | the client | the client |
//! | `crate = "path"` | where lockguard is | where lockguard is | where lockguard is |
//!
//! [`scheduled`] makes its function a starter instead (see there), and
//! takes its own options:
//!
//! | option | [`scheduled`] |
//! |---|---|
//! | `every = "1h"` | required: the period (at least 1 ms), counted from the Unix epoch |
//! | `at_least = "30m"` | keep the job's lock this long after it was taken (default: half the period, at most `at_most`); shorter than the period |
//! | `at_most = "10m"` | the lock's lease: the longest a run lasts before it is cancelled (default: the period) |
//! | `name = "nightly-report"` | the job's name (default: the function's path) |
//! | `client = <expr>` | the client (default: the process-wide default) |
//! | `crate = "path"` | where lockguard is |

mod attr;
mod expand;
mod rate;
mod scheduled;
mod shared;
mod template;

use proc_macro::TokenStream;

use crate::attr::Kind;

/// Runs an `async fn` while holding a distributed lock on a key formatted
/// from its arguments.
///
/// ```
/// use lockguard::{Client, distributed_lock};
///
/// struct Order {
///     id: u64,
/// }
///
/// #[derive(Debug)]
/// enum ShipError {
///     Lock(lockguard::Error),
///     NothingToShip,
/// }
///
/// impl From<lockguard::Error> for ShipError {
///     fn from(e: lockguard::Error) -> Self {
///         ShipError::Lock(e)
///     }
/// }
///
/// /// Ships an order: never twice at once, whichever process is asked.
/// #[distributed_lock(key = "order:{order.id}", ttl = "30s", wait = "5s")]
/// async fn ship(order: &Order, items: u32) -> Result<u32, ShipError> {
///     if items == 0 {
///         return Err(ShipError::NothingToShip);
///     }
///     Ok(items)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ShipError> {
/// Client::memory().install_default();
/// assert_eq!(ship(&Order { id: 42 }, 3).await?, 3);
/// # Ok(()) }
/// ```
///
/// # Behaviour
///
/// - The lock is taken before the body runs: with `wait`, waiting up to
///   that long while someone else holds it; without, trying once. A busy
///   lock makes the function return the `Busy` error (or `Ok(None)` with
///   `skip_if_busy`, for functions returning `Result<Option<T>, E>`), and
///   the body does not run.
/// - With `ttl`, the lease is fixed; without, a watchdog renews it while
///   the body runs (`watchdog = "..."` sets its length).
/// - With `at_least`, a body that ends sooner leaves the lock taken until
///   that long after it was taken (ShedLock's `lockAtLeastFor`; `ttl` is
///   the `lockAtMostFor`): a scheduled job run by every replica, each
///   with `skip_if_busy`, then runs once per period even where the
///   replicas' clocks differ a little. See `Lock::at_least`.
/// - While the body runs, a lost lease (the watchdog found the lock gone,
///   or a fixed lease is about to run out) stops it: the body's future is
///   dropped and not polled again, and the function returns the
///   `LeaseLost` error. With `keep_going_on_lost` the body runs to its end
///   regardless.
/// - After the body, the lock is released. A release that finds the lock
///   already gone means the body's work may not have been exclusive: the
///   function returns the `LeaseLost` error (with `keep_going_on_lost`, the
///   body's value is returned whatever the release says). A release that
///   cannot reach the store is logged, and the lease frees the lock.
/// - A call made from inside the body on the same key and client (a locked
///   function calling another on the same key) runs without taking the lock
///   again: nested calls do not deadlock, and the lock is released when the
///   outermost call ends. Reentrancy is scoped to the body, not the task:
///   two calls joined in one task (`join!`) exclude each other.
///
/// # Read-write mode
///
/// With `mode = "read"` or `mode = "write"`, the body runs under the
/// read-write lock on the key (`Client::rw_lock`): any number of `read`
/// calls run together, a `write` call runs alone. `ttl`, `watchdog`,
/// `wait`, `skip_if_busy`, `keep_going_on_lost`, `client` and `crate` work
/// as above; `at_least` is a compile error (a read or write hold ends with
/// the body). Holds of a read-write lock are not reentrant: a call on the
/// same key from inside the body takes it again, as a second reader, or as
/// a writer that waits for the body's own hold (until its `wait` runs out).
/// A store without read-write locks (see the table in `docs/stores.md`)
/// returns the `Unsupported` error.
///
/// ```
/// # use lockguard::{Client, distributed_lock};
/// #[distributed_lock(key = "prices:{market}", mode = "read", wait = "1s")]
/// async fn quote(market: &str) -> Result<u64, lockguard::Error> {
///     Ok(42) // many quotes at once, never during an update
/// }
///
/// #[distributed_lock(key = "prices:{market}", mode = "write", wait = "5s")]
/// async fn reprice(market: &str) -> Result<(), lockguard::Error> {
///     Ok(()) // alone: no quote and no other update runs meanwhile
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockguard::Error> {
/// # Client::memory().install_default();
/// reprice("eu").await?;
/// assert_eq!(quote("eu").await?, 42);
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// `Err(e.into())` with a `lockguard::Error` of kind `Busy`, `LeaseLost`,
/// `NoDefaultClient`, `InvalidInput` (a formatted key that is empty or too
/// long), or the store's (`Unavailable`, `Timeout`). Errors of the body are
/// returned as they are.
///
/// # Written by hand
///
/// The example above is equivalent to:
///
/// ```
/// # use lockguard::Client;
/// # struct Order { id: u64 }
/// # #[derive(Debug)] enum ShipError { Lock(lockguard::Error), NothingToShip }
/// # impl From<lockguard::Error> for ShipError { fn from(e: lockguard::Error) -> Self { ShipError::Lock(e) } }
/// use std::time::Duration;
///
/// async fn ship(order: &Order, items: u32) -> Result<u32, ShipError> {
///     let key = format!("order:{}", order.id);
///     let lg = Client::default_client()?;
///     lg.lock(&key)
///         .lease(Duration::from_secs(30)) // without `ttl`: no `.lease`, the watchdog renews
///         .wait(Duration::from_secs(5)) // without `wait`: one attempt
///         .run(async move {
///             // Nested calls on the same key run inside this body's scope.
///             if items == 0 {
///                 return Err(ShipError::NothingToShip);
///             }
///             Ok(items)
///         })
///         .await?
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ShipError> {
/// # Client::memory().install_default();
/// # assert_eq!(ship(&Order { id: 42 }, 3).await?, 3);
/// # Ok(()) }
/// ```
///
/// # Options
///
/// `key` (required), `mode`, `ttl`, `watchdog`, `wait`, `at_least`,
/// `skip_if_busy`, `keep_going_on_lost`, `client`, `crate`: see the
/// [crate docs](crate).
#[proc_macro_attribute]
pub fn distributed_lock(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::attribute(Kind::Lock, args.into(), item.into()).into()
}

/// Lets a call of an `async fn` run only while the key's quota allows it.
///
/// ```
/// use lockguard::{Client, rate_limit};
///
/// struct User {
///     id: u64,
/// }
///
/// /// Two password resets an hour per user, three at once after a quiet
/// /// spell.
/// #[rate_limit(key = "user:{user.id}", rate = "2/h", burst = 3, algorithm = "gcra")]
/// async fn reset_password(user: &User) -> Result<(), lockguard::Error> {
///     Ok(())
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockguard::Error> {
/// Client::memory().install_default();
/// let ann = User { id: 1 };
/// for _ in 0..3 {
///     reset_password(&ann).await?;
/// }
/// let refused = reset_password(&ann).await.unwrap_err();
/// assert!(refused.is_rate_limited());
/// println!("retry in {:?}", refused.retry_after());
/// # Ok(()) }
/// ```
///
/// # Behaviour
///
/// - Each call spends one unit (or `cost`) of the key's budget in the
///   limiter before the body runs; a refused call returns the
///   `RateLimited` error, with `Error::retry_after` saying when to try
///   again, and its body does not run.
/// - The limiter is named after the function's path
///   (`module_path!()::function`) unless `name` is given, so two functions
///   with the same key have budgets of their own, and two with the same
///   `name` share one (as does `lg.rate_limiter(name, quota)` with the
///   same quota). Methods of the same name in one module share a budget
///   unless named.
/// - `algorithm` picks GCRA (the default: `burst` at once, then one per
///   `period / count`), a fixed window (`count` per window), or a sliding
///   window log (at most `count` in any rolling period); `burst` applies
///   to GCRA only.
/// - `shadow` rolls a limit out: every call is decided and recorded (a
///   call over the quota counts as a refusal in the decision metric and is
///   logged at `DEBUG`), and every body runs
///   (`RateLimiter::shadow`). Remove it to enforce the limit.
/// - The function keeps its limiter's prepared settings (its store keys'
///   base, the decision step, the in-memory store's table) between calls,
///   for the client it ran on last, held weakly: a call builds only the
///   limiter's handle. It is the limiter written by hand below, made
///   once.
///
/// # Errors
///
/// `Err(e.into())` with a `lockguard::Error` of kind `RateLimited`,
/// `NoDefaultClient`, `InvalidInput` (a bad formatted key), or the store's.
///
/// # Written by hand
///
/// The example above is equivalent to:
///
/// ```
/// # use lockguard::Client;
/// # struct User { id: u64 }
/// use lockguard::{Algorithm, Quota};
///
/// async fn reset_password(user: &User) -> Result<(), lockguard::Error> {
///     let key = format!("user:{}", user.id);
///     let lg = Client::default_client()?;
///     lg.rate_limiter(concat!(module_path!(), "::reset_password"), Quota::per_hour(2).burst(3))
///         .algorithm(Algorithm::Gcra)
///         .shadow(false) // `true` with `shadow`
///         .try_acquire(&key) // `.try_acquire_cost(&key, cost)` with `cost`
///         .await?;
///     async move { Ok(()) }.await
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockguard::Error> {
/// # Client::memory().install_default();
/// # reset_password(&User { id: 1 }).await
/// # }
/// ```
///
/// # Options
///
/// `key` and `rate` (required), `burst`, `algorithm`, `name`, `cost`,
/// `shadow`, `client`, `crate`: see the [crate docs](crate).
#[proc_macro_attribute]
pub fn rate_limit(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::attribute(Kind::RateLimit, args.into(), item.into()).into()
}

/// Runs an `async fn` holding one permit of a distributed semaphore, so at
/// most `permits` bodies run at once per key, across every process.
///
/// ```
/// use lockguard::{Client, concurrency_limit};
///
/// struct Exporter {
///     locks: Client,
/// }
///
/// impl Exporter {
///     /// At most four exports of a tenant at once; a fifth waits up to two
///     /// seconds for a permit.
///     #[concurrency_limit(key = "exports:{tenant}", permits = 4, wait = "2s", client = self.locks)]
///     async fn export(&self, tenant: &str) -> Result<usize, lockguard::Error> {
///         Ok(tenant.len())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockguard::Error> {
/// let exporter = Exporter { locks: Client::memory() };
/// assert_eq!(exporter.export("acme").await?, 4);
/// # Ok(()) }
/// ```
///
/// # Behaviour
///
/// As [`distributed_lock`], with a permit of the semaphore `key` instead
/// of the lock: taken before the body (waiting up to `wait`, or trying
/// once), `Busy` (or `Ok(None)` with `skip_if_busy`) when every permit is
/// taken, a lease renewed by the watchdog unless `ttl` fixes it, a lost
/// permit stops the body unless `keep_going_on_lost`, and the permit is
/// given back after the body. Permits are counted, not owned: a nested
/// call on the same key takes a second permit.
///
/// # Errors
///
/// `Err(e.into())` with a `lockguard::Error` of kind `Busy`, `LeaseLost`,
/// `NoDefaultClient`, `InvalidInput`, or the store's.
///
/// # Written by hand
///
/// The example above is equivalent to:
///
/// ```
/// # use lockguard::Client;
/// # struct Exporter { locks: Client }
/// use std::time::Duration;
///
/// impl Exporter {
///     async fn export(&self, tenant: &str) -> Result<usize, lockguard::Error> {
///         let lg = self.locks.clone();
///         let key = format!("exports:{tenant}");
///         lg.semaphore(&key, 4)
///             .wait(Duration::from_secs(2))
///             .run(async move { Ok(tenant.len()) })
///             .await?
///     }
/// }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockguard::Error> {
/// # let exporter = Exporter { locks: Client::memory() };
/// # assert_eq!(exporter.export("acme").await?, 4);
/// # Ok(()) }
/// ```
///
/// # Options
///
/// `key` and `permits` (required), `ttl`, `watchdog`, `wait`,
/// `skip_if_busy`, `keep_going_on_lost`, `client`, `crate`: see the
/// [crate docs](crate).
#[proc_macro_attribute]
pub fn concurrency_limit(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::attribute(Kind::ConcurrencyLimit, args.into(), item.into()).into()
}

/// Makes an `async fn` a job that runs once per period across every
/// replica: the function becomes one of the same name (and arguments, but
/// its `JobRun`) that starts the job's schedule
/// ([`Client::schedule`](https://docs.rs/lockguard/latest/lockguard/struct.Client.html#method.schedule))
/// and returns its `Scheduled` handle.
///
/// ```
/// use lockguard::{Client, JobRun, scheduled};
///
/// /// Once an hour across the replicas; a run lasts at most 10 minutes.
/// #[scheduled(every = "1h", at_most = "10m", client = lg)]
/// async fn nightly_report(lg: &Client, run: JobRun) -> Result<(), lockguard::Error> {
///     // `lg` is the client the schedule runs on; fence writes with the run's token.
///     lg.fenced("report:last").write(run.fencing_token(), run.period().to_string()).await
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockguard::Error> {
/// let lg = Client::memory();
/// let report = nightly_report(&lg)?; // started: runs this period, then each hour
/// report.stop().await;
/// # Ok(()) }
/// ```
///
/// # Behaviour
///
/// - Each replica that calls the function schedules the job; each period
///   one of them runs it, and the others skip (see `Client::schedule` for
///   the guarantees: a period that ran never runs again, a run lasts at
///   most `at_most`).
/// - The job's name is the function's path (`module_path!()::function`)
///   unless `name` is given: replicas running the same binary share it.
/// - The arguments (but a `JobRun`, which each run gets) are cloned into
///   the schedule and into each run: a reference argument `x: &T` needs
///   `T: Clone`, and is a `&T` again inside the body.
/// - The body returns `Result<T, E>` with `E: Display`: a run's error is
///   logged (`WARN`), and the next period runs as usual.
///
/// # Errors
///
/// The starter returns `Err(lockguard::Error)` of kind `NoDefaultClient`
/// (without `client`) or `InvalidInput` (outside a tokio runtime, or a
/// name or lease the store cannot keep).
///
/// # Options
///
/// `every` (required), `at_least`, `at_most`, `name`, `client`, `crate`:
/// see the [crate docs](crate).
#[proc_macro_attribute]
pub fn scheduled(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::attribute(Kind::Scheduled, args.into(), item.into()).into()
}
