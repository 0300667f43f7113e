//! The held lock: RAII guard, explicit release, extend, the lease-loss
//! signal, and releases in the background.

use std::fmt;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::time::Instant;

use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::fence::FencingToken;
use crate::hold::Hold;
use crate::key::{LockKeys, Resource};
use crate::lease::{Grant, Lease};
use crate::token::Token;

/// The guards of one hold: a guard and the reentrant guards of its scope.
/// The last guard to go releases the hold.
#[derive(Debug)]
pub(crate) struct Guards {
    hold: Arc<Hold>,
    runtime: Option<Handle>,
    /// How many guards share the hold: the last one to go releases it,
    /// whatever other references (a reentrancy check's) are alive.
    count: AtomicUsize,
}

impl Guards {
    /// The guards of the hold made from `grant`, under `lease` (renewed
    /// by the watchdog if it says so); `reserved` when the grant recorded
    /// only a handoff's shorter reservation, which the hold's first
    /// renewal extends to the lease (see [`Hold::reserved`]); none yet.
    pub(crate) fn new(
        engine: Arc<Engine>,
        names: (Arc<str>, crate::meter::Series),
        keys: Arc<LockKeys>,
        grant: Grant,
        (lease, granted_at, reserved): (Lease, Instant, Option<Duration>),
    ) -> Arc<Self> {
        let watchdog = lease.is_watchdog();
        let hold = Arc::new(Hold::new(
            engine,
            names,
            keys,
            grant,
            (lease.duration(), granted_at, watchdog, reserved),
        ));
        hold.series.held();
        let runtime = Handle::try_current().ok();
        if let (Some(rt), true) = (&runtime, watchdog || reserved.is_some()) {
            crate::watchdog::renewals().start(&hold, rt);
        }
        Arc::new(Self {
            hold,
            runtime,
            count: AtomicUsize::new(0),
        })
    }

    /// A release before `at` keeps the lock until `at` (`Lock::at_least`).
    pub(crate) fn keep_until(&self, at: Instant) {
        let _ = self.hold.keep_until.set(at);
    }

    /// The store key of the lock held.
    pub(crate) fn key(&self) -> &str {
        &self.hold.keys.lock
    }

    /// The client it was taken through.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.hold.engine
    }

    pub(crate) fn is_held(&self) -> bool {
        self.hold.is_held()
    }

    /// Stops the watchdog; true the first time.
    fn begin_release(&self) -> bool {
        if self.hold.released.swap(true, Ordering::AcqRel) {
            return false;
        }
        let s = &self.hold;
        let state = s.lease_state();
        if !state.lost {
            let margin = state.valid_until.saturating_duration_since(Instant::now());
            s.series.lease_margin(margin);
        }
        // Wakes the watches' `lost()`: the lock is given up.
        self.hold.announce_release();
        s.series.released(s.since);
        crate::watchdog::renewals().cancel(s);
        true
    }

    /// One more guard shares the hold.
    fn add_guard(&self) {
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    /// A guard gives up its share; true when it was the last.
    fn drop_guard(&self) -> bool {
        self.count.fetch_sub(1, Ordering::AcqRel) == 1
    }

    /// Releases in the background (a guard was dropped).
    fn release_in_background(&self) {
        if self.begin_release() {
            let s = &self.hold;
            let parts = (s.engine.clone(), s.keys.clone(), s.token, s.keep_for());
            spawn_release(self.runtime.as_ref(), parts, &s.name, s.fence);
        }
    }

    async fn release_now(&self) -> Result<bool> {
        if !self.begin_release() {
            return Ok(false);
        }
        let s = &self.hold;
        let result = if let Some(left) = s.keep_for() {
            // Dropped midway, the lock stays until its lease ends.
            s.engine.store.release_later(&s.keys, &s.token, left).await
        } else {
            let pending = PendingRelease::new(&s.engine, &s.keys, s.token);
            let result = s.engine.store.release(&s.keys, &s.token).await;
            pending.disarm();
            result
        };
        self.released(result)
    }

    /// [`release_now`](Guards::release_now) on a store that answers at
    /// once.
    fn release_at_once(&self) -> Result<bool> {
        if !self.begin_release() {
            return Ok(false);
        }
        let s = &self.hold;
        let keep = s.keep_for();
        let answer = match keep {
            Some(left) => s.engine.store.release_later(&s.keys, &s.token, left),
            None => s.engine.store.release(&s.keys, &s.token),
        };
        match answer.now() {
            Some(result) => self.released(result),
            None => {
                // Not reached: asked only of a store that answers at once.
                let parts = (s.engine.clone(), s.keys.clone(), s.token, keep);
                spawn_release(self.runtime.as_ref(), parts, &s.name, s.fence);
                Err(Error::new(
                    crate::error::ErrorKind::Unavailable,
                    "the store did not answer the release at once; it continues in the background",
                ))
            }
        }
    }

    /// Reports the store's answer to the release.
    fn released(&self, result: Result<bool>) -> Result<bool> {
        let s = &self.hold;
        match &result {
            Ok(true) if s.keep_until.get().is_some() => {
                tracing::debug!(lock = %s.name, fence = s.fence.get(), "lock released; kept until its at_least has passed");
            }
            Ok(true) => {
                tracing::debug!(lock = %s.name, fence = s.fence.get(), "lock released");
            }
            Ok(false) => {
                s.mark_lost("release found the lock no longer ours");
            }
            Err(e) => {
                crate::meter::store_error(s.primitive(), "release");
                tracing::warn!(lock = %s.name, fence = s.fence.get(), error = %e, "release failed; the lease will free the lock");
            }
        }
        result
    }
}

impl Drop for Guards {
    fn drop(&mut self) {
        // Released by its last guard already, unless it never had one.
        self.release_in_background();
    }
}

/// What a release in the background needs: the lock, and how much longer
/// to keep it (`Lock::at_least`), if at all.
type ReleaseParts = (Arc<Engine>, Arc<LockKeys>, Token, Option<Duration>);

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
        let (engine, keys, token, keep) = parts;
        let answer = match keep {
            Some(left) => engine.store.release_later(&keys, &token, left).await,
            None => engine.store.release(&keys, &token).await,
        };
        match answer {
            Ok(true) => tracing::debug!(lock = %name, fence = fence.get(), "lock released on drop"),
            Ok(false) => tracing::debug!(lock = %name, "lock was no longer held at release on drop"),
            // A store that does not offer what was asked took nothing.
            Err(e) if e.is_unsupported() => {}
            Err(e) => {
                crate::meter::store_error(crate::meter::primitive(&keys), "release");
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
    parts: Option<(&'a Arc<Engine>, &'a Arc<LockKeys>, Token)>,
}

impl<'a> PendingRelease<'a> {
    pub(crate) fn new(engine: &'a Arc<Engine>, keys: &'a Arc<LockKeys>, token: Token) -> Self {
        Self {
            parts: Some((engine, keys, token)),
        }
    }

    pub(crate) fn disarm(mut self) {
        self.parts = None;
    }
}

impl Drop for PendingRelease<'_> {
    fn drop(&mut self) {
        if let Some((engine, keys, token)) = self.parts.take() {
            let parts = (engine.clone(), keys.clone(), token, None);
            spawn_release(None, parts, &keys.lock, FencingToken::new(0));
        }
    }
}

/// A held distributed lock.
///
/// Dropping the guard releases the lock in the background on the runtime
/// it was acquired on; it never blocks. [`LockGuard::release`] is the
/// explicit form and reports whether the lock was still held. Guards
/// obtained reentrantly inside [`LockGuard::scope`] share one hold of the lock:
/// the lock is released when the outermost one goes.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    guards: Arc<Guards>,
    reentrant: bool,
    /// Set by [`LockGuard::release`], which gives up the share itself.
    given_up: bool,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.guards.hold.name)
            .field("fencing_token", &self.guards.hold.fence)
            .field("held", &self.is_held())
            .field("reentrant", &self.reentrant)
            .finish()
    }
}

impl LockGuard {
    pub(crate) fn new(guards: Arc<Guards>) -> Self {
        guards.add_guard();
        Self {
            guards,
            reentrant: false,
            given_up: false,
        }
    }

    pub(crate) fn reentrant(guards: Arc<Guards>) -> Self {
        guards.add_guard();
        Self {
            guards,
            reentrant: true,
            given_up: false,
        }
    }

    fn hold(&self) -> &Arc<Hold> {
        &self.guards.hold
    }

    pub(crate) fn guards(&self) -> &Arc<Guards> {
        &self.guards
    }

    /// Marks the guard lost, as a renewal finding the lock gone would.
    #[cfg(test)]
    pub(crate) fn mark_lost_for_test(&self) {
        self.hold().mark_lost("test");
    }

    /// The lock's key as given.
    pub fn name(&self) -> &str {
        &self.hold().name
    }

    /// The fencing token the lock was granted with: greater than that of
    /// every earlier acquisition of the key.
    pub fn fencing_token(&self) -> FencingToken {
        self.hold().fence
    }

    /// The lease this lock was taken with.
    pub fn lease(&self) -> Duration {
        self.hold().lease
    }

    /// Whether this guard was handed out reentrantly, inside the
    /// [`scope`](LockGuard::scope) of a guard of the same lock.
    pub fn is_reentrant(&self) -> bool {
        self.reentrant
    }

    /// Whether the lock is still ours: not reported lost, and the lease
    /// (minus a safety margin) not over.
    pub fn is_held(&self) -> bool {
        self.hold().is_held()
    }

    /// How much longer the lease certainly lasts (zero once lost).
    pub fn valid_for(&self) -> Duration {
        self.hold().valid_for()
    }

    /// Completes when the lock is lost or its lease is about to run out
    /// (a safety margin before the store lets it go), with the
    /// [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost) error to report. With the watchdog on, it
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
        Hold::lost(self.hold().clone())
    }

    /// A handle on this guard's lease that does not hold the lock:
    /// its name, fencing token, [`is_held`](LeaseWatch::is_held) and
    /// [`lost`](LeaseWatch::lost), for code that must stop when the lock
    /// goes but does not own the guard (a request handler behind a lock
    /// layer, a task the holder spawned).
    pub fn watch(&self) -> LeaseWatch {
        LeaseWatch {
            hold: self.hold().clone(),
        }
    }

    /// Resets the lease to `lease` from now, if the lock is still ours.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost) when the lock had expired or was taken by
    /// someone else (the guard then counts as lost);
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a bad lease; the store's errors.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        Lease::Fixed(lease).validate()?;
        let s = self.hold();
        if let Some(max) = s.engine.store.max_lease()
            && lease > max
        {
            return Err(Error::invalid(format!(
                "a lease on this {} client can be at most {max:?} (two thirds of its session timeout or lease TTL), got {lease:?}",
                s.engine.store.name()
            )));
        }
        if s.lease_state().lost {
            return Err(s.lost_error("was lost before the extend"));
        }
        let _turn = s.renewal.lock().await;
        let sent_at = Instant::now();
        s.renewing(sent_at, lease);
        if s.engine.store.extend(&s.keys, &s.token, lease).await? {
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
    pub async fn release(self) -> Result<bool> {
        match self.give_up() {
            Ok(guards) => {
                let span = release_span(&guards.hold);
                crate::span::instrumented(guards.release_now(), &span).await
            }
            Err(held) => Ok(held),
        }
    }

    /// Gives up this guard's share: the hold's guards, when this was the
    /// last (releasing it falls to the caller); otherwise whether the
    /// lock is still held.
    fn give_up(mut self) -> std::result::Result<Arc<Guards>, bool> {
        self.given_up = true;
        let guards = self.guards.clone();
        drop(self);
        if guards.drop_guard() {
            Ok(guards)
        } else {
            Err(guards.is_held())
        }
    }

    /// [`release`](LockGuard::release) without awaiting, where the store
    /// answers in process (the [in-memory](crate::Client::memory) store):
    /// released before this returns, reported the same way. Where the
    /// store needs a round trip the guard is handed back, still holding
    /// the lock, for `release().await`.
    ///
    /// # Errors
    ///
    /// `Err(guard)` on a store that needs a round trip; inside `Ok`, as
    /// [`LockGuard::release`].
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> lockguard_core::Result<()> {
    /// let lg = lockguard_core::Client::memory();
    /// let guard = lg.lock("report").acquire().await?;
    /// let still_held = match guard.try_release_now() {
    ///     Ok(released) => released?,
    ///     Err(guard) => guard.release().await?,
    /// };
    /// assert!(still_held);
    /// # Ok(()) }
    /// ```
    pub fn try_release_now(self) -> std::result::Result<Result<bool>, Self> {
        if !self.guards.engine().store.answers_at_once() {
            return Err(self);
        }
        Ok(match self.give_up() {
            Ok(guards) => {
                let span = release_span(&guards.hold);
                crate::span::in_span(&span, || guards.release_at_once())
            }
            Err(held) => Ok(held),
        })
    }
}

/// The span of the release of `s`.
fn release_span(s: &Hold) -> tracing::Span {
    match s.keys.resource {
        _ if !tracing::level_enabled!(tracing::Level::DEBUG) => tracing::Span::none(),
        _ if s.keys.rw.is_some() => {
            let mode = s.keys.rw.map_or("", |m| m.as_str());
            tracing::debug_span!("rw_lock", op = "release", rw_lock = %s.name, mode, fence = s.fence.get())
        }
        Resource::Semaphore { .. } => {
            tracing::debug_span!("semaphore", op = "release", semaphore = %s.name, fence = s.fence.get())
        }
        Resource::Lock => {
            tracing::debug_span!("lock", op = "release", lock = %s.name, fence = s.fence.get())
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.given_up && self.guards.drop_guard() {
            self.guards.release_in_background();
        }
    }
}

/// Runs `body` until it ends or `lost` completes first; then `body` is
/// dropped at once, never polled again, and the loss returned. The lost
/// signal is polled first: once the lease is gone the body never makes
/// another step.
pub(crate) async fn until_lost<F: Future>(
    lost: impl Future<Output = Error>,
    body: F,
) -> Result<F::Output> {
    let mut lost = pin!(lost);
    let mut body = pin!(body);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(e) = lost.as_mut().poll(cx) {
            return Poll::Ready(Err(e));
        }
        body.as_mut().poll(cx).map(Ok)
    })
    .await
}

/// Runs `body` while `guard` holds its lock or permit, then releases it.
///
/// A lost lease drops the body at once (it is not polled again) and is
/// returned as the [`ErrorKind::LeaseLost`](crate::ErrorKind::LeaseLost)
/// error; so is a release that finds the lock already gone after the body
/// finished, since the body's work may not have been exclusive. A release
/// that cannot reach the store is logged and left to the lease: the work is
/// done.
pub(crate) async fn run_guarded<F: Future>(guard: LockGuard, body: F) -> Result<F::Output> {
    let out = until_lost(guard.lost(), body).await;
    // The body (dropped by `until_lost`) is gone before the lock is given
    // back.
    let out = match out {
        Ok(out) => out,
        Err(lost) => {
            drop(guard);
            return Err(lost);
        }
    };
    let hold = guard.hold().clone();
    match guard.release().await {
        Ok(true) => Ok(out),
        Ok(false) => Err(hold.lost_error("was gone when the work under it finished")),
        // Logged by the release; the lease frees the lock.
        Err(_) => Ok(out),
    }
}

/// A handle on a lock's (or permit's) lease that does not hold it: made by
/// [`LockGuard::watch`] and [`Permit::watch`](crate::Permit::watch).
///
/// Clones are cheap. Dropping every watch changes nothing; dropping the
/// guard releases the lock, after which the watch reports it not held.
#[derive(Clone)]
pub struct LeaseWatch {
    hold: Arc<Hold>,
}

impl fmt::Debug for LeaseWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseWatch")
            .field("name", &self.hold.name)
            .field("fencing_token", &self.hold.fence)
            .field("held", &self.is_held())
            .finish()
    }
}

impl LeaseWatch {
    /// The lock's (or semaphore's) key as given.
    pub fn name(&self) -> &str {
        &self.hold.name
    }

    /// The fencing token the lock was granted with: pass it with every write to a
    /// resource that checks it.
    pub fn fencing_token(&self) -> FencingToken {
        self.hold.fence
    }

    /// Whether the lock is still held: not lost, not released, and the
    /// lease (minus a safety margin) not over.
    pub fn is_held(&self) -> bool {
        self.hold.is_held()
    }

    /// How much longer the lease certainly lasts (zero once lost).
    pub fn valid_for(&self) -> Duration {
        self.hold.valid_for()
    }

    /// Completes when the lock is lost, released, or its lease is about to
    /// run out, as [`LockGuard::lost`].
    pub fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
        Hold::lost(self.hold.clone())
    }
}
