//! The held lock: RAII guard, explicit release, extend, and the lease-loss
//! signal.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::client::Client;
use crate::error::{Error, ErrorKind, Result};
use crate::fence::FencingToken;
use crate::key::LockKeys;
use crate::token::Token;

/// How long before the lease's end the guard stops counting itself as held:
/// 1% of the lease plus 2 ms, for clock drift and the time a request takes.
pub(crate) fn safety_margin(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// What the holder knows about its lease.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LeaseState {
    /// Until when the lease is certainly ours (measured from before the
    /// request that set it, minus the safety margin).
    pub(crate) valid_until: Instant,
    /// The store said the lock is no longer ours.
    pub(crate) lost: bool,
}

/// What the watchdog and the guard share about one acquisition.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) client: Client,
    pub(crate) name: Arc<str>,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) token: Token,
    pub(crate) fence: FencingToken,
    pub(crate) lease: Duration,
    pub(crate) state: watch::Sender<LeaseState>,
    /// Set when the guard is released or dropped: a confirmation that
    /// finds the lock gone after that is no loss.
    released: AtomicBool,
    /// Held from sending a renewal (watchdog, `extend`, confirmation) to
    /// applying its answer: renewals are sent and applied in one order, so
    /// the validity the guard counts on is the one the store ran last.
    pub(crate) renewal: tokio::sync::Mutex<()>,
}

impl Shared {
    /// How much longer the lease certainly lasts (zero once lost).
    fn valid_for(&self) -> Duration {
        let s = *self.state.borrow();
        if s.lost || self.released.load(Ordering::Acquire) {
            Duration::ZERO
        } else {
            s.valid_until.saturating_duration_since(Instant::now())
        }
    }

    /// Completes when the lock is lost or its lease is about to run out.
    fn lost(shared: Arc<Self>) -> impl Future<Output = Error> + Send + 'static {
        let mut rx = shared.state.subscribe();
        async move {
            loop {
                let s = *rx.borrow_and_update();
                if s.lost {
                    return shared.lost_error("was lost");
                }
                if shared.released.load(Ordering::Acquire) {
                    return shared.lost_error("was released");
                }
                tokio::select! {
                    () = tokio::time::sleep_until(s.valid_until) => {
                        if !rx.has_changed().unwrap_or(false) {
                            return shared.lost_error("is running out");
                        }
                    }
                    changed = rx.changed() => {
                        if changed.is_err() {
                            return shared.lost_error("ended");
                        }
                    }
                }
            }
        }
    }

    pub(crate) fn is_held(&self) -> bool {
        let s = *self.state.borrow();
        !s.lost && Instant::now() < s.valid_until && !self.released.load(Ordering::Acquire)
    }

    pub(crate) fn mark_lost(&self, why: &str) {
        let was_lost = self.state.send_replace(LeaseState {
            valid_until: Instant::now(),
            lost: true,
        });
        if !was_lost.lost {
            tracing::warn!(lock = %self.name, fence = self.fence.get(), reason = why, "lease lost");
        }
    }

    /// Records a successful renewal sent at `sent_at`. A renewal that comes
    /// back after the lease had already run out locally does not revive the
    /// guard: its loss has been signalled, so it stays lost. Returns whether
    /// the guard still holds.
    pub(crate) fn renewed(&self, sent_at: Instant, lease: Duration) -> bool {
        let now = Instant::now();
        let mut revived_too_late = false;
        self.state.send_if_modified(|s| {
            if s.lost {
                false
            } else if now >= s.valid_until {
                revived_too_late = true;
                false
            } else {
                s.valid_until = sent_at + lease.saturating_sub(safety_margin(lease));
                true
            }
        });
        if revived_too_late {
            self.mark_lost("renewal answered after the lease had run out");
        }
        !self.state.borrow().lost
    }

    /// Confirms a lock handed over to this waiter: sets its own lease in
    /// the store and counts from that request. Until the answer comes, the
    /// guard counts on the earlier of the grant's reservation and the new
    /// lease (the request may shorten the reservation).
    async fn confirm(&self) {
        let _turn = self.renewal.lock().await;
        let sent_at = Instant::now();
        let capped = sent_at + self.lease.saturating_sub(safety_margin(self.lease));
        self.state.send_if_modified(|s| {
            let cap = capped < s.valid_until;
            if cap {
                s.valid_until = capped;
            }
            cap
        });
        match self
            .client
            .store()
            .extend(&self.keys, &self.token, self.lease)
            .await
        {
            Ok(true) => {
                self.renewed(sent_at, self.lease);
            }
            Ok(false) if !self.released.load(Ordering::Acquire) => {
                self.mark_lost("the lock handed over was gone before it was confirmed");
            }
            Ok(false) => {}
            Err(e) => {
                tracing::debug!(lock = %self.name, error = %e, "confirming a lock handed over failed; it counts on its reservation");
            }
        }
    }

    fn lost_error(&self, why: &str) -> Error {
        Error::new(
            ErrorKind::LeaseLost,
            format!(
                "lease of lock {:?} (fencing token {}) {why}",
                self.name, self.fence
            ),
        )
    }
}

/// One acquisition, shared by the guard and its reentrant guards; released
/// when the last of them goes.
#[derive(Debug)]
pub(crate) struct Held {
    shared: Arc<Shared>,
    /// Dropping it stops the watchdog.
    stop_watchdog: std::sync::Mutex<Option<oneshot::Sender<()>>>,
    runtime: Option<Handle>,
    /// The guards sharing this acquisition: the last one to go releases
    /// it, whatever other references (a reentrancy check's) are alive.
    guards: AtomicUsize,
}

impl Held {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        client: Client,
        name: Arc<str>,
        keys: Arc<LockKeys>,
        token: Token,
        fence: FencingToken,
        lease: Duration,
        valid_until: Instant,
        watchdog: bool,
        reentrant: bool,
    ) -> Arc<Self> {
        let shared = Arc::new(Shared {
            client,
            name,
            keys,
            token,
            fence,
            lease,
            state: watch::Sender::new(LeaseState {
                valid_until,
                lost: false,
            }),
            released: AtomicBool::new(false),
            renewal: tokio::sync::Mutex::new(()),
        });
        let runtime = Handle::try_current().ok();
        let stop_watchdog = match (&runtime, watchdog) {
            (Some(rt), true) => {
                let (tx, rx) = oneshot::channel();
                rt.spawn(crate::watchdog::run(shared.clone(), rx));
                Some(tx)
            }
            _ => None,
        };
        let held = Arc::new(Self {
            shared,
            stop_watchdog: std::sync::Mutex::new(stop_watchdog),
            runtime,
            guards: AtomicUsize::new(0),
        });
        if reentrant && held.shared.keys.permits.is_none() {
            held.shared
                .client
                .record_holding(&held.shared.keys.lock, &held, held.shared.token);
        }
        held
    }

    pub(crate) fn is_held(&self) -> bool {
        self.shared.is_held()
    }

    /// Stops the watchdog and forgets the holding; true the first time.
    fn begin_release(&self) -> bool {
        if self.shared.released.swap(true, Ordering::AcqRel) {
            return false;
        }
        // Wakes the watches' `lost()`: the lock is given up.
        self.shared.state.send_modify(|_| {});
        self.stop_watchdog
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        self.shared
            .client
            .forget_holding(&self.shared.keys.lock, &self.shared.token);
        true
    }

    /// One more guard shares this acquisition.
    fn add_guard(&self) {
        self.guards.fetch_add(1, Ordering::AcqRel);
    }

    /// A guard gives up its share; true when it was the last.
    fn drop_guard(&self) -> bool {
        self.guards.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// Releases in the background (a guard was dropped).
    fn release_in_background(&self) {
        if self.begin_release() {
            let s = &self.shared;
            let parts = (s.client.clone(), s.keys.clone(), s.token);
            spawn_release(self.runtime.as_ref(), parts, &s.name, s.fence);
        }
    }

    async fn release_now(&self) -> Result<bool> {
        if !self.begin_release() {
            return Ok(false);
        }
        let s = &self.shared;
        let pending = PendingRelease::new(&s.client, &s.keys, s.token);
        let result = s.client.store().release(&s.keys, &s.token).await;
        pending.disarm();
        match &result {
            Ok(true) => {
                tracing::debug!(lock = %s.name, fence = s.fence.get(), "lock released");
            }
            Ok(false) => {
                s.mark_lost("release found the lock no longer ours");
            }
            Err(e) => {
                tracing::warn!(lock = %s.name, fence = s.fence.get(), error = %e, "release failed; the lease will free the lock");
            }
        }
        result
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // Released by its last guard already, unless it never had one.
        self.release_in_background();
    }
}

type ReleaseParts = (Client, Arc<LockKeys>, Token);

/// Releases in the background on `runtime` (or the current one); without a
/// runtime the lease frees the lock.
fn spawn_release(runtime: Option<&Handle>, parts: ReleaseParts, name: &str, fence: FencingToken) {
    let runtime = runtime.cloned().or_else(|| Handle::try_current().ok());
    let Some(runtime) = runtime else {
        tracing::warn!(lock = %name, "guard dropped outside a tokio runtime; the lease will free the lock");
        return;
    };
    let name: Arc<str> = name.into();
    runtime.spawn(async move {
        let (client, keys, token) = parts;
        match client.store().release(&keys, &token).await {
            Ok(true) => tracing::debug!(lock = %name, fence = fence.get(), "lock released on drop"),
            Ok(false) => tracing::debug!(lock = %name, "lock was no longer held at release on drop"),
            Err(e) => {
                tracing::warn!(lock = %name, error = %e, "release on drop failed; the lease will free the lock");
            }
        }
    });
}

/// Releases a token in the background unless disarmed: the guard against a
/// dropped future keeping a lock that nobody holds. It borrows what it
/// needs and clones it only if it has to act.
#[derive(Debug)]
pub(crate) struct PendingRelease<'a> {
    parts: Option<(&'a Client, &'a Arc<LockKeys>, Token)>,
}

impl<'a> PendingRelease<'a> {
    pub(crate) fn new(client: &'a Client, keys: &'a Arc<LockKeys>, token: Token) -> Self {
        Self {
            parts: Some((client, keys, token)),
        }
    }

    pub(crate) fn disarm(mut self) {
        self.parts = None;
    }
}

impl Drop for PendingRelease<'_> {
    fn drop(&mut self) {
        if let Some((client, keys, token)) = self.parts.take() {
            let parts = (client.clone(), keys.clone(), token);
            spawn_release(None, parts, &keys.lock, FencingToken::new(0));
        }
    }
}

/// A held distributed lock.
///
/// Dropping the guard releases the lock in the background on the runtime
/// it was acquired on; it never blocks. [`LockGuard::release`] is the
/// explicit form and reports whether the lock was still held. Guards that a
/// task obtained reentrantly share the acquisition: the lock is released
/// when the outermost one goes.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    held: Arc<Held>,
    reentrant: bool,
    /// Set by [`LockGuard::release`], which gives up the share itself.
    given_up: bool,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.held.shared.name)
            .field("fencing_token", &self.held.shared.fence)
            .field("held", &self.is_held())
            .field("reentrant", &self.reentrant)
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(held: Arc<Held>) -> Self {
        held.add_guard();
        Self {
            held,
            reentrant: false,
            given_up: false,
        }
    }

    pub(crate) fn reentrant(held: Arc<Held>) -> Self {
        held.add_guard();
        Self {
            held,
            reentrant: true,
            given_up: false,
        }
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.held.shared
    }

    /// Marks the guard lost, as a renewal finding the lock gone would.
    #[cfg(test)]
    pub(crate) fn mark_lost_for_test(&self) {
        self.shared().mark_lost("test");
    }

    /// Confirms, in the background, a lock handed to this waiter: see
    /// [`Shared::confirm`].
    pub(crate) fn confirm(&self) {
        let shared = self.shared().clone();
        let runtime = self
            .held
            .runtime
            .clone()
            .or_else(|| Handle::try_current().ok());
        if let Some(rt) = runtime {
            rt.spawn(async move { shared.confirm().await });
        }
    }

    /// The lock's key as given.
    pub fn name(&self) -> &str {
        &self.shared().name
    }

    /// The fencing token of this acquisition: greater than that of every
    /// earlier acquisition of the key.
    pub fn fencing_token(&self) -> FencingToken {
        self.shared().fence
    }

    /// The lease this lock was taken with.
    pub fn lease(&self) -> Duration {
        self.shared().lease
    }

    /// Whether this guard was handed out reentrantly to a task that already
    /// held the lock.
    pub fn is_reentrant(&self) -> bool {
        self.reentrant
    }

    /// Whether the lock is still ours: not reported lost, and the lease
    /// (minus a safety margin) not over.
    pub fn is_held(&self) -> bool {
        self.shared().is_held()
    }

    /// How much longer the lease certainly lasts (zero once lost).
    pub fn valid_for(&self) -> Duration {
        self.shared().valid_for()
    }

    /// Completes when the lock is lost or its lease is about to run out
    /// (a safety margin before the store lets it go), with the
    /// [`ErrorKind::LeaseLost`] error to report. With the watchdog on, it
    /// completes only when a renewal finds the lock gone or renewals fail
    /// until the lease runs out.
    ///
    /// The future does not borrow the guard, so it can race the work the
    /// lock protects:
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), lockguard_core::Error> {
    /// # let lg = lockguard_core::Client::memory();
    /// # async fn work() {}
    /// let guard = lg.lock("job").acquire().await?;
    /// tokio::select! {
    ///     () = work() => {}
    ///     lost = guard.lost() => return Err(lost),
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
        Shared::lost(self.shared().clone())
    }

    /// A handle on this acquisition's lease that does not hold the lock:
    /// its name, fencing token, [`is_held`](LeaseWatch::is_held) and
    /// [`lost`](LeaseWatch::lost), for code that must stop when the lock
    /// goes but does not own the guard (a request handler behind a lock
    /// layer, a task the holder spawned).
    pub fn watch(&self) -> LeaseWatch {
        LeaseWatch {
            shared: self.shared().clone(),
        }
    }

    /// Resets the lease to `lease` from now, if the lock is still ours.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::LeaseLost`] when the lock had expired or was taken by
    /// someone else (the guard then counts as lost);
    /// [`ErrorKind::InvalidInput`] for a bad lease; the store's errors.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        crate::lock::validate_lease(lease, false)?;
        let s = self.shared();
        if s.state.borrow().lost {
            return Err(s.lost_error("was lost before the extend"));
        }
        let _turn = s.renewal.lock().await;
        let sent_at = Instant::now();
        if s.client.store().extend(&s.keys, &s.token, lease).await? {
            if !s.renewed(sent_at, lease) {
                return Err(s.lost_error("ran out before the extend was answered"));
            }
            tracing::debug!(lock = %s.name, fence = s.fence.get(), lease_ms = lease.as_millis() as u64, "lease extended");
            Ok(())
        } else {
            s.mark_lost("extend found the lock no longer ours");
            Err(s.lost_error("was lost before the extend"))
        }
    }

    /// Releases the lock and reports whether it was still ours.
    ///
    /// `Ok(false)` means the lease had already run out or the lock had been
    /// taken over: the protected work may not have been exclusive. A
    /// reentrant guard (or an outer guard while inner ones live) only gives
    /// up its share and reports whether the lock is still held; the last
    /// guard's `release` releases the lock before it returns.
    ///
    /// # Errors
    ///
    /// The store's errors; the lease then frees the lock.
    pub async fn release(mut self) -> Result<bool> {
        self.given_up = true;
        let held = self.held.clone();
        drop(self);
        if held.drop_guard() {
            let s = &held.shared;
            let span = if s.keys.permits.is_some() {
                tracing::debug_span!("semaphore", op = "release", semaphore = %s.name, fence = s.fence.get())
            } else {
                tracing::debug_span!("lock", op = "release", lock = %s.name, fence = s.fence.get())
            };
            tracing::Instrument::instrument(held.release_now(), span).await
        } else {
            Ok(held.is_held())
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.given_up && self.held.drop_guard() {
            self.held.release_in_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watch sees the guard's token and lease, does not keep the lock,
    /// and reports the end of the acquisition: `lost()` completes and
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
    /// reference to the acquisition is alive (a reentrancy check of the
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
        let other_reference = guard.held.clone();
        assert!(guard.release().await.unwrap(), "the lock was held");
        let again = lg.peer().lock("now").try_acquire().await;
        assert!(again.is_ok(), "the key was not released: {again:?}");
        drop(other_reference);
    }

    /// Reentrant guards share the acquisition: giving up a share keeps the
    /// lock, and the last guard's release frees it and reports so.
    #[tokio::test]
    async fn the_last_of_shared_guards_releases() {
        let lg = Client::memory();
        let outer = lg.lock("shared").acquire().await.unwrap();
        let inner = lg.lock("shared").acquire().await.unwrap();
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

/// A handle on a lock's (or permit's) lease that does not hold it: made by
/// [`LockGuard::watch`] and [`Permit::watch`](crate::Permit::watch).
///
/// Clones are cheap. Dropping every watch changes nothing; dropping the
/// guard releases the lock, after which the watch reports it not held.
#[derive(Clone)]
pub struct LeaseWatch {
    shared: Arc<Shared>,
}

impl fmt::Debug for LeaseWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseWatch")
            .field("name", &self.shared.name)
            .field("fencing_token", &self.shared.fence)
            .field("held", &self.is_held())
            .finish()
    }
}

impl LeaseWatch {
    /// The lock's (or semaphore's) key as given.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The fencing token of the acquisition: pass it with every write to a
    /// resource that checks it.
    pub fn fencing_token(&self) -> FencingToken {
        self.shared.fence
    }

    /// Whether the lock is still held: not lost, not released, and the
    /// lease (minus a safety margin) not over.
    pub fn is_held(&self) -> bool {
        self.shared.is_held()
    }

    /// How much longer the lease certainly lasts (zero once lost).
    pub fn valid_for(&self) -> Duration {
        self.shared.valid_for()
    }

    /// Completes when the lock is lost, released, or its lease is about to
    /// run out, as [`LockGuard::lost`].
    pub fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
        Shared::lost(self.shared.clone())
    }
}
