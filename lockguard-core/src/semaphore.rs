//! At most N holders of a key at once.

use std::time::Duration;

use std::sync::Arc;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::guard::{LockGuard, run_guarded};
use crate::lease::Lease;
use crate::lock::Lock;

/// A distributed semaphore: at most `permits` holders of a key at once,
/// across every process using the store.
///
/// Made by [`Client::semaphore`](crate::Client::semaphore). Permits behave like lock guards: each
/// has a lease (so a crashed holder's permit expires), renewed by the same
/// watchdog unless a fixed [`Semaphore::lease`] is set; waiters queue like
/// a lock's, first come first served, and a permit given back goes straight
/// to the first live waiter, which alone is woken; dropping a permit gives
/// it back in the background.
///
/// On Redis the holders are a sorted set scored by lease end, with expired
/// holders dropped by the acquire script itself (one round trip).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockguard_core::Error> {
/// let lg = lockguard_core::Client::memory();
/// let exports = lg.semaphore("exports", 2);
/// let a = exports.acquire().await?;
/// let b = exports.acquire().await?;
/// assert!(exports.try_acquire().await.unwrap_err().is_busy());
/// a.release().await?;
/// let c = exports.try_acquire().await?;
/// # drop((b, c));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a semaphore does nothing until a permit is acquired"]
pub struct Semaphore {
    inner: Lock,
    permits: u32,
}

impl Semaphore {
    pub(crate) fn new(engine: Arc<Engine>, name: &str, permits: u32) -> Self {
        Self {
            inner: Lock::semaphore(engine, name, permits),
            permits,
        }
    }

    /// A fixed lease per permit, with no watchdog.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.inner = self.inner.lease(lease);
        self
    }

    /// A lease per permit renewed by the watchdog (the default, with the
    /// client's default lease).
    pub fn watchdog(mut self, lease: Duration) -> Self {
        self.inner = self.inner.watchdog(lease);
        self
    }

    /// How each permit's lease is kept; see [`Lock::with_lease`].
    pub fn with_lease(mut self, lease: Lease) -> Self {
        self.inner = self.inner.with_lease(lease);
        self
    }

    /// How long [`Semaphore::acquire`] waits when every permit is taken.
    /// Zero makes one attempt.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.inner = self.inner.wait(wait);
        self
    }

    /// The longest pause between attempts when no notification arrives
    /// (see [`Lock::retry_interval`]).
    pub fn retry_interval(mut self, interval: Duration) -> Self {
        self.inner = self.inner.retry_interval(interval);
        self
    }

    /// The `name` label of this semaphore's metrics; see
    /// [`Lock::metric_name`].
    pub fn metric_name(mut self, name: &str) -> Self {
        self.inner = self.inner.metric_name(name);
        self
    }

    /// The semaphore's key as given.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// How many holders it admits at once.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Checks the key, permit count and settings now, without a round
    /// trip; see [`Lock::validate`](crate::Lock::validate).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// bad key, permit count, lease or retry interval.
    pub fn validate(&self) -> Result<()> {
        self.inner.validate()
    }

    /// Takes a permit if one is free, without waiting.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Busy`](crate::ErrorKind::Busy) when every permit is
    /// taken; [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for
    /// a bad key, permit count or lease; the store's errors.
    pub async fn try_acquire(&self) -> Result<Permit> {
        self.inner.try_acquire().await.map(Permit)
    }

    /// [`try_acquire`](Semaphore::try_acquire) without awaiting, where the
    /// store answers in process; `None` (nothing sent) where it needs a
    /// round trip. See [`Lock::try_acquire_now`](crate::Lock::try_acquire_now).
    ///
    /// # Errors
    ///
    /// As [`Semaphore::try_acquire`].
    pub fn try_acquire_now(&self) -> Option<Result<Permit>> {
        Some(self.inner.try_acquire_now()?.map(Permit))
    }

    /// Takes a permit, waiting up to the configured bound.
    ///
    /// # Errors
    ///
    /// As [`Semaphore::try_acquire`], with `Busy` once the wait ran out.
    pub async fn acquire(&self) -> Result<Permit> {
        self.inner.acquire().await.map(Permit)
    }

    /// What the store knows of this semaphore now, in one round trip that
    /// changes nothing: how many permits are held, the soonest lease to
    /// end, how many wait; see [`Lock::inspect`].
    ///
    /// # Errors
    ///
    /// As [`Lock::inspect`].
    pub async fn inspect(&self) -> Result<crate::store::Occupancy> {
        self.inner.inspect().await
    }

    /// Runs `body` holding a permit: acquires one (waiting as configured),
    /// runs `body`, and gives the permit back when it is done. A lost lease
    /// drops `body` at once and returns the lease-lost error; see
    /// [`Lock::run`].
    ///
    /// # Errors
    ///
    /// As [`Semaphore::acquire`] and [`Lock::run`].
    pub async fn run<F: Future>(&self, body: F) -> Result<F::Output> {
        let permit = self.acquire().await?;
        run_guarded(permit.0, body).await
    }
}

/// One held permit of a [`Semaphore`]; dropping it gives it back.
#[derive(Debug)]
#[must_use = "dropping the permit gives it back at once"]
pub struct Permit(LockGuard);

impl Permit {
    /// The semaphore's key.
    pub fn name(&self) -> &str {
        self.0.name()
    }

    /// The permit's fencing token: on every store, no other permit of the
    /// semaphore has the same one; see [`LockGuard::fencing_token`].
    pub fn fencing_token(&self) -> crate::fence::FencingToken {
        self.0.fencing_token()
    }

    /// A handle on the permit's lease that does not hold it; see
    /// [`LockGuard::watch`].
    pub fn watch(&self) -> crate::guard::LeaseWatch {
        self.0.watch()
    }

    /// Whether the permit is still ours (not lost, lease not over).
    pub fn is_held(&self) -> bool {
        self.0.is_held()
    }

    /// How much longer the lease certainly lasts.
    pub fn valid_for(&self) -> Duration {
        self.0.valid_for()
    }

    /// Completes when the permit is lost or its lease is about to end; see
    /// [`LockGuard::lost`].
    pub fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
        self.0.lost()
    }

    /// Resets the permit's lease to `lease` from now.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost) when the permit
    /// had expired; the store's errors.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        self.0.extend(lease).await
    }

    /// Gives the permit back; `Ok(false)` when it had already expired.
    ///
    /// # Errors
    ///
    /// The store's errors; the lease then frees the permit.
    pub async fn release(self) -> Result<bool> {
        self.0.release().await
    }

    /// [`release`](Permit::release) without awaiting, where the store
    /// answers in process; the permit handed back, unreleased, where it
    /// needs a round trip. See [`LockGuard::try_release_now`].
    ///
    /// # Errors
    ///
    /// `Err(permit)` on a store that needs a round trip; inside `Ok`, as
    /// [`Permit::release`].
    pub fn try_release_now(self) -> std::result::Result<Result<bool>, Self> {
        self.0.try_release_now().map_err(Self)
    }
}
