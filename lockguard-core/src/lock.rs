//! Acquiring a distributed lock: one attempt, or a bounded wait woken by
//! release notifications.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Attempt;
use crate::client::{Lockguard, MAX_LEASE, MIN_LEASE, MIN_WATCHDOG_LEASE};
use crate::error::{Error, ErrorKind, Result};
use crate::fence::FencingToken;
use crate::guard::{Held, LockGuard, PendingRelease};
use crate::key::LockKeys;
use crate::notify::Offer;
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
/// Made by [`Lockguard::lock`]. Without [`Lock::lease`], the lease is the
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
/// let lg = lockguard_core::Lockguard::memory();
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
    client: Lockguard,
    name: Arc<str>,
    keys: Result<Arc<LockKeys>, String>,
    lease: LeaseMode,
    wait: Duration,
    retry_interval: Duration,
    reentrant: bool,
}

/// Checks a lease: not zero, whole milliseconds at least, at most
/// [`MAX_LEASE`], and long enough for the watchdog when it renews.
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
    pub(crate) fn new(client: Lockguard, name: &str) -> Self {
        let keys = crate::key::validate("lock", name)
            .map(|()| Arc::new(LockKeys::new(client.prefix(), name)))
            .map_err(|e| e.message().to_owned());
        Self::with_keys(client, name, keys)
    }

    /// The acquirer behind a semaphore: the same leases, watchdog and
    /// waiting, on permits instead of one lock.
    pub(crate) fn semaphore(client: Lockguard, name: &str, permits: u32) -> Self {
        let keys = crate::key::validate("semaphore", name)
            .and_then(|()| {
                if permits == 0 || permits > crate::semaphore::MAX_PERMITS {
                    Err(Error::invalid(format!(
                        "semaphore {name:?} needs between 1 and {} permits, got {permits}",
                        crate::semaphore::MAX_PERMITS
                    )))
                } else {
                    Ok(())
                }
            })
            .map(|()| Arc::new(LockKeys::semaphore(client.prefix(), name, permits)))
            .map_err(|e| e.message().to_owned());
        Self::with_keys(client, name, keys)
    }

    fn with_keys(client: Lockguard, name: &str, keys: Result<Arc<LockKeys>, String>) -> Self {
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

    /// The longest pause between two attempts when no release notification
    /// arrives. The safety net for a lost pub/sub message; waiters also
    /// retry when the holder's lease runs out.
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
    /// A waiter sleeps until a release is announced (pub/sub on Redis), the
    /// holder's lease runs out, or the retry interval passes, whichever
    /// comes first; it never spins. Of the tasks of one client waiting on
    /// one key, one at a time asks the store.
    ///
    /// Dropping the returned future at any point is safe: a lock it obtained
    /// but did not hand out is released in the background.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Busy`] when the wait ran out; [`ErrorKind::InvalidInput`]
    /// for a bad key or lease; the store's errors.
    pub async fn acquire(&self) -> Result<LockGuard> {
        let (keys, lease) = self.checked()?;
        if let Some(guard) = self.reenter(keys) {
            return Ok(guard);
        }
        let started = Instant::now();
        let mut wait = match self.attempt(keys, lease).await? {
            Ok(guard) => return Ok(guard),
            Err(wait) => wait,
        };
        let deadline = started.checked_add(self.wait);
        if self.wait.is_zero() {
            return Err(self.busy(wait.ttl(), Some(self.wait)));
        }
        tracing::debug!(lock = %self.name, "lock busy; waiting");
        let mut registration = self
            .client
            .waiters()
            .register(&keys.channel, deadline)
            .await;
        let slot = registration.slot.clone();
        let _slot = match deadline {
            Some(d) => tokio::time::timeout_at(d, slot.lock())
                .await
                .map_err(|_| self.busy(wait.ttl(), Some(self.wait)))?,
            None => slot.lock().await,
        };
        let mut first = true;
        let mut offer: Option<OfferRx> = None;
        loop {
            registration.rx.borrow_and_update();
            // Taking over the slot from a sibling task that just acquired
            // the lock: it is certainly held, so wait for its release
            // instead of asking the store.
            let sibling_holds = first && self.client.held_locally(&keys.lock);
            first = false;
            if !sibling_holds {
                match self.attempt(keys, lease).await? {
                    Ok(guard) => {
                        tracing::debug!(
                            lock = %self.name,
                            fence = guard.fencing_token().get(),
                            waited_ms = started.elapsed().as_millis() as u64,
                            "lock acquired after waiting"
                        );
                        return Ok(guard);
                    }
                    Err(w) => wait = w,
                }
            }
            let now = Instant::now();
            let remaining = match deadline {
                Some(d) if d <= now => {
                    // A handoff that arrived meanwhile is ours to take.
                    if let Some(h) = offer.as_mut().and_then(OfferRx::try_take)
                        && let Some(guard) =
                            self.guard(keys.clone(), h.token, h.fence, lease, h.sent_at)
                    {
                        return Ok(guard);
                    }
                    return Err(self.busy(wait.ttl(), Some(self.wait)));
                }
                Some(d) => d - now,
                None => Duration::MAX,
            };
            if wait == Wait::Contended {
                // Every contender of the split round is notified at once;
                // a random pause instead keeps the next round from splitting.
                tokio::time::sleep(contention_backoff().min(remaining)).await;
                continue;
            }
            let ttl = wait.ttl();
            // Never a zero nap: a holder whose lease is about to end gets
            // a millisecond, not a spin.
            let nap = jitter(self.retry_interval)
                .min(ttl.unwrap_or(Duration::MAX))
                .min(remaining)
                .max(Duration::from_millis(1));
            // Offer to take the lock over from a task of this client.
            if offer.is_none() && self.client.store().can_transfer(keys) {
                let (tx, rx) = tokio::sync::oneshot::channel();
                self.client
                    .waiters()
                    .offer(&keys.channel, Offer { tx, lease });
                offer = Some(OfferRx {
                    rx,
                    client: self.client.clone(),
                    keys: keys.clone(),
                });
            }
            let handed = async {
                match offer.as_mut() {
                    Some(o) => Some((&mut o.rx).await),
                    None => std::future::pending().await,
                }
            };
            let woken = tokio::select! {
                _ = registration.rx.changed() => None,
                () = tokio::time::sleep(nap) => None,
                h = handed => h,
            };
            if let Some(handed) = woken {
                offer = None;
                if let Ok(h) = handed
                    && let Some(guard) =
                        self.guard(keys.clone(), h.token, h.fence, lease, h.sent_at)
                {
                    tracing::debug!(lock = %self.name, waited_ms = started.elapsed().as_millis() as u64, "lock handed over after waiting");
                    return Ok(guard);
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

    /// One attempt. `Ok(Err(wait))` when someone else holds the lock:
    /// `Held(ttl)` with their remaining lease, or `Contended` when a Redlock
    /// round had no winner and the caller should back off at random.
    async fn attempt(
        &self,
        keys: &Arc<LockKeys>,
        lease: Duration,
    ) -> Result<Result<LockGuard, Wait>> {
        let token = Token::random();
        let started = Instant::now();
        // Until the store's answer is handled, a drop of this future (or a
        // timeout with an unknown outcome) releases the token in the
        // background: the request may have taken the lock.
        let pending = PendingRelease::new(&self.client, keys, token);
        let outcome = self.client.store().try_acquire(keys, &token, lease).await?;
        match outcome {
            Attempt::Held(ttl) => {
                pending.disarm();
                Ok(Err(Wait::Held(ttl)))
            }
            Attempt::Contended => {
                // Our partial grants were undone by the store already.
                pending.disarm();
                Ok(Err(Wait::Contended))
            }
            Attempt::Acquired(_) | Attempt::AcquiredSlot(..) => {
                let (fence, held_keys) = match outcome {
                    Attempt::AcquiredSlot(fence, slot) => (fence, slot),
                    Attempt::Acquired(fence) => (fence, keys.clone()),
                    Attempt::Held(_) | Attempt::Contended => unreachable!("matched above"),
                };
                pending.disarm();
                self.guard(held_keys, token, fence, lease, started)
                    .map(Ok)
                    .ok_or_else(|| {
                        Error::new(
                            ErrorKind::Timeout,
                            format!(
                                "lock {:?} was granted after {:?}, past its {lease:?} lease",
                                self.name,
                                started.elapsed()
                            ),
                        )
                    })
            }
        }
    }

    /// The guard for a lock taken with `token` by a request sent at
    /// `sent_at`, or `None` (and the token released) when the answer came so
    /// late that the lease may already be over: a lock that might have
    /// expired is never handed out.
    fn guard(
        &self,
        keys: Arc<LockKeys>,
        token: Token,
        fence: FencingToken,
        lease: Duration,
        sent_at: Instant,
    ) -> Option<LockGuard> {
        let valid_until = sent_at + lease.saturating_sub(crate::guard::safety_margin(lease));
        if Instant::now() >= valid_until {
            drop(PendingRelease::new(&self.client, &keys, token));
            return None;
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
        Some(LockGuard::new(held))
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

/// The receiving end of a handoff offer. Dropped with a handoff still in it
/// (the waiter gave up, failed or was cancelled between the handoff and
/// reading it), it releases the handed lock in the background: a lock is
/// never left to a waiter that is gone.
struct OfferRx {
    rx: tokio::sync::oneshot::Receiver<crate::notify::Handoff>,
    client: Lockguard,
    keys: Arc<LockKeys>,
}

impl OfferRx {
    fn try_take(&mut self) -> Option<crate::notify::Handoff> {
        self.rx.try_recv().ok()
    }
}

impl Drop for OfferRx {
    fn drop(&mut self) {
        self.rx.close();
        if let Ok(h) = self.rx.try_recv() {
            drop(PendingRelease::new(&self.client, &self.keys, h.token));
        }
    }
}

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

    /// A release by one task with another task of the same client waiting
    /// hands the lock over in one request: no release is published, the
    /// waiter's fencing token is newer; after the bounded run of handoffs
    /// a release is public again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn release_hands_over_to_a_waiting_task_of_the_same_client() {
        let server = lockguard_testing::RedisServer::start();
        let lg = Lockguard::connect(&server.url()).await.unwrap();
        let mut admin = server.connection().await;
        let keys = LockKeys::new(lg.prefix(), "h");
        let publishes = |info: String| -> u64 {
            info.lines()
                .find_map(|l| l.strip_prefix("cmdstat_publish:calls="))
                .and_then(|r| r.split(',').next())
                .map_or(0, |n| n.parse().unwrap())
        };
        let mut guard = lg.lock("h").acquire().await.unwrap();
        // Enough waiting tasks that some always wait between rounds.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let rounds = crate::notify::MAX_HANDOFFS_IN_A_ROW + 1;
        for _ in 0..=rounds {
            let (lg, tx) = (lg.clone(), tx.clone());
            tokio::spawn(async move {
                let g = lg
                    .lock("h")
                    .wait(Duration::from_secs(20))
                    .acquire()
                    .await
                    .unwrap();
                tx.send(g).unwrap();
            });
        }
        for round in 0..rounds {
            while !lg.waiters().has_offer(&keys.channel) {
                tokio::task::yield_now().await;
            }
            let _: () = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query_async(&mut admin)
                .await
                .unwrap();
            let before = guard.fencing_token();
            assert!(guard.release().await.unwrap());
            guard = rx.recv().await.unwrap();
            assert!(guard.fencing_token() > before);
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(&mut admin)
                .await
                .unwrap();
            let expected = u64::from(round == crate::notify::MAX_HANDOFFS_IN_A_ROW);
            assert_eq!(publishes(info), expected, "round {round}");
        }
        drop((guard, tx));
        while let Ok(Some(g)) = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
            drop(g);
        }
    }

    #[tokio::test]
    async fn released_and_dropped_guards_leave_no_reentrancy_record() {
        let lg = Lockguard::memory();
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

    /// A waiter that leaves after a lock was handed to it (timed out,
    /// failed, cancelled) does not keep it: the lock is released at once.
    #[tokio::test]
    async fn a_handoff_to_a_waiter_that_left_is_released() {
        let lg = Lockguard::memory();
        let keys = Arc::new(LockKeys::new(lg.prefix(), "gone"));
        let holder = lg
            .lock("gone")
            .lease(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let _reg = lg.waiters().register(&keys.channel, None).await;
        lg.waiters().offer(
            &keys.channel,
            Offer {
                tx,
                lease: Duration::from_secs(30),
            },
        );
        let offer = OfferRx {
            rx,
            client: lg.clone(),
            keys: keys.clone(),
        };
        assert!(holder.release().await.unwrap(), "handed over");
        assert!(
            lg.peer()
                .lock("gone")
                .try_acquire()
                .await
                .unwrap_err()
                .is_busy(),
            "the handed lock is held"
        );
        drop(offer);
        tokio::task::yield_now().await;
        let freed = lg.peer().lock("gone").try_acquire().await;
        assert!(
            freed.is_ok(),
            "the departed waiter kept the lock: {freed:?}"
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
