//! An upgradeable read-write lock: readers share it, a writer holds it
//! alone, and one upgradeable reader at a time reads beside the readers
//! and can become the writer without a writer ever coming in between.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::Engine;
use crate::error::{Error, ErrorKind, Result};
use crate::fence::FencingToken;
use crate::guard::LockGuard;
use crate::key::{RwMode, UPGRADE_GATE_KIND, UPGRADEABLE_KIND};
use crate::lease::Lease;
use crate::lock::Lock;
use crate::rw_lock::ReadLock;
use crate::store::Occupancy;

/// A distributed read-write lock with upgradeable reads (DistributedLock's
/// `AcquireUpgradeableReadLock`): many readers, or one writer, and beside
/// the readers at most one upgradeable reader, whose read can become the
/// write without letting a writer in between, so read-then-write code
/// needs no release-and-race.
///
/// Made by [`Client::upgradeable_rw_lock`](crate::Client::upgradeable_rw_lock).
/// Three ways to take it:
///
/// - [`read`](Self::read): a reader, shared with the other readers and
///   the upgradeable reader, as a [`RwLock`](crate::RwLock)'s;
/// - [`upgradeable_read`](Self::upgradeable_read): the upgradeable
///   reader, shared with the readers, alone among upgradeable readers and
///   writers; [`UpgradeableGuard::upgrade`] makes it the writer;
/// - [`write`](Self::write): the writer, alone.
///
/// How it holds: the upgradeable reader and every writer first take the
/// lock's *gate*, a lock of its own, so at most one of them is in at a
/// time; then a read or a write hold of the read-write lock behind it.
/// An upgrade gives the read back and waits for the write while still
/// holding the gate: no writer can be holding or waiting meanwhile (each
/// would hold the gate), so the write it gets follows its own read with
/// only readers in between, and its fencing token is greater than every
/// read's before it. A write therefore costs the gate's round trips beside
/// the write's; a read costs what a [`RwLock`](crate::RwLock)'s read does.
///
/// An upgradeable read-write lock is a lock of its own: a
/// [`RwLock`](crate::RwLock) of the same name is another lock, and every
/// process that takes this one takes it through this type.
///
/// A store without read-write locks answers
/// [`ErrorKind::Unsupported`] at once, naming itself.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockguard_core::Error> {
/// use lockguard_core::RwMode;
/// let lg = lockguard_core::Client::memory();
/// let stock = lg.upgradeable_rw_lock("stock:sku1");
///
/// // Read, beside other readers; a second upgradeable reader must wait.
/// let mut guard = stock.upgradeable_read().acquire().await?;
/// let reader = stock.read().try_acquire().await?;
/// assert!(stock.upgradeable_read().try_acquire().await.unwrap_err().is_busy());
///
/// // Decide to write: the upgrade waits for the other reader to go.
/// let read_fence = guard.fencing_token();
/// let (upgraded, _) = tokio::join!(guard.upgrade(), async {
///     reader.release().await.unwrap();
/// });
/// upgraded?;
/// assert_eq!(guard.mode(), RwMode::Write);
/// assert!(guard.fencing_token() > read_fence);
/// assert!(stock.read().try_acquire().await.unwrap_err().is_busy());
/// assert!(guard.release().await?);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "a read-write lock does nothing until acquired"]
pub struct UpgradeableRwLock {
    reads: Lock,
    writes: Lock,
    gate: Lock,
}

impl UpgradeableRwLock {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        Self {
            reads: Lock::rw_of_kind(engine.clone(), name, UPGRADEABLE_KIND, RwMode::Read),
            writes: Lock::rw_of_kind(engine.clone(), name, UPGRADEABLE_KIND, RwMode::Write),
            gate: Lock::of_kind(
                engine,
                name,
                UPGRADE_GATE_KIND,
                "upgradeable read-write lock",
            ),
        }
    }

    /// The lock taken to read: shared with the other readers and with the
    /// upgradeable reader, never with a writer.
    pub fn read(&self) -> ReadLock {
        ReadLock(self.reads.clone())
    }

    /// The lock taken to read with the right to upgrade: shared with the
    /// readers, alone among upgradeable readers and writers.
    pub fn upgradeable_read(&self) -> UpgradeableLock {
        UpgradeableLock {
            gate: self.gate.clone(),
            reads: self.reads.clone(),
            writes: self.writes.clone(),
            mode: RwMode::Read,
        }
    }

    /// The lock taken to write: alone.
    pub fn write(&self) -> UpgradeableLock {
        UpgradeableLock {
            mode: RwMode::Write,
            ..self.upgradeable_read()
        }
    }

    /// The key as given.
    pub fn name(&self) -> &str {
        self.reads.name()
    }

    /// What the store knows of the read-write lock now: its readers (the
    /// upgradeable reader among them) or its writer, the waiters and the
    /// newest fencing token; see [`RwLock::inspect`](crate::RwLock::inspect).
    ///
    /// # Errors
    ///
    /// As [`RwLock::inspect`](crate::RwLock::inspect).
    pub async fn inspect(&self) -> Result<Occupancy> {
        self.reads.inspect().await
    }
}

/// An [`UpgradeableRwLock`] taken to read with the right to upgrade, or to
/// write, ready to be acquired: made by
/// [`UpgradeableRwLock::upgradeable_read`] and
/// [`UpgradeableRwLock::write`]. Its options apply to the gate and to the
/// read or write hold alike (and to the write an upgrade takes).
#[derive(Debug, Clone)]
#[must_use = "a read-write lock does nothing until acquired"]
pub struct UpgradeableLock {
    gate: Lock,
    reads: Lock,
    writes: Lock,
    mode: RwMode,
}

impl UpgradeableLock {
    /// Applies `f` to each lock it takes.
    fn map(self, f: impl Fn(Lock) -> Lock) -> Self {
        Self {
            gate: f(self.gate),
            reads: f(self.reads),
            writes: f(self.writes),
            mode: self.mode,
        }
    }

    /// A fixed lease with no watchdog (see [`Lock::lease`]).
    pub fn lease(self, lease: Duration) -> Self {
        self.map(|l| l.lease(lease))
    }

    /// A lease renewed by the watchdog (the default; see
    /// [`Lock::watchdog`]).
    pub fn watchdog(self, lease: Duration) -> Self {
        self.map(|l| l.watchdog(lease))
    }

    /// How the lease is kept, as a value (see [`Lock::with_lease`]).
    pub fn with_lease(self, lease: Lease) -> Self {
        self.map(|l| l.with_lease(lease))
    }

    /// How long [`acquire`](Self::acquire) waits before giving up, for the
    /// gate and for the hold each (and an upgrade for its write). Zero
    /// makes one attempt.
    pub fn wait(self, wait: Duration) -> Self {
        self.map(|l| l.wait(wait))
    }

    /// The longest pause between two attempts when no notification
    /// arrives (see [`Lock::retry_interval`]).
    pub fn retry_interval(self, interval: Duration) -> Self {
        self.map(|l| l.retry_interval(interval))
    }

    /// The `name` label of its metrics (see [`Lock::metric_name`]).
    pub fn metric_name(self, name: &str) -> Self {
        self.map(|l| l.metric_name(name))
    }

    /// Which hold this takes: [`RwMode::Read`] for an upgradeable read.
    pub fn mode(&self) -> RwMode {
        self.mode
    }

    /// Takes the gate, then the hold, if both are free at once, without
    /// waiting or queueing.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Busy`] when another upgradeable reader or a writer
    /// holds the gate, or (a write) readers hold the lock;
    /// [`ErrorKind::InvalidInput`] for a bad key or lease;
    /// [`ErrorKind::Unsupported`] on a store without read-write locks; the
    /// store's errors. Nothing is held after an error.
    pub async fn try_acquire(&self) -> Result<UpgradeableGuard> {
        self.offered()?;
        let gate = self.gate.try_acquire().await?;
        let hold = match self.mode {
            RwMode::Read => self.reads.try_acquire().await,
            RwMode::Write => self.writes.try_acquire().await,
        };
        self.guard(gate, hold).await
    }

    /// Takes the gate, then the hold, each waiting in its queue up to the
    /// configured bound. Dropping the future at any point is safe: what it
    /// took is released.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire), with `Busy` once a wait ran
    /// out. Nothing is held after an error.
    pub async fn acquire(&self) -> Result<UpgradeableGuard> {
        self.offered()?;
        let gate = self.gate.acquire().await?;
        let hold = match self.mode {
            RwMode::Read => self.reads.acquire().await,
            RwMode::Write => self.writes.acquire().await,
        };
        self.guard(gate, hold).await
    }

    /// `Unsupported` at once on a store without read-write locks, before
    /// the gate (an ordinary lock, which it offers) is taken or waited for.
    fn offered(&self) -> Result<()> {
        let store = &self.gate.engine().store;
        if store.read_write() {
            return Ok(());
        }
        Err(crate::store::unsupported(store.name(), "read-write locks"))
    }

    /// The guard of `gate` and `hold`, or (the hold not taken) the error,
    /// the gate given back.
    async fn guard(&self, gate: LockGuard, hold: Result<LockGuard>) -> Result<UpgradeableGuard> {
        match hold {
            Ok(hold) => Ok(UpgradeableGuard {
                gate,
                hold: Some(hold),
                mode: self.mode,
                reads: self.reads.clone(),
                writes: self.writes.clone(),
            }),
            Err(e) => {
                if let Err(undo) = gate.release().await {
                    tracing::warn!(lock = self.gate.name(), error = %undo, "giving back an upgradeable lock's gate failed; its lease frees it");
                }
                Err(e)
            }
        }
    }

    /// Runs `body` holding the lock (see [`Lock::run`]): a lost lease of
    /// the gate or of the hold drops `body` and returns the error.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire) and [`Lock::run`].
    pub async fn run<F: Future>(&self, body: F) -> Result<F::Output> {
        let guard = self.acquire().await?;
        let lost = guard.lost();
        let out = tokio::select! {
            out = body => out,
            e = lost => {
                drop(guard);
                return Err(e);
            }
        };
        guard.release().await?;
        Ok(out)
    }
}

/// The upgradeable reader's hold of an [`UpgradeableRwLock`], or a
/// writer's: its gate, and its read or write hold. Dropping it releases
/// both in the background; [`release`](Self::release) is the explicit
/// form.
#[derive(Debug)]
#[must_use = "dropping the guard releases the lock at once"]
pub struct UpgradeableGuard {
    gate: LockGuard,
    /// `None` once an upgrade lost the read and could not take it back.
    hold: Option<LockGuard>,
    mode: RwMode,
    reads: Lock,
    writes: Lock,
}

impl UpgradeableGuard {
    /// The lock's key as given.
    pub fn name(&self) -> &str {
        self.gate.name()
    }

    /// Which hold it is now: [`RwMode::Write`] once upgraded.
    pub fn mode(&self) -> RwMode {
        self.mode
    }

    /// The fencing token of the read or write hold it has now: after an
    /// upgrade, the write's, greater than every earlier read's and write's
    /// (zero once a failed upgrade could not take its read back).
    pub fn fencing_token(&self) -> FencingToken {
        self.hold
            .as_ref()
            .map_or(FencingToken::new(0), LockGuard::fencing_token)
    }

    /// Whether both its gate and its hold are still ours.
    pub fn is_held(&self) -> bool {
        self.gate.is_held() && self.hold.as_ref().is_some_and(LockGuard::is_held)
    }

    /// How much longer both leases certainly last (zero once lost).
    pub fn valid_for(&self) -> Duration {
        let hold = self
            .hold
            .as_ref()
            .map_or(Duration::ZERO, LockGuard::valid_for);
        hold.min(self.gate.valid_for())
    }

    /// Completes when the gate or the hold it has now is lost or about to
    /// run out, with the error to report (see [`LockGuard::lost`]). After
    /// an upgrade, ask again: this one watches the read it gave back.
    pub fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
        let gate = self.gate.lost();
        let hold = self.hold.as_ref().map(LockGuard::lost);
        let name = self.name().to_owned();
        async move {
            let Some(hold) = hold else {
                return Error::new(
                    ErrorKind::LeaseLost,
                    format!(
                        "upgradeable read-write lock {name:?}: its read was lost in an upgrade"
                    ),
                );
            };
            tokio::select! {
                e = gate => e,
                e = hold => e,
            }
        }
    }

    /// Makes the upgradeable read the write, without a writer coming in
    /// between: gives the read back and takes the write while holding the
    /// gate, waiting (up to the lock's wait) for the other readers to go;
    /// readers that come meanwhile queue behind it. The write's fencing
    /// token is greater than every earlier read's. A write already is one:
    /// `Ok` at once.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::LeaseLost`] when the gate or the read was lost;
    /// [`ErrorKind::Busy`] when the readers did not go within the wait;
    /// the store's errors. After an error the guard reads again, holding
    /// the gate ([`mode`](Self::mode) says `Read`), unless the read could
    /// not be taken back: then [`is_held`](Self::is_held) is false.
    pub async fn upgrade(&mut self) -> Result<()> {
        let writes = self.writes.clone();
        self.upgrade_to(&writes).await
    }

    /// As [`upgrade`](Self::upgrade), waiting up to `wait` for the other
    /// readers to go, whatever the lock's own wait: a short wait for the
    /// lock's hold and a long one for an upgrade that must go through, or
    /// `Duration::ZERO` for an upgrade that only tries.
    ///
    /// # Errors
    ///
    /// As [`upgrade`](Self::upgrade), with `Busy` once `wait` ran out.
    pub async fn upgrade_with_wait(&mut self, wait: Duration) -> Result<()> {
        let writes = self.writes.clone().wait(wait);
        self.upgrade_to(&writes).await
    }

    /// The upgrade, its write taken through `writes`.
    async fn upgrade_to(&mut self, writes: &Lock) -> Result<()> {
        if self.mode == RwMode::Write {
            return Ok(());
        }
        let lost = |what: &str| {
            Error::new(
                ErrorKind::LeaseLost,
                format!(
                    "upgradeable read-write lock {:?}: {what} was lost before the upgrade",
                    self.gate.name()
                ),
            )
        };
        if !self.gate.is_held() {
            return Err(lost("its gate"));
        }
        let Some(read) = self.hold.take() else {
            return Err(lost("its read"));
        };
        if !read.release().await? {
            return Err(lost("its read"));
        }
        // Every writer holds the gate, which is ours: none holds or waits.
        match writes.acquire().await {
            Ok(write) => {
                self.hold = Some(write);
                self.mode = RwMode::Write;
                Ok(())
            }
            Err(e) => {
                // Back to reading: no writer is ahead of this read either.
                match self.reads.acquire().await {
                    Ok(read) => self.hold = Some(read),
                    Err(again) => {
                        tracing::warn!(lock = self.gate.name(), error = %again, "an upgrade failed and the read could not be taken back")
                    }
                }
                Err(e)
            }
        }
    }

    /// Releases the hold, then the gate, and reports whether both were
    /// still ours.
    ///
    /// # Errors
    ///
    /// The store's errors; the leases then free what was not released.
    pub async fn release(self) -> Result<bool> {
        let held = match self.hold {
            Some(hold) => hold.release().await?,
            None => false,
        };
        Ok(self.gate.release().await? && held)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use crate::store::forwarding::Forwarding;

    /// On a store without read-write locks, an upgradeable read or write
    /// answers `Unsupported` at once, even while its gate (an ordinary
    /// lock, which the store offers) is held: it neither takes nor waits
    /// for the gate first.
    #[tokio::test]
    async fn a_store_without_read_write_locks_refuses_at_once() {
        let lg = Forwarding::client(&Forwarding::new(None));
        let rw = lg.upgradeable_rw_lock("doc");
        let gate = rw.gate.try_acquire().await.unwrap();
        for lock in [rw.upgradeable_read(), rw.write()] {
            let started = Instant::now();
            let e = lock
                .clone()
                .wait(Duration::from_secs(5))
                .acquire()
                .await
                .unwrap_err();
            assert!(e.is_unsupported(), "{e}");
            assert!(
                started.elapsed() < Duration::from_secs(1),
                "{e} after a wait"
            );
            assert!(lock.try_acquire().await.unwrap_err().is_unsupported());
        }
        assert!(gate.release().await.unwrap());
    }
}
