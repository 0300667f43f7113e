//! Acquiring a distributed lock: one attempt, or a bounded wait in the
//! key's queue in the store, woken by the release that hands the lock over.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::Engine;
use crate::error::{Error, ErrorKind, Invalid, Result};
use crate::fence::FencingToken;
use crate::guard::{Guards, LockGuard, PendingRelease, run_guarded};
use crate::key::{LockKeys, Resource};
use crate::lease::{Grant, Lease, valid_until};
use crate::span::instrumented;
use crate::store::{Attempt, Occupancy, Place, Waiting};
use crate::token::Token;

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

    /// The acquirer behind a semaphore: the same leases, watchdog and
    /// waiting, on permits instead of one lock.
    pub(crate) fn semaphore(engine: Arc<Engine>, name: &str, permits: u32) -> Self {
        let keys = crate::key::validate_key("semaphore", name)
            .and_then(|()| {
                // Checked before anything is sent: an attempt that cannot
                // reach the store arms no background release.
                let max = engine.store.locks.max_permits();
                if permits == 0 || permits > max {
                    Err(Error::invalid(format!(
                        "semaphore {name:?} needs between 1 and {max} permits on a {} client, got {permits}",
                        engine.store.locks.name()
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
    /// rather than making a series each.
    pub fn metric_name(mut self, name: &str) -> Self {
        self.metric_name = Some(name.into());
        self
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
        crate::meter::acquisition(self.primitive(), self.metric_label(), outcome, started);
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
        let outcome = result.as_ref().map(drop);
        crate::meter::acquisition(self.primitive(), self.metric_label(), outcome, started);
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
            .locks
            .max_lease()
            .unwrap_or(crate::lease::MAX_LEASE);
        if at_least > max {
            return Err(Error::invalid(format!(
                "lock {:?}: at_least ({at_least:?}) is longer than the longest lease a {} client keeps ({max:?})",
                self.name,
                self.engine.store.locks.name()
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
        match self.engine.store.locks.max_lease() {
            Some(max) if duration > max => match self.lease {
                Lease::Watchdog(_) => Ok(Lease::Watchdog(max)),
                _ => Err(Error::invalid(format!(
                    "a fixed lease on a {} client can be at most {max:?} (two thirds of \
                     its session timeout), got {duration:?}; use the watchdog or a longer \
                     session timeout",
                    self.engine.store.locks.name()
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
    /// confirms its lease in the background; a waiter never takes a free
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
    /// every error is returned at once.
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

    /// Takes the lock, waiting for it if it is busy.
    async fn acquire_waiting(&self, keys: &Arc<LockKeys>, lease: Duration) -> Result<LockGuard> {
        if self.engine.store.locks.waiting() == Waiting::Line {
            return self.wait_in_line(keys, lease).await;
        }
        let deadline = Instant::now().checked_add(self.wait);
        let waiters = &self.engine.waiters;
        if !waiters.listening() {
            // This client's first wait: try first, so a client that never
            // waits never opens a pub/sub connection; then listen before
            // queueing, so no handoff is announced before anyone hears it
            // (for a refresh period at most: see `subscription_bound`).
            match self.within(deadline, self.attempt(keys, lease, None)).await {
                Ok(Ok(guard)) => return Ok(guard),
                Ok(Err(_)) => {}
                // The queue's attempts retry it until the deadline.
                Err(e) if e.is_unavailable() => {
                    tracing::debug!(lock = %self.name, error = %e, "attempt failed; retrying while the wait lasts");
                }
                Err(e) => return Err(e),
            }
            waiters.listen(self.subscription_bound(deadline)).await;
        }
        self.wait_in_queue(keys, lease, deadline).await
    }

    /// Waits in the key's queue in the store until the lock is handed over
    /// (or found free with nobody ahead). A grant whose answer came after
    /// its lease could have run out (a store or a client that stalled past
    /// the lease) is given back, and the wait queues again with a new token
    /// while its deadline lasts: a blip shorter than the wait is ridden
    /// out, as any other.
    async fn wait_in_queue(
        &self,
        keys: &Arc<LockKeys>,
        lease: Duration,
        deadline: Option<Instant>,
    ) -> Result<LockGuard> {
        let started = Instant::now();
        loop {
            if let Some(guard) = self.queue_once(keys, lease, deadline, started).await? {
                return Ok(guard);
            }
            if deadline.is_some_and(|d| d <= Instant::now()) {
                return Err(self.lapsed(lease));
            }
            tracing::debug!(lock = %self.name, "the lock was granted too late to use its lease; queueing again");
        }
    }

    /// One stay in the key's queue, with one token: the guard, or `None`
    /// when the lock was granted too late to use its lease (the token is
    /// given back in the background as this returns).
    async fn queue_once(
        &self,
        keys: &Arc<LockKeys>,
        lease: Duration,
        deadline: Option<Instant>,
        started: Instant,
    ) -> Result<Option<LockGuard>> {
        let _waiting = crate::meter::waiting(self.primitive(), self.metric_label());
        let token = Token::random();
        let waiters = &self.engine.waiters;
        let ticket = waiters.ticket(token);
        let timeout = self.engine.defaults.waiter_timeout;
        let refresh = self.refresh();
        // How far apart this waiter refreshes: `refresh`, or a third of
        // how long the store keeps its place while it is far from the head
        // of a long queue (until the store says it came near).
        let mut pace = refresh;
        // When each recent attempt was sent: a handoff is reserved for us
        // until at least `timeout` after the attempt it names.
        let mut sent: VecDeque<(u32, Instant)> = VecDeque::with_capacity(RECENT_ATTEMPTS);
        // Until the lock is handed out, dropping this (the future was
        // dropped, or the wait ended) takes the token out of the queue and
        // passes on a lock handed to it, in the background.
        let leave = PendingRelease::new(&self.engine, keys, token);
        let mut attempt: u32 = 0;
        let mut backoff = Backoff::default();
        loop {
            // Numbers only tell recent attempts apart: wrapping is harmless.
            attempt = attempt.wrapping_add(1);
            let first = sent.is_empty();
            let sent_at = Instant::now();
            if sent.len() == RECENT_ATTEMPTS {
                sent.pop_front();
            }
            sent.push_back((attempt, sent_at));
            let place = Place {
                timeout,
                channel: waiters.channel(),
                attempt,
                waiter: token,
                since_ms: 0,
            };
            let attempt_result = self
                .within(
                    deadline,
                    self.engine.store.acquire(keys, &token, lease, Some(place)),
                )
                .await;
            let (ttl, failed) = match attempt_result {
                Ok(Attempt::Acquired { fence, keys }) => {
                    let grant = Grant {
                        token,
                        fence,
                        valid_until: valid_until(sent_at, lease),
                    };
                    if grant.valid_until <= Instant::now() {
                        // `leave` gives the token back as this returns.
                        return Ok(None);
                    }
                    leave.disarm();
                    drop(ticket);
                    let guard = self.granted(keys, grant)?;
                    self.log_acquired(fence, started);
                    return Ok(Some(guard));
                }
                Ok(Attempt::Busy(ttl)) => {
                    pace = refresh;
                    (ttl, None)
                }
                Ok(Attempt::Queued { ttl, kept }) => {
                    pace = if kept > timeout { kept / 3 } else { refresh };
                    (ttl, None)
                }
                // Nobody won this round: try again at the next refresh.
                Ok(Attempt::Contended) => (None, None),
                // A store that cannot be reached (a restart, a failover, a
                // new session) is retried with backoff while the wait lasts.
                Err(e) if e.is_unavailable() => {
                    tracing::debug!(lock = %self.name, error = %e, "attempt failed while waiting; retrying");
                    // Its outcome is unknown: it may have claimed a lock
                    // handed to us and given it back (a grant the replicas
                    // did not confirm is released, to the next waiter). No
                    // handoff named by it or an earlier attempt is used:
                    // the next attempt claims the lock if it is still ours.
                    sent.clear();
                    let _stale = ticket.take_handoff();
                    (None, Some(e))
                }
                Err(e) => return Err(e),
            };
            if first {
                tracing::debug!(lock = %self.name, "lock busy; queued");
            }
            let now = Instant::now();
            let remaining = match deadline {
                Some(d) if d <= now => {
                    return Err(match failed {
                        Some(e) => self.gave_up(e),
                        None => self.busy(ttl, self.wait),
                    });
                }
                Some(d) => d - now,
                None => Duration::MAX,
            };
            // Woken by the handoff, or at the next refresh, or when the
            // holder's lease ends (never a zero nap: a lease about to end
            // gets a millisecond, not a spin); after a failure, at the
            // next step of the backoff.
            // Near the head, also when the holder's lease ends (the holder
            // may have died). Far from it, not: the waiters near the head
            // take a lock nobody hands over, and a far waiter would only
            // queue again (its nap is also shortened when it comes near).
            let calm = |pace: Duration| {
                let nap = jitter(pace);
                let nap = if pace > refresh {
                    nap
                } else {
                    nap.min(ttl.unwrap_or(Duration::MAX))
                };
                nap.max(Duration::from_millis(1))
            };
            let nap = match failed {
                Some(_) => backoff.next(),
                None => {
                    backoff = Backoff::default();
                    calm(pace)
                }
            };
            let mut until = now + final_stretch(nap, remaining);
            let woken = loop {
                tokio::select! {
                    () = ticket.notified() => {
                        // Come near the head: refresh at the short pace from
                        // now on; there is nothing to send yet.
                        if ticket.take_near() && !ticket.has_handoff() {
                            if pace > refresh && failed.is_none() {
                                pace = refresh;
                                let now = Instant::now();
                                let left = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
                                until = until.min(now + final_stretch(calm(pace), left));
                            }
                            continue;
                        }
                        break true;
                    }
                    () = tokio::time::sleep_until(until) => break false,
                }
            };
            if !woken {
                if deadline.is_some_and(|d| d <= Instant::now()) {
                    return Err(match failed {
                        Some(e) => self.gave_up(e),
                        None => self.busy(ttl, self.wait),
                    });
                }
                continue;
            }
            // A handoff is ours until the deadline the attempt it names set:
            // take the lock now, valid from that attempt of ours, and
            // confirm it with our lease in the background. A handoff we
            // cannot place (too old, or about to lapse) is claimed by the
            // next attempt instead, if it is still ours.
            let Some(handoff) = ticket.take_handoff() else {
                continue;
            };
            let Some(&(_, at)) = sent.iter().find(|(a, _)| *a == handoff.attempt) else {
                continue;
            };
            let grant = Grant {
                token,
                fence: handoff.fence,
                valid_until: valid_until(at, timeout),
            };
            if grant.valid_until <= Instant::now() + MIN_HANDOFF_VALIDITY {
                continue;
            }
            if self.engine.store.locks.confirms_handoffs() {
                let Some(grant) = self.confirm_handoff(keys, grant, lease, deadline).await? else {
                    // Not confirmed: the next attempt claims the lock if it
                    // is still ours, and confirms it as any acquisition.
                    continue;
                };
                if grant.valid_until <= Instant::now() {
                    return Ok(None);
                }
                leave.disarm();
                drop(ticket);
                let guard = self.granted(keys.clone(), grant)?;
                self.log_acquired(handoff.fence, started);
                return Ok(Some(guard));
            }
            leave.disarm();
            drop(ticket);
            let guard = self.granted(keys.clone(), grant)?;
            guard.confirm();
            self.log_acquired(handoff.fence, started);
            return Ok(Some(guard));
        }
    }

    /// Confirms a handoff before it is used, on a store that
    /// [`confirms_handoffs`](crate::store::LockStore::confirms_handoffs):
    /// extends it with our lease, which the store confirms with its
    /// replicas. The grant, valid from the extension, once it is confirmed;
    /// `None` when it was not (gone, or the store or its replicas did not
    /// answer in time): the wait goes on.
    async fn confirm_handoff(
        &self,
        keys: &Arc<LockKeys>,
        grant: Grant,
        lease: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Grant>> {
        let sent_at = Instant::now();
        let extended = self
            .within(
                deadline,
                self.engine.store.extend(keys, &grant.token, lease),
            )
            .await;
        match extended {
            Ok(true) => Ok(Some(Grant {
                valid_until: valid_until(sent_at, lease),
                ..grant
            })),
            Ok(false) => {
                tracing::debug!(lock = %self.name, "the lock handed over was gone before it was confirmed; waiting on");
                Ok(None)
            }
            Err(e) if e.is_unavailable() && deadline.is_none_or(|d| d > Instant::now()) => {
                tracing::debug!(lock = %self.name, error = %e, "confirming the lock handed over failed; waiting on");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Runs one attempt of a wait, bounded by the wait's deadline: an
    /// attempt started just before it never keeps the caller for a whole
    /// response timeout. An attempt cut off is dropped, and its outcome,
    /// unknown, is cleaned up in the background (the token released).
    async fn within<T>(
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

    fn log_acquired(&self, fence: FencingToken, started: Instant) {
        tracing::debug!(
            lock = %self.name,
            fence = fence.get(),
            waited_ms = started.elapsed().as_millis() as u64,
            "lock acquired after waiting"
        );
    }

    /// Waits on a store without a queue (Redlock): the waiter takes its
    /// place in the key's line, ordered by when it began to wait, and
    /// attempts again when a release is announced on the key's channel,
    /// when the holder's lease ends, or after a jittered retry interval (at
    /// most a third of the waiter timeout, which keeps its place). Only the
    /// first live waiter of the line can take a free lock.
    async fn wait_in_line(&self, keys: &Arc<LockKeys>, lease: Duration) -> Result<LockGuard> {
        let started = Instant::now();
        let deadline = started.checked_add(self.wait);
        match self.within(deadline, self.attempt(keys, lease, None)).await {
            Ok(Ok(guard)) => return Ok(guard),
            Ok(Err(_)) => {}
            // Retried below while the wait lasts.
            Err(e) if e.is_unavailable() => {}
            Err(e) => return Err(e),
        }
        tracing::debug!(lock = %self.name, "lock busy; waiting for a release");
        let _waiting = crate::meter::waiting(self.primitive(), self.metric_label());
        let mut registration = self
            .engine
            .waiters
            .broadcast(keys.channel(), self.subscription_bound(deadline))
            .await;
        let waiter = Token::random();
        let since_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        // Dropping this (the lock was taken, the wait ended, the future was
        // dropped) takes the waiter out of the line on every node, in the
        // background.
        let _leave = PendingRelease::new(&self.engine, keys, waiter);
        let timeout = self.engine.defaults.waiter_timeout;
        let refresh = self.refresh();
        let mut backoff = Backoff::default();
        let mut attempt: u32 = 0;
        loop {
            // Attempt again at once: a release may have come before the
            // subscription.
            registration.rx.borrow_and_update();
            attempt = attempt.wrapping_add(1);
            let place = Place {
                timeout,
                channel: "",
                attempt,
                waiter,
                since_ms,
            };
            let attempt = self.attempt(keys, lease, Some(place));
            let (wait, failed) = match self.within(deadline, attempt).await {
                Ok(Ok(guard)) => return Ok(guard),
                Ok(Err(wait)) => (wait, None),
                // No quorum reachable: retried with backoff while the wait
                // lasts.
                Err(e) if e.is_unavailable() => (Wait::Busy(None), Some(e)),
                Err(e) => return Err(e),
            };
            let now = Instant::now();
            let remaining = match deadline {
                Some(d) if d <= now => {
                    return Err(match failed {
                        Some(e) => self.gave_up(e),
                        None => self.busy(wait.ttl(), self.wait),
                    });
                }
                Some(d) => d - now,
                None => Duration::MAX,
            };
            if failed.is_some() {
                tokio::time::sleep(final_stretch(backoff.next(), remaining)).await;
                continue;
            }
            backoff = Backoff::default();
            if wait == Wait::Contended {
                // Every contender of the split round is notified at once;
                // a random pause instead keeps the next round from splitting.
                tokio::time::sleep(contention_backoff().min(remaining)).await;
                continue;
            }
            let nap = final_stretch(
                jitter(refresh)
                    .min(wait.ttl().unwrap_or(Duration::MAX))
                    .max(Duration::from_millis(1)),
                remaining,
            );
            tokio::select! {
                _ = registration.rx.changed() => {}
                () = tokio::time::sleep(nap) => {
                    if deadline.is_some_and(|d| d <= Instant::now()) {
                        return Err(self.busy(wait.ttl(), self.wait));
                    }
                }
            }
        }
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

    /// One attempt; it never queues, and keeps a waiter's `place` in the
    /// line of a store whose waiters line up (Redlock). `Ok(Err(wait))`
    /// when someone else
    /// holds the lock: `Busy(ttl)` with their remaining lease, or
    /// `Contended` when a round had no winner and the caller should back
    /// off at random.
    async fn attempt(
        &self,
        keys: &Arc<LockKeys>,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> Result<Result<LockGuard, Wait>> {
        let token = Token::random();
        let sent_at = Instant::now();
        // Until the store's answer is handled, a drop of this future (or a
        // timeout with an unknown outcome) releases the token in the
        // background: the request may have taken the lock.
        let pending = PendingRelease::new(&self.engine, keys, token);
        let outcome = self
            .engine
            .store
            .acquire(keys, &token, lease, place)
            .await?;
        pending.disarm();
        self.attempted(token, sent_at, lease, outcome)
    }

    /// [`attempt`](Lock::attempt) where the store answers at once; `None`
    /// (nothing sent) where it needs a round trip.
    fn attempt_now(
        &self,
        keys: &Arc<LockKeys>,
        lease: Duration,
        sent_at: Instant,
    ) -> Option<Result<Result<LockGuard, Wait>>> {
        let token = Token::random();
        let store = &self.engine.store;
        let outcome = store.acquire(keys, &token, lease, None).into_ready()?;
        Some(outcome.and_then(|outcome| self.attempted(token, sent_at, lease, outcome)))
    }

    /// What the store's answer to an attempt with `token`, sent at
    /// `sent_at`, gives.
    fn attempted(
        &self,
        token: Token,
        sent_at: Instant,
        lease: Duration,
        outcome: Attempt,
    ) -> Result<Result<LockGuard, Wait>> {
        match outcome {
            Attempt::Busy(ttl) | Attempt::Queued { ttl, .. } => Ok(Err(Wait::Busy(ttl))),
            // Our partial grants were undone by the store already.
            Attempt::Contended => Ok(Err(Wait::Contended)),
            Attempt::Acquired { fence, keys } => {
                let grant = Grant {
                    token,
                    fence,
                    valid_until: valid_until(sent_at, lease),
                };
                self.granted(keys, grant).map(Ok)
            }
        }
    }

    /// The guard for what `grant` gave (its `keys`), or an error (and the
    /// token released) when the grant's validity has passed: a lock that
    /// might have expired is never handed out.
    pub(crate) fn granted(&self, keys: Arc<LockKeys>, grant: Grant) -> Result<LockGuard> {
        let kept = self.effective_lease()?;
        let lease = kept.duration();
        let now = Instant::now();
        if now >= grant.valid_until {
            drop(PendingRelease::new(&self.engine, &keys, grant.token));
            return Err(self.lapsed(lease));
        }
        let watchdog = self.lease.is_watchdog();
        let fence = grant.fence;
        let guards = Guards::new(
            self.engine.clone(),
            (self.name.clone(), self.metric_label().clone()),
            keys,
            grant,
            (kept, now),
        );
        if !self.at_least.is_zero() {
            guards.keep_until(now + self.at_least);
        }
        tracing::debug!(lock = %self.name, fence = fence.get(), lease_ms = lease.as_millis() as u64, watchdog, "lock acquired");
        Ok(LockGuard::new(guards))
    }

    /// The error of a grant whose answer came after its `lease` could have
    /// run out: the lock was given back, never used.
    pub(crate) fn lapsed(&self, lease: Duration) -> Error {
        Error::new(
            ErrorKind::Timeout,
            format!(
                "lock {:?} was granted too late to use its {lease:?} lease",
                self.name
            ),
        )
    }

    /// The error of a wait that ended while the store could not be
    /// reached: of the kind of its last failure, saying that it was retried
    /// for the whole wait.
    fn gave_up(&self, last: Error) -> Error {
        Error::new(
            last.kind(),
            format!(
                "lock {:?}: the store could not be reached at the end of the wait of {:?} (failures were retried); last: {last}",
                self.name, self.wait
            ),
        )
        .with_source(last)
    }

    /// The busy error after waiting `waited` (zero: one attempt).
    pub(crate) fn busy(&self, ttl: Option<Duration>, waited: Duration) -> Error {
        let what = match self.keys.as_ref().map(|k| (k.rw, k.resource)) {
            Ok((Some(crate::key::RwMode::Read), _)) => format!(
                "read-write lock {:?} is held by a writer, or a writer waits ahead",
                self.name
            ),
            Ok((Some(crate::key::RwMode::Write), _)) => format!(
                "read-write lock {:?} is held by readers or a writer, or others wait ahead",
                self.name
            ),
            Ok((None, Resource::Semaphore { permits })) => {
                format!(
                    "all {permits} permits of semaphore {:?} are taken",
                    self.name
                )
            }
            _ => format!("lock {:?} is held by another owner", self.name),
        };
        let msg = if waited.is_zero() {
            what
        } else {
            format!("{what}; gave up after waiting {waited:?}")
        };
        let err = Error::new(ErrorKind::Busy, msg);
        match ttl {
            Some(ttl) => err.with_retry_after(ttl),
            None => err,
        }
    }
}

/// How many of a waiter's latest attempts it remembers the send time of: a
/// grant naming an older one has lapsed or is about to.
const RECENT_ATTEMPTS: usize = 8;

/// The least validity a handoff must have left to be taken without asking
/// the store: time to confirm it.
const MIN_HANDOFF_VALIDITY: Duration = Duration::from_millis(20);

/// Why an attempt did not take the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Someone holds it, with this much lease left if known.
    Busy(Option<Duration>),
    /// A round split the store between contenders.
    Contended,
}

impl Wait {
    fn ttl(self) -> Option<Duration> {
        match self {
            Self::Busy(ttl) => ttl,
            Self::Contended => None,
        }
    }
}

/// The random pause after a round with no winner: long enough to
/// desynchronize contenders (a few round trips), short against any lease.
fn contention_backoff() -> Duration {
    Duration::from_micros(fastrand::u64(500..=10_000))
}

/// The pauses between the attempts of a wait that fail to reach the store:
/// 10 ms, doubling up to 1 s, each jittered, so a blip costs a waiter a few
/// quick retries and an outage one attempt a second.
#[derive(Debug, Default)]
struct Backoff {
    failures: u32,
}

impl Backoff {
    const FIRST: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_secs(1);

    fn next(&mut self) -> Duration {
        let step = Self::FIRST
            .saturating_mul(1 << self.failures.min(10))
            .min(Self::MAX);
        self.failures = self.failures.saturating_add(1);
        jitter(step)
    }
}

/// How close to the end of a wait no new attempt starts: one started later
/// would likely be cut off by the deadline with its outcome unknown.
const FINAL_STRETCH: Duration = Duration::from_millis(50);

/// A nap of at most `remaining`, stretched to all of it when it would end
/// within [`FINAL_STRETCH`] of the deadline.
fn final_stretch(nap: Duration, remaining: Duration) -> Duration {
    if remaining.saturating_sub(nap) < FINAL_STRETCH {
        remaining
    } else {
        nap
    }
}

/// A pause between 50% and 100% of `interval`, so waiters of different
/// clients do not retry in lockstep. Never panics on tiny intervals.
fn jitter(interval: Duration) -> Duration {
    let nanos = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
    let half = nanos / 2;
    Duration::from_nanos(half + fastrand::u64(0..=nanos - half))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_range_and_handles_tiny_intervals() {
        assert_eq!(jitter(Duration::ZERO), Duration::ZERO);
        assert!(jitter(Duration::from_nanos(1)) <= Duration::from_nanos(1));
        for _ in 0..1000 {
            let j = jitter(Duration::from_millis(100));
            assert!(j >= Duration::from_millis(50) && j <= Duration::from_millis(100));
        }
        let _ = jitter(Duration::MAX);
    }

    mod subscription {
        use std::sync::atomic::{AtomicUsize, Ordering};

        use tokio::sync::watch;

        use crate::clock::MonotonicClock;
        use crate::store::memory::MemoryStore;
        use crate::store::{Inbox, Listener, Store, StoreFuture};
        use crate::{Client, Result};

        use super::*;

        /// A client's subscription: it answers once `open` says so, with
        /// its value (`Ok` for true); `calls` counts the subscriptions.
        #[derive(Debug)]
        struct Gated {
            calls: AtomicUsize,
            open: watch::Receiver<Option<bool>>,
        }

        impl Listener for Gated {
            fn sync<'a>(&'a self, _: &'a str, _: Arc<dyn Inbox>) -> StoreFuture<'a, Result<()>> {
                self.calls.fetch_add(1, Ordering::SeqCst);
                let mut open = self.open.clone();
                StoreFuture::boxed(async move {
                    let said = *open.wait_for(Option::is_some).await.unwrap();
                    if said == Some(true) {
                        Ok(())
                    } else {
                        Err(Error::new(ErrorKind::Unavailable, "no pub/sub connection"))
                    }
                })
            }
        }

        /// A client over the in-memory store (which hands locks over
        /// itself) whose wake-ups also come through `listener`, and its
        /// guard of the lock `k` (a 60 s lease), which others wait for.
        async fn holding_k(listener: Arc<Gated>) -> (Client, LockGuard) {
            let memory = MemoryStore::new(Arc::new(MonotonicClock::new()));
            let store = Store::new(Arc::new(memory), vec![listener]);
            let lg = Client::builder().build(store).unwrap();
            let held = lg
                .lock("k")
                .lease(Duration::from_secs(60))
                .acquire()
                .await
                .unwrap();
            (lg, held)
        }

        fn gated() -> (Arc<Gated>, watch::Sender<Option<bool>>) {
            let (tx, open) = watch::channel(None);
            let listener = Gated {
                calls: AtomicUsize::new(0),
                open,
            };
            (Arc::new(listener), tx)
        }

        /// A client's first wait whose subscription hangs (a pub/sub
        /// connection held up by a hung server) queues after one refresh
        /// period, not at the end of its wait, and is handed the lock.
        #[tokio::test(start_paused = true)]
        async fn a_hung_subscription_holds_up_a_first_wait_one_refresh_at_most() {
            let (listener, _open) = gated();
            let (lg, held) = holding_k(listener.clone()).await;
            let refresh = Duration::from_millis(100);
            let lock = lg
                .lock("k")
                .wait(Duration::from_secs(30))
                .retry_interval(refresh);
            let waiting = tokio::spawn(async move { lock.acquire().await });
            tokio::time::sleep(refresh / 2).await;
            assert_eq!(lg.lock("k").inspect().await.unwrap().waiters, 0);
            tokio::time::sleep(refresh).await;
            assert_eq!(
                lg.lock("k").inspect().await.unwrap().waiters,
                1,
                "the first wait did not queue within a refresh period of its hung subscription"
            );
            assert!(held.release().await.unwrap());
            let guard = tokio::time::timeout(refresh * 2, waiting)
                .await
                .expect("the queued waiter was not handed the lock")
                .unwrap()
                .unwrap();
            assert!(guard.release().await.unwrap());
            assert_eq!(listener.calls.load(Ordering::SeqCst), 1);
        }

        /// First waits that come while the client's subscription is under
        /// way start no other; once it is done, waits start none at all;
        /// a failed one is tried again by the next first wait.
        #[tokio::test(start_paused = true)]
        async fn one_subscription_at_a_time_and_again_after_a_failure() {
            let (listener, open) = gated();
            let (lg, held) = holding_k(listener.clone()).await;
            let wait = |lg: &Client| {
                let lock = lg
                    .lock("k")
                    .wait(Duration::from_millis(300))
                    .retry_interval(Duration::from_millis(100));
                async move { lock.acquire().await.map(drop) }
            };
            let waits: Vec<_> = (0..3).map(|_| tokio::spawn(wait(&lg))).collect();
            for w in waits {
                assert!(w.await.unwrap().unwrap_err().is_busy());
            }
            assert_eq!(
                listener.calls.load(Ordering::SeqCst),
                1,
                "a second subscription began"
            );
            open.send_replace(Some(false));
            tokio::time::sleep(Duration::from_millis(1)).await;
            assert!(wait(&lg).await.unwrap_err().is_busy());
            let calls = || listener.calls.load(Ordering::SeqCst);
            assert_eq!(calls(), 2, "a failed subscription was not tried again");
            open.send_replace(Some(true));
            assert!(wait(&lg).await.unwrap_err().is_busy());
            assert_eq!(calls(), 3);
            assert!(wait(&lg).await.unwrap_err().is_busy());
            assert_eq!(calls(), 3, "a wait subscribed again once listening");
            drop(held);
        }
    }

    #[test]
    fn backoff_grows_to_its_bound() {
        let mut b = Backoff::default();
        let first = b.next();
        assert!(first >= Duration::from_millis(5) && first <= Duration::from_millis(10));
        for _ in 0..100 {
            assert!(b.next() <= Backoff::MAX);
        }
        assert!(b.next() >= Backoff::MAX / 2);
    }
}
