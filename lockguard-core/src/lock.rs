//! Acquiring a distributed lock: one attempt, or a bounded wait in the
//! key's queue in the store, woken by the release that hands the lock over.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Attempt, Place};
use crate::client::{Client, MAX_LEASE, MIN_LEASE, MIN_WATCHDOG_LEASE};
use crate::error::{Error, ErrorKind, Result};
use tracing::Instrument;

use crate::fence::FencingToken;
use crate::guard::{Held, LockGuard, PendingRelease, safety_margin};
use crate::key::LockKeys;
use crate::token::Token;

/// How a lock's lease is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseMode {
    /// A lease of this length, renewed by the watchdog while the guard lives.
    Watchdog(Duration),
    /// A lease of this length and no renewal: the lock frees itself when it
    /// ends unless [`LockGuard::extend`] is called.
    Fixed(Duration),
}

/// A distributed lock on one key, ready to be acquired.
///
/// Made by [`Client::lock`]. Without [`Lock::lease`], the lease is the
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
    client: Client,
    name: Arc<str>,
    keys: Result<Arc<LockKeys>, String>,
    lease: LeaseMode,
    wait: Duration,
    retry_interval: Duration,
    reentrant: bool,
}

/// Checks a lease: not zero, whole milliseconds at least, at most
/// [`MAX_LEASE`], and long enough for the watchdog when it renews.
/// Records how an acquisition in `span` ended: its fencing token, and how
/// long it took.
fn finish_span(
    span: &tracing::Span,
    started: Instant,
    result: Result<LockGuard>,
) -> Result<LockGuard> {
    if let Ok(guard) = &result {
        span.record("fence", guard.fencing_token().get());
    }
    span.record(
        "waited_ms",
        u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    );
    result
}

pub(crate) fn validate_lease(lease: Duration, watchdog: bool) -> Result<()> {
    if lease < MIN_LEASE {
        return Err(Error::invalid(format!(
            "lease must be at least {MIN_LEASE:?}, got {lease:?}"
        )));
    }
    if lease > MAX_LEASE {
        return Err(Error::invalid(format!(
            "lease of {lease:?} exceeds the maximum of {MAX_LEASE:?}"
        )));
    }
    if watchdog && lease < MIN_WATCHDOG_LEASE {
        return Err(Error::invalid(format!(
            "a lease renewed by the watchdog must be at least {MIN_WATCHDOG_LEASE:?}, got {lease:?}"
        )));
    }
    Ok(())
}

impl Lock {
    pub(crate) fn new(client: Client, name: &str) -> Self {
        let keys = crate::key::validate("lock", name)
            .map(|()| Arc::new(LockKeys::new(client.prefix(), name)))
            .map_err(|e| e.message().to_owned());
        Self::with_keys(client, name, keys)
    }

    /// The acquirer behind a semaphore: the same leases, watchdog and
    /// waiting, on permits instead of one lock.
    pub(crate) fn semaphore(client: Client, name: &str, permits: u32) -> Self {
        let keys = crate::key::validate("semaphore", name)
            .and_then(|()| {
                // Checked before anything is sent: an attempt that cannot
                // reach the store arms no background release.
                let max = client.store().max_permits();
                if permits == 0 || permits > max {
                    Err(Error::invalid(format!(
                        "semaphore {name:?} needs between 1 and {max} permits on a {} client, got {permits}",
                        client.store().name()
                    )))
                } else {
                    Ok(())
                }
            })
            .map(|()| Arc::new(LockKeys::semaphore(client.prefix(), name, permits)))
            .map_err(|e| e.message().to_owned());
        Self::with_keys(client, name, keys)
    }

    fn with_keys(client: Client, name: &str, keys: Result<Arc<LockKeys>, String>) -> Self {
        let defaults = client.defaults();
        Self {
            name: name.into(),
            keys,
            lease: LeaseMode::Watchdog(defaults.lease),
            wait: defaults.wait,
            retry_interval: defaults.retry_interval,
            reentrant: true,
            client,
        }
    }

    /// A fixed lease with no watchdog: the lock frees itself `lease` after
    /// it was taken unless extended.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = LeaseMode::Fixed(lease);
        self
    }

    /// A lease of `lease` renewed by the watchdog every `lease / 3` while the
    /// guard lives (the default, with the client's default lease).
    pub fn watchdog(mut self, lease: Duration) -> Self {
        self.lease = LeaseMode::Watchdog(lease);
        self
    }

    /// How long [`Lock::acquire`] waits for a busy lock before giving up.
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

    /// Whether a task that already holds this lock gets a reentrant guard
    /// when it asks again (the default). Turned off, a second acquire by the
    /// same task waits like anyone else's: for a task that acts for many
    /// independent requests, such as a server's connection task.
    pub fn reentrant(mut self, reentrant: bool) -> Self {
        self.reentrant = reentrant;
        self
    }

    /// The key as given.
    pub fn name(&self) -> &str {
        &self.name
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

    fn checked(&self) -> Result<(&Arc<LockKeys>, Duration)> {
        let keys = self.keys.as_ref().map_err(|e| Error::invalid(e.clone()))?;
        let lease = match self.lease {
            LeaseMode::Watchdog(lease) => {
                validate_lease(lease, true)?;
                lease
            }
            LeaseMode::Fixed(lease) => {
                validate_lease(lease, false)?;
                lease
            }
        };
        if self.retry_interval.is_zero() {
            return Err(Error::invalid("retry interval must be greater than zero"));
        }
        Ok((keys, lease))
    }

    /// Takes the lock if it is free, without waiting.
    ///
    /// A task that already holds this lock gets a reentrant guard at once.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Busy`] when another holder has it (with
    /// [`Error::retry_after`] set to the holder's remaining lease when known);
    /// [`ErrorKind::InvalidInput`] for a bad key or lease; the store's errors.
    pub async fn try_acquire(&self) -> Result<LockGuard> {
        let (span, started) = (self.span("try_acquire"), Instant::now());
        let result = self.try_acquire_inner().instrument(span.clone()).await;
        finish_span(&span, started, result)
    }

    async fn try_acquire_inner(&self) -> Result<LockGuard> {
        let (keys, lease) = self.checked()?;
        if let Some(guard) = self.reenter(keys) {
            return Ok(guard);
        }
        match self.attempt(keys, lease).await? {
            Ok(guard) => Ok(guard),
            Err(wait) => Err(self.busy(wait.ttl(), None)),
        }
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
    /// On a Redlock client waiters do not queue: they retry when a release
    /// is announced, after the holder's lease, or after a jittered retry
    /// interval, whichever comes first.
    ///
    /// Dropping the returned future at any point is safe: it leaves the
    /// queue, and a lock handed to it but not yet returned is passed on, in
    /// the background.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Busy`] when the wait ran out; [`ErrorKind::InvalidInput`]
    /// for a bad key or lease; the store's errors: at once when the first
    /// attempt fails, and at the end of the wait when the last one did
    /// (failures in between are retried).
    ///
    /// [`Builder::waiter_timeout`]: crate::Builder::waiter_timeout
    pub async fn acquire(&self) -> Result<LockGuard> {
        let (span, started) = (self.span("acquire"), Instant::now());
        let result = self.acquire_inner().instrument(span.clone()).await;
        finish_span(&span, started, result)
    }

    /// The span of one acquisition: `lock` (or `semaphore`) names it;
    /// `fence` and `waited_ms` are recorded when it ends.
    fn span(&self, op: &'static str) -> tracing::Span {
        let semaphore = self.keys.as_ref().is_ok_and(|k| k.permits.is_some());
        if semaphore {
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
            return match self.attempt(keys, lease).await? {
                Ok(guard) => Ok(guard),
                Err(wait) => Err(self.busy(wait.ttl(), Some(self.wait))),
            };
        }
        if !self.client.store().queues() {
            return self.wait_for_release(keys, lease).await;
        }
        let deadline = Instant::now().checked_add(self.wait);
        let waiters = self.client.waiters();
        if !waiters.listening() {
            // This client's first wait: try first, so a client that never
            // waits never opens a pub/sub connection; then listen before
            // queueing, so no handoff is announced before anyone hears it.
            if let Ok(guard) = self.within(deadline, self.attempt(keys, lease)).await? {
                return Ok(guard);
            }
            waiters.listen(deadline).await;
        }
        self.wait_in_queue(keys, lease, deadline).await
    }

    /// Waits in the key's queue in the store until the lock is handed over
    /// (or found free with nobody ahead).
    async fn wait_in_queue(
        &self,
        keys: &Arc<LockKeys>,
        lease: Duration,
        deadline: Option<Instant>,
    ) -> Result<LockGuard> {
        let started = Instant::now();
        let token = Token::random();
        let waiters = self.client.waiters();
        let ticket = waiters.ticket(token);
        let timeout = self.client.defaults().waiter_timeout;
        let refresh = (timeout / 3).min(self.retry_interval);
        // When each recent attempt was sent: a grant is reserved for us
        // until at least `timeout` after the attempt it names.
        let mut sent: VecDeque<(u32, Instant)> = VecDeque::with_capacity(RECENT_ATTEMPTS);
        // Until the lock is handed out, dropping this (the future was
        // dropped, or the wait ended) takes the token out of the queue and
        // passes on a lock handed to it, in the background.
        let leave = PendingRelease::new(&self.client, keys, token);
        let mut attempt: u32 = 0;
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
            };
            let attempt_result = self
                .within(
                    deadline,
                    self.client
                        .store()
                        .acquire(keys, &token, lease, Some(place)),
                )
                .await;
            let (ttl, failed) = match attempt_result {
                Ok(Attempt::Acquired(fence)) => {
                    leave.disarm();
                    drop(ticket);
                    let valid_until = sent_at + lease.saturating_sub(safety_margin(lease));
                    let guard = self.granted(keys.clone(), token, fence, lease, valid_until)?;
                    self.log_acquired(fence, started);
                    return Ok(guard);
                }
                Ok(Attempt::Held(ttl)) => (ttl, None),
                Ok(Attempt::Contended | Attempt::AcquiredSlot(..)) => {
                    unreachable!("only Redlock splits or hands out slots, and it does not queue")
                }
                Err(e) if first => return Err(e),
                Err(e) => {
                    tracing::debug!(lock = %self.name, error = %e, "attempt failed while waiting; retrying");
                    (None, Some(e))
                }
            };
            if first {
                tracing::debug!(lock = %self.name, "lock busy; queued");
            }
            let now = Instant::now();
            let remaining = match deadline {
                Some(d) if d <= now => {
                    return Err(failed.unwrap_or_else(|| self.busy(ttl, Some(self.wait))));
                }
                Some(d) => d - now,
                None => Duration::MAX,
            };
            // Woken by the handoff, or at the next refresh, or when the
            // holder's lease ends (never a zero nap: a lease about to end
            // gets a millisecond, not a spin).
            let nap = final_stretch(
                jitter(refresh)
                    .min(ttl.unwrap_or(Duration::MAX))
                    .max(Duration::from_millis(1)),
                remaining,
            );
            tokio::select! {
                () = ticket.notified() => {}
                () = tokio::time::sleep(nap) => {
                    if deadline.is_some_and(|d| d <= Instant::now()) {
                        return Err(self.busy(ttl, Some(self.wait)));
                    }
                    continue;
                }
            }
            // A grant is ours until the deadline the attempt it names set:
            // take the lock now, valid from that attempt of ours, and
            // confirm it with our lease in the background. A grant we cannot
            // place (too old, or about to lapse) is claimed by the next
            // attempt instead, if it is still ours.
            let Some(grant) = ticket.take_grant() else {
                continue;
            };
            let Some(&(_, at)) = sent.iter().find(|(a, _)| *a == grant.attempt) else {
                continue;
            };
            let valid_until = at + timeout.saturating_sub(safety_margin(timeout));
            if valid_until <= Instant::now() + MIN_GRANT_VALIDITY {
                continue;
            }
            leave.disarm();
            drop(ticket);
            let guard = self.granted(keys.clone(), token, grant.fence, lease, valid_until)?;
            guard.confirm();
            self.log_acquired(grant.fence, started);
            return Ok(guard);
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

    /// Waits for a Redlock lock: no queue across independent nodes, so
    /// waiters retry when a release is announced on the key's channel, when
    /// the holder's lease ends, or after a jittered retry interval.
    async fn wait_for_release(&self, keys: &Arc<LockKeys>, lease: Duration) -> Result<LockGuard> {
        let started = Instant::now();
        let deadline = started.checked_add(self.wait);
        if let Ok(guard) = self.within(deadline, self.attempt(keys, lease)).await? {
            return Ok(guard);
        }
        tracing::debug!(lock = %self.name, "lock busy; waiting for a release");
        let mut registration = self
            .client
            .waiters()
            .broadcast(&keys.channel, deadline)
            .await;
        loop {
            // Attempt again at once: a release may have come before the
            // subscription.
            registration.rx.borrow_and_update();
            let wait = match self.within(deadline, self.attempt(keys, lease)).await? {
                Ok(guard) => return Ok(guard),
                Err(wait) => wait,
            };
            let now = Instant::now();
            let remaining = match deadline {
                Some(d) if d <= now => return Err(self.busy(wait.ttl(), Some(self.wait))),
                Some(d) => d - now,
                None => Duration::MAX,
            };
            if wait == Wait::Contended {
                // Every contender of the split round is notified at once;
                // a random pause instead keeps the next round from splitting.
                tokio::time::sleep(contention_backoff().min(remaining)).await;
                continue;
            }
            let nap = final_stretch(
                jitter(self.retry_interval)
                    .min(wait.ttl().unwrap_or(Duration::MAX))
                    .max(Duration::from_millis(1)),
                remaining,
            );
            tokio::select! {
                _ = registration.rx.changed() => {}
                () = tokio::time::sleep(nap) => {
                    if deadline.is_some_and(|d| d <= Instant::now()) {
                        return Err(self.busy(wait.ttl(), Some(self.wait)));
                    }
                }
            }
        }
    }

    fn reenter(&self, keys: &LockKeys) -> Option<LockGuard> {
        if !self.reentrant || keys.permits.is_some() {
            // Permits are counted, not owned: a task may hold several.
            return None;
        }
        let held = self.client.held_by_current_task(&keys.lock)?;
        tracing::trace!(lock = %self.name, "reentrant acquisition");
        Some(LockGuard::reentrant(held))
    }

    /// One attempt that never queues. `Ok(Err(wait))` when someone else
    /// holds the lock: `Held(ttl)` with their remaining lease, or
    /// `Contended` when a Redlock round had no winner and the caller should
    /// back off at random.
    async fn attempt(
        &self,
        keys: &Arc<LockKeys>,
        lease: Duration,
    ) -> Result<Result<LockGuard, Wait>> {
        let token = Token::random();
        let sent_at = Instant::now();
        // Until the store's answer is handled, a drop of this future (or a
        // timeout with an unknown outcome) releases the token in the
        // background: the request may have taken the lock.
        let pending = PendingRelease::new(&self.client, keys, token);
        let outcome = self
            .client
            .store()
            .acquire(keys, &token, lease, None)
            .await?;
        pending.disarm();
        let valid_until = sent_at + lease.saturating_sub(safety_margin(lease));
        match outcome {
            Attempt::Held(ttl) => Ok(Err(Wait::Held(ttl))),
            // Our partial grants were undone by the store already.
            Attempt::Contended => Ok(Err(Wait::Contended)),
            Attempt::Acquired(fence) => self
                .granted(keys.clone(), token, fence, lease, valid_until)
                .map(Ok),
            Attempt::AcquiredSlot(fence, slot) => {
                self.granted(slot, token, fence, lease, valid_until).map(Ok)
            }
        }
    }

    /// The guard for a lock taken with `token`, certainly ours until
    /// `valid_until`, or an error (and the token released) when that has
    /// passed: a lock that might have expired is never handed out.
    fn granted(
        &self,
        keys: Arc<LockKeys>,
        token: Token,
        fence: FencingToken,
        lease: Duration,
        valid_until: Instant,
    ) -> Result<LockGuard> {
        if Instant::now() >= valid_until {
            drop(PendingRelease::new(&self.client, &keys, token));
            return Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "lock {:?} was granted too late to use its {lease:?} lease",
                    self.name
                ),
            ));
        }
        let watchdog = matches!(self.lease, LeaseMode::Watchdog(_));
        let held = Held::new(
            self.client.clone(),
            self.name.clone(),
            keys,
            token,
            fence,
            lease,
            valid_until,
            watchdog,
            self.reentrant,
        );
        tracing::debug!(lock = %self.name, fence = fence.get(), lease_ms = lease.as_millis() as u64, watchdog, "lock acquired");
        Ok(LockGuard::new(held))
    }

    fn busy(&self, ttl: Option<Duration>, waited: Option<Duration>) -> Error {
        let what = match self.keys.as_ref().ok().and_then(|k| k.permits) {
            Some(n) => format!("all {n} permits of semaphore {:?} are taken", self.name),
            None => format!("lock {:?} is held by another owner", self.name),
        };
        let msg = match waited {
            Some(w) => format!("{what}; gave up after waiting {w:?}"),
            None => what,
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

/// The least validity a grant must have left to be taken without asking
/// the store: time to confirm it.
const MIN_GRANT_VALIDITY: Duration = Duration::from_millis(20);

/// Why an attempt did not take the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Someone holds it, with this much lease left if known.
    Held(Option<Duration>),
    /// A Redlock round split the nodes between contenders.
    Contended,
}

impl Wait {
    fn ttl(self) -> Option<Duration> {
        match self {
            Self::Held(ttl) => ttl,
            Self::Contended => None,
        }
    }
}

/// The random pause after a Redlock round with no winner: long enough to
/// desynchronize contenders (a few round trips), short against any lease.
fn contention_backoff() -> Duration {
    Duration::from_micros(fastrand::u64(500..=10_000))
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

    /// With five waiters of five clients queued, a release is one script
    /// that publishes once, and the handoff costs the release and the
    /// first waiter's confirmation: two scripts, whatever the number of
    /// waiters.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_release_wakes_the_first_waiter_alone() {
        let server = lockguard_testing::RedisServer::start();
        let holder = Client::connect(&server.url()).await.unwrap();
        let mut admin = server.connection().await;
        let keys = LockKeys::new(holder.prefix(), "herd");
        let stat = |info: &str, cmd: &str| -> u64 {
            info.lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{cmd}:calls=")))
                .and_then(|r| r.split(',').next())
                .map_or(0, |n| n.parse().unwrap())
        };
        let guard = holder.lock("herd").acquire().await.unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..5 {
            // Refreshes every 10 s: none falls inside the measurement.
            let lg = Client::builder()
                .waiter_timeout(Duration::from_secs(30))
                .retry_interval(Duration::from_secs(10))
                .connect(&server.url())
                .await
                .unwrap();
            let tx = tx.clone();
            tokio::spawn(async move {
                let g = lg
                    .lock("herd")
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await;
                let _ = tx.send((i, g.unwrap()));
            });
            loop {
                let queued: u64 = redis::cmd("ZCARD")
                    .arg(&keys.queue)
                    .query_async(&mut admin)
                    .await
                    .unwrap();
                if queued == i + 1 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        // Load the release and extend scripts, so no SCRIPT LOAD falls
        // inside.
        let warm = holder.lock("warm").acquire().await.unwrap();
        warm.extend(Duration::from_secs(5)).await.unwrap();
        assert!(warm.release().await.unwrap());
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut admin)
            .await
            .unwrap();
        let before = guard.fencing_token();
        assert!(guard.release().await.unwrap());
        let (first, g) = rx.recv().await.unwrap();
        assert_eq!(first, 0, "the first waiter in the queue gets the lock");
        assert!(g.fencing_token() > before);
        // The new holder confirms its lease in the background.
        let mut info = String::new();
        for _ in 0..200 {
            info = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(&mut admin)
                .await
                .unwrap();
            if stat(&info, "evalsha") >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(stat(&info, "publish"), 1, "one waiter notified\n{info}");
        assert_eq!(
            stat(&info, "evalsha"),
            2,
            "release and confirm only\n{info}"
        );
        // The rest follow in order.
        let mut g = g;
        for expected in 1..5 {
            assert!(g.release().await.unwrap());
            let (i, next) = rx.recv().await.unwrap();
            assert_eq!(i, expected);
            g = next;
        }
        assert!(g.release().await.unwrap());
    }

    #[tokio::test]
    async fn released_and_dropped_guards_leave_no_reentrancy_record() {
        let lg = Client::memory();
        for i in 0..100 {
            let g = lg.lock(&format!("k{i}")).acquire().await.unwrap();
            if i % 2 == 0 {
                assert!(g.release().await.unwrap());
            } else {
                drop(g);
            }
        }
        assert_eq!(lg.holdings_len(), 0);
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

    #[test]
    fn leases_are_validated() {
        assert!(validate_lease(Duration::ZERO, false).is_err());
        assert!(validate_lease(Duration::from_millis(9), false).is_err());
        assert!(validate_lease(MIN_LEASE, false).is_ok());
        // The shortest lease still leaves time to use it.
        assert!(crate::guard::safety_margin(MIN_LEASE) < MIN_LEASE / 2);
        assert!(validate_lease(Duration::from_millis(50), true).is_err());
        assert!(validate_lease(MAX_LEASE, true).is_ok());
        assert!(validate_lease(MAX_LEASE + Duration::from_millis(1), false).is_err());
    }
}
