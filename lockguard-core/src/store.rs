//! The public store boundary: the traits a store implements, and the
//! values that cross it.
//!
//! A store implements [`LockStore`] (locks and semaphores: acquire with a
//! place in the wait queue, release, extend, inspect) and [`DataStore`]
//! (counters, rate limiters, fenced values; each method has a default
//! answer, [`ErrorKind::Unsupported`] naming the store, for a store that
//! cannot offer it). Every operation is atomic, and one request where the
//! store allows. The primitives ([`Lock`](crate::Lock),
//! [`Counter`](crate::Counter), ...) know nothing of any store's commands:
//! they call these traits.
//!
//! Wake-ups reach the client's waiters through its [`Inbox`]: a store that
//! makes them in process calls it from [`LockStore::attach`]; one that
//! receives them over a message connection (Redis pub/sub, PostgreSQL
//! `LISTEN`) gives the client [`Listener`]s, which subscribe what the inbox
//! wants and deliver to it.
//!
//! # Adding a store
//!
//! 1. Implement [`LockStore`] and [`DataStore`] with plain `async fn`s
//!    (an empty `impl DataStore` offers locks only); the [`Store`] you
//!    build boxes them, once. Key your state by [`LockKeys::id`],
//!    [`CounterKeys::id`] and [`LimitKeys::id`]: each names one user key of
//!    one kind under the client's prefix, and no two differ only in how
//!    they are spelled. Lay out whatever else the store needs from them
//!    (the Redis store adds hash-tagged keys for its queue and sequence).
//! 2. Build a [`Store`] from it and a client with
//!    [`Builder::build`](crate::Builder::build).
//! 3. Run the conformance kit on it (`lockguard_testing::conformance`,
//!    a harness and one `conformance!` line in the store crate's tests):
//!    it checks mutual exclusion, leases, fencing, FIFO handoff, wake-ups,
//!    cancellation, counters and limits the way every store in this
//!    repository is checked.
//!
//! The in-memory store (`Client::memory`) is the reference
//! implementation. A store that talks to a server takes its deadlines,
//! units, redaction and reconnecting from [`net`] and [`url`]; the whole
//! recipe of a store crate is "Adding a store" in `docs/stores.md`.
//!
//! # Examples
//!
//! A store that forwards to the in-memory store, counting acquisitions:
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::{Arc, Weak};
//! use std::time::Duration;
//!
//! use lockguard_core::store::{
//!     Outcome, DataStore, Inbox, LockKeys, LockStore, Place, Store, Token, Waiting,
//! };
//! use lockguard_core::{Client, Result};
//!
//! #[derive(Debug)]
//! struct Counting {
//!     inner: Store,
//!     acquisitions: AtomicU64,
//! }
//!
//! impl LockStore for Counting {
//!     fn name(&self) -> &'static str {
//!         "counting"
//!     }
//!     fn waiting(&self) -> Waiting {
//!         self.inner.waiting()
//!     }
//!     // A wrapper forwards every answer the store gives of itself.
//!     fn confirms_handoffs(&self) -> bool {
//!         self.inner.confirms_handoffs()
//!     }
//!     fn attach(&self, inbox: Weak<dyn Inbox>) {
//!         self.inner.attach(inbox)
//!     }
//!     async fn acquire(
//!         &self,
//!         keys: &Arc<LockKeys>,
//!         token: &Token,
//!         lease: Duration,
//!         place: Option<Place<'_>>,
//!     ) -> Result<Outcome> {
//!         self.acquisitions.fetch_add(1, Ordering::Relaxed);
//!         self.inner.acquire(keys, token, lease, place).await
//!     }
//!     async fn release(&self, keys: &Arc<LockKeys>, token: &Token) -> Result<bool> {
//!         self.inner.release(keys, token).await
//!     }
//!     async fn extend(&self, keys: &Arc<LockKeys>, token: &Token, lease: Duration) -> Result<bool> {
//!         self.inner.extend(keys, token, lease).await
//!     }
//! }
//!
//! // Locks only: counters and limiters answer `Unsupported`.
//! impl DataStore for Counting {}
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lockguard_core::Result<()> {
//! let counting = Arc::new(Counting {
//!     inner: Store::memory(),
//!     acquisitions: AtomicU64::new(0),
//! });
//! let lg = Client::builder().build(Store::new(counting.clone(), Vec::new()))?;
//! let guard = lg.lock("order:42").try_acquire().await?;
//! assert!(guard.release().await?);
//! assert_eq!(counting.acquisitions.load(Ordering::Relaxed), 1);
//! assert!(lg.counter("stock").get().await.unwrap_err().is_unsupported());
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::fence::FencingToken;
pub use crate::flights::{Flight, Flights};
pub use channel_tasks::{ChannelTasks, Started};
pub use erased::Store;
pub use follow::ChangeBell;
pub(crate) use follow::{Changes, feed};
pub use future::StoreFuture;
pub use lease_ends::{LeaseEnd, LeaseEnds};
pub use limit::{LimitKeys, LimitOp, LimitReply};
pub use lock_leases::LockLeases;
pub use named_keys::NamedKeys;
pub use on_demand::OnDemand;
pub use session_locks::{HoldOf, LockSessions, SessionLocks, Tried, Waited};
pub use turns::{Turn, Turns};

mod channel_tasks;
mod erased;
mod follow;
#[cfg(test)]
pub(crate) mod forwarding;
mod future;
mod lease_ends;
mod limit;
mod lock_leases;
mod named_keys;
mod on_demand;
mod session_locks;
mod turns;
// The in-memory store, behind the boundary this module defines.
pub(crate) mod memory;
pub mod net;
pub mod url;
pub use crate::key::{CounterKeys, LockKeys, Resource, RwMode};
#[cfg(doc)]
use crate::rate_limit::Decision;
pub use crate::token::Token;

/// A fenced value as stored: the token that wrote it and its bytes.
pub type Stored = Option<(u64, Vec<u8>)>;

/// The outcome of one attempt to take a lock or a permit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Taken, with this fencing token. `keys` are what to release and renew:
    /// the keys asked for, or (a store that keeps a semaphore's permits as
    /// locks of their own) the one permit taken.
    Acquired {
        /// The acquisition's fencing token.
        fence: FencingToken,
        /// What to release and renew.
        keys: Arc<LockKeys>,
    },
    /// Taken for this attempt's token before this attempt: the server
    /// granted it to a wait the store runs there (a database session's own
    /// lock, waited for in the server), at `at` or later. The lease counts
    /// from `at`, not from this attempt: a client paused between the grant
    /// and this attempt finds it shorter, or gone.
    Granted {
        /// The acquisition's fencing token.
        fence: FencingToken,
        /// What to release and renew.
        keys: Arc<LockKeys>,
        /// A time no later than the grant, on this process's clock (the
        /// wait's send, plus how long the server says it waited): the
        /// lease is counted from here.
        at: tokio::time::Instant,
        /// How long from `at` the server recorded the hold for: the lease
        /// asked for, or less, a reservation (the session-lock engine
        /// records the waiter timeout, [`SessionLocks`]), which the
        /// waiter's client extends to its whole lease a third of the way
        /// into it, if its guard is still held then.
        recorded: Duration,
    },
    /// Someone else holds it; their lease has this long left, if known.
    Busy(Option<Duration>),
    /// Someone else holds it (their lease has `ttl` left, if known), and
    /// the waiter, who asked with a [`Place`], is queued: its place is kept
    /// for `kept` without a refresh.
    ///
    /// A store may keep a waiter far from the head of a long queue longer
    /// than its [`Place::timeout`], so that the refreshes of all its
    /// waiters together do not grow with the queue: the waiter refreshes a
    /// third of `kept` apart. The store must then tell the waiter, through
    /// [`Inbox::near`], when it comes near the head, keep its place only for
    /// its timeout from then on, and reserve a lock handed to it for no
    /// longer than its timeout: a dead waiter delays the queue by at most
    /// its timeout, wherever it queued.
    Queued {
        /// How long the holder's lease has left, if known.
        ttl: Option<Duration>,
        /// How long the store keeps the waiter's place without a refresh.
        kept: Duration,
    },
    /// Nobody won: concurrent attempts split the store between them (the
    /// nodes of a quorum store). Retry after a short random pause, not on
    /// the next notification (which every loser gets at once), so the next
    /// round does not split the same way.
    Contended,
}

/// The outcome of one attempt to take several locks in one step
/// ([`LockStore::acquire_all`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AllOrNone {
    /// Every lock taken: each one's fencing token, in the order asked.
    Acquired(Vec<FencingToken>),
    /// None taken: the lock at `index` (in the order asked) is held, its
    /// lease having `ttl` left when known, or has live waiters ahead.
    Busy {
        /// Which lock, by its place in the order asked.
        index: usize,
        /// How long its holder's lease has left, if known.
        ttl: Option<Duration>,
    },
}

/// Locks to take in one step ([`LockStore::acquire_all`]): distinct locks
/// (never semaphores or read-write locks), at least one, each with the
/// token to take it with, in the order asked. The client checks them
/// before a store sees them.
#[derive(Debug, Clone, Copy)]
pub struct LockSet<'a> {
    keys: &'a [Arc<LockKeys>],
    tokens: &'a [Token],
}

impl<'a> LockSet<'a> {
    /// `keys[i]` to take with `tokens[i]`, when they are distinct locks,
    /// at least one, a token each; `None` otherwise.
    pub fn new(keys: &'a [Arc<LockKeys>], tokens: &'a [Token]) -> Option<Self> {
        let locks = keys
            .iter()
            .all(|k| k.resource() == Resource::Lock && k.rw_mode().is_none());
        let distinct = || {
            let mut ids: Vec<&str> = keys.iter().map(|k| k.id()).collect();
            ids.sort_unstable();
            ids.windows(2).all(|w| w[0] != w[1])
        };
        (!keys.is_empty() && keys.len() == tokens.len() && locks && distinct())
            .then_some(Self { keys, tokens })
    }

    /// The locks, in the order asked.
    pub fn keys(&self) -> &'a [Arc<LockKeys>] {
        self.keys
    }

    /// The tokens, `tokens()[i]` for `keys()[i]`.
    pub fn tokens(&self) -> &'a [Token] {
        self.tokens
    }

    /// How many locks (at least one).
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Never: a set holds at least one lock.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Each lock with its token, in the order asked.
    pub fn iter(&self) -> impl Iterator<Item = (&'a Arc<LockKeys>, &'a Token)> + 'a {
        self.keys.iter().zip(self.tokens)
    }
}

/// How waiters of a store wait for a lock or permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Waiting {
    /// In a first-come-first-served queue in the store: a release hands
    /// the lock to the first live waiter and announces a [`Handoff`] to it.
    Queue,
    /// In a line ordered by when each waiter began to wait, kept on every
    /// node of a quorum store (whose nodes keep no common queue): a waiter
    /// takes a free lock only when no live waiter is ahead of it, and a
    /// release is announced on the key's channel for the waiters to retry.
    Line,
}

/// How a waiter keeps its place in a key's wait queue: refreshed by each of
/// its attempts, dropped when it has been silent for `timeout`, notified on
/// `channel` when the lock (or a permit) is handed to it.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Place<'a> {
    /// How long the place is kept without a refresh.
    pub timeout: Duration,
    /// Where the waiter's client listens for the handoff (a store whose
    /// wake-ups travel as messages names its channel).
    pub channel: &'a str,
    /// The number of this attempt of the waiter: a handoff names the attempt
    /// whose deadline it is reserved until.
    pub attempt: u32,
    /// The waiter, the same for all its attempts (on a queue store, the
    /// token its attempts take the lock with).
    pub waiter: Token,
    /// When the waiter began to wait, in ms since the Unix epoch on its
    /// client's clock: a store whose nodes keep no common queue (Redlock)
    /// lines waiters up by it, so that every node orders them alike.
    pub since_ms: u64,
}

impl Place<'static> {
    /// The place of `waiter`'s attempt number `attempt`, kept for `timeout`
    /// without a refresh, its handoff told to its client's [`Inbox`] (no
    /// channel): what a store's own tests pass to drive its queue without a
    /// client.
    pub fn new(waiter: Token, attempt: u32, timeout: Duration) -> Self {
        Self {
            timeout,
            channel: "",
            attempt,
            waiter,
            since_ms: 0,
        }
    }
}

impl<'a> Place<'a> {
    /// The same place, with wake-ups told on `channel` (a store that
    /// announces releases on a channel of its own passes `""`).
    pub fn with_channel<'b>(self, channel: &'b str) -> Place<'b> {
        Place {
            timeout: self.timeout,
            channel,
            attempt: self.attempt,
            waiter: self.waiter,
            since_ms: self.since_ms,
        }
    }
}

/// A lock or permit handed to a queued waiter, as announced to it: reserved
/// for it until the deadline that its attempt number `attempt` set, which
/// is at least `timeout` after that attempt was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Handoff {
    /// The waiter the lock or permit was handed to.
    pub token: Token,
    /// The fencing token it holds it with.
    pub fence: FencingToken,
    /// The attempt of the waiter whose deadline the reservation runs to.
    pub attempt: u32,
}

impl Handoff {
    /// A handoff to `token`, with `fence`, reserved until the deadline of
    /// its attempt number `attempt`.
    pub fn new(token: Token, fence: FencingToken, attempt: u32) -> Self {
        Self {
            token,
            fence,
            attempt,
        }
    }

    /// The announcement as text: `token fence attempt`, what
    /// [`Handoff::parse`] reads.
    pub fn to_text(&self) -> String {
        format!(
            "{} {} {}",
            self.token.as_str(),
            self.fence.get(),
            self.attempt
        )
    }

    /// Parses the announcement `token fence attempt`.
    pub fn parse(payload: &[u8]) -> Option<Self> {
        let mut parts = payload.split(|b| *b == b' ');
        let token = Token::parse(parts.next()?)?;
        let number = |p: Option<&[u8]>| std::str::from_utf8(p?).ok()?.parse::<u64>().ok();
        let fence = number(parts.next()).filter(|f| *f > 0)?;
        let attempt = u32::try_from(number(parts.next())?).ok()?;
        parts.next().is_none().then_some(Self {
            token,
            fence: FencingToken::new(fence),
            attempt,
        })
    }
}

/// A lock, semaphore or read-write lock as the store sees it at one
/// moment: made by [`Lock::inspect`](crate::Lock::inspect),
/// [`Semaphore::inspect`](crate::Semaphore::inspect) and
/// [`RwLock::inspect`](crate::RwLock::inspect), one round trip, changing
/// nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Occupancy {
    /// How many hold it: 0 or 1 for a lock, up to the permits for a
    /// semaphore; for a read-write lock, its readers and its writer.
    pub holders: u32,
    /// How many may hold it at once: 1 for a lock, the permits for a
    /// semaphore; for a read-write lock, 1 while a writer holds it and
    /// `u32::MAX` (any number of readers) otherwise.
    pub capacity: u32,
    /// How long the holder's lease has left (for a semaphore, the lease
    /// that ends first); `None` when nobody holds it, and on ZooKeeper,
    /// where a holder's own client keeps its lease.
    pub lease_left: Option<Duration>,
    /// Waiters in its queue. A waiter that died is counted until the queue
    /// drops it, at most the waiter timeout later.
    pub waiters: u64,
    /// The newest fencing token drawn from the sequence the key's tokens
    /// come from: the holder's, or a later one of another key sharing the
    /// sequence. No acquisition of the key has had a greater token; `None`
    /// when none has been drawn.
    pub latest_fence: Option<FencingToken>,
    /// How many of the holders are readers of a read-write lock (0 for a
    /// lock or a semaphore).
    pub readers: u32,
    /// Whether a writer holds the read-write lock (false for a lock or a
    /// semaphore).
    pub writer: bool,
}

impl Occupancy {
    /// What a store reports: `holders` of `capacity`, the lease that ends
    /// first, the waiters and the newest fencing token drawn.
    pub fn new(
        holders: u32,
        capacity: u32,
        lease_left: Option<Duration>,
        waiters: u64,
        latest_fence: Option<FencingToken>,
    ) -> Self {
        Self {
            holders,
            capacity,
            lease_left,
            waiters,
            latest_fence,
            readers: 0,
            writer: false,
        }
    }

    /// What a store reports of a read-write lock: `readers` or a
    /// `writer` (a store never reports both), the lease that ends first,
    /// the waiters of both kinds and the newest fencing token drawn.
    pub fn read_write(
        readers: u32,
        writer: bool,
        lease_left: Option<Duration>,
        waiters: u64,
        latest_fence: Option<FencingToken>,
    ) -> Self {
        Self {
            holders: readers.saturating_add(u32::from(writer)),
            capacity: if writer { 1 } else { u32::MAX },
            lease_left,
            waiters,
            latest_fence,
            readers,
            writer,
        }
    }

    /// Whether anyone holds it.
    pub fn is_held(&self) -> bool {
        self.holders > 0
    }

    /// Whether every permit (the lock) is taken, so an acquisition now
    /// would wait.
    pub fn is_full(&self) -> bool {
        self.holders >= self.capacity
    }
}

/// One row of a survey a database store reads: a holder or a waiter of
/// the lock `id`, as [`holdings_from_rows`] groups them.
#[derive(Debug, Clone)]
pub struct SurveyRow {
    /// The lock's identity.
    pub id: String,
    /// The holder's or waiter's token, as stored.
    pub token: Vec<u8>,
    /// Of a read-write lock, the hold's mode.
    pub mode: Option<RwMode>,
    /// A holder's fencing token (0 when the store does not know it: a
    /// hold whose lease is its database session's) and the ms its lease
    /// has left (`None` when not known); `None` for a waiter.
    pub hold: Option<(i64, Option<i64>)>,
    /// The newest fencing token drawn for the lock, if any.
    pub latest: Option<i64>,
}

/// The holdings the rows of a survey give, the rows of one lock together
/// (holders in any order, then its waiters first in line first).
///
/// # Errors
///
/// What is wrong with a row (a token not lockguard's, a fencing token
/// that is not positive), for the store to report as
/// [`ErrorKind::Protocol`] with what it was doing.
pub fn holdings_from_rows(
    rows: impl IntoIterator<Item = SurveyRow>,
) -> std::result::Result<Vec<Holding>, String> {
    let mut out: Vec<Holding> = Vec::new();
    for row in rows {
        let token = Token::parse(&row.token).ok_or_else(|| {
            let text = String::from_utf8_lossy(&row.token);
            format!("the token {text:?} of {:?}", row.id)
        })?;
        if out.last().is_none_or(|h| h.id != row.id) {
            let latest = row
                .latest
                .and_then(|f| u64::try_from(f).ok())
                .filter(|f| *f > 0);
            out.push(Holding::new(
                row.id.clone(),
                Vec::new(),
                Vec::new(),
                latest.map(FencingToken::new),
            ));
        }
        let holding = out.last_mut().expect("pushed above");
        match row.hold {
            Some((fence, left)) => {
                let fence = match fence {
                    0 => None,
                    f => {
                        Some(FencingToken::new(u64::try_from(f).map_err(|_| {
                            format!("the fencing token {f} of {:?}", row.id)
                        })?))
                    }
                };
                let left = left.map(|l| Duration::from_millis(l.max(0).unsigned_abs()));
                holding
                    .holders
                    .push(Holder::new(token, row.mode, fence, left));
            }
            None => holding.waiters.push(Waiter::new(token, row.mode)),
        }
    }
    Ok(out)
}

/// Whether the lock identity `id` under `prefix` is a read-write lock's
/// (of a [`RwLock`](crate::RwLock) or an
/// [`UpgradeableRwLock`](crate::UpgradeableRwLock)): a survey then says
/// the mode of its holders and waiters.
pub fn is_read_write_id(prefix: &str, id: &str) -> bool {
    id.strip_prefix(prefix)
        .is_some_and(|rest| ["rw:{", "urw:{"].iter().any(|kind| rest.starts_with(kind)))
}

/// One lock, semaphore or read-write lock that is held or awaited, as the
/// store keeps it at one moment ([`LockStore::survey`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holding {
    /// Its identity ([`LockKeys::id`]): the client's prefix, its kind and
    /// its escaped name.
    pub id: String,
    /// Who holds it (of a semaphore or a read-write lock, every holder).
    pub holders: Vec<Holder>,
    /// Who waits for it, first in line first. A waiter that died is listed
    /// until the queue drops it, at most the waiter timeout later.
    pub waiters: Vec<Waiter>,
    /// The newest fencing token drawn from the sequence its tokens come
    /// from (see [`Occupancy::latest_fence`]).
    pub latest_fence: Option<FencingToken>,
}

impl Holding {
    /// The holding of the lock `id`: its holders, its waiters in order and
    /// the newest fencing token drawn.
    pub fn new(
        id: String,
        holders: Vec<Holder>,
        waiters: Vec<Waiter>,
        latest_fence: Option<FencingToken>,
    ) -> Self {
        Self {
            id,
            holders,
            waiters,
            latest_fence,
        }
    }
}

/// One holder of a lock, a semaphore's permit or a read-write lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The holder's token: the identity of its hold, unique to it.
    pub token: Token,
    /// Of a read-write lock, whether it reads or writes; `None` otherwise.
    pub mode: Option<RwMode>,
    /// Its fencing token, where the store keeps it per holder (else see
    /// [`Holding::latest_fence`], which is never below it).
    pub fence: Option<FencingToken>,
    /// How long its lease has left; `None` where the holder's own client
    /// keeps the lease (ZooKeeper) or ends it (etcd).
    pub lease_left: Option<Duration>,
}

impl Holder {
    /// A holder with `token`, its mode of a read-write lock, its fence and
    /// its lease left, each where the store knows it.
    pub fn new(
        token: Token,
        mode: Option<RwMode>,
        fence: Option<FencingToken>,
        lease_left: Option<Duration>,
    ) -> Self {
        Self {
            token,
            mode,
            fence,
            lease_left,
        }
    }
}

/// One waiter in a lock's queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// The waiter's token: the hold it will have.
    pub token: Token,
    /// Of a read-write lock, whether it waits to read or to write.
    pub mode: Option<RwMode>,
}

impl Waiter {
    /// A waiter with `token`, waiting for a `mode` hold of a read-write
    /// lock or (`None`) for a lock or a permit.
    pub fn new(token: Token, mode: Option<RwMode>) -> Self {
        Self { token, mode }
    }
}

/// Locks and semaphores: what every store offers.
///
/// A store writes each operation as a plain `async fn` (the trait's
/// `impl Future` signatures accept one); the [`Store`] it is built into
/// boxes them, once, for every store. An operation's future must send
/// nothing until it is first polled, so that dropping it unpolled changes
/// nothing in the store (an `async fn` never runs before it is polled).
///
/// Keys of a read-write lock ([`LockKeys::rw_mode`]) reach
/// [`acquire`](LockStore::acquire), [`release`](LockStore::release),
/// [`extend`](LockStore::extend) and [`inspect`](LockStore::inspect) only
/// on a store that says it offers them ([`read_write`](LockStore::read_write));
/// the others' clients refuse them with [`ErrorKind::Unsupported`] first.
pub trait LockStore: Send + Sync + fmt::Debug + 'static {
    /// The store's name, for messages and [`Client::store_name`](crate::Client::store_name).
    fn name(&self) -> &'static str;

    /// How its waiters wait.
    fn waiting(&self) -> Waiting;

    /// Whether every operation answers in process, at its first poll,
    /// never waiting (the in-memory store): what the `*_now` methods of
    /// the primitives rely on.
    fn answers_at_once(&self) -> bool {
        false
    }

    /// Whether the store offers read-write locks: its operations then
    /// take keys of a read-write lock's holds too, and keep the rules of
    /// [`acquire`](LockStore::acquire) for them.
    fn read_write(&self) -> bool {
        false
    }

    /// The most permits a semaphore may have on this store.
    fn max_permits(&self) -> u32 {
        crate::key::MAX_PERMITS
    }

    /// The longest lease the store can keep (ZooKeeper: two thirds of the
    /// session timeout, past which a holder's session may have ended
    /// unnoticed); `None` for any lease.
    fn max_lease(&self) -> Option<Duration> {
        None
    }

    /// Whether a lock or permit handed over from the queue counts only
    /// once its waiter has confirmed it: a store whose writes count once
    /// replicas have them (Redis with `wait_for_replicas`) says yes, since
    /// a release hands it over on the primary before any replica has it,
    /// and a failover then would let a second client take it. The waiter
    /// then [`extend`](LockStore::extend)s it with its lease, which such a
    /// store confirms with its replicas, before it gets the guard; the
    /// others hand the guard over at once and extend it to the lease a
    /// third of the way into its reservation, if it is still held.
    fn confirms_handoffs(&self) -> bool {
        false
    }

    /// Where the store announces handoffs it makes without a message
    /// channel (the in-memory store); the others ignore it.
    fn attach(&self, _inbox: Weak<dyn Inbox>) {}

    /// One attempt to take a lock or a semaphore permit: takes it when it
    /// is free and nobody queues ahead, claims it when a release handed it
    /// to `token`, and otherwise, with a `place` (on a [`Waiting::Queue`]
    /// store), joins the queue or keeps and refreshes the place held.
    /// Without a place it never queues.
    ///
    /// For the keys of a read-write lock's hold ([`LockKeys::rw_mode`]),
    /// many readers or one writer. Readers and writers wait in one
    /// first-come-first-served queue: a hold is taken only when it is
    /// compatible with the holders (a read with readers, a write with
    /// nobody) and nobody queues ahead, so a reader that arrives while a
    /// writer waits queues behind it. A release, or a lease found ended,
    /// hands the lock to the head of the queue: to the whole run of
    /// readers there at once (a [`Handoff`] to each), or to the one
    /// writer there. Every hold, read or write, draws its fencing token
    /// from one sequence of the key, so every write's is greater than
    /// every earlier read's and write's, and every read's greater than
    /// every earlier write's.
    fn acquire(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> impl Future<Output = Result<Outcome>> + Send;

    /// Gives up `token`'s lock, permit or read-write hold, handing it to
    /// the first live waiters in the same step (as far as they fit);
    /// `token` also leaves the queue. True when it was still held.
    fn release(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Takes every lock of `set` in one atomic step when each is free
    /// with no live waiter ahead; otherwise none (a free lock with waiters
    /// may be handed to its first, as [`LockStore::acquire`] does). A
    /// multi-lock's attempt: one request instead of one per key, and no
    /// moment when some keys are held and others not.
    ///
    /// `None` (the default) where the store cannot take these keys in one
    /// step (a Redis Cluster whose keys are in different slots, a quorum
    /// store); the caller then takes them one by one, in order.
    fn acquire_all(
        &self,
        set: LockSet<'_>,
        lease: Duration,
    ) -> impl Future<Output = Result<Option<AllOrNone>>> + Send {
        let _ = (set, lease);
        std::future::ready(Ok(None))
    }

    /// What the store knows of the lock, semaphore or read-write lock now,
    /// changing nothing (of a read-write lock: its readers or writer, see
    /// [`Occupancy::read_write`], the waiters of both kinds, the newest
    /// fencing token).
    ///
    /// The default answers [`ErrorKind::Unsupported`] naming the store.
    fn inspect(&self, _keys: &Arc<LockKeys>) -> impl Future<Output = Result<Occupancy>> + Send {
        std::future::ready(Err(unsupported(self.name(), "inspection")))
    }

    /// Every lock, semaphore and read-write lock under `prefix` (a
    /// client's key prefix) that is held or has waiters, with its holders
    /// and its waiters in order, changing nothing: what an operator's
    /// `lockguard locks` lists. Read in as few requests as the store
    /// allows, not atomically across locks.
    ///
    /// The default answers [`ErrorKind::Unsupported`] naming the store.
    fn survey(&self, _prefix: &str) -> impl Future<Output = Result<Vec<Holding>>> + Send {
        std::future::ready(Err(unsupported(self.name(), "listing locks")))
    }

    /// How much longer no lock can be taken anew after a crash, a restart
    /// or a failover that lost the store's records of the leases running
    /// then
    /// (a holder of the server that went down may still count on its
    /// lease, so the store waits out the longest a lease could last);
    /// `None` when there is no such wait. What `lockguard locks` shows
    /// beside the locks.
    ///
    /// The default is `None`: a store whose leases outlive a crash, or end
    /// with it, has no such wait.
    fn crash_wait(&self) -> impl Future<Output = Result<Option<Duration>>> + Send {
        std::future::ready(Ok(None))
    }

    /// Ends `token`'s hold from any client: an operator's forced release of
    /// a holder that is stuck or gone. As the holder's own release would,
    /// it hands the lock on to the next waiter, with a greater fencing
    /// token; the holder learns it lost the lock at its next renewal. True
    /// when `token` held it.
    ///
    /// The default is [`release`](LockStore::release), right for a store
    /// whose release needs only the token; a store that releases through
    /// what its own client remembers of a hold finds the hold in the store
    /// instead.
    fn evict(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
    ) -> impl Future<Output = Result<bool>> + Send {
        self.release(keys, token)
    }

    /// Resets `token`'s lease to `lease` from now; true when it was still
    /// held.
    fn extend(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        lease: Duration,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Gives up `token`'s lock but keeps it taken for `keep` more: the
    /// release of a lock taken with `at_least` before that has passed (a
    /// scheduled job's lock). What is kept must outlive this client and
    /// its process: another replica may run the same job the moment it
    /// is free. True when it was still held.
    ///
    /// The default resets the lease to `keep` ([`extend`](LockStore::extend)),
    /// which is right where a lease lives in the store; a store whose
    /// holds live in the client's session (ZooKeeper's ephemeral nodes)
    /// leaves something in the store that outlives the session instead.
    fn release_later(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        keep: Duration,
    ) -> impl Future<Output = Result<bool>> + Send {
        self.extend(keys, token, keep)
    }
}

/// Counters, rate limiters and fenced values: what a store offers where it
/// can. Each method answers [`ErrorKind::Unsupported`], naming the store,
/// unless the store implements it.
pub trait DataStore: LockStore {
    /// Adds `delta`; the new value.
    fn counter_add(
        &self,
        _keys: &CounterKeys,
        _delta: i64,
        _ttl: Option<Duration>,
    ) -> impl Future<Output = Result<i64>> + Send {
        std::future::ready(Err(unsupported(self.name(), "counters")))
    }

    /// `Ok(new value)` when `n` was taken, `Err(current value)` when there
    /// was too little.
    fn counter_take(
        &self,
        _keys: &CounterKeys,
        _n: i64,
        _ttl: Option<Duration>,
    ) -> impl Future<Output = Result<Result<i64, i64>>> + Send {
        std::future::ready(Err(unsupported(self.name(), "counters")))
    }

    /// The value and its version (both 0 for a counter never written).
    fn counter_get(&self, _keys: &CounterKeys) -> impl Future<Output = Result<(i64, u64)>> + Send {
        std::future::ready(Err(unsupported(self.name(), "counters")))
    }

    /// `Ok(new version)` when set, `Err(current version)` when `expected`
    /// did not match.
    fn counter_set(
        &self,
        _keys: &CounterKeys,
        _value: i64,
        _expected: Option<u64>,
        _ttl: Option<Duration>,
    ) -> impl Future<Output = Result<Result<u64, u64>>> + Send {
        std::future::ready(Err(unsupported(self.name(), "counters")))
    }

    /// Adds `member` to the counter's marks; true when it was new.
    fn mark_once(
        &self,
        _keys: &CounterKeys,
        _member: &str,
        _ttl: Option<Duration>,
    ) -> impl Future<Output = Result<bool>> + Send {
        std::future::ready(Err(unsupported(self.name(), "marks")))
    }

    /// One step of `op` on the store's clock, over the key's state; with
    /// `peek`, the step a request of `cost` would take now, changing
    /// nothing. The store answers what its step gave ([`LimitReply`]); the
    /// client makes the [`Decision`] of it.
    fn rate_limit(
        &self,
        _keys: &LimitKeys<'_>,
        _op: LimitOp,
        _cost: u64,
        _peek: bool,
    ) -> impl Future<Output = Result<LimitReply>> + Send {
        std::future::ready(Err(unsupported(self.name(), "rate limiting")))
    }

    /// Stores `value` if `token` is at least the newest accepted; true
    /// when it was stored.
    fn fenced_write(
        &self,
        _key: &str,
        _token: u64,
        _value: &[u8],
    ) -> impl Future<Output = Result<bool>> + Send {
        std::future::ready(Err(unsupported(self.name(), "fenced values")))
    }

    /// The stored value and the token that wrote it.
    fn fenced_read(&self, _key: &str) -> impl Future<Output = Result<Stored>> + Send {
        std::future::ready(Err(unsupported(self.name(), "fenced values")))
    }

    /// Removes the stored value if `token` is at least the newest
    /// accepted, and keeps `token` as the newest (a tombstone: a later
    /// write with an older token is still refused, and
    /// [`fenced_read`](DataStore::fenced_read) answers `None`). On a
    /// resource never written it records `token`. True when removed or
    /// recorded, false when a newer token has written.
    fn fenced_remove(&self, _key: &str, _token: u64) -> impl Future<Output = Result<bool>> + Send {
        std::future::ready(Err(unsupported(self.name(), "fenced values")))
    }

    /// Follows the lock at `lock` and the fenced value at `value` (an
    /// election's lock and its announcement, for
    /// [`Leader::observe`](crate::Leader::observe)): rings `bell` each time
    /// either may have changed (a holder or waiter came or went, also by a
    /// lease's end; the value was written or removed), until the bell is
    /// [closed](ChangeBell::closed). Answers once it follows: every change
    /// after the answer rings the bell. A store that can follow no longer
    /// (its watch ended, its connection was lost) drops the bell; the
    /// observer then asks again, and reads again.
    ///
    /// The default answers [`ErrorKind::Unsupported`] naming the store:
    /// observers then poll. A store implements it where the server pushes
    /// changes (etcd's watches, ZooKeeper's persistent watches).
    fn follow(
        &self,
        _lock: &Arc<LockKeys>,
        _value: &str,
        _bell: ChangeBell,
    ) -> impl Future<Output = Result<()>> + Send {
        std::future::ready(Err(unsupported(self.name(), "following changes")))
    }
}

/// Where a store's messages for one client go: the client's waiters.
pub trait Inbox: Send + Sync {
    /// Whether anyone of this client listens on `channel`.
    fn is_wanted(&self, channel: &str) -> bool;

    /// A message published on `channel`. On the client's own channel a
    /// [`Handoff`] as [`Handoff::to_text`] writes it, or a waiter's token
    /// alone: that waiter came near the head (see [`Inbox::near`]).
    fn deliver(&self, channel: &str, payload: &[u8]);

    /// A handoff the store made to one of this client's waiters.
    fn handoff(&self, handoff: Handoff);

    /// Something changed ahead of `token`'s waiter in its queue (a store
    /// that watches rather than hands over: ZooKeeper): it asks again.
    fn wake(&self, token: &Token);

    /// `token`'s waiter, whose place was kept longer than its timeout (see
    /// [`Outcome::Queued`]), came near the head of its queue: it refreshes
    /// its place at its timeout's pace from now on. Nothing is sent.
    fn near(&self, token: &Token);

    /// Messages may have been missed (a connection was lost): every waiter
    /// checks.
    fn wake_all(&self);
}

/// One message connection of a store (a Redis pub/sub connection): it
/// subscribes the channels the client's [`Inbox`] wants.
pub trait Listener: Send + Sync + fmt::Debug {
    /// Brings the subscription of `channel` in line with whether `inbox`
    /// wants it now. When it is wanted, answers `Ok` only once it is
    /// subscribed (for every caller, also those that come while another's
    /// subscription is under way): a waiter joins its queue after this, and
    /// a handoff announced before the subscription would reach nobody.
    /// [`ChannelTasks`] does this for a store that runs a task per channel.
    fn sync<'a>(&'a self, channel: &'a str, inbox: Arc<dyn Inbox>) -> StoreFuture<'a, Result<()>>;
}

/// The error of an operation a store does not offer: "the `store` store
/// does not offer `what`" (`"counters"`), of kind
/// [`ErrorKind::Unsupported`].
pub fn unsupported(store: &str, what: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("the {store} store does not offer {what}"),
    )
}

/// Milliseconds for a `PX`-style argument, rounded up so a sub-millisecond
/// remainder never shortens a lease.
pub fn millis_ceil(d: Duration) -> u64 {
    let ms = d.as_millis();
    let ms = if !d.subsec_nanos().is_multiple_of(1_000_000) {
        ms + 1
    } else {
        ms
    };
    u64::try_from(ms).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survey_rows_group_by_lock() {
        let token = |c: char| c.to_string().repeat(32).into_bytes();
        let row = |id: &str, t: char, hold: Option<(i64, Option<i64>)>| SurveyRow {
            id: id.to_owned(),
            token: token(t),
            mode: None,
            hold,
            latest: Some(9),
        };
        let found = holdings_from_rows([
            row("l:a", 'a', Some((7, Some(1500)))),
            row("l:a", 'b', None),
            row("l:a", 'c', None),
            row("l:b", 'd', Some((9, None))),
        ])
        .unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].holders[0].fence, Some(FencingToken::new(7)));
        assert_eq!(
            found[0].holders[0].lease_left,
            Some(Duration::from_millis(1500))
        );
        let waiting: Vec<&str> = found[0].waiters.iter().map(|w| w.token.as_str()).collect();
        assert_eq!(
            waiting,
            [token('b'), token('c')].map(|t| String::from_utf8(t).unwrap())
        );
        assert_eq!(found[1].latest_fence, Some(FencingToken::new(9)));
        // A fence the store does not know is none; a negative one is garbage.
        let unknown = holdings_from_rows([row("l:a", 'a', Some((0, None)))]).unwrap();
        assert_eq!(unknown[0].holders[0].fence, None);
        assert!(holdings_from_rows([row("l:a", 'a', Some((-1, None)))]).is_err());
        let mut bad = row("l:a", 'a', None);
        bad.token = b"not a token".to_vec();
        assert!(
            holdings_from_rows([bad])
                .unwrap_err()
                .contains("not a token")
        );
    }

    #[test]
    fn handoff_announcements_parse_strictly() {
        let token = Token::random();
        let text = format!("{} 42 7", token.as_str());
        assert_eq!(
            Handoff::parse(text.as_bytes()),
            Some(Handoff {
                token,
                fence: FencingToken::new(42),
                attempt: 7,
            })
        );
        let t = token.as_str();
        for bad in [
            String::new(),
            t.to_owned(),
            format!("{t} 42"),
            format!("{t} 0 1"),
            format!("{t} 42 1 9"),
            format!("{t} -1 1"),
            format!("{t} 42 99999999999"),
            format!("{} 42 1", &t[1..]),
            format!("{}X 42 1", &t[1..]),
            "\u{fffd} 1 1".to_owned(),
        ] {
            assert_eq!(Handoff::parse(bad.as_bytes()), None, "{bad:?}");
        }
    }
}
