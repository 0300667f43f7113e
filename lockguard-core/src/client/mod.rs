//! The client handle: one store, a key prefix, defaults, and the machinery
//! shared by every primitive it hands out.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, MonotonicClock};
use crate::counter::Counter;
use crate::engine::{
    DEFAULT_RETRY_INTERVAL, DEFAULT_WAIT, DEFAULT_WAITER_TIMEOUT, Defaults, Engine,
    MIN_WAITER_TIMEOUT,
};
use crate::error::{Error, ErrorKind, Result};
use crate::fenced::FencedResource;
use crate::key::DEFAULT_PREFIX;
use crate::leader::Leader;
use crate::lease::{DEFAULT_LEASE, Lease, MAX_LEASE};
use crate::limiter::RateLimiter;
use crate::lock::Lock;
use crate::multi_lock::MultiLock;
use crate::rate_limit::Quota;
use crate::rw_lock::RwLock;
use crate::schedule::{JobRun, Schedule, Scheduled};
use crate::semaphore::Semaphore;
use crate::store::Store;
use crate::store::memory::MemoryStore;
use crate::token::Token;
use crate::upgradeable::UpgradeableRwLock;

/// The default timeout for connecting to a store.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The default timeout for one request to a store.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// The process-wide default client, for code (such as the attribute
/// macros) that is not handed one.
static DEFAULT: std::sync::RwLock<Option<Client>> = std::sync::RwLock::new(None);

/// A handle on one store (in memory, or a store crate's) that hands out locks and the
/// other primitives.
///
/// Cloning is cheap and clones share everything: the connections, the
/// pub/sub subscriber, and the identity that reentrancy goes by (see
/// [`LockGuard::scope`](crate::LockGuard::scope)).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockguard_core::Error> {
/// use lockguard_core::Client;
///
/// // The in-memory store here; a store crate's constructor
/// // (`lockguard_redis::ClientExt::connect`, ...) gives the same handle.
/// let lg = Client::memory();
/// let guard = lg.lock("report:daily").acquire().await?;
/// // ... exclusive work ...
/// assert!(guard.release().await?);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    engine: Arc<Engine>,
}

impl Client {
    /// A client on a fresh in-memory store, with default settings.
    ///
    /// Only clones of the returned handle share its locks.
    pub fn memory() -> Self {
        let b = Builder::default();
        let memory = Arc::new(MemoryStore::new(b.clock.clone()));
        b.finish(Store::new(memory, Vec::new()))
    }

    /// Makes this client the process-wide default, replacing any earlier
    /// one. Call it at start-up; the attribute macros use it when they are
    /// not given a `client`.
    pub fn install_default(&self) {
        *DEFAULT.write().unwrap_or_else(|p| p.into_inner()) = Some(self.clone());
    }

    /// The process-wide default client.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NoDefaultClient`] when none was installed with
    /// [`Client::install_default`].
    pub fn default_client() -> Result<Self> {
        DEFAULT
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::NoDefaultClient,
                    "no default lockguard client installed; call Client::install_default at start-up",
                )
            })
    }

    /// A builder for a client with non-default settings.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// A handle on the same store and connections that does not share
    /// reentrancy with this one: a lock held through `self` is not reentrant
    /// through the peer, even inside the holder's scope. Two peers behave
    /// like two processes, which is what tests of the in-memory store need.
    pub fn peer(&self) -> Self {
        Self {
            engine: Arc::new(self.engine.peer()),
        }
    }

    /// A lock on `name`. Nothing is sent until it is acquired.
    ///
    /// An invalid name (empty, longer than [`MAX_KEY_LEN`](crate::MAX_KEY_LEN)
    /// bytes, control characters) is reported by `acquire`.
    pub fn lock(&self, name: &str) -> Lock {
        Lock::new(self.engine.clone(), name)
    }

    /// A lock on every key in `names` at once: all of them or none, taken
    /// in one order every client shares (see [`MultiLock`]). Nothing is
    /// sent until it is acquired.
    ///
    /// No keys, more than [`MAX_MULTI_LOCK_KEYS`](crate::MAX_MULTI_LOCK_KEYS),
    /// or an invalid name is reported by `acquire`.
    pub fn multi_lock<I, S>(&self, names: I) -> MultiLock
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        MultiLock::new(&self.engine, names)
    }

    /// A read-write lock on `name`: many readers or one writer (see
    /// [`RwLock`]). Nothing is sent until it is acquired.
    ///
    /// An invalid name is reported by `acquire`.
    pub fn rw_lock(&self, name: &str) -> RwLock {
        RwLock::new(self.engine.clone(), name)
    }

    /// The read-write lock `name` with upgradeable reads: readers, one
    /// upgradeable reader beside them that can become the writer with no
    /// writer in between, and writers. A lock of its own, apart from
    /// [`rw_lock`](Self::rw_lock)`(name)`; see [`UpgradeableRwLock`].
    pub fn upgradeable_rw_lock(&self, name: &str) -> UpgradeableRwLock {
        UpgradeableRwLock::new(self.engine.clone(), name)
    }

    /// A semaphore admitting at most `permits` holders of `name` at once.
    ///
    /// A zero or oversized permit count is reported by `acquire`.
    pub fn semaphore(&self, name: &str, permits: u32) -> Semaphore {
        Semaphore::new(self.engine.clone(), name, permits)
    }

    /// An atomic counter.
    pub fn counter(&self, name: &str) -> Counter {
        Counter::new(self.engine.clone(), name)
    }

    /// A rate limiter named `name` (GCRA unless another algorithm is
    /// chosen), enforcing `quota` per key.
    ///
    /// A name that is empty or holds braces (which would choose the Redis
    /// Cluster slot of every key) is reported by each check.
    pub fn rate_limiter(&self, name: &str, quota: Quota) -> RateLimiter {
        RateLimiter::new(self.engine.clone(), name, quota)
    }

    /// The rate limiter of a call site that makes it at every call
    /// (`#[rate_limit]`'s): [`rate_limiter`](Self::rate_limiter) with
    /// `algorithm` and `shadow`, built from what `site` kept of its last
    /// call when that was the same limiter on this client, so that a call
    /// prepares nothing again.
    #[doc(hidden)]
    pub fn rate_limiter_at(
        &self,
        site: &crate::LimiterSite,
        name: &str,
        quota: Quota,
        algorithm: crate::Algorithm,
        shadow: bool,
    ) -> RateLimiter {
        RateLimiter::at_site(site, &self.engine, name, quota, algorithm, shadow)
    }

    /// A value that only accepts writes with fresh fencing tokens.
    pub fn fenced(&self, name: &str) -> FencedResource {
        FencedResource::new(self.engine.clone(), name)
    }

    /// Runs `job` once per period across every replica that schedules the
    /// same name (ShedLock's `@Scheduled` with `@SchedulerLock`), until the
    /// returned [`Scheduled`] is stopped or dropped.
    ///
    /// Each replica tries every period at its start (periods are counted on
    /// the wall clock from the Unix epoch, so replicas agree on them), and
    /// the one that takes the job's lock runs it:
    ///
    /// - **One run per period.** The lock (a key of its own kind, never the
    ///   key of [`Client::lock`] with the same name) is kept
    ///   [`at_least`](Schedule::at_least) after it was taken (half the
    ///   period by default), so a replica whose clock is behind finds it
    ///   taken; and, on every store with fenced values, the run writes the
    ///   period's number with the lock's fencing token before it starts, so
    ///   a period that ran is never run again, however far a replica's
    ///   clock is off. A replica that starts mid-period runs that period
    ///   at once, unless it has run. (On Redlock, which keeps no fenced
    ///   values, `at_least` alone keeps runs apart: a replica that starts
    ///   mid-period waits for the next, and one that takes the lock later
    ///   than `at_least` into the period, its process paused or its
    ///   attempt slow, skips it, as an earlier run's lock may have been let
    ///   go by then.)
    /// - **A run lasts at most [`at_most`](Schedule::at_most)** (the
    ///   period by default): the lock's fixed lease. A run still going then
    ///   is cancelled, since another replica may take the lock; a replica
    ///   whose process died mid-run is replaced for the next period once
    ///   the lease ends.
    /// - A period whose run is still going when the next starts is skipped.
    ///   The job's error is logged (`WARN`), and the next period runs as
    ///   usual. Each period is counted in
    ///   `lockguard_scheduled_runs_total` (feature `metrics`).
    ///
    /// The job gets a [`JobRun`]: the period's number and the lock's
    /// fencing token, for its fenced writes.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// bad name, a zero period, an `at_least` not shorter than the period
    /// or longer than `at_most`, a lease the store cannot keep, or a call
    /// outside a tokio runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lockguard_core::Error> {
    /// use std::time::Duration;
    /// use lockguard_core::{Client, JobRun};
    /// let lg = Client::memory();
    /// let (ran, mut runs) = tokio::sync::mpsc::unbounded_channel();
    /// let report = lg.schedule("nightly-report", Duration::from_millis(100), move |run: JobRun| {
    ///     let ran = ran.clone();
    ///     async move {
    ///         // The job's work, its writes fenced with run.fencing_token().
    ///         ran.send(run.period()).ok();
    ///         Ok::<_, std::io::Error>(())
    ///     }
    /// })?;
    /// let first = runs.recv().await.unwrap();
    /// let next = runs.recv().await.unwrap();
    /// assert!(next > first); // once per period
    /// report.stop().await;
    /// # Ok(()) }
    /// ```
    pub fn schedule<F, Fut, T, E>(
        &self,
        name: &str,
        schedule: impl Into<Schedule>,
        job: F,
    ) -> Result<Scheduled>
    where
        F: FnMut(JobRun) -> Fut + Send + 'static,
        Fut: Future<Output = std::result::Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        crate::schedule::start(self.engine().clone(), name, schedule.into(), job)
    }

    /// The election `name`: candidates [`campaign`](Leader::campaign) to
    /// lead, one at a time, and anyone can read and watch who leads. Nothing
    /// is sent until asked.
    ///
    /// An invalid name (as for [`Client::lock`]) is reported by each call.
    pub fn leader(&self, name: &str) -> Leader {
        Leader::new(self.engine.clone(), name)
    }

    /// The engine behind this handle, for primitives that reach a second
    /// client's store.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Whether two handles are clones of one client (sharing its store and
    /// the identity reentrancy goes by).
    pub fn same_client(&self, other: &Client) -> bool {
        Arc::ptr_eq(&self.engine, &other.engine)
    }

    /// The prefix of every key this client writes.
    pub fn prefix(&self) -> &str {
        &self.engine.prefix
    }

    /// The store's name: `"memory"`, `"redis"` (Sentinel too),
    /// `"redis-cluster"`, `"redlock"`, `"postgres"`, `"mysql"` or
    /// `"zookeeper"` for lockguard's stores, or what another store's
    /// boundary calls itself.
    pub fn store_name(&self) -> &'static str {
        self.engine.store.name()
    }

    /// The longest lease the store keeps, where it has a bound (ZooKeeper
    /// and etcd: two thirds of the session timeout or lease TTL); `None`
    /// for a store that keeps any lease asked for. Locks renewed by their
    /// watchdog are not bound by it.
    pub fn max_lease(&self) -> Option<Duration> {
        self.engine.store.max_lease()
    }

    /// Where the store is (`127.0.0.1:6379`, the members of a cluster, a
    /// password masked), as its store crate said when it connected; `None`
    /// for the in-memory store.
    pub fn store_address(&self) -> Option<&str> {
        self.engine.store.address()
    }

    /// The store's name: [`Client::store_name`], by its former name.
    #[deprecated(note = "renamed to `store_name`")]
    pub fn backend_name(&self) -> &'static str {
        self.store_name()
    }
}

impl Leader {
    /// Announces on `client`'s store instead of this client's: for an
    /// election on a store without fenced values (Redlock), whose
    /// announcements then live on one Redis server (or any store) that
    /// every candidate and reader names the same way. The term still comes
    /// from this client's lock, and `client`'s prefix names the key.
    pub fn announce_on(self, client: &Client) -> Self {
        self.announce_with(client.engine().clone())
    }
}

/// Settings for a [`Client`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let lg = lockguard_core::Client::builder()
///     .prefix("billing:")
///     .default_wait(Duration::from_secs(2))
///     .memory()?;
/// assert_eq!(lg.prefix(), "billing:");
/// # Ok::<(), lockguard_core::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Builder {
    prefix: String,
    defaults: Defaults,
    connection: ConnectionSettings,
    clock: Arc<dyn Clock>,
}

/// The connection settings of a [`Builder`], for a store crate to open its
/// connections with: see [`Builder::connection_settings`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionSettings {
    /// How long to wait for a connection ([`Builder::connect_timeout`]).
    pub connect_timeout: Duration,
    /// How long to wait for an answer ([`Builder::response_timeout`]).
    pub response_timeout: Duration,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_PREFIX.to_owned(),
            defaults: Defaults {
                lease: DEFAULT_LEASE,
                wait: DEFAULT_WAIT,
                retry_interval: DEFAULT_RETRY_INTERVAL,
                waiter_timeout: DEFAULT_WAITER_TIMEOUT,
            },
            connection: ConnectionSettings {
                connect_timeout: DEFAULT_CONNECT_TIMEOUT,
                response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            },
            clock: Arc::new(MonotonicClock::new()),
        }
    }
}

impl Builder {
    /// The prefix of every key the client writes (default `"lockguard:"`).
    ///
    /// It may not contain braces: lockguard chooses each key's Redis Cluster
    /// slot with a hash tag of its own, so a script's keys share a slot. A
    /// prefix with braces is refused when the client is built.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The lease of locks renewed by the watchdog (default 30 s).
    pub fn default_lease(mut self, lease: Duration) -> Self {
        self.defaults.lease = lease;
        self
    }

    /// How long `acquire` waits for a busy lock (default 10 s).
    pub fn default_wait(mut self, wait: Duration) -> Self {
        self.defaults.wait = wait;
        self
    }

    /// The longest pause between attempts when no notification arrives
    /// (default 500 ms; queued waiters refresh their place more often when
    /// the waiter timeout asks for it). Waiters also retry when the
    /// holder's lease ends, whichever comes first.
    pub fn retry_interval(mut self, interval: Duration) -> Self {
        self.defaults.retry_interval = interval;
        self
    }

    /// How long a queued waiter that stops answering keeps its place in a
    /// lock's or semaphore's wait queue (default 1 s, at least 50 ms).
    ///
    /// Waiters refresh their place every third of this while they wait; a
    /// waiter whose process died or whose connection is gone is skipped once
    /// it has been silent this long, so it delays the queue by at most this,
    /// never by a lease.
    pub fn waiter_timeout(mut self, timeout: Duration) -> Self {
        self.defaults.waiter_timeout = timeout;
        self
    }

    /// How long connecting to the store may take (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connection.connect_timeout = timeout;
        self
    }

    /// How long one request to the store may take (default 2 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.connection.response_timeout = timeout;
        self
    }

    /// The clock of the in-memory store's rate limiters and counter
    /// expiry (default: [`MonotonicClock`]). A Redis client ignores it: on
    /// Redis, time comes from the server.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The lease of locks renewed by the watchdog, as set with
    /// [`Builder::default_lease`]: for a store crate's checks of its own
    /// settings against it.
    pub fn get_default_lease(&self) -> Duration {
        self.defaults.lease
    }

    /// The connection settings a store crate opens its connections with.
    pub fn connection_settings(&self) -> ConnectionSettings {
        self.connection
    }

    /// Checks the settings, as every constructor does before it connects:
    /// a store crate's constructor calls it first, so settings that cannot
    /// work are reported before any connection is made.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for settings that cannot work (a prefix
    /// with a brace, a zero retry interval, a default lease below
    /// [`MIN_WATCHDOG_LEASE`](crate::MIN_WATCHDOG_LEASE)).
    pub fn validate(&self) -> Result<()> {
        crate::key::validate_plain("key prefix", &self.prefix)?;
        let d = &self.defaults;
        Lease::Watchdog(d.lease).validate()?;
        if d.retry_interval.is_zero() {
            return Err(Error::invalid("retry interval must be greater than zero"));
        }
        if d.waiter_timeout < MIN_WAITER_TIMEOUT || d.waiter_timeout > MAX_LEASE {
            return Err(Error::invalid(format!(
                "waiter timeout must be between {MIN_WAITER_TIMEOUT:?} and {MAX_LEASE:?}, got {:?}",
                d.waiter_timeout
            )));
        }
        for (what, t) in [
            ("connect timeout", self.connection.connect_timeout),
            ("response timeout", self.connection.response_timeout),
        ] {
            if t.is_zero() || t > MAX_LEASE {
                return Err(Error::invalid(format!(
                    "{what} must be between zero and {MAX_LEASE:?}, got {t:?}"
                )));
            }
        }
        Ok(())
    }

    /// A client on `store`, a store of any crate built on the
    /// [store boundary](crate::store).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for settings that cannot work (a zero
    /// retry interval, a default lease below [`MIN_WATCHDOG_LEASE`](crate::MIN_WATCHDOG_LEASE)).
    pub fn build(self, store: Store) -> Result<Client> {
        self.validate()?;
        Ok(self.finish(store))
    }

    /// The client on `store`.
    fn finish(self, store: Store) -> Client {
        // The channel this client's queued waiters are told on that a lock
        // was handed to them: one per client, unique.
        let channel = format!("{}waiters:{}", self.prefix, Token::random().as_str());
        Client {
            engine: Arc::new(Engine::new(store, self.prefix, self.defaults, channel)),
        }
    }

    /// A client on a fresh in-memory store.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for settings that cannot work (a zero
    /// retry interval, a default lease below [`MIN_WATCHDOG_LEASE`](crate::MIN_WATCHDOG_LEASE)).
    pub fn memory(self) -> Result<Client> {
        self.validate()?;
        let memory = Arc::new(MemoryStore::new(self.clock.clone()));
        Ok(self.finish(Store::new(memory, Vec::new())))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{ErrorKind, LockGuard};

    /// Inside the scope of a guard whose lease is over, a task asks for the
    /// lock while the guard is dropped on another thread: the reference the
    /// reentrancy check takes may be the last one, and dropping it must not
    /// deadlock (it did when reentrancy was a registry behind a mutex).
    /// (Issue 11, item 3.)
    #[test]
    fn reentrancy_check_racing_the_last_drop_does_not_deadlock() {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            let lg = Client::memory();
            for _ in 0..5_000 {
                let guard = rt
                    .block_on(lg.lock("race").lease(Duration::from_secs(30)).acquire())
                    .unwrap();
                // Lost: the reentrancy check upgrades and then rejects it.
                guard.mark_lost_for_test();
                // The guard moves into its own scope, to be dropped from it.
                let slot = std::sync::Mutex::new(None);
                let body = async {
                    let guard: LockGuard = slot.lock().unwrap().take().unwrap();
                    let dropper = std::thread::spawn(move || drop(guard));
                    while !dropper.is_finished() {
                        let again = lg.lock("race").try_acquire().await;
                        assert!(again.is_err() || !again.unwrap().is_reentrant());
                    }
                    dropper.join().unwrap();
                };
                let scope = guard.scope(body);
                *slot.lock().unwrap() = Some(guard);
                rt.block_on(scope);
                // Let the background releases run.
                rt.block_on(tokio::task::yield_now());
            }
            done.send(()).unwrap();
        });
        finished
            .recv_timeout(Duration::from_secs(60))
            .expect("the reentrancy check deadlocked against a concurrent drop");
    }

    #[test]
    fn waiter_timeouts_are_validated() {
        for bad in [Duration::ZERO, Duration::from_millis(49), MAX_LEASE * 2] {
            let err = Client::builder().waiter_timeout(bad).memory().unwrap_err();
            assert!(err.is_invalid_input(), "{bad:?}: {err}");
        }
        assert!(
            Client::builder()
                .waiter_timeout(crate::MIN_WAITER_TIMEOUT)
                .memory()
                .is_ok()
        );
    }

    /// A watch sees the guard's token and lease, does not keep the lock,
    /// and reports the end of the hold: `lost()` completes and
    /// `is_held()` turns false when the guard is released or dropped.
    #[tokio::test]
    async fn a_watch_follows_the_guard_without_holding_the_lock() {
        let lg = Client::memory();
        let guard = lg.lock("watched").acquire().await.unwrap();
        let watch = guard.watch();
        assert_eq!(watch.fencing_token(), guard.fencing_token());
        assert_eq!(watch.name(), "watched");
        assert!(watch.is_held() && watch.valid_for() > Duration::ZERO);
        let lost = watch.lost();
        assert!(guard.release().await.unwrap());
        let err = tokio::time::timeout(Duration::from_secs(5), lost)
            .await
            .expect("lost() did not complete on release");
        assert_eq!(err.kind(), ErrorKind::LeaseLost);
        assert!(!watch.is_held() && watch.valid_for() == Duration::ZERO);
        // The watch kept nothing: the key is free.
        let again = lg.lock("watched").try_acquire().await.unwrap();
        let dropped = again.watch();
        drop(again);
        tokio::time::timeout(Duration::from_secs(5), dropped.lost())
            .await
            .expect("lost() did not complete on drop");
        assert!(!dropped.is_held());
    }

    /// `release()` of the last guard releases at once, even while another
    /// reference to the hold's guards is alive (a reentrancy check of the
    /// owning task holds one for a moment): the key is free when it
    /// returns, and it reports that the lock was held. (Issue 11, item 13:
    /// it returned `is_held()` and left the release to whoever dropped the
    /// last reference, its result lost.)
    #[tokio::test]
    async fn release_of_the_last_guard_releases_now() {
        let lg = Client::memory();
        let guard = lg
            .lock("now")
            .lease(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap();
        let other_reference = guard.guards().clone();
        assert!(guard.release().await.unwrap(), "the lock was held");
        let again = lg.peer().lock("now").try_acquire().await;
        assert!(again.is_ok(), "the key was not released: {again:?}");
        drop(other_reference);
    }

    /// Reentrant guards share one hold: giving up a share keeps the
    /// lock, and the last guard's release frees it and reports so.
    #[tokio::test]
    async fn the_last_of_shared_guards_releases() {
        let lg = Client::memory();
        let outer = lg.lock("shared").acquire().await.unwrap();
        let inner = outer.scope(lg.lock("shared").acquire()).await.unwrap();
        assert!(inner.is_reentrant());
        assert!(
            outer.release().await.unwrap(),
            "still held by the inner guard"
        );
        assert!(lg.peer().lock("shared").try_acquire().await.is_err());
        assert!(inner.release().await.unwrap());
        assert!(lg.peer().lock("shared").try_acquire().await.is_ok());
    }
}
