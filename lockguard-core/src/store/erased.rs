//! [`Store`]: a store's operations boxed once, behind one handle, whatever
//! the store.

use std::any::Any;
use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::memory::{LimitTable, MemoryStore};
use super::{
    AllOrNone, ChangeBell, CounterKeys, DataStore, Holding, Inbox, LimitKeys, LimitOp, LimitReply,
    Listener, LockKeys, LockSet, LockStore, Occupancy, Outcome, Place, StoreFuture, Stored, Token,
    Waiting, unsupported,
};
use crate::error::Result;

/// The store's operations with their futures boxed: the one place the
/// boundary is erased. Implemented for every [`DataStore`].
trait Erased: Send + Sync + fmt::Debug {
    fn name(&self) -> &'static str;
    fn waiting(&self) -> Waiting;
    fn answers_at_once(&self) -> bool;
    fn read_write(&self) -> bool;
    fn max_permits(&self) -> u32;
    fn max_lease(&self) -> Option<Duration>;
    fn confirms_handoffs(&self) -> bool;
    fn attach(&self, inbox: Weak<dyn Inbox>);
    fn acquire<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
        lease: Duration,
        place: Option<Place<'a>>,
    ) -> StoreFuture<'a, Result<Outcome>>;
    fn release<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
    ) -> StoreFuture<'a, Result<bool>>;
    fn acquire_all<'a>(
        &'a self,
        set: LockSet<'a>,
        lease: Duration,
    ) -> StoreFuture<'a, Result<Option<AllOrNone>>>;
    fn inspect<'a>(&'a self, keys: &'a Arc<LockKeys>) -> StoreFuture<'a, Result<Occupancy>>;
    fn survey<'a>(&'a self, prefix: &'a str) -> StoreFuture<'a, Result<Vec<Holding>>>;
    fn crash_wait(&self) -> StoreFuture<'_, Result<Option<Duration>>>;
    fn evict<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
    ) -> StoreFuture<'a, Result<bool>>;
    fn extend<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
        lease: Duration,
    ) -> StoreFuture<'a, Result<bool>>;
    fn release_later<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
        keep: Duration,
    ) -> StoreFuture<'a, Result<bool>>;
    fn counter_add<'a>(
        &'a self,
        keys: &'a CounterKeys,
        delta: i64,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<i64>>;
    fn counter_take<'a>(
        &'a self,
        keys: &'a CounterKeys,
        n: i64,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<Result<i64, i64>>>;
    fn counter_get<'a>(&'a self, keys: &'a CounterKeys) -> StoreFuture<'a, Result<(i64, u64)>>;
    fn counter_set<'a>(
        &'a self,
        keys: &'a CounterKeys,
        value: i64,
        expected: Option<u64>,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<Result<u64, u64>>>;
    fn mark_once<'a>(
        &'a self,
        keys: &'a CounterKeys,
        member: &'a str,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<bool>>;
    fn rate_limit<'a>(
        &'a self,
        keys: &'a LimitKeys<'a>,
        op: LimitOp,
        cost: u64,
        peek: bool,
    ) -> StoreFuture<'a, Result<LimitReply>>;
    /// [`rate_limit`](DataStore::rate_limit) polled once in place, with
    /// no box: the answer of a store that answers at once.
    fn rate_limit_now(
        &self,
        keys: &LimitKeys<'_>,
        op: LimitOp,
        cost: u64,
        peek: bool,
    ) -> Option<Result<LimitReply>>;
    fn fenced_write<'a>(
        &'a self,
        key: &'a str,
        token: u64,
        value: &'a [u8],
    ) -> StoreFuture<'a, Result<bool>>;
    fn fenced_read<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Result<Stored>>;
    fn fenced_remove<'a>(&'a self, key: &'a str, token: u64) -> StoreFuture<'a, Result<bool>>;
    fn follow<'a>(
        &'a self,
        lock: &'a Arc<LockKeys>,
        value: &'a str,
        bell: ChangeBell,
    ) -> StoreFuture<'a, Result<()>>;
}

impl<S: DataStore> Erased for S {
    fn name(&self) -> &'static str {
        LockStore::name(self)
    }
    fn waiting(&self) -> Waiting {
        LockStore::waiting(self)
    }
    fn answers_at_once(&self) -> bool {
        LockStore::answers_at_once(self)
    }
    fn read_write(&self) -> bool {
        LockStore::read_write(self)
    }
    fn max_permits(&self) -> u32 {
        LockStore::max_permits(self)
    }
    fn max_lease(&self) -> Option<Duration> {
        LockStore::max_lease(self)
    }
    fn confirms_handoffs(&self) -> bool {
        LockStore::confirms_handoffs(self)
    }
    fn attach(&self, inbox: Weak<dyn Inbox>) {
        LockStore::attach(self, inbox)
    }
    fn acquire<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
        lease: Duration,
        place: Option<Place<'a>>,
    ) -> StoreFuture<'a, Result<Outcome>> {
        StoreFuture::new(LockStore::acquire(self, keys, token, lease, place))
    }
    fn release<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
    ) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::new(LockStore::release(self, keys, token))
    }
    fn acquire_all<'a>(
        &'a self,
        set: LockSet<'a>,
        lease: Duration,
    ) -> StoreFuture<'a, Result<Option<AllOrNone>>> {
        StoreFuture::new(LockStore::acquire_all(self, set, lease))
    }
    fn inspect<'a>(&'a self, keys: &'a Arc<LockKeys>) -> StoreFuture<'a, Result<Occupancy>> {
        StoreFuture::new(LockStore::inspect(self, keys))
    }
    fn survey<'a>(&'a self, prefix: &'a str) -> StoreFuture<'a, Result<Vec<Holding>>> {
        StoreFuture::new(LockStore::survey(self, prefix))
    }
    fn crash_wait(&self) -> StoreFuture<'_, Result<Option<Duration>>> {
        StoreFuture::new(LockStore::crash_wait(self))
    }
    fn evict<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
    ) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::new(LockStore::evict(self, keys, token))
    }
    fn extend<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
        lease: Duration,
    ) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::new(LockStore::extend(self, keys, token, lease))
    }
    fn release_later<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
        keep: Duration,
    ) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::new(LockStore::release_later(self, keys, token, keep))
    }
    fn counter_add<'a>(
        &'a self,
        keys: &'a CounterKeys,
        delta: i64,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<i64>> {
        StoreFuture::new(DataStore::counter_add(self, keys, delta, ttl))
    }
    fn counter_take<'a>(
        &'a self,
        keys: &'a CounterKeys,
        n: i64,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<Result<i64, i64>>> {
        StoreFuture::new(DataStore::counter_take(self, keys, n, ttl))
    }
    fn counter_get<'a>(&'a self, keys: &'a CounterKeys) -> StoreFuture<'a, Result<(i64, u64)>> {
        StoreFuture::new(DataStore::counter_get(self, keys))
    }
    fn counter_set<'a>(
        &'a self,
        keys: &'a CounterKeys,
        value: i64,
        expected: Option<u64>,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<Result<u64, u64>>> {
        StoreFuture::new(DataStore::counter_set(self, keys, value, expected, ttl))
    }
    fn mark_once<'a>(
        &'a self,
        keys: &'a CounterKeys,
        member: &'a str,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::new(DataStore::mark_once(self, keys, member, ttl))
    }
    fn rate_limit<'a>(
        &'a self,
        keys: &'a LimitKeys<'a>,
        op: LimitOp,
        cost: u64,
        peek: bool,
    ) -> StoreFuture<'a, Result<LimitReply>> {
        StoreFuture::new(DataStore::rate_limit(self, keys, op, cost, peek))
    }
    fn rate_limit_now(
        &self,
        keys: &LimitKeys<'_>,
        op: LimitOp,
        cost: u64,
        peek: bool,
    ) -> Option<Result<LimitReply>> {
        poll_once(DataStore::rate_limit(self, keys, op, cost, peek))
    }
    fn fenced_write<'a>(
        &'a self,
        key: &'a str,
        token: u64,
        value: &'a [u8],
    ) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::new(DataStore::fenced_write(self, key, token, value))
    }
    fn fenced_read<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Result<Stored>> {
        StoreFuture::new(DataStore::fenced_read(self, key))
    }
    fn fenced_remove<'a>(&'a self, key: &'a str, token: u64) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::new(DataStore::fenced_remove(self, key, token))
    }
    fn follow<'a>(
        &'a self,
        lock: &'a Arc<LockKeys>,
        value: &'a str,
        bell: ChangeBell,
    ) -> StoreFuture<'a, Result<()>> {
        StoreFuture::new(DataStore::follow(self, lock, value, bell))
    }
}

/// `future`'s answer when one poll in place gives it; `None` (and the
/// operation dropped part way) when it needs more.
fn poll_once<F: Future>(future: F) -> Option<F::Output> {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    {
        std::task::Poll::Ready(value) => Some(value),
        std::task::Poll::Pending => None,
    }
}

/// A client's store: the store's operations and its message connections,
/// what [`Builder::build`](crate::Builder::build) makes a client of.
///
/// Its methods are the boundary's operations, boxed: a store that wraps
/// another (to count, to fail on purpose in a test) holds a `Store` and
/// forwards to it (`self.inner.acquire(keys, token, lease, place).await`).
#[derive(Debug, Clone)]
pub struct Store {
    store: Arc<dyn Erased>,
    /// The store itself when it is the in-memory one, whose rate limiters
    /// decide in their own tables with no store call between
    /// ([`Store::limit_table`]).
    memory: Option<Arc<MemoryStore>>,
    pub(crate) listeners: Vec<Arc<dyn Listener>>,
    /// Where the store is, for messages (see [`Store::at`]).
    address: Option<Arc<str>>,
}

impl Store {
    /// A store of `store`'s operations, whose wake-ups arrive through
    /// `listeners` (none for a store that calls the client's [`Inbox`]
    /// itself, from [`LockStore::attach`]).
    pub fn new<S: DataStore>(store: Arc<S>, listeners: Vec<Arc<dyn Listener>>) -> Self {
        let memory = (Arc::clone(&store) as Arc<dyn Any + Send + Sync>)
            .downcast::<MemoryStore>()
            .ok();
        Self {
            store,
            memory,
            listeners,
            address: None,
        }
    }

    /// Says where the store is (`host:port`, several joined with commas, a
    /// URL), for the messages and logs that name it: an outage's warning
    /// says which store stopped answering. A password in it is masked
    /// ([`url::redacted`](super::url::redacted)).
    #[must_use]
    pub fn at(mut self, address: &str) -> Self {
        self.address = Some(super::url::redacted(address).into());
        self
    }

    /// Where the store is, as [`Store::at`] said; `None` for a store that
    /// did not say (the in-memory store is in the process).
    pub fn address(&self) -> Option<&str> {
        self.address.as_deref()
    }

    /// The store's message connections.
    pub fn listeners(&self) -> &[Arc<dyn Listener>] {
        &self.listeners
    }

    /// The store's name ([`LockStore::name`]).
    pub fn name(&self) -> &'static str {
        self.store.name()
    }

    /// How its waiters wait ([`LockStore::waiting`]).
    pub fn waiting(&self) -> Waiting {
        self.store.waiting()
    }

    /// Whether every operation answers at once ([`LockStore::answers_at_once`]).
    pub fn answers_at_once(&self) -> bool {
        self.store.answers_at_once()
    }

    /// Whether the store offers read-write locks ([`LockStore::read_write`]).
    pub fn read_write(&self) -> bool {
        self.store.read_write()
    }

    /// The most permits a semaphore may have ([`LockStore::max_permits`]).
    pub fn max_permits(&self) -> u32 {
        self.store.max_permits()
    }

    /// The longest lease the store keeps ([`LockStore::max_lease`]).
    pub fn max_lease(&self) -> Option<Duration> {
        self.store.max_lease()
    }

    /// Whether handoffs count once confirmed ([`LockStore::confirms_handoffs`]).
    pub fn confirms_handoffs(&self) -> bool {
        self.store.confirms_handoffs()
    }

    /// Where the store announces its handoffs ([`LockStore::attach`]).
    pub fn attach(&self, inbox: Weak<dyn Inbox>) {
        self.store.attach(inbox)
    }

    /// The refusal of a read-write lock's keys on a store without them.
    fn refuses<T: Send + 'static>(
        &self,
        keys: &LockKeys,
    ) -> Option<StoreFuture<'static, Result<T>>> {
        (keys.rw_mode().is_some() && !self.store.read_write()).then(|| {
            let e = unsupported(self.store.name(), "read-write locks");
            StoreFuture::new(std::future::ready(Err(e)))
        })
    }

    /// One attempt ([`LockStore::acquire`]).
    pub fn acquire<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
        lease: Duration,
        place: Option<Place<'a>>,
    ) -> StoreFuture<'a, Result<Outcome>> {
        match self.refuses(keys) {
            Some(refused) => refused,
            None => self.store.acquire(keys, token, lease, place),
        }
    }

    /// Gives up a hold ([`LockStore::release`]).
    pub fn release<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
    ) -> StoreFuture<'a, Result<bool>> {
        match self.refuses(keys) {
            Some(refused) => refused,
            None => self.store.release(keys, token),
        }
    }

    /// Takes every lock of `set` in one step, or none ([`LockStore::acquire_all`]).
    pub fn acquire_all<'a>(
        &'a self,
        set: LockSet<'a>,
        lease: Duration,
    ) -> StoreFuture<'a, Result<Option<AllOrNone>>> {
        self.store.acquire_all(set, lease)
    }

    /// What the store knows of a lock now ([`LockStore::inspect`]).
    pub fn inspect<'a>(&'a self, keys: &'a Arc<LockKeys>) -> StoreFuture<'a, Result<Occupancy>> {
        match self.refuses(keys) {
            Some(refused) => refused,
            None => self.store.inspect(keys),
        }
    }

    /// Every lock held or awaited under `prefix` ([`LockStore::survey`]).
    pub fn survey<'a>(&'a self, prefix: &'a str) -> StoreFuture<'a, Result<Vec<Holding>>> {
        self.store.survey(prefix)
    }

    /// The wait after a crash that lost the leases' records
    /// ([`LockStore::crash_wait`]).
    pub fn crash_wait(&self) -> StoreFuture<'_, Result<Option<Duration>>> {
        self.store.crash_wait()
    }

    /// Ends another client's hold ([`LockStore::evict`]).
    pub fn evict<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
    ) -> StoreFuture<'a, Result<bool>> {
        match self.refuses(keys) {
            Some(refused) => refused,
            None => self.store.evict(keys, token),
        }
    }

    /// Renews a lease ([`LockStore::extend`]).
    pub fn extend<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
        lease: Duration,
    ) -> StoreFuture<'a, Result<bool>> {
        match self.refuses(keys) {
            Some(refused) => refused,
            None => self.store.extend(keys, token, lease),
        }
    }

    /// Gives up a hold, keeping it taken for `keep` ([`LockStore::release_later`]).
    pub fn release_later<'a>(
        &'a self,
        keys: &'a Arc<LockKeys>,
        token: &'a Token,
        keep: Duration,
    ) -> StoreFuture<'a, Result<bool>> {
        match self.refuses(keys) {
            Some(refused) => refused,
            None => self.store.release_later(keys, token, keep),
        }
    }

    /// Adds to a counter ([`DataStore::counter_add`]).
    pub fn counter_add<'a>(
        &'a self,
        keys: &'a CounterKeys,
        delta: i64,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<i64>> {
        self.store.counter_add(keys, delta, ttl)
    }

    /// Takes from a counter ([`DataStore::counter_take`]).
    pub fn counter_take<'a>(
        &'a self,
        keys: &'a CounterKeys,
        n: i64,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<Result<i64, i64>>> {
        self.store.counter_take(keys, n, ttl)
    }

    /// Reads a counter ([`DataStore::counter_get`]).
    pub fn counter_get<'a>(&'a self, keys: &'a CounterKeys) -> StoreFuture<'a, Result<(i64, u64)>> {
        self.store.counter_get(keys)
    }

    /// Sets a counter ([`DataStore::counter_set`]).
    pub fn counter_set<'a>(
        &'a self,
        keys: &'a CounterKeys,
        value: i64,
        expected: Option<u64>,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<Result<u64, u64>>> {
        self.store.counter_set(keys, value, expected, ttl)
    }

    /// Marks a member once ([`DataStore::mark_once`]).
    pub fn mark_once<'a>(
        &'a self,
        keys: &'a CounterKeys,
        member: &'a str,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<bool>> {
        self.store.mark_once(keys, member, ttl)
    }

    /// One rate-limit step ([`DataStore::rate_limit`]).
    pub fn rate_limit<'a>(
        &'a self,
        keys: &'a LimitKeys<'a>,
        op: LimitOp,
        cost: u64,
        peek: bool,
    ) -> StoreFuture<'a, Result<LimitReply>> {
        self.store.rate_limit(keys, op, cost, peek)
    }

    /// One rate-limit step answered in place, with no box, on a store that
    /// answers at once ([`LockStore::answers_at_once`]); `None` elsewhere
    /// (nothing was sent).
    pub(crate) fn rate_limit_now(
        &self,
        keys: &LimitKeys<'_>,
        op: LimitOp,
        cost: u64,
        peek: bool,
    ) -> Option<Result<LimitReply>> {
        if !self.store.answers_at_once() {
            return None;
        }
        self.store.rate_limit_now(keys, op, cost, peek)
    }

    /// The table in which the in-memory store decides the rate limiter
    /// whose store keys start with `limiter`, for the limiter to keep;
    /// `None` for any other store. A limiter that holds it decides
    /// in it directly: the same step [`DataStore::rate_limit`] runs, with
    /// no look-up of the table per check.
    pub(crate) fn limit_table(&self, limiter: &Arc<str>) -> Option<Arc<LimitTable>> {
        self.memory.as_ref().map(|m| m.limit_table(limiter))
    }

    /// Writes a fenced value ([`DataStore::fenced_write`]).
    pub fn fenced_write<'a>(
        &'a self,
        key: &'a str,
        token: u64,
        value: &'a [u8],
    ) -> StoreFuture<'a, Result<bool>> {
        self.store.fenced_write(key, token, value)
    }

    /// Reads a fenced value ([`DataStore::fenced_read`]).
    pub fn fenced_read<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Result<Stored>> {
        self.store.fenced_read(key)
    }

    /// Removes a fenced value ([`DataStore::fenced_remove`]).
    pub fn fenced_remove<'a>(&'a self, key: &'a str, token: u64) -> StoreFuture<'a, Result<bool>> {
        self.store.fenced_remove(key, token)
    }

    /// Follows a lock and a fenced value ([`DataStore::follow`]).
    pub fn follow<'a>(
        &'a self,
        lock: &'a Arc<LockKeys>,
        value: &'a str,
        bell: ChangeBell,
    ) -> StoreFuture<'a, Result<()>> {
        self.store.follow(lock, value, bell)
    }
}
