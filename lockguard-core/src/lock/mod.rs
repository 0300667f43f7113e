//! Acquiring a distributed lock: one attempt, or a bounded wait in the
//! key's queue in the store, woken by the release that hands the lock over.
//!
//! - `mod.rs`: the lock, its settings, and the acquisitions users call;
//! - `attempt.rs`: one attempt on the store, and what its answer gives;
//! - `queue.rs`: the wait in the key's queue in the store, and the handoff
//!   that ends it;
//! - `line.rs`: the wait in the key's line, on a store without a queue
//!   (Redlock);
//! - `pace.rs`: how long a waiter pauses between its attempts.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::Engine;
use crate::error::{Error, ErrorKind, Invalid, Result};
use crate::guard::{LockGuard, run_guarded};
use crate::key::{LockKeys, Resource};
use crate::lease::Lease;
use crate::meter::Series;
use crate::span::instrumented;
use crate::store::{Occupancy, Waiting};

mod attempt;
mod line;
mod pace;
mod queue;

pub(crate) use queue::LAPSES_IN_A_ROW;

/// A distributed lock on one key, ready to be acquired.
///
/// Made by [`Client::lock`](crate::Client::lock). Without [`Lock::lease`], the lease is the
/// client's default (30 s) and a watchdog renews it every third of the lease
/// while the guard lives, so work of any length stays protected and a
/// crashed process frees the lock within one lease.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockguard_core::Error> {
/// use std::time::Duration;
/// let lg = lockguard_core::Client::memory();
///
/// let guard = lg
///     .lock("order:42")
///     .lease(Duration::from_secs(10)) // no watchdog: 10 s, then it is free
///     .wait(Duration::from_secs(2)) // give up after 2 s if busy
///     .acquire()
///     .await?;
///
/// // A second attempt from another task finds it busy.
/// let busy = tokio::spawn({
///     let lg = lg.clone();
///     async move { lg.lock("order:42").try_acquire().await }
/// })
/// .await
/// .unwrap();
/// assert!(busy.unwrap_err().is_busy());
///
/// assert!(guard.release().await?);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a lock does nothing until acquired"]
pub struct Lock {
    engine: Arc<Engine>,
    name: Arc<str>,
    keys: Result<Arc<LockKeys>, Invalid>,
    lease: Lease,
    /// How long after it was taken a release keeps the lock (zero: none).
    at_least: Duration,
    wait: Duration,
    retry_interval: Duration,
    /// The `name` label of its metrics, when not the name.
    metric_name: Option<Arc<str>>,
    /// Its metrics' series, named at its first grant.
    #[cfg(feature = "metrics")]
    series: std::sync::OnceLock<Series>,
}

impl Lock {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        let keys = crate::key::validate_key("lock", name)
            .map(|()| Arc::new(LockKeys::new(&engine.prefix, name, Resource::Lock)))
            .map_err(Invalid::from);
        Self::with_keys(engine, name, keys)
    }

    /// The lock behind the election `name` ([`Leader`](crate::Leader)), on
    /// a key of its own kind.
    pub(crate) fn election(engine: Arc<Engine>, name: &str) -> Self {
        let keys = crate::key::validate_key("election", name)
            .map(|()| Arc::new(LockKeys::election(&engine.prefix, name)))
            .map_err(Invalid::from);
        Self::with_keys(engine, name, keys)
    }

    /// The lock behind the scheduled job `name`
    /// ([`Client::schedule`](crate::Client::schedule)), on a key of its own
    /// kind.
    pub(crate) fn scheduled(engine: Arc<Engine>, name: &str) -> Self {
        let keys = crate::key::validate_key("scheduled job", name)
            .map(|()| {
                Arc::new(LockKeys::of_kind(
                    &engine.prefix,
                    crate::key::SCHEDULE_KIND,
                    name,
                ))
            })
            .map_err(Invalid::from);
        Self::with_keys(engine, name, keys)
    }

    /// A lock of its own `kind` (an upgradeable read-write lock's gate),
    /// `what` in its errors.
    pub(crate) fn of_kind(engine: Arc<Engine>, name: &str, kind: &str, what: &str) -> Self {
        let keys = crate::key::validate_key(what, name)
            .map(|()| Arc::new(LockKeys::of_kind(&engine.prefix, kind, name)))
            .map_err(Invalid::from);
        Self::with_keys(engine, name, keys)
    }

    /// One hold of a read-write lock of `kind` (an upgradeable one's).
    pub(crate) fn rw_of_kind(
        engine: Arc<Engine>,
        name: &str,
        kind: &str,
        mode: crate::key::RwMode,
    ) -> Self {
        let keys = crate::key::validate_key("read-write lock", name)
            .map(|()| Arc::new(LockKeys::rw_of_kind(&engine.prefix, kind, name, mode)))
            .map_err(Invalid::from);
        Self::with_keys(engine, name, keys)
    }

    /// The acquirer behind a semaphore: the same leases, watchdog and
    /// waiting, on permits instead of one lock.
    pub(crate) fn semaphore(engine: Arc<Engine>, name: &str, permits: u32) -> Self {
        let keys = crate::key::validate_key("semaphore", name)
            .and_then(|()| {
                // Checked before anything is sent: an attempt that cannot
                // reach the store arms no background release.
                let max = engine.store.max_permits();
                if permits == 0 || permits > max {
                    Err(Error::invalid(format!(
                        "semaphore {name:?} needs between 1 and {max} permits on a {} client, got {permits}",
                        engine.store.name()
                    )))
                } else {
                    Ok(())
                }
            })
            .map(|()| {
                let resource = Resource::Semaphore { permits };
                Arc::new(LockKeys::new(&engine.prefix, name, resource))
            })
            .map_err(Invalid::from);
        Self::with_keys(engine, name, keys)
    }

    /// The acquirer behind one hold of a read-write lock: the same leases,
    /// watchdog and waiting, on a read or a write hold of one key.
    pub(crate) fn rw(engine: Arc<Engine>, name: &str, mode: crate::key::RwMode) -> Self {
        let keys = crate::key::validate_key("read-write lock", name)
            .map(|()| Arc::new(LockKeys::rw(&engine.prefix, name, mode)))
            .map_err(Invalid::from);
        Self::with_keys(engine, name, keys)
    }

    fn with_keys(engine: Arc<Engine>, name: &str, keys: Result<Arc<LockKeys>, Invalid>) -> Self {
        let defaults = engine.defaults;
        Self {
            name: name.into(),
            keys,
            lease: Lease::Watchdog(defaults.lease),
            at_least: Duration::ZERO,
            wait: defaults.wait,
            retry_interval: defaults.retry_interval,
            metric_name: None,
            #[cfg(feature = "metrics")]
            series: std::sync::OnceLock::new(),
            engine,
        }
    }

    /// A fixed lease with no watchdog: the lock frees itself `lease` after
    /// it was taken unless extended.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Lease::Fixed(lease);
        self
    }

    /// A lease of `lease` renewed by the watchdog every `lease / 3` while the
    /// guard lives (the default, with the client's default lease).
    pub fn watchdog(mut self, lease: Duration) -> Self {
        self.lease = Lease::Watchdog(lease);
        self
    }

    /// How the lease is kept: [`Lock::lease`] or [`Lock::watchdog`] as a
    /// value, for settings that choose between them.
    pub fn with_lease(mut self, lease: Lease) -> Self {
        self.lease = lease;
        self
    }

    /// Keeps the lock until at least `at_least` after it was taken, even
    /// when the guard is released (or dropped) sooner: the release then
    /// leaves the lock to expire at that moment instead of freeing it (and
    /// stops the watchdog). For a job that runs on many replicas on a
    /// schedule: a replica whose clock runs a little behind finds the lock
    /// still taken and skips the run, so each period's job runs once
    /// (ShedLock's `lockAtLeastFor`). The lease is the most the lock is
    /// kept ([`Lock::lease`], `lockAtMostFor`); zero (the default) keeps
    /// nothing.
    ///
    /// Counted from when the acquisition returned, so the lock is kept at
    /// least that long after the store took it. A holder whose process
    /// dies before its release leaves the lock to its lease, as always.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lockguard_core::Error> {
    /// use std::time::Duration;
    /// let lg = lockguard_core::Client::memory();
    /// let report = lg
    ///     .lock("nightly-report")
    ///     .lease(Duration::from_secs(600)) // at most 10 minutes
    ///     .at_least(Duration::from_secs(30)); // at least 30 s
    /// let guard = report.try_acquire().await?;
    /// // The job is done in moments; the lock stays for the 30 s.
    /// assert!(guard.release().await?);
    /// assert!(lg.peer().lock("nightly-report").try_acquire().await.unwrap_err().is_busy());
    /// # Ok(()) }
    /// ```
    pub fn at_least(mut self, at_least: Duration) -> Self {
        self.at_least = at_least;
        self
    }

    /// How long [`Lock::acquire`] waits for a busy lock before giving up.
    /// Zero makes one attempt, as [`Lock::try_acquire`] does.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The longest pause between two attempts of a waiter when no
    /// notification arrives (queued waiters also refresh their place every
    /// third of the waiter timeout, whichever is shorter). The safety net
    /// for a lost pub/sub message; waiters also retry when the holder's
    /// lease runs out.
    pub fn retry_interval(mut self, interval: Duration) -> Self {
        self.retry_interval = interval;
        self
    }

    /// The `name` label of this lock's metrics (feature `metrics`; see the
    /// [crate docs](crate#metrics)), instead of its name: for names that
    /// carry an id, so that `order:42` and `order:43` count as `order`
    /// rather than making a series each. Without the `metrics` feature it
    /// keeps nothing (a lock made per request pays nothing for it).
    pub fn metric_name(self, name: &str) -> Self {
        #[cfg(feature = "metrics")]
        {
            Self {
                metric_name: Some(name.into()),
                series: std::sync::OnceLock::new(),
                ..self
            }
        }
        #[cfg(not(feature = "metrics"))]
        {
            let _ = name;
            self
        }
    }

    /// The key as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The lock's keys, or the error its name was refused with.
    pub(crate) fn keys(&self) -> Result<&Arc<LockKeys>> {
        self.keys.as_ref().map_err(Invalid::error)
    }

    /// Records in the metrics an acquisition that began at `started` and
    /// ended with `outcome` outside [`Lock::finish`].
    pub(crate) fn record(&self, started: Instant, outcome: Result<(), &Error>) {
        match outcome {
            Ok(()) => self.series().acquired(started),
            Err(e) => crate::meter::refused(self.primitive(), self.metric_label(), e),
        }
    }

    /// The client the lock belongs to.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Whether an enclosing scope holds this lock (an acquisition would be
    /// reentrant).
    pub(crate) fn in_scope(&self) -> bool {
        self.keys
            .as_ref()
            .is_ok_and(|k| crate::reentry::find(&self.engine, &k.lock).is_some())
    }

    /// The lock's identity in the store; empty for a refused name.
    pub(crate) fn id(&self) -> &str {
        self.keys.as_ref().map_or("", |k| k.id())
    }

    fn metric_label(&self) -> &Arc<str> {
        self.metric_name.as_ref().unwrap_or(&self.name)
    }

    /// Its metrics' series, shared by its holds (without the `metrics`
    /// feature, an empty value: nothing is kept).
    pub(crate) fn series(&self) -> Series {
        #[cfg(feature = "metrics")]
        {
            self.series
                .get_or_init(|| {
                    self.engine
                        .series
                        .series(self.primitive(), self.metric_label())
                })
                .clone()
        }
        #[cfg(not(feature = "metrics"))]
        Series::new(self.primitive(), self.metric_label())
    }

    /// The `primitive` label of its metrics.
    fn primitive(&self) -> &'static str {
        match &self.keys {
            Ok(keys) => crate::meter::primitive(keys),
            Err(_) => "lock",
        }
    }

    /// Records how an acquisition in `span` ended: its fencing token and
    /// how long it took, in the span and in the metrics.
    pub(crate) fn finish(
        &self,
        span: &tracing::Span,
        started: Instant,
        result: Result<LockGuard>,
    ) -> Result<LockGuard> {
        // The clock is read only for a span or metrics that take it.
        if !span.is_disabled() {
            if let Ok(guard) = &result {
                span.record("fence", guard.fencing_token().get());
            }
            let waited = started.elapsed();
            span.record(
                "waited_ms",
                u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
            );
        }
        self.record(started, result.as_ref().map(drop));
        result
    }

    /// Checks the key and settings now, without a round trip: what
    /// [`Lock::acquire`] would refuse as [`ErrorKind::InvalidInput`] before
    /// reaching the store. For configuration checked at start-up.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a bad key, lease or retry interval
    /// (or, for a semaphore, permit count).
    pub fn validate(&self) -> Result<()> {
        self.checked().map(drop)
    }

    pub(crate) fn checked(&self) -> Result<(&Arc<LockKeys>, Duration)> {
        let keys = self.keys.as_ref().map_err(Invalid::error)?;
        let lease = self.effective_lease()?;
        if self.retry_interval.is_zero() {
            return Err(Error::invalid("retry interval must be greater than zero"));
        }
        self.check_at_least(lease)?;
        Ok((keys, lease.duration()))
    }

    /// `at_least` fits under the lease: a fixed lease is the most the lock
    /// is kept, and a store keeps no lease longer than its own bound.
    fn check_at_least(&self, lease: Lease) -> Result<()> {
        let at_least = self.at_least;
        if at_least.is_zero() {
            return Ok(());
        }
        if let Lease::Fixed(most) = lease
            && at_least > most
        {
            return Err(Error::invalid(format!(
                "lock {:?}: at_least ({at_least:?}) is longer than its fixed lease ({most:?}), which is the most the lock is kept",
                self.name
            )));
        }
        let max = self
            .engine
            .store
            .max_lease()
            .unwrap_or(crate::lease::MAX_LEASE);
        if at_least > max {
            return Err(Error::invalid(format!(
                "lock {:?}: at_least ({at_least:?}) is longer than the longest lease a {} client keeps ({max:?})",
                self.name,
                self.engine.store.name()
            )));
        }
        Ok(())
    }

    /// The lease, validated and fitted to the store: a watchdog lease
    /// longer than the store can keep (a ZooKeeper session timeout) is
    /// shortened to it (renewed more often); a longer fixed lease is an
    /// error, since nothing would renew it.
    fn effective_lease(&self) -> Result<Lease> {
        let duration = self.lease.validate()?;
        match self.engine.store.max_lease() {
            Some(max) if duration > max => match self.lease {
                Lease::Watchdog(_) => Ok(Lease::Watchdog(max)),
                _ => Err(Error::invalid(format!(
                    "a fixed lease on this {} client can be at most {max:?} (two thirds \
                     of its session timeout or lease TTL), got {duration:?}; use the \
                     watchdog or a longer session",
                    self.engine.store.name()
                ))),
            },
            _ => Ok(self.lease),
        }
    }

    /// Takes the lock if it is free, without waiting.
    ///
    /// Inside the [`scope`](LockGuard::scope) of a guard of this lock (the
    /// body of [`Lock::run`] or of a `#[distributed_lock]` function), the
    /// guard is reentrant and given at once.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Busy`] when another holder has it (with
    /// [`Error::retry_after`] set to the holder's remaining lease when known);
    /// [`ErrorKind::InvalidInput`] for a bad key or lease; the store's errors.
    pub async fn try_acquire(&self) -> Result<LockGuard> {
        let (span, started) = (self.span("try_acquire"), Instant::now());
        let result = instrumented(self.try_acquire_inner(), &span).await;
        self.finish(&span, started, result)
    }

    async fn try_acquire_inner(&self) -> Result<LockGuard> {
        let (keys, lease) = self.checked()?;
        if let Some(guard) = self.reenter(keys) {
            return Ok(guard);
        }
        match self.attempt(keys, lease, None).await? {
            Ok(guard) => Ok(guard),
            Err(wait) => Err(self.busy(wait.ttl(), Duration::ZERO)),
        }
    }

    /// [`try_acquire`](Lock::try_acquire) without awaiting, where the store
    /// answers in process (the [in-memory](crate::Client::memory) store):
    /// the same single attempt, with the same outcome, taken before this
    /// returns. `None` on a store that must be asked over the network
    /// (nothing is sent): then `try_acquire().await`.
    ///
    /// For callers that can skip a future when the answer is known: an
    /// HTTP layer takes a request's lock without boxing an acquisition.
    ///
    /// # Errors
    ///
    /// As [`Lock::try_acquire`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lockguard_core::Result<()> {
    /// let lg = lockguard_core::Client::memory();
    /// let lock = lg.lock("report");
    /// let guard = match lock.try_acquire_now() {
    ///     Some(taken) => taken?,
    ///     None => lock.try_acquire().await?,
    /// };
    /// assert!(lg.peer().lock("report").try_acquire_now().unwrap().unwrap_err().is_busy());
    /// assert!(matches!(guard.try_release_now(), Ok(Ok(true))));
    /// # Ok(()) }
    /// ```
    pub fn try_acquire_now(&self) -> Option<Result<LockGuard>> {
        if !self.engine.store.answers_at_once() {
            return None;
        }
        let (span, started) = (self.span("try_acquire"), Instant::now());
        let result = crate::span::in_span(&span, || {
            let (keys, lease) = match self.checked() {
                Ok(checked) => checked,
                Err(e) => return Some(Err(e)),
            };
            if let Some(guard) = self.reenter(keys) {
                return Some(Ok(guard));
            }
            // Sent as the attempt starts: its clock reading serves both.
            Some(match self.attempt_now(keys, lease, started)? {
                Ok(Ok(guard)) => Ok(guard),
                Ok(Err(wait)) => Err(self.busy(wait.ttl(), Duration::ZERO)),
                Err(e) => Err(e),
            })
        })?;
        Some(self.finish(&span, started, result))
    }

    /// Takes the lock, waiting up to the configured bound (see
    /// [`Lock::wait`]) while someone else holds it.
    ///
    /// Waiters queue in the store, first come first served across every
    /// client and process. A release hands the lock straight to the first
    /// live waiter and wakes that one alone, which returns at once (valid
    /// from its own last request, see the [`safety`](crate::safety) page) and
    /// extends it to its lease a third of the way into its reservation,
    /// if it still holds it then; a waiter never takes a free
    /// lock while others queue ahead of it. While it waits, a waiter
    /// refreshes its place every third of the client's waiter timeout (see
    /// [`Builder::waiter_timeout`]); that refresh also claims a lock handed
    /// over while a notification was lost, and a waiter that stops
    /// refreshing (its process died) is skipped after the timeout. It never
    /// spins.
    ///
    /// On a store without a queue (Redlock) waiters line up on every node
    /// by when they began to wait, and only the first live one takes a
    /// free lock; they attempt again when a release is announced, after
    /// the holder's lease, or after a jittered retry interval, whichever
    /// comes first.
    ///
    /// Inside the [`scope`](LockGuard::scope) of a guard of this lock, the
    /// guard is reentrant and given at once.
    ///
    /// Dropping the returned future at any point is safe: it leaves the
    /// queue, and a lock handed to it but not yet returned is passed on, in
    /// the background.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Busy`] when the wait ran out; [`ErrorKind::InvalidInput`]
    /// for a bad key or lease. A store that cannot be reached
    /// ([`ErrorKind::Unavailable`], [`ErrorKind::Timeout`]: a restart, a
    /// failover, a new session, a lost quorum) is retried with backoff
    /// (10 ms doubling to 1 s) while the wait lasts, so a wait rides out a
    /// blip shorter than itself; when the wait ends on such a failure, that
    /// error is returned, saying it was retried. Other store errors are
    /// returned at once. With no wait ([`Lock::try_acquire`], `wait(0)`)
    /// every error is returned at once. A lock granted after its lease
    /// could have run out (the store or this process stalled past it) is
    /// given back and waited for again; [`ErrorKind::Timeout`] when that
    /// happens five times in a row (a lease shorter than the store takes to
    /// answer: give the lock a longer one).
    ///
    /// [`Builder::waiter_timeout`]: crate::Builder::waiter_timeout
    pub async fn acquire(&self) -> Result<LockGuard> {
        let (span, started) = (self.span("acquire"), Instant::now());
        let result = instrumented(self.acquire_inner(), &span).await;
        self.finish(&span, started, result)
    }

    /// What the store knows of this lock now, in one round trip that
    /// changes nothing: whether it is held and for how long yet, how many
    /// wait, and the newest fencing token of its sequence. For dashboards
    /// and "who holds it" questions, not for deciding to acquire: the
    /// answer may be stale by the time it arrives.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lockguard_core::Error> {
    /// use std::time::Duration;
    /// let lg = lockguard_core::Client::memory();
    /// let lock = lg.lock("report").lease(Duration::from_secs(30));
    /// assert!(!lock.inspect().await?.is_held());
    /// let guard = lock.acquire().await?;
    /// let now = lock.inspect().await?;
    /// assert!(now.is_held() && now.lease_left.unwrap() <= Duration::from_secs(30));
    /// assert!(now.latest_fence >= Some(guard.fencing_token()));
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a bad key; [`ErrorKind::Unsupported`]
    /// on a Redlock client (its nodes may disagree); the store's errors.
    pub async fn inspect(&self) -> Result<Occupancy> {
        let keys = self.keys.as_ref().map_err(Invalid::error)?;
        self.engine.store.inspect(keys).await
    }

    /// Runs `body` under the lock: acquires it (waiting as configured),
    /// runs `body` in the lock's [`scope`](LockGuard::scope), and releases
    /// it when `body` is done.
    ///
    /// Inside `body`, acquiring this lock again on the same client (a
    /// nested `run`, a nested `#[distributed_lock]` function) is reentrant.
    /// If the lease is lost while `body` runs, `body` is dropped at once,
    /// never polled again, and the [`ErrorKind::LeaseLost`] error returned.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lockguard_core::Error> {
    /// let lg = lockguard_core::Client::memory();
    /// let lock = lg.lock("nightly-report");
    /// let rows = lock
    ///     .run(async {
    ///         // A nested run of the same lock does not wait for itself.
    ///         lock.run(async { 42 }).await
    ///     })
    ///     .await??;
    /// assert_eq!(rows, 42);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Lock::acquire`]; [`ErrorKind::LeaseLost`] when the lease was
    /// lost while `body` ran, or found gone by the release after it (the
    /// work may not have been exclusive). A release that cannot reach the
    /// store is logged and left to the lease.
    pub async fn run<F: Future>(&self, body: F) -> Result<F::Output> {
        let guard = self.acquire().await?;
        let body = guard.scope(body);
        run_guarded(guard, body).await
    }

    /// The span of one acquisition: `lock` (or `semaphore`) names it;
    /// `fence` and `waited_ms` are recorded when it ends.
    fn span(&self, op: &'static str) -> tracing::Span {
        if !tracing::level_enabled!(tracing::Level::DEBUG) {
            // Not even made: a disabled span still costs its fields' setup.
            return tracing::Span::none();
        }
        let keys = self.keys.as_ref().ok();
        if let Some(mode) = keys.and_then(|k| k.rw) {
            let mode = mode.as_str();
            tracing::debug_span!("rw_lock", op, rw_lock = %self.name, mode, fence = tracing::field::Empty, waited_ms = tracing::field::Empty)
        } else if keys.is_some_and(|k| matches!(k.resource, Resource::Semaphore { .. })) {
            tracing::debug_span!("semaphore", op, semaphore = %self.name, fence = tracing::field::Empty, waited_ms = tracing::field::Empty)
        } else {
            tracing::debug_span!("lock", op, lock = %self.name, fence = tracing::field::Empty, waited_ms = tracing::field::Empty)
        }
    }

    async fn acquire_inner(&self) -> Result<LockGuard> {
        let (keys, lease) = self.checked()?;
        if let Some(guard) = self.reenter(keys) {
            return Ok(guard);
        }
        if self.wait.is_zero() {
            return match self.attempt(keys, lease, None).await? {
                Ok(guard) => Ok(guard),
                Err(wait) => Err(self.busy(wait.ttl(), self.wait)),
            };
        }
        // Boxed: the waiting machinery would make every acquire's future
        // as large as a waiting one's (an HTTP layer's single attempt
        // moves and boxes it per request).
        Box::pin(self.acquire_waiting(keys, lease)).await
    }

    /// How far apart a waiter asks the store again (near the head of its
    /// queue): a third of the client's waiter timeout, or the retry
    /// interval when that is shorter.
    fn refresh(&self) -> Duration {
        (self.engine.defaults.waiter_timeout / 3).min(self.retry_interval)
    }

    /// How long a wait waits for its client's subscription before it
    /// queues without it: until `deadline`, and no longer than one refresh
    /// period, past which the waiter's own refresh finds a handoff sooner
    /// than a subscription still under way (a pub/sub connection held up
    /// by a hung server) would announce it.
    fn subscription_bound(&self, deadline: Option<Instant>) -> Instant {
        let now = Instant::now();
        let patience = now.checked_add(self.refresh()).unwrap_or(now);
        deadline.map_or(patience, |d| d.min(patience))
    }

    /// Takes the lock, waiting for it if it is busy: in the key's line on
    /// a store whose waiters line up, in its queue on the others.
    async fn acquire_waiting(&self, keys: &Arc<LockKeys>, lease: Duration) -> Result<LockGuard> {
        if self.engine.store.waiting() == Waiting::Line {
            return self.wait_in_line(keys, lease).await;
        }
        self.wait_in_queue(keys, lease).await
    }

    /// Runs one attempt of a wait, bounded by the wait's deadline: an
    /// attempt started just before it never keeps the caller for a whole
    /// response timeout. An attempt cut off is dropped, and its outcome,
    /// unknown, is cleaned up in the background (the token released).
    async fn by_deadline<T>(
        &self,
        deadline: Option<Instant>,
        attempt: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let Some(deadline) = deadline else {
            return attempt.await;
        };
        tokio::time::timeout_at(deadline, attempt)
            .await
            .unwrap_or_else(|_| {
                Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "lock {:?}: no answer from the store before the wait of {:?} ended",
                        self.name, self.wait
                    ),
                ))
            })
    }

    /// A reentrant guard, when a scope this runs in holds the lock.
    fn reenter(&self, keys: &LockKeys) -> Option<LockGuard> {
        if keys.resource != Resource::Lock || keys.rw.is_some() {
            // Permits are counted, not owned: a body may hold several.
            // A read-write lock's holds are not reentrant.
            return None;
        }
        let guards = crate::reentry::find(&self.engine, &keys.lock)?;
        tracing::trace!(lock = %self.name, "reentrant acquisition");
        Some(LockGuard::reentrant(guards))
    }
}
