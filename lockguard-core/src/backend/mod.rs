//! The boundary between the primitives and the stores.
//!
//! A store implements [`LockBackend`] (locks and semaphores: acquire,
//! release, extend; every store has them) and, where it can,
//! [`DataBackend`] (counters, rate limiters, fenced values). Every
//! operation is atomic and one round trip. A store that wakes waiters
//! through messages (Redis pub/sub) also gives the client [`Listener`]s,
//! which deliver to the client's [`Inbox`].
//!
//! Adding a store means implementing these traits in a module of its own,
//! a constructor on [`Builder`](crate::Builder) that builds a [`Store`],
//! and passing the conformance suite (`lockguard-core/tests/conformance`),
//! which every store runs: see the crate docs.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::fence::FencingToken;
use crate::key::{CounterKeys, LockKeys};
use crate::rate_limit::{Decision, gcra};
use crate::token::Token;

pub(crate) mod memory;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
pub(crate) mod redis;
pub(crate) mod redlock;
#[cfg(feature = "zookeeper")]
pub(crate) mod zookeeper;

/// A fenced value as stored: the token that wrote it and its bytes.
pub(crate) type Stored = Option<(u64, Vec<u8>)>;

/// The future of one store operation: the answer itself for a store that
/// answers at once (the in-memory store: no allocation), or a boxed future
/// for one that answers over the network.
pub(crate) enum StoreFuture<'a, T> {
    Ready(Option<T>),
    Pending(Pin<Box<dyn Future<Output = T> + Send + 'a>>),
}

impl<'a, T> StoreFuture<'a, T> {
    /// An answer already known.
    pub(crate) fn ready(value: T) -> Self {
        Self::Ready(Some(value))
    }

    /// An answer still to come.
    pub(crate) fn boxed(future: impl Future<Output = T> + Send + 'a) -> Self {
        Self::Pending(Box::pin(future))
    }

    /// The answer, when the store gave it at once; `None` for one still to
    /// come (dropped unpolled: nothing was sent).
    pub(crate) fn into_ready(self) -> Option<T> {
        match self {
            Self::Ready(value) => value,
            Self::Pending(_) => None,
        }
    }
}

// The value is moved out, never pinned in place.
impl<T> Unpin for StoreFuture<'_, T> {}

impl<T> Future for StoreFuture<'_, T> {
    type Output = T;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match self.get_mut() {
            Self::Ready(value) => Poll::Ready(
                value
                    .take()
                    .expect("store future polled after it completed"),
            ),
            Self::Pending(future) => future.as_mut().poll(cx),
        }
    }
}

/// The outcome of one attempt to take a lock or a permit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Taken, with this fencing token. `keys` are what to release and renew:
    /// the keys asked for, or (a store that keeps a semaphore's permits as
    /// locks of their own) the one permit taken.
    Acquired {
        fence: FencingToken,
        keys: Arc<LockKeys>,
    },
    /// Someone else holds it; their lease has this long left, if known.
    Busy(Option<Duration>),
    /// Nobody won: concurrent attempts split the store between them (the
    /// nodes of a quorum store). Retry after a short random pause, not on
    /// the next notification (which every loser gets at once), so the next
    /// round does not split the same way.
    Contended,
}

/// How waiters of a store wait for a lock or permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waiting {
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
pub(crate) struct Place<'a> {
    pub(crate) timeout: Duration,
    pub(crate) channel: &'a str,
    /// The number of this attempt of the waiter: a handoff names the attempt
    /// whose deadline it is reserved until.
    pub(crate) attempt: u32,
    /// The waiter, the same for all its attempts (on a queue store, the
    /// token its attempts take the lock with).
    pub(crate) waiter: Token,
    /// When the waiter began to wait, in ms since the Unix epoch on its
    /// client's clock: a store whose nodes keep no common queue (Redlock)
    /// lines waiters up by it, so that every node orders them alike.
    pub(crate) since_ms: u64,
}

/// A lock or permit handed to a queued waiter, as announced to it: reserved
/// for it until the deadline that its attempt number `attempt` set, which
/// is at least `timeout` after that attempt was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Handoff {
    pub(crate) token: Token,
    pub(crate) fence: FencingToken,
    pub(crate) attempt: u32,
}

impl Handoff {
    /// Parses the announcement `token fence attempt`.
    pub(crate) fn parse(payload: &[u8]) -> Option<Self> {
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

/// The key of one rate-limited key's state; the sliding log also keeps its
/// running sum at [`LimitKeys::sum`] (sharing the hash tag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LimitKeys<'k> {
    /// Borrowed where a check answered at once builds it in a buffer.
    pub(crate) main: std::borrow::Cow<'k, str>,
}

impl<'k> LimitKeys<'k> {
    pub(crate) fn new(main: impl Into<std::borrow::Cow<'k, str>>) -> Self {
        Self { main: main.into() }
    }

    pub(crate) fn sum(&self) -> String {
        format!("{}:sum", self.main)
    }
}

/// One rate-limit algorithm with its constants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LimitOp {
    Gcra(gcra::Params),
    Fixed { limit: u64, period_us: i64 },
    Sliding { limit: u64, period_us: i64 },
}

/// A lock or semaphore as the store sees it at one moment: made by
/// [`Lock::inspect`](crate::Lock::inspect) and
/// [`Semaphore::inspect`](crate::Semaphore::inspect), one round trip,
/// changing nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Occupancy {
    /// How many hold it: 0 or 1 for a lock, up to the permits for a
    /// semaphore.
    pub holders: u32,
    /// How many may hold it at once: 1 for a lock, the permits for a
    /// semaphore.
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
}

impl Occupancy {
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
pub(crate) trait LockBackend: Send + Sync + fmt::Debug {
    /// The store's name, for messages and [`Client::backend_name`](crate::Client::backend_name).
    fn name(&self) -> &'static str;

    /// How its waiters wait.
    fn waiting(&self) -> Waiting;

    /// Whether every operation answers at once, in process, with a
    /// [`StoreFuture::Ready`] (the in-memory store): what the `*_now`
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

    /// What the store knows of the lock or semaphore now, changing nothing.
    fn inspect<'a>(&'a self, _keys: &'a Arc<LockKeys>) -> StoreFuture<'a, Result<Occupancy>> {
        StoreFuture::ready(Err(Error::new(
            ErrorKind::Unsupported,
            format!("inspection is not offered on a {} client", self.name()),
        )))
    }

    /// Resets `token`'s lease to `lease` from now; true when it was still
    /// held.
    fn extend<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
        lease: Duration,
    ) -> StoreFuture<'a, Result<bool>>;
}

/// Counters, rate limiters and fenced values: what a store offers where it
/// can.
pub(crate) trait DataBackend: Send + Sync + fmt::Debug {
    /// Adds `delta`; the new value.
    fn counter_add<'a>(
        &'a self,
        keys: &'a CounterKeys,
        delta: i64,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<i64>>;

    /// `Ok(new value)` when `n` was taken, `Err(current value)` when there
    /// was too little.
    fn counter_take<'a>(
        &'a self,
        keys: &'a CounterKeys,
        n: i64,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<Result<i64, i64>>>;

    /// The value and its version (both 0 for a counter never written).
    fn counter_get<'a>(&'a self, keys: &'a CounterKeys) -> StoreFuture<'a, Result<(i64, u64)>>;

    /// `Ok(new version)` when set, `Err(current version)` when `expected`
    /// did not match.
    fn counter_set<'a>(
        &'a self,
        keys: &'a CounterKeys,
        value: i64,
        expected: Option<u64>,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<Result<u64, u64>>>;

    /// Adds `member` to the counter's marks; true when it was new.
    fn mark_once<'a>(
        &'a self,
        keys: &'a CounterKeys,
        member: &'a str,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<bool>>;

    /// One rate-limit decision, on the store's clock; with `peek`, the
    /// decision a request of `cost` would get now, changing nothing.
    fn rate_limit<'a>(
        &'a self,
        keys: &'a LimitKeys<'_>,
        op: LimitOp,
        cost: u64,
        peek: bool,
    ) -> StoreFuture<'a, Result<Decision>>;

    /// Stores `value` if `token` is at least the newest accepted; true
    /// when it was stored.
    fn fenced_write<'a>(
        &'a self,
        key: &'a str,
        token: u64,
        value: &'a [u8],
    ) -> StoreFuture<'a, Result<bool>>;

    /// The stored value and the token that wrote it.
    fn fenced_read<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Result<Stored>>;
}

/// Where a store's messages for one client go: the client's waiters.
pub(crate) trait Inbox: Send + Sync {
    /// Whether anyone of this client listens on `channel`.
    fn is_wanted(&self, channel: &str) -> bool;

    /// A message published on `channel`.
    fn deliver(&self, channel: &str, payload: &[u8]);

    /// A handoff the store made to one of this client's waiters.
    fn handoff(&self, handoff: Handoff);

    /// Something changed ahead of `token`'s waiter in its queue (a store
    /// that watches rather than hands over: ZooKeeper): it asks again.
    #[cfg_attr(not(feature = "zookeeper"), allow(dead_code))]
    fn wake(&self, token: &Token);

    /// Messages may have been missed (a connection was lost): every waiter
    /// checks.
    fn wake_all(&self);
}

/// One message connection of a store (a Redis pub/sub connection): it
/// subscribes the channels the client's [`Inbox`] wants.
pub(crate) trait Listener: Send + Sync + fmt::Debug {
    /// Brings the subscription of `channel` in line with whether `inbox`
    /// wants it now.
    fn sync<'a>(&'a self, channel: &'a str, inbox: Arc<dyn Inbox>) -> StoreFuture<'a, Result<()>>;
}

/// A client's store: its lock backend, its data backend if it has one, and
/// its message connections.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    pub(crate) locks: Arc<dyn LockBackend>,
    data: Option<Arc<dyn DataBackend>>,
    pub(crate) listeners: Vec<Arc<dyn Listener>>,
}

impl Store {
    /// A store of locks and data in one.
    pub(crate) fn new<B>(backend: Arc<B>, listeners: Vec<Arc<dyn Listener>>) -> Self
    where
        B: LockBackend + DataBackend + 'static,
    {
        Self {
            locks: backend.clone(),
            data: Some(backend),
            listeners,
        }
    }

    /// A store of locks only.
    pub(crate) fn locks_only(
        locks: Arc<dyn LockBackend>,
        listeners: Vec<Arc<dyn Listener>>,
    ) -> Self {
        Self {
            locks,
            data: None,
            listeners,
        }
    }

    /// Whether every operation answers at once, in process: see
    /// [`LockBackend::answers_at_once`].
    pub(crate) fn answers_at_once(&self) -> bool {
        self.locks.answers_at_once()
    }

    /// The data backend, or [`ErrorKind::Unsupported`] naming `what` on a
    /// store that has none.
    pub(crate) fn data(&self, what: &str) -> Result<&dyn DataBackend> {
        self.data.as_deref().ok_or_else(|| {
            Error::new(
                ErrorKind::Unsupported,
                format!(
                    "{what} is not offered on a {} client; it offers locks and semaphores only",
                    self.locks.name()
                ),
            )
        })
    }
}

/// Milliseconds for a `PX`-style argument, rounded up so a sub-millisecond
/// remainder never shortens a lease.
pub(crate) fn millis_ceil(d: Duration) -> u64 {
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
