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
//! 1. Implement [`LockStore`] and [`DataStore`] (an empty `impl` offers
//!    locks only). Key your state by [`LockKeys::id`],
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
//! implementation.
//!
//! # Examples
//!
//! A store that forwards to the in-memory store, counting acquisitions:
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::time::Duration;
//!
//! use lockguard_core::store::{
//!     Attempt, DataStore, Inbox, LockKeys, LockStore, Place, Store, StoreFuture, Token, Waiting,
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
//!         self.inner.locks().waiting()
//!     }
//!     // A wrapper forwards every answer the store gives of itself.
//!     fn confirms_handoffs(&self) -> bool {
//!         self.inner.locks().confirms_handoffs()
//!     }
//!     fn acquire<'a>(
//!         &'a self,
//!         keys: &'a Arc<LockKeys>,
//!         token: &'a Token,
//!         lease: Duration,
//!         place: Option<Place<'a>>,
//!     ) -> StoreFuture<'a, Result<Attempt>> {
//!         self.acquisitions.fetch_add(1, Ordering::Relaxed);
//!         self.inner.locks().acquire(keys, token, lease, place)
//!     }
//!     fn release<'a>(
//!         &'a self,
//!         keys: &'a Arc<LockKeys>,
//!         token: &'a Token,
//!     ) -> StoreFuture<'a, Result<bool>> {
//!         self.inner.locks().release(keys, token)
//!     }
//!     fn extend<'a>(
//!         &'a self,
//!         keys: &'a Arc<LockKeys>,
//!         token: &'a Token,
//!         lease: Duration,
//!     ) -> StoreFuture<'a, Result<bool>> {
//!         self.inner.locks().extend(keys, token, lease)
//!     }
//!     fn attach(&self, inbox: std::sync::Weak<dyn Inbox>) {
//!         self.inner.locks().attach(inbox)
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
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::fence::FencingToken;
pub use crate::flights::{Flight, Flights};
pub use channel_tasks::{ChannelTasks, Started};

mod channel_tasks;
// The in-memory store, behind the boundary this module defines.
pub(crate) mod memory;
pub mod url;
pub use crate::key::{CounterKeys, LockKeys, Resource, RwMode};
use crate::rate_limit::{Decision, gcra};
pub use crate::token::Token;

/// A fenced value as stored: the token that wrote it and its bytes.
pub type Stored = Option<(u64, Vec<u8>)>;

/// The future of one store operation: the answer itself for a store that
/// answers at once (the in-memory store: no allocation), or a boxed future
/// for one that answers over the network.
///
/// A store that answers over the network returns [`StoreFuture::boxed`]; the
/// future must send nothing until it is first polled, so that dropping it
/// unpolled changes nothing in the store.
pub struct StoreFuture<'a, T>(Answer<'a, T>);

enum Answer<'a, T> {
    Ready(Option<T>),
    Pending(Pin<Box<dyn Future<Output = T> + Send + 'a>>),
}

impl<T> fmt::Debug for StoreFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Answer::Ready(_) => "StoreFuture::Ready",
            Answer::Pending(_) => "StoreFuture::Pending",
        })
    }
}

impl<'a, T> StoreFuture<'a, T> {
    /// An answer already known.
    pub fn ready(value: T) -> Self {
        Self(Answer::Ready(Some(value)))
    }

    /// An answer still to come.
    pub fn boxed(future: impl Future<Output = T> + Send + 'a) -> Self {
        Self(Answer::Pending(Box::pin(future)))
    }

    /// The answer, when the store gave it at once; `None` for one still to
    /// come (dropped unpolled: nothing was sent).
    pub fn into_ready(self) -> Option<T> {
        match self.0 {
            Answer::Ready(value) => value,
            Answer::Pending(_) => None,
        }
    }
}

// The value is moved out, never pinned in place.
impl<T> Unpin for StoreFuture<'_, T> {}

impl<T> Future for StoreFuture<'_, T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match &mut self.get_mut().0 {
            Answer::Ready(value) => Poll::Ready(
                value
                    .take()
                    .expect("store future polled after it completed"),
            ),
            Answer::Pending(future) => future.as_mut().poll(cx),
        }
    }
}

/// The outcome of one attempt to take a lock or a permit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// Taken, with this fencing token. `keys` are what to release and renew:
    /// the keys asked for, or (a store that keeps a semaphore's permits as
    /// locks of their own) the one permit taken.
    Acquired {
        /// The acquisition's fencing token.
        fence: FencingToken,
        /// What to release and renew.
        keys: Arc<LockKeys>,
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

/// The keys of one rate-limited key of one limiter: a store keys the
/// key's state by [`id`](Self::id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitKeys<'k> {
    /// Borrowed where a check answered at once builds it in a buffer.
    pub(crate) main: std::borrow::Cow<'k, str>,
}

impl<'k> LimitKeys<'k> {
    pub(crate) fn new(main: impl Into<std::borrow::Cow<'k, str>>) -> Self {
        Self { main: main.into() }
    }

    /// The identity of one limited key of one limiter under the client's
    /// prefix: key the limiter's state by it. Two different limiters, or
    /// keys, never share one.
    pub fn id(&self) -> &str {
        &self.main
    }
}

/// One rate-limit algorithm with its constants.
///
/// A store runs the step of [`crate::rate_limit`] that matches, on its own
/// clock, over the key's state read under the key's lock (or in one
/// script).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LimitOp {
    /// GCRA: [`gcra::step`].
    Gcra(gcra::Params),
    /// A fixed window: [`fixed_window::step`](crate::rate_limit::fixed_window::step).
    Fixed {
        /// Requests (cost units) per window.
        limit: u64,
        /// The window, in µs.
        period_us: i64,
    },
    /// A sliding log: [`sliding_window::step`](crate::rate_limit::sliding_window::step).
    Sliding {
        /// Requests (cost units) per rolling period.
        limit: u64,
        /// The period, in µs.
        period_us: i64,
    },
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

/// Locks and semaphores: what every store offers.
pub trait LockStore: Send + Sync + fmt::Debug {
    /// The store's name, for messages and [`Client::store_name`](crate::Client::store_name).
    fn name(&self) -> &'static str;

    /// How its waiters wait.
    fn waiting(&self) -> Waiting;

    /// Whether every operation answers at once, in process, with a
    /// [`StoreFuture::ready`] (the in-memory store): what the `*_now`
    /// methods of the primitives rely on.
    fn answers_at_once(&self) -> bool {
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
    /// others hand the guard over at once and confirm the lease after.
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
    fn acquire<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
        lease: Duration,
        place: Option<Place<'a>>,
    ) -> StoreFuture<'a, Result<Attempt>>;

    /// Gives up `token`'s lock or permit, handing it to the first live
    /// waiter in the same step; `token` also leaves the queue. True when
    /// it was still held.
    fn release<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
    ) -> StoreFuture<'a, Result<bool>>;

    /// Takes every lock of `keys` (distinct locks, never semaphores),
    /// `keys[i]` with `tokens[i]` and `lease`, in one atomic step when each
    /// is free with no live waiter ahead; otherwise none (a free lock
    /// with waiters may be handed to its first, as [`LockStore::acquire`]
    /// does). A multi-lock's attempt: one request instead of one per key,
    /// and no moment when some keys are held and others not.
    ///
    /// `None` (the default) where the store cannot take these keys in one
    /// step (a Redis Cluster whose keys are in different slots, a quorum
    /// store); the caller then takes them one by one, in order.
    fn acquire_all<'a>(
        &'a self,
        keys: &'a [Arc<LockKeys>],
        tokens: &'a [Token],
        lease: Duration,
    ) -> StoreFuture<'a, Result<Option<AllOrNone>>> {
        let _ = (keys, tokens, lease);
        StoreFuture::ready(Ok(None))
    }

    /// What the store knows of the lock or semaphore now, changing nothing.
    fn inspect<'a>(&'a self, _keys: &'a Arc<LockKeys>) -> StoreFuture<'a, Result<Occupancy>> {
        StoreFuture::ready(Err(unsupported(self.name(), "inspection")))
    }

    /// Resets `token`'s lease to `lease` from now; true when it was still
    /// held.
    fn extend<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
        lease: Duration,
    ) -> StoreFuture<'a, Result<bool>>;

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
    fn release_later<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
        keep: Duration,
    ) -> StoreFuture<'a, Result<bool>> {
        self.extend(keys, token, keep)
    }

    /// One attempt to take a `mode` hold of a read-write lock, as
    /// [`acquire`](LockStore::acquire) does for a lock: many readers or one
    /// writer. The keys' [`id`](LockKeys::id) is the same for both modes.
    ///
    /// Readers and writers wait in one first-come-first-served queue: a
    /// hold is taken only when it is compatible with the holders (a read
    /// with readers, a write with nobody) and nobody queues ahead, so a
    /// reader that arrives while a writer waits queues behind it. A
    /// release, or a lease found ended, hands the lock to the head of the
    /// queue: to the whole run of readers there at once (a [`Handoff`] to
    /// each), or to the one writer there. Every hold, read or write, draws
    /// its fencing token from one sequence of the key, so every write's is
    /// greater than every earlier read's and write's, and every read's
    /// greater than every earlier write's.
    ///
    /// The default answers [`ErrorKind::Unsupported`] naming the store.
    fn rw_acquire<'a>(
        &'a self,
        _keys: &'a Arc<LockKeys>,
        _mode: RwMode,
        _token: &'a Token,
        _lease: Duration,
        _place: Option<Place<'a>>,
    ) -> StoreFuture<'a, Result<Attempt>> {
        StoreFuture::ready(Err(unsupported(self.name(), "read-write locks")))
    }

    /// Gives up `token`'s `mode` hold of a read-write lock, handing the
    /// lock to the head of the queue in the same step when it is free (see
    /// [`rw_acquire`](LockStore::rw_acquire)); `token` also leaves the
    /// queue. True when it was still held.
    ///
    /// The default answers [`ErrorKind::Unsupported`] naming the store.
    fn rw_release<'a>(
        &'a self,
        _keys: &'a Arc<LockKeys>,
        _mode: RwMode,
        _token: &'a Token,
    ) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::ready(Err(unsupported(self.name(), "read-write locks")))
    }

    /// Resets the lease of `token`'s `mode` hold of a read-write lock to
    /// `lease` from now; true when it was still held.
    ///
    /// The default answers [`ErrorKind::Unsupported`] naming the store.
    fn rw_extend<'a>(
        &'a self,
        _keys: &'a Arc<LockKeys>,
        _mode: RwMode,
        _token: &'a Token,
        _lease: Duration,
    ) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::ready(Err(unsupported(self.name(), "read-write locks")))
    }

    /// What the store knows of a read-write lock now, changing nothing:
    /// its readers or writer ([`Occupancy::read_write`]), the waiters of
    /// both kinds, the newest fencing token.
    ///
    /// The default answers [`ErrorKind::Unsupported`] naming the store.
    fn rw_inspect<'a>(&'a self, _keys: &'a Arc<LockKeys>) -> StoreFuture<'a, Result<Occupancy>> {
        StoreFuture::ready(Err(unsupported(self.name(), "read-write locks")))
    }
}

/// Counters, rate limiters and fenced values: what a store offers where it
/// can. Each method answers [`ErrorKind::Unsupported`], naming the store,
/// unless the store implements it.
pub trait DataStore: LockStore {
    /// Adds `delta`; the new value.
    fn counter_add<'a>(
        &'a self,
        _keys: &'a CounterKeys,
        _delta: i64,
        _ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<i64>> {
        StoreFuture::ready(Err(unsupported(self.name(), "counters")))
    }

    /// `Ok(new value)` when `n` was taken, `Err(current value)` when there
    /// was too little.
    fn counter_take<'a>(
        &'a self,
        _keys: &'a CounterKeys,
        _n: i64,
        _ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<Result<i64, i64>>> {
        StoreFuture::ready(Err(unsupported(self.name(), "counters")))
    }

    /// The value and its version (both 0 for a counter never written).
    fn counter_get<'a>(&'a self, _keys: &'a CounterKeys) -> StoreFuture<'a, Result<(i64, u64)>> {
        StoreFuture::ready(Err(unsupported(self.name(), "counters")))
    }

    /// `Ok(new version)` when set, `Err(current version)` when `expected`
    /// did not match.
    fn counter_set<'a>(
        &'a self,
        _keys: &'a CounterKeys,
        _value: i64,
        _expected: Option<u64>,
        _ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<Result<u64, u64>>> {
        StoreFuture::ready(Err(unsupported(self.name(), "counters")))
    }

    /// Adds `member` to the counter's marks; true when it was new.
    fn mark_once<'a>(
        &'a self,
        _keys: &'a CounterKeys,
        _member: &'a str,
        _ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::ready(Err(unsupported(self.name(), "marks")))
    }

    /// One rate-limit decision, on the store's clock; with `peek`, the
    /// decision a request of `cost` would get now, changing nothing.
    fn rate_limit<'a>(
        &'a self,
        _keys: &'a LimitKeys<'_>,
        _op: LimitOp,
        _cost: u64,
        _peek: bool,
    ) -> StoreFuture<'a, Result<Decision>> {
        StoreFuture::ready(Err(unsupported(self.name(), "rate limiting")))
    }

    /// Stores `value` if `token` is at least the newest accepted; true
    /// when it was stored.
    fn fenced_write<'a>(
        &'a self,
        _key: &'a str,
        _token: u64,
        _value: &'a [u8],
    ) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::ready(Err(unsupported(self.name(), "fenced values")))
    }

    /// The stored value and the token that wrote it.
    fn fenced_read<'a>(&'a self, _key: &'a str) -> StoreFuture<'a, Result<Stored>> {
        StoreFuture::ready(Err(unsupported(self.name(), "fenced values")))
    }

    /// Removes the stored value if `token` is at least the newest
    /// accepted, and keeps `token` as the newest (a tombstone: a later
    /// write with an older token is still refused, and
    /// [`fenced_read`](DataStore::fenced_read) answers `None`). On a
    /// resource never written it records `token`. True when removed or
    /// recorded, false when a newer token has written.
    fn fenced_remove<'a>(&'a self, _key: &'a str, _token: u64) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::ready(Err(unsupported(self.name(), "fenced values")))
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
    /// [`Attempt::Queued`]), came near the head of its queue: it refreshes
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

/// A client's store: the store's operations and its message connections,
/// what [`Builder::build`](crate::Builder::build) makes a client of.
#[derive(Debug, Clone)]
pub struct Store {
    pub(crate) locks: Arc<dyn LockStore>,
    data: Arc<dyn DataStore>,
    pub(crate) listeners: Vec<Arc<dyn Listener>>,
}

impl Store {
    /// A store of `store`'s operations, whose wake-ups arrive through
    /// `listeners` (none for a store that calls the client's [`Inbox`]
    /// itself, from [`LockStore::attach`]).
    pub fn new<S>(store: Arc<S>, listeners: Vec<Arc<dyn Listener>>) -> Self
    where
        S: DataStore + 'static,
    {
        Self {
            locks: store.clone(),
            data: store,
            listeners,
        }
    }

    /// The store's locks and semaphores.
    pub fn locks(&self) -> &dyn LockStore {
        &*self.locks
    }

    /// The store's counters, rate limiters and fenced values.
    pub fn data(&self) -> &dyn DataStore {
        &*self.data
    }

    /// The store's message connections.
    pub fn listeners(&self) -> &[Arc<dyn Listener>] {
        &self.listeners
    }

    /// Whether every operation answers at once, in process: see
    /// [`LockStore::answers_at_once`].
    pub(crate) fn answers_at_once(&self) -> bool {
        self.locks.answers_at_once()
    }

    /// One attempt on what `keys` name: a lock or a permit
    /// ([`LockStore::acquire`]), or a hold of a read-write lock
    /// ([`LockStore::rw_acquire`]).
    pub(crate) fn acquire<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
        lease: Duration,
        place: Option<Place<'a>>,
    ) -> StoreFuture<'a, Result<Attempt>> {
        match keys.rw {
            None => self.locks.acquire(keys, token, lease, place),
            Some(mode) => self.locks.rw_acquire(keys, mode, token, lease, place),
        }
    }

    /// Gives up `token`'s hold of what `keys` name.
    pub(crate) fn release<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
    ) -> StoreFuture<'a, Result<bool>> {
        match keys.rw {
            None => self.locks.release(keys, token),
            Some(mode) => self.locks.rw_release(keys, mode, token),
        }
    }

    /// Resets the lease of `token`'s hold of what `keys` name.
    pub(crate) fn extend<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
        lease: Duration,
    ) -> StoreFuture<'a, Result<bool>> {
        match keys.rw {
            None => self.locks.extend(keys, token, lease),
            Some(mode) => self.locks.rw_extend(keys, mode, token, lease),
        }
    }

    /// Gives up `token`'s hold of what `keys` name, keeping it taken for
    /// `keep` more ([`LockStore::release_later`]; a read-write lock's hold
    /// is kept by its lease).
    pub(crate) fn release_later<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
        keep: Duration,
    ) -> StoreFuture<'a, Result<bool>> {
        match keys.rw {
            None => self.locks.release_later(keys, token, keep),
            Some(mode) => self.locks.rw_extend(keys, mode, token, keep),
        }
    }

    /// What the store knows of what `keys` name.
    pub(crate) fn inspect<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
    ) -> StoreFuture<'a, Result<Occupancy>> {
        match keys.rw {
            None => self.locks.inspect(keys),
            Some(_) => self.locks.rw_inspect(keys),
        }
    }
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
