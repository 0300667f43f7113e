//! A read-write lock: many readers or one writer, in one queue.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::fence::FencingToken;
use crate::guard::{LeaseWatch, LockGuard, run_guarded};
use crate::key::RwMode;
use crate::lease::Lease;
use crate::lock::Lock;
use crate::store::Occupancy;

/// A distributed read-write lock on one key: many readers at once, or one
/// writer alone (Redisson's `RReadWriteLock`, Curator's
/// `InterProcessReadWriteLock`).
///
/// Made by [`Client::rw_lock`](crate::Client::rw_lock); [`RwLock::read`]
/// and [`RwLock::write`] give the two ways to take it, each with the
/// options of a [`Lock`] (lease or watchdog, wait, retry interval) and the
/// guarantees of its guard: a lease renewed by the watchdog unless fixed, a
/// fencing token, the lease-loss signal, a release that reports whether the
/// hold was still ours, a drop that releases in the background, and an
/// acquisition that is safe to drop at any point.
///
/// Readers and writers wait in one first-come-first-served queue in the
/// store. A reader that arrives while a writer waits queues behind it, so
/// a stream of readers cannot starve a writer; a release hands the lock to
/// the head of the queue: the whole run of readers there at once, or the
/// one writer there. Every hold, read or write, draws its fencing token
/// from one sequence of the key: a write's token is greater than those of
/// every read and write before it, a read's greater than those of every
/// write before it.
///
/// Holds of a read-write lock are not reentrant: a read taken inside
/// [`ReadLock::run`] is a second reader (and a write taken there waits for
/// the first read to end, so it never comes).
///
/// A store without read-write locks answers
/// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) at once,
/// naming itself. Which stores offer them is in the one table of what each
/// store offers: `docs/stores.md` in the `lockguard` package.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockguard_core::Error> {
/// use std::time::Duration;
/// let lg = lockguard_core::Client::memory();
/// let prices = lg.rw_lock("prices");
///
/// // Readers share the lock.
/// let a = prices.read().acquire().await?;
/// let b = lg.peer().rw_lock("prices").read().try_acquire().await?;
/// let now = prices.inspect().await?;
/// assert_eq!((now.readers, now.writer), (2, false));
///
/// // A writer waits until both are gone, and its fencing token is greater
/// // than theirs.
/// let writer = prices.write().wait(Duration::from_secs(5));
/// let (write, _) = tokio::join!(writer.acquire(), async {
///     a.release().await.unwrap();
///     b.release().await.unwrap();
/// });
/// let write = write?;
/// assert!(prices.read().try_acquire().await.unwrap_err().is_busy());
/// assert!(write.release().await?);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a read-write lock does nothing until acquired"]
pub struct RwLock {
    reads: Lock,
    writes: Lock,
}

impl RwLock {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        Self {
            reads: Lock::rw(engine.clone(), name, RwMode::Read),
            writes: Lock::rw(engine, name, RwMode::Write),
        }
    }

    /// The lock taken to read: shared with the other readers.
    pub fn read(&self) -> ReadLock {
        ReadLock(self.reads.clone())
    }

    /// The lock taken to write: alone.
    pub fn write(&self) -> WriteLock {
        WriteLock(self.writes.clone())
    }

    /// The key as given.
    pub fn name(&self) -> &str {
        self.reads.name()
    }

    /// What the store knows of this lock now, in one round trip that
    /// changes nothing: how many read it ([`Occupancy::readers`]), whether
    /// a writer holds it ([`Occupancy::writer`]), the lease that ends
    /// first, how many wait (readers and writers), and the newest fencing
    /// token of its sequence. See [`Lock::inspect`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// bad key; [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported)
    /// on a store without read-write locks; the store's errors.
    pub async fn inspect(&self) -> Result<Occupancy> {
        self.reads.inspect().await
    }
}

/// One way of taking a [`RwLock`], with a lock's options, and its guard.
macro_rules! rw_hold {
    (
        $(#[$lock_doc:meta])* $Lock:ident,
        $(#[$guard_doc:meta])* $Guard:ident,
        $mode:expr, $what:literal
    ) => {
        $(#[$lock_doc])*
        #[derive(Debug, Clone)]
        #[must_use = "a read-write lock does nothing until acquired"]
        pub struct $Lock(pub(crate) Lock);

        impl $Lock {
            /// A fixed lease with no watchdog (see [`Lock::lease`]).
            pub fn lease(self, lease: Duration) -> Self {
                Self(self.0.lease(lease))
            }

            /// A lease renewed by the watchdog every `lease / 3` while the
            /// guard lives (the default, with the client's default lease;
            /// see [`Lock::watchdog`]).
            pub fn watchdog(self, lease: Duration) -> Self {
                Self(self.0.watchdog(lease))
            }

            /// How the lease is kept, as a value (see [`Lock::with_lease`]).
            pub fn with_lease(self, lease: Lease) -> Self {
                Self(self.0.with_lease(lease))
            }

            #[doc = concat!("How long [`", stringify!($Lock), "::acquire`] waits before giving up.")]
            /// Zero makes one attempt.
            pub fn wait(self, wait: Duration) -> Self {
                Self(self.0.wait(wait))
            }

            /// The longest pause between two attempts when no notification
            /// arrives (see [`Lock::retry_interval`]).
            pub fn retry_interval(self, interval: Duration) -> Self {
                Self(self.0.retry_interval(interval))
            }

            /// The `name` label of its metrics (see [`Lock::metric_name`]).
            pub fn metric_name(self, name: &str) -> Self {
                Self(self.0.metric_name(name))
            }

            /// The key as given.
            pub fn name(&self) -> &str {
                self.0.name()
            }

            /// Which hold this takes.
            pub fn mode(&self) -> RwMode {
                $mode
            }

            /// Checks the key and settings now, without a round trip (see
            /// [`Lock::validate`]).
            ///
            /// # Errors
            ///
            /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput)
            /// for a bad key, lease or retry interval.
            pub fn validate(&self) -> Result<()> {
                self.0.validate()
            }

            #[doc = concat!("Takes the lock ", $what, " if it can at once, without waiting or queueing.")]
            ///
            /// # Errors
            ///
            /// [`ErrorKind::Busy`](crate::ErrorKind::Busy) when it cannot
            /// (with [`Error::retry_after`] set when the store knows how
            /// long the holders' leases have left);
            /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput)
            /// for a bad key or lease;
            /// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) on
            /// a store without read-write locks; the store's errors.
            pub async fn try_acquire(&self) -> Result<$Guard> {
                self.0.try_acquire().await.map($Guard)
            }

            #[doc = concat!("[`try_acquire`](", stringify!($Lock), "::try_acquire) without awaiting, where the")]
            /// store answers in process; `None` (nothing sent) where it
            /// needs a round trip. See [`Lock::try_acquire_now`].
            ///
            /// # Errors
            ///
            #[doc = concat!("As [`", stringify!($Lock), "::try_acquire`].")]
            pub fn try_acquire_now(&self) -> Option<Result<$Guard>> {
                Some(self.0.try_acquire_now()?.map($Guard))
            }

            #[doc = concat!("Takes the lock ", $what, ", waiting in the key's queue up to the")]
            #[doc = concat!("configured bound (see [`", stringify!($Lock), "::wait`]).")]
            ///
            /// Readers and writers queue together, first come first served;
            /// see [`RwLock`] and, for the waiting itself, [`Lock::acquire`].
            /// Dropping the returned future at any point is safe: it leaves
            /// the queue, and a hold handed to it is passed on.
            ///
            /// # Errors
            ///
            #[doc = concat!("As [`", stringify!($Lock), "::try_acquire`], with `Busy` once the wait ran out;")]
            /// a store that cannot be reached is retried while the wait
            /// lasts (see [`Lock::acquire`]).
            pub async fn acquire(&self) -> Result<$Guard> {
                self.0.acquire().await.map($Guard)
            }

            #[doc = concat!("Runs `body` holding the lock ", $what, ": acquires it (waiting as")]
            /// configured), runs `body`, and releases it when `body` is
            /// done. A lost lease drops `body` at once and returns the
            /// lease-lost error, as [`Lock::run`] does; the hold is not
            /// reentrant inside `body`.
            ///
            /// # Errors
            ///
            #[doc = concat!("As [`", stringify!($Lock), "::acquire`] and [`Lock::run`].")]
            pub async fn run<F: Future>(&self, body: F) -> Result<F::Output> {
                let guard = self.acquire().await?;
                run_guarded(guard.0, body).await
            }
        }

        $(#[$guard_doc])*
        #[derive(Debug)]
        #[must_use = "dropping the guard releases the lock at once"]
        pub struct $Guard(pub(crate) LockGuard);

        impl $Guard {
            /// The lock's key as given.
            pub fn name(&self) -> &str {
                self.0.name()
            }

            /// Which hold this is.
            pub fn mode(&self) -> RwMode {
                $mode
            }

            /// The fencing token the hold was granted with (see
            /// [`RwLock`] for how reads' and writes' tokens are ordered).
            pub fn fencing_token(&self) -> FencingToken {
                self.0.fencing_token()
            }

            /// The lease this hold was taken with.
            pub fn lease(&self) -> Duration {
                self.0.lease()
            }

            /// Whether the hold is still ours: not reported lost, and the
            /// lease (minus a safety margin) not over.
            pub fn is_held(&self) -> bool {
                self.0.is_held()
            }

            /// How much longer the lease certainly lasts (zero once lost).
            pub fn valid_for(&self) -> Duration {
                self.0.valid_for()
            }

            /// Completes when the hold is lost or its lease is about to run
            /// out, with the error to report; see [`LockGuard::lost`].
            pub fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
                self.0.lost()
            }

            /// A handle on the hold's lease that does not hold it; see
            /// [`LockGuard::watch`].
            pub fn watch(&self) -> LeaseWatch {
                self.0.watch()
            }

            /// Resets the lease to `lease` from now, if the hold is still
            /// ours.
            ///
            /// # Errors
            ///
            /// As [`LockGuard::extend`].
            pub async fn extend(&self, lease: Duration) -> Result<()> {
                self.0.extend(lease).await
            }

            /// Releases the hold, handing the lock to the head of its queue
            /// when it is free, and reports whether the hold was still ours
            /// (`Ok(false)`: its lease had run out).
            ///
            /// # Errors
            ///
            /// The store's errors; the lease then frees the hold.
            pub async fn release(self) -> Result<bool> {
                self.0.release().await
            }

            #[doc = concat!("[`release`](", stringify!($Guard), "::release) without awaiting, where the store")]
            /// answers in process; the guard handed back, unreleased, where
            /// it needs a round trip. See [`LockGuard::try_release_now`].
            ///
            /// # Errors
            ///
            /// `Err(guard)` on a store that needs a round trip; inside `Ok`,
            #[doc = concat!("as [`", stringify!($Guard), "::release`].")]
            pub fn try_release_now(self) -> std::result::Result<Result<bool>, Self> {
                self.0.try_release_now().map_err(Self)
            }
        }
    };
}

rw_hold!(
    /// A [`RwLock`] taken to read, ready to be acquired: made by
    /// [`RwLock::read`]. Readers share the lock with each other, never with
    /// a writer, and queue behind a writer that waits.
    ReadLock,
    /// A read hold of a [`RwLock`]. Dropping it releases the hold in the
    /// background; [`ReadGuard::release`] is the explicit form.
    ReadGuard,
    RwMode::Read,
    "to read"
);

rw_hold!(
    /// A [`RwLock`] taken to write, ready to be acquired: made by
    /// [`RwLock::write`]. A writer holds the lock alone.
    WriteLock,
    /// The write hold of a [`RwLock`]. Dropping it releases the hold in
    /// the background; [`WriteGuard::release`] is the explicit form.
    WriteGuard,
    RwMode::Write,
    "to write"
);
