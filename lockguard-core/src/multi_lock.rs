//! Locking several keys as one: all of them or none, taken in one order
//! that every client shares, so two multi-locks over shared keys never
//! deadlock.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::Engine;
use crate::error::{Error, ErrorKind, Invalid, Result};
use crate::fence::FencingToken;
use crate::guard::{LockGuard, PendingRelease, until_lost};
use crate::lease::{Grant, Lease, valid_until};
use crate::lock::{LAPSES_IN_A_ROW, Lock};
use crate::store::{AllOrNone, LockSet};
use crate::token::Token;

/// The most keys one multi-lock takes.
pub const MAX_MULTI_LOCK_KEYS: usize = 1024;

/// A lock on several keys at once, ready to be acquired: every key or none
/// (Redisson's `RMultiLock`, Curator's `InterProcessMultiLock`).
///
/// Made by [`Client::multi_lock`](crate::Client::multi_lock). Each key is
/// an ordinary [`Lock`] of the same name: a multi-lock on `a` and `b`
/// excludes, and is excluded by, a [`Client::lock`](crate::Client::lock)
/// on `a`, and each key keeps its own lease, watchdog, fencing token and
/// FIFO queue.
///
/// The keys are taken one after another in one order every client shares
/// (their identities in the store, sorted), waiting in each key's queue in
/// turn within one overall [`wait`](MultiLock::wait). Two multi-locks
/// whose keys overlap, given in any order, take the shared keys in the
/// same order, so neither can hold one the other needs while it waits for
/// one the other holds: no deadlock. When a key cannot be had within the
/// wait (busy, the store down, the future dropped), the keys already taken
/// are released before the error is returned (in the background for a
/// dropped future), so no partial hold outlives the attempt; a process
/// that dies part way leaves its keys to their leases, like any lock. A
/// key whose lease lapsed while a later key was waited for (a fixed lease
/// shorter than the wait) is taken again, after the keys behind it are
/// given back, within the same wait: a guard is returned only while it
/// holds every key. Five such retakes in a row end the wait with
/// [`ErrorKind::Timeout`]: the lease is shorter than taking every key
/// takes (under the contention there is), and taking and giving back the
/// keys again would not change that.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockguard_core::Error> {
/// let lg = lockguard_core::Client::memory();
///
/// // A transfer locks both accounts; another transfer between the same
/// // two, written the other way round, takes them in the same order.
/// let guard = lg.multi_lock(["account:7", "account:3"]).acquire().await?;
/// assert_eq!(guard.names().collect::<Vec<_>>(), ["account:3", "account:7"]);
/// let fence = guard.fencing_token("account:7").unwrap();
/// # let _ = fence;
///
/// // Each key is an ordinary lock: a single lock on one of them is busy.
/// let peer = lg.peer();
/// assert!(peer.lock("account:3").try_acquire().await.unwrap_err().is_busy());
/// // And a multi-lock sharing a key is busy as a whole; it holds nothing.
/// let e = peer.multi_lock(["account:1", "account:7"]).try_acquire().await.unwrap_err();
/// assert!(e.is_busy());
/// assert!(!peer.lock("account:1").inspect().await?.is_held());
///
/// assert!(guard.release().await?);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a multi-lock does nothing until acquired"]
pub struct MultiLock {
    /// One lock per distinct key, in acquisition order.
    locks: Result<Vec<Lock>, Invalid>,
    wait: Duration,
}

impl MultiLock {
    pub(crate) fn new<I, S>(engine: &Arc<Engine>, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let wait = engine.defaults.wait;
        let mut locks = Vec::new();
        for name in names {
            locks.push(Lock::new(engine.clone(), name.as_ref()));
        }
        Self {
            locks: Self::ordered(locks).map_err(Invalid::from),
            wait,
        }
    }

    /// The locks in the order every client takes them, one per identity.
    fn ordered(mut locks: Vec<Lock>) -> Result<Vec<Lock>> {
        if locks.is_empty() {
            return Err(Error::invalid("a multi-lock needs at least one key"));
        }
        if locks.len() > MAX_MULTI_LOCK_KEYS {
            return Err(Error::invalid(format!(
                "a multi-lock takes at most {MAX_MULTI_LOCK_KEYS} keys, got {}",
                locks.len()
            )));
        }
        for lock in &locks {
            lock.keys()?;
        }
        // Checked above: every lock has its keys.
        locks.sort_by(|a, b| a.id().cmp(b.id()));
        locks.dedup_by(|a, b| a.id() == b.id());
        Ok(locks)
    }

    fn map(mut self, f: impl Fn(Lock) -> Lock) -> Self {
        if let Ok(locks) = &mut self.locks {
            *locks = std::mem::take(locks).into_iter().map(f).collect();
        }
        self
    }

    /// A fixed lease on every key, with no watchdog (see [`Lock::lease`]).
    pub fn lease(self, lease: Duration) -> Self {
        self.map(|l| l.lease(lease))
    }

    /// A lease on every key renewed by the watchdog (the default, with the
    /// client's default lease; see [`Lock::watchdog`]).
    pub fn watchdog(self, lease: Duration) -> Self {
        self.map(|l| l.watchdog(lease))
    }

    /// How every key's lease is kept, as a value (see [`Lock::with_lease`]).
    pub fn with_lease(self, lease: Lease) -> Self {
        self.map(|l| l.with_lease(lease))
    }

    /// Keeps every key until at least `at_least` after it was taken (see
    /// [`Lock::at_least`]).
    pub fn at_least(self, at_least: Duration) -> Self {
        self.map(|l| l.at_least(at_least))
    }

    /// How long [`MultiLock::acquire`] waits in all, across every key,
    /// before giving up. Zero makes one attempt per key.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The longest pause between two attempts on a key when no
    /// notification arrives (see [`Lock::retry_interval`]).
    pub fn retry_interval(self, interval: Duration) -> Self {
        self.map(|l| l.retry_interval(interval))
    }

    /// The `name` label of the keys' metrics (see [`Lock::metric_name`]).
    pub fn metric_name(self, name: &str) -> Self {
        self.map(|l| l.metric_name(name))
    }

    /// The keys as given, in acquisition order, each once; empty for a
    /// multi-lock with a bad key.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.locks.iter().flatten().map(Lock::name)
    }

    /// Checks the keys and settings now, without a round trip: what
    /// [`MultiLock::acquire`] would refuse as
    /// [`ErrorKind::InvalidInput`] before reaching the store.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for no keys, more than
    /// [`MAX_MULTI_LOCK_KEYS`], a bad key, lease or retry interval.
    pub fn validate(&self) -> Result<()> {
        self.locks()?.iter().try_for_each(Lock::validate)
    }

    fn locks(&self) -> Result<&[Lock]> {
        self.locks.as_deref().map_err(Invalid::error)
    }

    /// Takes every key if each is free, without waiting.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Busy`] naming a key another owner holds (the keys taken
    /// before it are released first); [`ErrorKind::InvalidInput`] as
    /// [`MultiLock::validate`]; the store's errors.
    pub async fn try_acquire(&self) -> Result<MultiLockGuard> {
        self.take(None).await
    }

    /// Takes every key, waiting up to the configured bound (see
    /// [`MultiLock::wait`]) in each busy key's queue in turn.
    ///
    /// Dropping the returned future at any point is safe: the keys it took
    /// are released in the background, and the key it was waiting for is
    /// left as [`Lock::acquire`] leaves it.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Busy`] when the wait ran out on a key (the keys taken
    /// before it are released first); otherwise as [`Lock::acquire`].
    pub async fn acquire(&self) -> Result<MultiLockGuard> {
        let deadline = Instant::now().checked_add(self.wait);
        self.take(Some(deadline)).await
    }

    /// Runs `body` under every key: acquires them (waiting as configured),
    /// runs `body` in their [`scope`](MultiLockGuard::scope), and releases
    /// them when `body` is done. If any key's lease is lost while `body`
    /// runs, `body` is dropped at once and [`ErrorKind::LeaseLost`]
    /// returned.
    ///
    /// # Errors
    ///
    /// As [`MultiLock::acquire`]; [`ErrorKind::LeaseLost`] when a lease was
    /// lost while `body` ran, or found gone by the release after it. A
    /// release that cannot reach the store is logged and left to the lease.
    pub async fn run<F: Future>(&self, body: F) -> Result<F::Output> {
        let guard = self.acquire().await?;
        // The body (dropped by `until_lost`) is gone before the keys are
        // given back.
        let out = match until_lost(guard.lost(), guard.scope(body)).await {
            Ok(out) => out,
            Err(lost) => {
                drop(guard);
                return Err(lost);
            }
        };
        match guard.release().await {
            Ok(true) => Ok(out),
            Ok(false) => Err(Error::new(
                ErrorKind::LeaseLost,
                "a key of the multi-lock was gone when the work under it finished",
            )),
            // Logged by the release; the leases free the keys.
            Err(_) => Ok(out),
        }
    }

    /// Takes the keys: all in one step where the store can; otherwise (or
    /// when that finds one busy and this may wait) in order, each with one
    /// attempt (`deadline` `None`) or waiting in its queue until `deadline`
    /// (`Some(None)`: no bound).
    async fn take(&self, deadline: Option<Option<Instant>>) -> Result<MultiLockGuard> {
        let locks = self.locks()?;
        locks.iter().try_for_each(Lock::validate)?;
        match self.attempt_all(locks).await {
            Ok(Some(Ok(guard))) => return Ok(guard),
            Ok(Some(Err(busy))) if deadline.is_none() => return Err(busy),
            // A wait rides out a store that cannot be reached, key by key.
            Err(e) if deadline.is_none() || !e.is_retryable() => return Err(e),
            // Waits in each busy key's queue, in order.
            _ => {}
        }
        // Dropped with the future: whatever was taken is released.
        let mut taken = Taken(Vec::with_capacity(locks.len()));
        let mut lapses = 0;
        loop {
            let Some(lock) = locks.get(taken.0.len()) else {
                // Every key is taken, but one taken early may have lapsed
                // while a later one was waited for (a fixed lease shorter
                // than the wait, renewals that failed), and another owner
                // may hold it now. The keys from the first lapsed one on are
                // given back and taken again, in order, while the wait
                // lasts: a multi-lock returns only holding every key.
                let Some(first) = taken.0.iter().position(|g| !g.is_held()) else {
                    break;
                };
                taken.release_from(first).await;
                lapses += 1;
                let ended = deadline.is_none_or(|d| d.is_some_and(|d| d <= Instant::now()));
                if ended || lapses >= LAPSES_IN_A_ROW {
                    taken.release().await;
                    let lapsed = &locks[first];
                    let lease = lapsed.checked()?.1;
                    return Err(if ended {
                        lapsed.lapsed(lease)
                    } else {
                        lapsed.lapsed_while_taking_the_rest(lease, lapses)
                    });
                }
                tracing::debug!(lock = %locks[first].name(), "a key of the multi-lock lapsed while a later one was waited for; taking it again");
                continue;
            };
            let attempt = match deadline {
                None => lock.try_acquire().await,
                Some(deadline) => {
                    let left = deadline.map_or(Duration::MAX, |d| {
                        d.saturating_duration_since(Instant::now())
                    });
                    lock.clone().wait(left).acquire().await
                }
            };
            match attempt {
                Ok(guard) => taken.0.push(guard),
                Err(e) => {
                    taken.release().await;
                    return Err(e);
                }
            }
        }
        Ok(MultiLockGuard {
            guards: std::mem::take(&mut taken.0),
        })
    }
}

impl MultiLock {
    /// One attempt at every key in one step ([`LockStore::acquire_all`]):
    /// `None` where the store cannot (nothing was sent), or some key is
    /// held by an enclosing scope (the ordered path makes it reentrant);
    /// `Some(Err(busy))` naming the key that was busy.
    ///
    /// [`LockStore::acquire_all`]: crate::store::LockStore::acquire_all
    async fn attempt_all(&self, locks: &[Lock]) -> Result<Option<Result<MultiLockGuard>>> {
        if locks.len() < 2 || locks.iter().any(Lock::in_scope) {
            return Ok(None);
        }
        let engine = locks[0].engine();
        let mut keys = Vec::with_capacity(locks.len());
        let mut lease = Duration::ZERO;
        for lock in locks {
            let (k, l) = lock.checked()?;
            keys.push(k.clone());
            lease = l;
        }
        let tokens: Vec<Token> = keys.iter().map(|_| Token::random()).collect();
        let Some(set) = LockSet::new(&keys, &tokens) else {
            return Ok(None);
        };
        let started = Instant::now();
        // Until the answer is handled, a drop of this future (or an error
        // whose outcome is unknown) releases every token in the background:
        // the request may have taken the keys.
        let pending: Vec<PendingRelease<'_>> = keys
            .iter()
            .zip(&tokens)
            .map(|(k, t)| PendingRelease::new(engine, k, *t))
            .collect();
        let answer = engine.store.acquire_all(set, lease).await?;
        let fences = match answer {
            Some(AllOrNone::Acquired(fences)) if fences.len() == keys.len() => fences,
            Some(AllOrNone::Acquired(fences)) => {
                return Err(Error::new(
                    ErrorKind::Protocol,
                    format!(
                        "the store answered {} fencing tokens for a multi-lock of {} keys",
                        fences.len(),
                        keys.len()
                    ),
                ));
            }
            Some(AllOrNone::Busy { index, ttl }) => {
                pending.into_iter().for_each(PendingRelease::disarm);
                let lock = locks.get(index).unwrap_or(&locks[0]);
                let busy = lock.busy(ttl, Duration::ZERO);
                lock.record(started, Err(&busy));
                return Ok(Some(Err(busy)));
            }
            None => {
                pending.into_iter().for_each(PendingRelease::disarm);
                return Ok(None);
            }
        };
        pending.into_iter().for_each(PendingRelease::disarm);
        let until = valid_until(started, lease);
        let mut guards = Vec::with_capacity(locks.len());
        for (((lock, keys), token), fence) in locks.iter().zip(keys).zip(tokens).zip(fences) {
            let grant = Grant {
                token,
                fence,
                valid_until: until,
            };
            // A key granted too late is released by `granted`; the guards
            // made before it are released as they drop.
            let guard = lock.granted(keys, grant, None);
            guards.push(lock.finish(&tracing::Span::none(), started, guard)?);
        }
        Ok(Some(Ok(MultiLockGuard { guards })))
    }
}

/// The keys a multi-lock has taken so far; released on drop.
struct Taken(Vec<LockGuard>);

impl Taken {
    /// Gives back every key taken, reporting a release that fails (the
    /// lease then frees the key).
    async fn release(&mut self) {
        self.release_from(0).await;
    }

    /// Gives back the keys taken from the `first`-th on, last first.
    async fn release_from(&mut self, first: usize) {
        for guard in self.0.drain(first..).rev() {
            let name = guard.name().to_owned();
            if let Err(e) = guard.release().await {
                tracing::warn!(lock = %name, error = %e, "a multi-lock could not give back a key it took; its lease frees it");
            }
        }
    }
}

/// A held multi-lock: one [`LockGuard`] per key, released together.
///
/// Dropping it releases every key in the background, as dropping a
/// [`LockGuard`] does; [`MultiLockGuard::release`] is the explicit form.
#[derive(Debug)]
#[must_use = "dropping the guard releases every key at once"]
pub struct MultiLockGuard {
    /// In acquisition order.
    guards: Vec<LockGuard>,
}

impl MultiLockGuard {
    /// The keys as given, in acquisition order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.guards.iter().map(LockGuard::name)
    }

    /// The fencing token `name` was granted with, one per key; `None` for a
    /// key this multi-lock does not hold.
    pub fn fencing_token(&self, name: &str) -> Option<FencingToken> {
        self.guards
            .iter()
            .find(|g| g.name() == name)
            .map(LockGuard::fencing_token)
    }

    /// Every key with its fencing token, in acquisition order.
    pub fn fencing_tokens(&self) -> impl Iterator<Item = (&str, FencingToken)> {
        self.guards.iter().map(|g| (g.name(), g.fencing_token()))
    }

    /// The guard of each key, in acquisition order.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The guards, to keep or release one key at a time.
    pub fn into_guards(mut self) -> Vec<LockGuard> {
        std::mem::take(&mut self.guards)
    }

    /// Whether every key is still held (no lease is known to be lost).
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(LockGuard::is_held)
    }

    /// The shortest time any key's lease is still known valid for.
    pub fn valid_for(&self) -> Duration {
        self.guards
            .iter()
            .map(LockGuard::valid_for)
            .min()
            .unwrap_or_default()
    }

    /// Completes when the lease of any key is lost or about to run out
    /// (see [`LockGuard::lost`]), with that key's error.
    pub fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
        let mut each: Vec<Pin<Box<dyn Future<Output = Error> + Send>>> = self
            .guards
            .iter()
            .map(|g| Box::pin(g.lost()) as Pin<Box<dyn Future<Output = Error> + Send>>)
            .collect();
        std::future::poll_fn(move |cx| {
            for lost in &mut each {
                if let Poll::Ready(e) = lost.as_mut().poll(cx) {
                    return Poll::Ready(e);
                }
            }
            Poll::Pending
        })
    }

    /// Resets every key's lease to `lease` from now.
    ///
    /// # Errors
    ///
    /// The first key's error, as [`LockGuard::extend`]: a key found lost
    /// is [`ErrorKind::LeaseLost`]. Every key is tried.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        let mut first = None;
        for guard in &self.guards {
            if let Err(e) = guard.extend(lease).await {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Runs `body` as the holder of every key: inside it, acquiring one of
    /// them again on the same client is reentrant (see
    /// [`LockGuard::scope`]).
    pub fn scope<F: Future>(&self, body: F) -> impl Future<Output = F::Output> + use<F> {
        crate::reentry::scope_all(&self.guards, body)
    }

    /// Releases every key, and reports whether all were still held.
    ///
    /// # Errors
    ///
    /// The first store error; every key is still released (or left to its
    /// lease when the store cannot be reached).
    pub async fn release(mut self) -> Result<bool> {
        let mut held = true;
        let mut first = None;
        for guard in std::mem::take(&mut self.guards).into_iter().rev() {
            match guard.release().await {
                Ok(still) => held &= still,
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        first.map_or(Ok(held), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Client;

    /// Polls `lock`'s queue (paused time moves on) until `n` wait in it.
    async fn until_waiting(lock: &Lock, n: u64) {
        while lock.inspect().await.unwrap().waiters != n {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// A multi-lock whose fixed lease is shorter than taking its keys takes
    /// (each round waits 30 ms in the last key's queue while the first
    /// key's 10 ms lease runs), with no bound on its wait, ends with a
    /// `Timeout` after `LAPSES_IN_A_ROW` retakes, holding nothing, where it
    /// took and gave back its keys for good.
    #[tokio::test(start_paused = true)]
    async fn retakes_of_a_lapsed_key_end_when_the_lease_is_shorter_than_taking_the_keys() {
        let lg = Client::memory();
        let multi = lg
            .multi_lock(["a", "b"])
            .lease(Duration::from_millis(10))
            .wait(Duration::MAX);
        let order: Vec<String> = multi.names().map(str::to_owned).collect();
        let last = lg.lock(&order[1]).wait(Duration::MAX);
        let mut held = last.try_acquire().await.unwrap();
        let waiting = tokio::spawn(async move { multi.acquire().await });
        for _ in 0..LAPSES_IN_A_ROW {
            // The multi-lock holds the first key and waits for the last;
            // the next holder of the last queues behind it, so it is
            // handed the last key when the multi-lock gives it back.
            until_waiting(&last, 1).await;
            tokio::time::sleep(Duration::from_millis(30)).await;
            let next = tokio::spawn({
                let last = last.clone();
                async move { last.acquire().await }
            });
            until_waiting(&last, 2).await;
            assert!(held.release().await.unwrap());
            held = next.await.unwrap().unwrap();
        }
        let e = tokio::time::timeout(Duration::from_secs(60), waiting)
            .await
            .expect("the multi-lock went on taking and giving back its keys")
            .unwrap()
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
        assert!(e.to_string().contains("5 times in a row"), "{e}");
        assert_eq!(
            lg.lock(&order[0]).inspect().await.unwrap().holders,
            0,
            "{e}"
        );
        assert!(held.release().await.unwrap());
    }
}
