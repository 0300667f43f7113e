//! Leader election: candidates queue for a lock of the election's own, the
//! one that takes it leads for a term (its fencing token) and announces
//! itself in a fenced value, which anyone can read and watch.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::engine::Engine;
use crate::error::{Error, ErrorKind, Invalid, Result};
use crate::fence::FencingToken;
use crate::fenced::FencedResource;
use crate::guard::{LeaseWatch, LockGuard};
use crate::lease::Lease;
use crate::lock::Lock;
use crate::store::{Changes, Occupancy};

/// The longest identity a candidate may announce, in bytes.
pub const MAX_IDENTITY_LEN: usize = 1024;

/// How often [`LeaderObserver::next`] polls who leads, unless
/// [`Leader::watch_interval`] says otherwise.
const DEFAULT_WATCH_INTERVAL: Duration = Duration::from_millis(250);

/// The first byte of an announcement: a leader's identity follows.
const LEADS: u8 = 1;

/// The first byte of an announcement a leader left when it resigned.
const RESIGNED: u8 = 0;

/// The first byte of an announcement with a proclaimed value: the
/// identity's length (two bytes, big-endian), the identity, the value.
const PROCLAIMS: u8 = 2;

/// The longest value a leader may [proclaim](Leadership::proclaim), in
/// bytes.
pub const MAX_PROCLAIMED_LEN: usize = 64 * 1024;

/// How soon an observer that could not follow the store's changes tries
/// again, at most.
const FOLLOW_AGAIN: Duration = Duration::from_secs(1);

/// How many watch intervals an observer following a store's changes
/// waits before it reads again anyway (a change the store failed to
/// push is seen then).
const FOLLOWED_REREAD: u32 = 20;

/// An election: candidates [`campaign`](Leader::campaign) to lead, one at a
/// time, and anyone can read who leads ([`Leader::current`]) and observe it
/// change ([`Leader::observe`]).
///
/// Made by [`Client::leader`](crate::Client::leader). An election is a lock
/// on a key of its own kind (`{prefix}leader:{name}`, never the key of
/// [`Client::lock`](crate::Client::lock) with the same name), so it runs on
/// every store as locks do and keeps their guarantees:
///
/// - **One leader at a time** while leases are respected; candidates wait
///   in the lock's queue in the store, **first come first served**, woken
///   by the release that hands the lead over (on Redlock, in its line).
/// - **Terms**: a leader's term is the lock's fencing token, greater than
///   every earlier leader's. Pass it with every write to a resource that
///   checks tokens ([`Client::fenced`](crate::Client::fenced)), so a leader
///   paused past its lease cannot overwrite its successor's work.
/// - **Failover within a lease**: the lease is renewed by the watchdog
///   (the client's default lease, 30 s, unless [`Leader::watchdog`] or
///   [`Leader::lease`] says otherwise); a leader whose process dies is
///   replaced by the first live candidate when its lease ends (on
///   ZooKeeper, when its session does).
/// - **Loss signal**: [`Leadership::lost`] completes when the lead is lost
///   or about to be (a safety margin before the lease ends), before
///   anyone else can be elected.
///
/// A new leader announces its identity ([`Leader::identity`]) and term
/// before [`campaign`](Leader::campaign) returns, in a fenced value on
/// `{prefix}leader-term:{name}` that refuses a write from an older term:
/// an old leader's late announcement or resignation never erases a newer
/// leader's. [`Leader::current`] reads it, and the lock's state: see there
/// for exactly what a reader sees.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockguard_core::Error> {
/// use std::time::Duration;
/// let lg = lockguard_core::Client::memory();
///
/// let election = lg
///     .leader("scheduler")
///     .identity("worker-1:8080") // what readers see
///     .watchdog(Duration::from_secs(5)); // a dead leader is replaced within 5 s
/// let leadership = election.campaign().await?; // waits until elected
///
/// // Anyone reads who leads, and since which term.
/// let now = lg.peer().leader("scheduler").current().await?.unwrap();
/// assert_eq!(now.identity, b"worker-1:8080");
/// assert_eq!(now.term, leadership.term());
///
/// // Lead until done, or until the lead is lost.
/// tokio::select! {
///     () = async { /* the leader's work */ } => {}
///     lost = leadership.lost() => return Err(lost),
/// }
/// assert!(leadership.resign().await?);
/// assert!(lg.leader("scheduler").current().await?.is_none());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "an election does nothing until a candidate campaigns or someone reads it"]
pub struct Leader {
    name: Arc<str>,
    lock: Lock,
    board: FencedResource,
    identity: Result<Arc<[u8]>, Invalid>,
    watch_interval: Duration,
    /// Whether the announcement is on another client's store
    /// ([`Leader::announce_on`]): observers then poll.
    announced_elsewhere: bool,
}

impl Leader {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        let lock = Lock::election(engine.clone(), name).wait(Duration::MAX);
        Self {
            name: name.into(),
            lock,
            board: FencedResource::announcement(engine, name),
            identity: Ok(default_identity()),
            watch_interval: DEFAULT_WATCH_INTERVAL,
            announced_elsewhere: false,
        }
    }

    /// What this candidate announces when elected, for readers of
    /// [`Leader::current`]: an address, a pod name, any bytes up to
    /// [`MAX_IDENTITY_LEN`]. By default, the process's own tag (16 hex
    /// digits drawn at random once per process, the first half of every
    /// lock token it draws): distinct per process, the same for every
    /// candidate of one process.
    pub fn identity(mut self, identity: impl Into<Vec<u8>>) -> Self {
        let identity: Vec<u8> = identity.into();
        self.identity = if identity.len() > MAX_IDENTITY_LEN {
            Err(Invalid::from(Error::invalid(format!(
                "election {:?}: the identity is {} bytes long, the maximum is {MAX_IDENTITY_LEN}",
                self.name,
                identity.len()
            ))))
        } else {
            Ok(identity.into())
        };
        self
    }

    /// A lease of `lease` renewed by the watchdog every `lease / 3` while
    /// the [`Leadership`] lives (the default, with the client's default
    /// lease): a leader whose process dies is replaced at most `lease`
    /// later.
    pub fn watchdog(mut self, lease: Duration) -> Self {
        self.lock = self.lock.watchdog(lease);
        self
    }

    /// A fixed lease with no watchdog: the lead ends `lease` after the
    /// election unless [`Leadership::extend`] renews it.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lock = self.lock.lease(lease);
        self
    }

    /// How the lease is kept, as a value: [`Leader::watchdog`] or
    /// [`Leader::lease`].
    pub fn with_lease(mut self, lease: Lease) -> Self {
        self.lock = self.lock.with_lease(lease);
        self
    }

    /// How long [`Leader::campaign`] waits to be elected before giving up.
    ///
    /// By default it waits without bound, as a candidate normally does:
    /// until elected, or until the campaign's future is dropped (which
    /// leaves the queue at once). The wait is the lock's
    /// ([`Lock::wait`](crate::Lock::wait)): a wait of
    /// [`Duration::MAX`] has no deadline at all, and a queued candidate
    /// costs one refresh of its place every third of the waiter timeout.
    /// Zero makes one attempt.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.lock = self.lock.wait(wait);
        self
    }

    /// How often an observer ([`Leader::observe`]) asks who leads on a
    /// store that does not push changes (250 ms by default): it polls
    /// [`Leader::current`], one read of the announcement and one
    /// inspection of the lock each time. On a store that pushes them
    /// (etcd, ZooKeeper: see [`Leader::observe`]), it reads when told of a
    /// change, and every 20 intervals anyway.
    pub fn watch_interval(mut self, interval: Duration) -> Self {
        self.watch_interval = interval;
        self
    }

    /// Announces on `engine`'s store: what
    /// [`Leader::announce_on`] does with a
    /// client's.
    pub(crate) fn announce_with(mut self, engine: Arc<Engine>) -> Self {
        self.board = FencedResource::announcement(engine, &self.name);
        self.announced_elsewhere = true;
        self
    }

    /// The election's name as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Checks the name and settings now, without a round trip: what
    /// [`Leader::campaign`] would refuse as [`ErrorKind::InvalidInput`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a bad name, lease, identity or watch
    /// interval.
    pub fn validate(&self) -> Result<()> {
        self.lock.validate()?;
        self.identity.as_ref().map_err(Invalid::error)?;
        if self.watch_interval.is_zero() {
            return Err(Error::invalid(format!(
                "election {:?}: the watch interval must be greater than zero",
                self.name
            )));
        }
        Ok(())
    }

    /// Waits to be elected, then announces this candidate's identity with
    /// its term and returns the [`Leadership`].
    ///
    /// Candidates wait in the election lock's queue in the store, first
    /// come first served across every client and process, and are woken
    /// by the release that hands the lead over (see
    /// [`Lock::acquire`](crate::Lock::acquire)). The announcement is
    /// written with the term as its fencing token before this returns, so
    /// once it returns [`Leader::current`] names this candidate (until it
    /// loses the lead). On a store without fenced values (Redlock, unless
    /// [`Leader::announce_on`] names another), nothing is announced.
    ///
    /// Dropping the future at any point is safe: it leaves the queue, and a
    /// lead handed to it but not yet returned is passed on, in the
    /// background.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Busy`] when a [`Leader::wait`] ran out;
    /// [`ErrorKind::InvalidInput`] for a bad name, lease or identity;
    /// [`ErrorKind::LeaseLost`] when a newer term announced before this
    /// one could (this candidate's lease ran out during the election); the
    /// store's errors (a failed announcement gives the lead up again).
    pub async fn campaign(&self) -> Result<Leadership> {
        self.validate()?;
        let guard = self.lock.acquire().await.map_err(|e| {
            if !e.is_busy() {
                return e;
            }
            let busy = Error::new(
                ErrorKind::Busy,
                format!(
                    "election {:?} is led by another candidate ({})",
                    self.name,
                    e.message()
                ),
            );
            match e.retry_after() {
                Some(after) => busy.with_retry_after(after),
                None => busy,
            }
            .with_source(e)
        })?;
        let term = guard.fencing_token();
        let identity = self.identity.as_ref().map_err(Invalid::error)?.clone();
        let announced = match self.board.write(term, announcement(&identity)).await {
            Ok(()) => true,
            Err(e) if e.is_unsupported() => {
                tracing::debug!(election = %self.name, term = term.get(), "elected; the store keeps no announcements");
                false
            }
            Err(e) => {
                // Given up at once: a leader nobody can see is no leader.
                let _ = guard.release().await;
                return Err(if e.is_stale_fencing_token() {
                    Error::new(
                        ErrorKind::LeaseLost,
                        format!(
                            "election {:?}: term {term} ended before it was announced; a newer term has announced",
                            self.name
                        ),
                    )
                    .with_source(e)
                } else {
                    e
                });
            }
        };
        tracing::debug!(election = %self.name, term = term.get(), "elected");
        Ok(Leadership {
            name: self.name.clone(),
            identity,
            guard,
            announcement: Announcement {
                board: self.board.clone(),
                term,
                armed: announced,
            },
        })
    }

    /// Who leads now: the identity and term of the announced leader while
    /// the election's lock is held; `None` when nobody holds it, when the
    /// last leader resigned, or when no candidate was ever elected.
    ///
    /// Two reads, the announcement and then the lock, each atomic: the
    /// answer is what was true a moment ago, as any read over a network.
    /// Exactly:
    ///
    /// - A leader's identity and term are seen from when its
    ///   [`campaign`](Leader::campaign) returns until it resigns, its lease
    ///   ends (its process died, or it was paused past its lease), or a
    ///   successor announces.
    /// - Between a leader's loss and its successor's announcement (the
    ///   successor's election and one write), a reader may still see the
    ///   old leader, or `None`; never an identity with a term it was not
    ///   elected for. Terms tell leaders apart: a newer leader always has
    ///   a greater term.
    /// - On a store that cannot inspect its locks (Redlock), the
    ///   announcement alone answers: a leader that resigned or dropped its
    ///   [`Leadership`] is seen gone, but one whose process died is seen
    ///   until its successor announces.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a bad name; [`ErrorKind::Unsupported`]
    /// on a store without fenced values (Redlock, unless
    /// [`Leader::announce_on`] names another); [`ErrorKind::Protocol`] for
    /// an announcement lockguard did not write; the store's errors.
    pub async fn current(&self) -> Result<Option<LeaderInfo>> {
        let Some(stored) = self.board.read().await? else {
            return Ok(None);
        };
        let (identity, value) = match stored.value.split_first() {
            Some((&LEADS, identity)) => (identity.to_vec(), None),
            Some((&PROCLAIMS, rest)) => match proclaimed(rest) {
                Some((identity, value)) => (identity.to_vec(), Some(value.to_vec())),
                None => return Err(self.not_ours(stored.token)),
            },
            Some((&RESIGNED, _)) => return Ok(None),
            _ => return Err(self.not_ours(stored.token)),
        };
        match self.lock.inspect().await {
            Ok(now) if !now.is_held() => return Ok(None),
            Ok(_) => {}
            // The announcement alone answers (see above).
            Err(e) if e.is_unsupported() => {}
            Err(e) => return Err(e),
        }
        Ok(Some(LeaderInfo {
            identity,
            term: stored.token,
            value,
        }))
    }

    /// The error of an announcement lockguard did not write.
    fn not_ours(&self, term: FencingToken) -> Error {
        Error::new(
            ErrorKind::Protocol,
            format!(
                "election {:?}: the announcement of term {term} is not one lockguard writes",
                self.name
            ),
        )
    }

    /// An observer of who leads: [`LeaderObserver::next`] gives what
    /// [`Leader::current`] says at once, and then each time it changes (a
    /// new leader, a new term, a [proclaimed](Leadership::proclaim) value,
    /// nobody), as etcd's `Observe` does.
    ///
    /// - On a store that pushes changes (etcd's watches, ZooKeeper's
    ///   persistent watches: the observers' row of the store table,
    ///   `docs/stores.md` in the `lockguard` package),
    ///   the observer is told of each change to the election's lock and
    ///   announcement, also of a lease's end, and reads again at once: a
    ///   change is seen a round trip or two after it happens. It reads
    ///   every 20 [watch intervals](Leader::watch_interval) anyway, and
    ///   follows again after the store's feed ends (a reconnection), at
    ///   most once a watch interval (or a second, if that is shorter).
    /// - On the other stores, it polls [`Leader::current`] every
    ///   [`Leader::watch_interval`] (250 ms by default).
    ///
    /// What it gives keeps [`Leader::current`]'s rules, and terms never go
    /// back: after a term it never gives an older one (a read that
    /// answers an older term, from a replica behind, say, is skipped).
    /// Changes that come and go between two reads are not seen: a reader
    /// that must not miss a term reads the terms of the writes a leader
    /// fenced.
    pub fn observe(&self) -> LeaderObserver {
        LeaderObserver {
            leader: self.clone(),
            seen: None,
            newest: None,
            polled: false,
            feed: Feed::Closed,
        }
    }

    /// A watch of who leads: [`Leader::observe`], by its earlier name.
    #[deprecated(note = "renamed `Leader::observe`")]
    pub fn watch(&self) -> LeaderObserver {
        self.observe()
    }

    /// A feed of changes to the election's lock and announcement, when the
    /// store pushes them.
    async fn follow(&self) -> Result<Changes> {
        let keys = self.lock.keys()?;
        let store = &self.lock.engine().store;
        if self.announced_elsewhere {
            return Err(crate::store::unsupported(
                store.name(),
                "following an announcement on another store",
            ));
        }
        let (bell, changes) = crate::store::feed();
        store.follow(keys, self.board.key()?, bell).await?;
        Ok(changes)
    }

    /// What the store knows of the election's lock now, changing nothing:
    /// whether someone leads, and how many candidates wait
    /// ([`Occupancy::waiters`]). See [`Lock::inspect`](crate::Lock::inspect).
    ///
    /// # Errors
    ///
    /// As [`Lock::inspect`](crate::Lock::inspect):
    /// [`ErrorKind::Unsupported`] on Redlock.
    pub async fn inspect(&self) -> Result<Occupancy> {
        self.lock.inspect().await
    }
}

/// The identity of a candidate that sets none: the random half of this
/// process's lock tokens.
fn default_identity() -> Arc<[u8]> {
    let token = crate::token::Token::random();
    token.as_str().as_bytes()[..16].into()
}

/// The announcement of a leader with `identity`.
fn announcement(identity: &[u8]) -> Vec<u8> {
    let mut value = Vec::with_capacity(identity.len() + 1);
    value.push(LEADS);
    value.extend_from_slice(identity);
    value
}

/// The announcement of a leader with `identity` that proclaims `value`.
fn proclamation(identity: &[u8], value: &[u8]) -> Option<Vec<u8>> {
    let len = u16::try_from(identity.len()).ok()?;
    let mut stored = Vec::with_capacity(3 + identity.len() + value.len());
    stored.push(PROCLAIMS);
    stored.extend_from_slice(&len.to_be_bytes());
    stored.extend_from_slice(identity);
    stored.extend_from_slice(value);
    Some(stored)
}

/// The identity and value of a proclamation, after its first byte.
fn proclaimed(rest: &[u8]) -> Option<(&[u8], &[u8])> {
    let (len, rest) = rest.split_first_chunk::<2>()?;
    let len = usize::from(u16::from_be_bytes(*len));
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// Who leads an election: see [`Leader::current`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct LeaderInfo {
    /// What the leader announced ([`Leader::identity`]).
    pub identity: Vec<u8>,
    /// The leader's term: its lock's fencing token, greater than every
    /// earlier leader's.
    pub term: FencingToken,
    /// What the leader last [proclaimed](Leadership::proclaim) in this
    /// term; `None` until it proclaims.
    pub value: Option<Vec<u8>>,
}

impl LeaderInfo {
    /// The identity as text, when it is UTF-8.
    pub fn identity_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.identity).ok()
    }

    /// The proclaimed value as text, when there is one and it is UTF-8.
    pub fn value_str(&self) -> Option<&str> {
        std::str::from_utf8(self.value.as_deref()?).ok()
    }
}

/// The lead of an election, won by [`Leader::campaign`].
///
/// Dropping it gives the lead up in the background, as dropping a lock
/// guard releases the lock, and marks its announcement resigned (unless a
/// newer term announced); [`Leadership::resign`] is the explicit form.
#[derive(Debug)]
#[must_use = "dropping the leadership resigns at once"]
pub struct Leadership {
    name: Arc<str>,
    identity: Arc<[u8]>,
    guard: LockGuard,
    announcement: Announcement,
}

impl Leadership {
    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This leader's term: the election lock's fencing token, greater than
    /// every earlier leader's (not always the next number: on some stores
    /// other keys draw from the same sequence). Pass it with every write
    /// the leader makes to a resource that checks tokens.
    pub fn term(&self) -> FencingToken {
        self.guard.fencing_token()
    }

    /// What this leader announced.
    pub fn identity(&self) -> &[u8] {
        &self.identity
    }

    /// Whether this candidate still leads: not lost, not resigned, and the
    /// lease (minus a safety margin) not over.
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// How much longer the lead certainly lasts (zero once lost).
    pub fn valid_for(&self) -> Duration {
        self.guard.valid_for()
    }

    /// Completes when the lead is lost (a renewal found the lock gone, a
    /// fixed lease ended) or its lease is about to run out, before anyone
    /// else can be elected: stop leading then. See
    /// [`LockGuard::lost`].
    pub fn lost(&self) -> impl Future<Output = Error> + Send + 'static {
        self.guard.lost()
    }

    /// A handle on the lead's lease that does not hold it (its term,
    /// [`is_held`](LeaseWatch::is_held), [`lost`](LeaseWatch::lost)), for
    /// tasks the leader spawns.
    pub fn watch(&self) -> LeaseWatch {
        self.guard.watch()
    }

    /// Publishes `value` with this leader's term (its address for clients,
    /// the epoch of its configuration), as etcd's `Proclaim` does:
    /// [`Leader::current`] and [`Leader::observe`] give it as
    /// [`LeaderInfo::value`] from when this returns until the next
    /// proclamation or the end of the term. One fenced write of the
    /// announcement, with the term as its token: a leader whose term ended
    /// cannot overwrite its successor's.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a value longer than
    /// [`MAX_PROCLAIMED_LEN`]; [`ErrorKind::LeaseLost`] when the lead was
    /// lost, or a newer term has announced; [`ErrorKind::Unsupported`] on
    /// a store without fenced values (Redlock, unless
    /// [`Leader::announce_on`] names another); the store's errors.
    pub async fn proclaim(&self, value: impl AsRef<[u8]>) -> Result<()> {
        let value = value.as_ref();
        if value.len() > MAX_PROCLAIMED_LEN {
            return Err(Error::invalid(format!(
                "election {:?}: the proclaimed value is {} bytes long, the maximum is {MAX_PROCLAIMED_LEN}",
                self.name,
                value.len()
            )));
        }
        let term = self.term();
        let lost = || {
            Error::new(
                ErrorKind::LeaseLost,
                format!(
                    "election {:?}: term {term} has ended, so it proclaims nothing",
                    self.name
                ),
            )
        };
        if !self.guard.is_held() {
            return Err(lost());
        }
        // The identity was checked against MAX_IDENTITY_LEN, which a u16 holds.
        let stored = proclamation(&self.identity, value)
            .ok_or_else(|| Error::invalid("the identity is too long to proclaim with"))?;
        match self.announcement.board.write(term, stored).await {
            Err(e) if e.is_stale_fencing_token() => Err(lost().with_source(e)),
            done => done,
        }
    }

    /// Resets a fixed lease to `lease` from now, if this candidate still
    /// leads. See [`LockGuard::extend`].
    ///
    /// # Errors
    ///
    /// As [`LockGuard::extend`]: [`ErrorKind::LeaseLost`] when the lead was
    /// already lost.
    pub async fn extend(&self, lease: Duration) -> Result<()> {
        self.guard.extend(lease).await
    }

    /// Gives the lead up: marks the announcement resigned, if it is still
    /// this term's (a newer leader's is never touched), then releases the
    /// election's lock, handing it to the first candidate waiting. True
    /// when this candidate still led.
    ///
    /// # Errors
    ///
    /// The store's errors. The lock is released even when marking the
    /// announcement failed (that error is returned then); a release that
    /// cannot reach the store leaves the lock to its lease.
    pub async fn resign(self) -> Result<bool> {
        let Self {
            name,
            guard,
            mut announcement,
            ..
        } = self;
        let term = guard.fencing_token();
        let marked = announcement.resign().await;
        let released = guard.release().await;
        tracing::debug!(election = %name, term = term.get(), "resigned");
        marked?;
        released
    }
}

/// A leader's announcement, marked resigned when the leader goes: by
/// [`Leadership::resign`], or in the background when it is dropped.
#[derive(Debug)]
struct Announcement {
    board: FencedResource,
    term: FencingToken,
    /// Whether it was written and is not marked resigned yet.
    armed: bool,
}

impl Announcement {
    /// Marks it resigned, unless a newer term has announced.
    async fn resign(&mut self) -> Result<()> {
        if !std::mem::take(&mut self.armed) {
            return Ok(());
        }
        mark_resigned(&self.board, self.term).await
    }
}

async fn mark_resigned(board: &FencedResource, term: FencingToken) -> Result<()> {
    match board.write(term, [RESIGNED]).await {
        // A newer term has announced: its announcement stays.
        Err(e) if e.is_stale_fencing_token() => Ok(()),
        done => done,
    }
}

impl Drop for Announcement {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Outside a runtime nothing is sent: readers find the lock free.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (board, term) = (self.board.clone(), self.term);
            runtime.spawn(async move {
                if let Err(e) = mark_resigned(&board, term).await {
                    tracing::debug!(election = %board.name(), error = %e, "marking a dropped leadership resigned failed; readers see its lock free");
                }
            });
        }
    }
}

/// Who leads an election, as it changes: made by [`Leader::observe`].
#[derive(Debug)]
pub struct LeaderObserver {
    leader: Leader,
    /// What the last read that changed something gave.
    seen: Option<Option<LeaderInfo>>,
    /// The newest term given: an older one is never given after it.
    newest: Option<FencingToken>,
    /// Whether a read was made: the next waits for a change first.
    polled: bool,
    feed: Feed,
}

/// An observer's feed of the store's changes.
#[derive(Debug)]
enum Feed {
    /// None open: the next read opens one first.
    Closed,
    /// Rings on each change; opened at the instant given.
    Open(Changes, Instant),
    /// The store pushes no changes: the observer polls.
    Unsupported,
}

/// What an observer gives, by its earlier name.
#[deprecated(note = "renamed `LeaderObserver`")]
pub type LeaderWatch = LeaderObserver;

impl LeaderObserver {
    /// What [`Leader::current`] says, the first time at once and then each
    /// time it differs from what this observer last gave (another leader,
    /// another term, another proclaimed value, or nobody): see
    /// [`Leader::observe`] for how it learns of a change.
    ///
    /// # Errors
    ///
    /// As [`Leader::current`], for the read that failed; the observer can
    /// be asked again (it waits for a change, or the interval, first).
    pub async fn next(&mut self) -> Result<Option<LeaderInfo>> {
        self.leader.validate()?;
        loop {
            if std::mem::replace(&mut self.polled, true) {
                self.wait().await;
            }
            // Following starts before the read: a change after the read
            // rings.
            if matches!(self.feed, Feed::Closed) {
                self.feed = match self.leader.follow().await {
                    Ok(changes) => Feed::Open(changes, Instant::now()),
                    Err(e) if e.is_unsupported() => Feed::Unsupported,
                    Err(e) => {
                        tracing::debug!(election = %self.leader.name, error = %e, "cannot follow the election's changes now; polling until the next read");
                        Feed::Closed
                    }
                };
            }
            let now = self.leader.current().await?;
            if let Some(info) = &now {
                if self.newest.is_some_and(|newest| info.term < newest) {
                    continue;
                }
                self.newest = Some(info.term);
            }
            if self.seen.as_ref() != Some(&now) {
                self.seen = Some(now.clone());
                return Ok(now);
            }
        }
    }

    /// Waits for a change the store pushes, or the interval.
    async fn wait(&mut self) {
        let interval = self.leader.watch_interval;
        match &mut self.feed {
            Feed::Open(changes, opened) => {
                let reread = interval.saturating_mul(FOLLOWED_REREAD);
                tokio::select! {
                    rung = changes.changed() => if !rung {
                        // The store follows no longer: follow again, and
                        // read; a feed that ended soon after it opened (a
                        // store that drops it at once) is followed again
                        // a pause after it opened, not at once for good.
                        let again = *opened + interval.min(FOLLOW_AGAIN);
                        self.feed = Feed::Closed;
                        tokio::time::sleep_until(again).await;
                    },
                    () = tokio::time::sleep(reread) => {}
                }
            }
            // Following failed (the store was unreachable): try again soon.
            Feed::Closed => tokio::time::sleep(interval.min(FOLLOW_AGAIN)).await,
            Feed::Unsupported => tokio::time::sleep(interval).await,
        }
    }

    /// Whether the store pushes this observer its changes: true once a
    /// feed is open (after the first [`next`](LeaderObserver::next)), false
    /// while it polls.
    pub fn is_pushed(&self) -> bool {
        matches!(self.feed, Feed::Open(..))
    }

    /// What [`LeaderObserver::next`] last gave: `None` before it gave
    /// anything.
    pub fn last(&self) -> Option<&Option<LeaderInfo>> {
        self.seen.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Client;

    #[tokio::test]
    async fn bad_names_identities_and_leases_are_clear_errors() {
        let lg = Client::memory();
        let e = lg.leader("").campaign().await.unwrap_err();
        assert!(
            e.is_invalid_input() && e.message().contains("election"),
            "{e}"
        );
        assert!(
            lg.leader("a\nb")
                .current()
                .await
                .unwrap_err()
                .is_invalid_input()
        );
        let long = vec![b'x'; MAX_IDENTITY_LEN + 1];
        let e = lg.leader("l").identity(long).validate().unwrap_err();
        assert!(
            e.is_invalid_input() && e.message().contains("identity"),
            "{e}"
        );
        let e = lg.leader("l").lease(Duration::from_millis(1)).validate();
        assert!(e.unwrap_err().is_invalid_input());
        let e = lg
            .leader("l")
            .watchdog(Duration::from_secs(1 << 40))
            .validate();
        assert!(e.unwrap_err().is_invalid_input());
        let e = lg.leader("l").watch_interval(Duration::ZERO).validate();
        assert!(e.unwrap_err().is_invalid_input());
        let mut watch = lg.leader("l").watch_interval(Duration::ZERO).observe();
        assert!(watch.next().await.unwrap_err().is_invalid_input());
    }

    #[tokio::test]
    async fn the_election_never_meets_a_lock_or_fenced_value_of_its_name() {
        let lg = Client::memory();
        let lock = lg.lock("jobs").try_acquire().await.unwrap();
        lg.fenced("jobs")
            .write(FencingToken::new(u64::MAX), "x")
            .await
            .unwrap();
        let lead = lg
            .leader("jobs")
            .identity("me")
            .wait(Duration::ZERO)
            .campaign()
            .await
            .unwrap();
        let now = lg.leader("jobs").current().await.unwrap().unwrap();
        assert_eq!((now.identity_str(), now.term), (Some("me"), lead.term()));
        assert!(lead.resign().await.unwrap());
        assert!(lock.release().await.unwrap());
    }

    #[tokio::test]
    async fn the_default_identity_is_the_process_tag() {
        let lg = Client::memory();
        let lead = lg.leader("d").campaign().await.unwrap();
        assert_eq!(lead.identity().len(), 16);
        let token = crate::token::Token::random();
        assert_eq!(lead.identity(), &token.as_str().as_bytes()[..16]);
        drop(lead);
    }

    #[tokio::test]
    async fn a_dropped_leadership_is_marked_resigned() {
        let lg = Client::memory();
        let lead = lg.leader("x").campaign().await.unwrap();
        let term = lead.term();
        drop(lead);
        let board = lg.leader("x").board;
        let mut resigned = false;
        for _ in 0..100 {
            let stored = board.read().await.unwrap().unwrap();
            if stored.value == [RESIGNED] {
                assert_eq!(stored.token, term);
                resigned = true;
                break;
            }
            tokio::task::yield_now().await;
        }
        assert!(resigned);
        assert!(lg.leader("x").current().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_campaign_without_a_bound_waits_until_cancelled() {
        let lg = Client::memory();
        let lead = lg.leader("w").campaign().await.unwrap();
        let waiting =
            tokio::time::timeout(Duration::from_millis(100), lg.peer().leader("w").campaign())
                .await;
        assert!(waiting.is_err(), "a second candidate was elected");
        let e = lg
            .peer()
            .leader("w")
            .wait(Duration::from_millis(20))
            .campaign()
            .await
            .unwrap_err();
        assert!(e.is_busy() && e.message().contains("election"), "{e}");
        assert!(lead.resign().await.unwrap());
        let next = tokio::time::timeout(Duration::from_secs(5), lg.peer().leader("w").campaign())
            .await
            .expect("elected once the lead was given up")
            .unwrap();
        assert!(next.resign().await.unwrap());
    }

    /// An observer whose store ends each feed as soon as it opens follows
    /// it again once a watch interval, not at once for good (a read and a follow
    /// per turn of a loop, for as long as nothing changes).
    #[tokio::test(start_paused = true)]
    async fn a_feed_that_ends_at_once_is_followed_again_after_a_pause() {
        let store = crate::store::forwarding::Forwarding::new(None);
        let lg = crate::store::forwarding::Forwarding::client(&store);
        let mut observer = lg.leader("e").observe();
        assert_eq!(observer.next().await.unwrap(), None);
        // Nothing changes: the observer waits, following again and again.
        let waited = tokio::time::timeout(Duration::from_millis(3500), observer.next()).await;
        assert!(waited.is_err(), "a change was seen where none was made");
        let follows = store.follows.load(std::sync::atomic::Ordering::Relaxed);
        // One each watch interval (250 ms), and the first.
        assert!(
            (13..=16).contains(&follows),
            "{follows} follows in 3.5 s of a feed that ends at once"
        );
    }
}
