//! The in-memory store: the same semantics as Redis, inside one process.
//!
//! Locks and semaphore leases follow tokio's clock (so tests with paused
//! time drive them, like the waiting that goes with them); counters' expiry
//! and rate limiters follow the client's [`Clock`].

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::clock::{self, Clock, MonotonicClock};
use crate::error::{Error, Result};
use crate::fence::FencingToken;
use crate::key::LockKeys;
use crate::key::{CounterKeys, Resource};
use crate::rate_limit::Decision;
use crate::store::{
    DataStore, Handoff, Holding, Inbox, LimitKeys, LimitOp, LimitReply, LockStore, Occupancy,
    Outcome, Place, Store, Stored, Waiting,
};
use crate::token::{Token, TokenHashing};

mod expiring;
mod limits;
mod rw;
mod shards;
mod survey;

use expiring::Expiring;
pub(crate) use limits::LimitTable;
use limits::Limits;
use rw::RwHolders;

/// A semaphore's holders: each token's lease end and fencing token.
type Holders = HashMap<Token, (Instant, u64), TokenHashing>;

/// A queued waiter: its place is kept until `deadline` unless refreshed;
/// `attempt` set that deadline.
#[derive(Debug, Clone, Copy)]
struct Waiter {
    token: Token,
    deadline: Instant,
    attempt: u32,
    /// A reader of a read-write lock (which shares it with the readers
    /// queued next to it).
    reads: bool,
}

/// How long a lock or permit handed to a waiter is kept for it to claim:
/// until its place would have lapsed, and at least 50 ms (as on Redis).
fn reservation(deadline: Instant, now: Instant) -> Instant {
    deadline.max(now + Duration::from_millis(50))
}

/// What one lock or semaphore operation works on, under the store's mutex:
/// the holders, and the key's queue with the token sequence; the waiters it
/// hands a lock or permit to are announced once the mutex is released.
struct Step<'a> {
    locks: &'a mut Expiring<Instant, (Token, u64)>,
    permits: &'a mut Expiring<Instant, Holders>,
    rw: &'a mut Expiring<Instant, RwHolders>,
    queue: Queue<'a>,
}

/// A key's waiters, and what handing them the lock takes.
struct Queue<'a> {
    waiters: &'a mut VecDeque<Waiter>,
    fence: &'a mut u64,
    handed: Vec<Handoff>,
    now: Instant,
}

impl Queue<'_> {
    fn next_fence(&mut self) -> u64 {
        *self.fence += 1;
        *self.fence
    }

    /// The first waiter whose place is still kept, after dropping the
    /// lapsed ones ahead of it.
    fn head(&mut self) -> Option<Waiter> {
        while let Some(first) = self.waiters.front() {
            if first.deadline > self.now {
                return Some(*first);
            }
            self.waiters.pop_front();
        }
        None
    }

    /// Takes the first live waiter out of the queue to hand it the lock or
    /// a permit: its fencing token, and until when the grant is reserved for
    /// it to claim. `me` (a waiter asking for itself) is not taken.
    fn grant_first(&mut self, me: Option<&Token>) -> Option<(Token, u64, Instant)> {
        let first = self.head().filter(|w| Some(&w.token) != me)?;
        self.waiters.pop_front();
        let fence = self.next_fence();
        self.handed.push(Handoff {
            token: first.token,
            fence: FencingToken::new(fence),
            attempt: first.attempt,
        });
        Some((first.token, fence, reservation(first.deadline, self.now)))
    }

    fn leave(&mut self, token: &Token) {
        self.waiters.retain(|w| w.token != *token);
    }

    /// Keeps `token`'s place (a reader's, with `reads`) for `place`'s
    /// timeout: refreshed where it is, or taken at the back.
    fn keep_place(&mut self, token: &Token, place: Place<'_>, reads: bool) {
        let deadline = self.now + place.timeout;
        match self.waiters.iter_mut().find(|w| w.token == *token) {
            Some(w) => (w.deadline, w.attempt) = (deadline, place.attempt),
            None => self.waiters.push_back(Waiter {
                token: *token,
                deadline,
                attempt: place.attempt,
                reads,
            }),
        }
    }

    /// Hands the free permits to the first live waiters, stopping before
    /// `me`. Returns how many are left.
    fn hand_out_permits(
        &mut self,
        holders: &mut Holders,
        permits: u32,
        me: Option<&Token>,
    ) -> usize {
        let mut free = (permits as usize).saturating_sub(holders.len());
        while free > 0
            && let Some((token, fence, ends)) = self.grant_first(me)
        {
            holders.insert(token, (ends, fence));
            free -= 1;
        }
        free
    }
}

impl Step<'_> {
    fn lock(&mut self, key: &str, token: &Token, lease: Duration) -> Taken {
        let now = self.queue.now;
        // One lookup: a live holder, an expired (or released) entry reused
        // in place, or none.
        let slot = self.locks.slot_mut(key, now);
        if let Some(((holder, f), ends, true)) = slot {
            if holder == token {
                // Handed to us by a release: claim it with our own lease.
                *ends = Some(now + lease);
                return Ok(FencingToken::new(*f));
            }
            return Err(ends.map(|e| e - now));
        }
        // Waiters ahead of us: the free lock goes to the first.
        let (holder, ends, taken) = match self.queue.grant_first(Some(token)) {
            Some((first, fence, ends)) => ((first, fence), ends, Err(Some(ends - now))),
            None => {
                let fence = self.queue.next_fence();
                self.queue.leave(token);
                let ends = now + lease;
                ((*token, fence), ends, Ok(FencingToken::new(fence)))
            }
        };
        match slot {
            Some((value, deadline, _)) => (*value, *deadline) = (holder, Some(ends)),
            None => self.locks.insert_new(key, holder, Some(ends), now),
        }
        taken
    }

    fn release_lock(&mut self, key: &str, token: &Token) -> bool {
        let now = self.queue.now;
        let Some((holder, ends, true)) = self.locks.slot_mut(key, now) else {
            return false;
        };
        if holder.0 != *token {
            return false;
        }
        match self.queue.grant_first(None) {
            Some((first, fence, reserved)) => (*holder, *ends) = ((first, fence), Some(reserved)),
            // Expired in place, not removed: the key's next acquisition
            // reuses the entry (a sweep drops it if none comes).
            None => *ends = Some(now),
        }
        true
    }

    fn permit(&mut self, key: &str, token: &Token, lease: Duration, n: u32) -> Taken {
        let now = self.queue.now;
        let queue = &mut self.queue;
        let fresh = || (Holders::default(), None);
        self.permits.with_entry(key, now, fresh, |holders, ends| {
            let attempt = match holders.get_mut(token) {
                Some((e, f)) if *e > now => {
                    // Handed to us by a release: claim it with our own lease.
                    *e = now + lease;
                    Ok(FencingToken::new(*f))
                }
                _ => {
                    holders.retain(|_, (e, _)| *e > now);
                    if queue.hand_out_permits(holders, n, Some(token)) > 0 {
                        let fence = queue.next_fence();
                        holders.insert(*token, (now + lease, fence));
                        queue.leave(token);
                        Ok(FencingToken::new(fence))
                    } else {
                        let first = holders.values().map(|(e, _)| *e).min();
                        Err(first.map(|e| e - now))
                    }
                }
            };
            *ends = holders.values().map(|(e, _)| *e).max();
            attempt
        })
    }

    fn release_permit(&mut self, key: &str, token: &Token, n: u32) -> bool {
        let now = self.queue.now;
        let Some((holders, ends)) = self.permits.get_mut(key, now) else {
            return false;
        };
        let held = holders.remove(token).is_some_and(|(e, _)| e > now);
        holders.retain(|_, (e, _)| *e > now);
        self.queue.hand_out_permits(holders, n, None);
        *ends = holders.values().map(|(e, _)| *e).max();
        held
    }
}

/// The outcome of one attempt on the holders: taken with this fencing
/// token, or busy with the holder's lease left.
type Taken = std::result::Result<FencingToken, Option<Duration>>;

/// Where handoffs to waiters are announced: the client's inbox.
struct Notify(Weak<dyn Inbox>);

impl std::fmt::Debug for Notify {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Notify")
    }
}

#[derive(Debug, Default)]
struct State {
    /// Lock holders: token and fencing token.
    locks: Expiring<Instant, (Token, u64)>,
    /// Semaphore holders: token → lease end and fencing token.
    permits: Expiring<Instant, Holders>,
    /// Read-write lock holders: readers or a writer.
    rw: Expiring<Instant, RwHolders>,
    /// Each lock's and semaphore's waiters, first come first served.
    queues: HashMap<String, VecDeque<Waiter>>,
    /// One sequence for every key, which fencing tokens and counter
    /// versions are drawn from: strictly increasing per key, across a
    /// key's expiry, with no state per key.
    sequence: u64,
    counters: Expiring<i64, (i64, u64)>,
    marks: Expiring<i64, HashSet<String>>,
    /// The newest token accepted and the value, `None` once removed.
    fenced: HashMap<String, (u64, Option<Vec<u8>>)>,
}

/// The in-memory store.
#[derive(Debug)]
pub(crate) struct MemoryStore {
    state: Mutex<State>,
    /// The limiters' state, apart, a table per limiter: a rate-limit
    /// check, the most frequent operation of a server, takes only its
    /// key's shard of its limiter's table.
    limits: Limits,
    clock: Arc<dyn Clock>,
    notify: OnceLock<Notify>,
}

fn ms_to_us(ttl: Option<Duration>) -> Option<i64> {
    ttl.map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

fn overflow(key: &str) -> Error {
    Error::invalid(format!(
        "counter {key:?}: increment or decrement would overflow"
    ))
}

impl MemoryStore {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            limits: Limits::new(clock.clone()),
            clock,
            notify: OnceLock::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update below is complete before it can panic (none do), so a
        // poisoned mutex still guards consistent state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now_us(&self) -> i64 {
        clock::micros(&*self.clock)
    }

    // ---- locks and semaphores ------------------------------------------

    fn announce(&self, handed: Vec<Handoff>) {
        if handed.is_empty() {
            // Nothing to tell: the inbox is not even looked up (upgrading
            // its handle is an atomic every core would contend for).
            return;
        }
        if let Some(inbox) = self.notify.get().and_then(|n| n.0.upgrade()) {
            for handoff in handed {
                inbox.handoff(handoff);
            }
        }
    }

    /// Runs one lock or semaphore operation on the key's holders and
    /// queue, then announces the handoffs it made.
    fn step<R>(&self, keys: &LockKeys, op: impl FnOnce(&mut Step<'_>) -> R) -> R {
        let (result, handed) = {
            let mut st = self.state();
            let State {
                locks,
                permits,
                rw,
                queues,
                sequence,
                ..
            } = &mut *st;
            // Taken out and put back only when waiters remain, so a key
            // nobody waits for costs no allocation (and, while nobody
            // waits anywhere, no lookup).
            let mut queue = if queues.is_empty() {
                VecDeque::new()
            } else {
                queues.remove(&keys.lock).unwrap_or_default()
            };
            let mut step = Step {
                locks,
                permits,
                rw,
                queue: Queue {
                    waiters: &mut queue,
                    fence: sequence,
                    handed: Vec::new(),
                    now: Instant::now(),
                },
            };
            let result = op(&mut step);
            let handed = step.queue.handed;
            if !queue.is_empty() {
                queues.insert(keys.lock.clone(), queue);
            }
            (result, handed)
        };
        self.announce(handed);
        result
    }

    /// One attempt; see [`LockStore::acquire`].
    pub(crate) fn acquire(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> Outcome {
        let taken = self.step(keys, |step| {
            let taken = match keys.resource {
                Resource::Lock => step.lock(&keys.lock, token, lease),
                Resource::Semaphore { permits } => step.permit(&keys.lock, token, lease, permits),
            };
            if taken.is_err()
                && let Some(place) = place
            {
                step.queue.keep_place(token, place, false);
            }
            taken
        });
        match taken {
            Ok(fence) => Outcome::Acquired {
                fence,
                keys: keys.clone(),
            },
            Err(ttl) => Outcome::Busy(ttl),
        }
    }

    /// Gives up `token`'s lock or permit, handing it to the first live
    /// waiter; `token` also leaves the queue.
    pub(crate) fn release(&self, keys: &LockKeys, token: &Token) -> bool {
        self.step(keys, |step| {
            step.queue.leave(token);
            match keys.resource {
                Resource::Lock => step.release_lock(&keys.lock, token),
                Resource::Semaphore { permits } => step.release_permit(&keys.lock, token, permits),
            }
        })
    }

    pub(crate) fn extend(&self, keys: &LockKeys, token: &Token, lease: Duration) -> bool {
        let now = Instant::now();
        let mut st = self.state();
        match keys.resource {
            Resource::Lock => match st.locks.get_mut(&keys.lock, now) {
                Some(((t, _), ends)) if t == token => {
                    *ends = Some(now + lease);
                    true
                }
                _ => false,
            },
            Resource::Semaphore { .. } => match st.permits.get_mut(&keys.lock, now) {
                Some((holders, ends)) => match holders.get_mut(token) {
                    Some((e, _)) if *e > now => {
                        *e = now + lease;
                        *ends = (*ends).max(Some(now + lease));
                        true
                    }
                    _ => false,
                },
                None => false,
            },
        }
    }

    /// What the store holds for the lock or semaphore; see
    /// [`LockStore::inspect`].
    pub(crate) fn inspect(&self, keys: &LockKeys) -> Occupancy {
        let now = Instant::now();
        let st = self.state();
        let (holders, capacity, lease_left) = match keys.resource {
            Resource::Lock => match st.locks.get(&keys.lock, now) {
                Some((_, ends)) => (1, 1, ends.map(|e| e - now)),
                None => (0, 1, None),
            },
            Resource::Semaphore { permits } => {
                let live: Vec<Instant> = st
                    .permits
                    .get(&keys.lock, now)
                    .map(|(holders, _)| {
                        holders
                            .values()
                            .map(|(e, _)| *e)
                            .filter(|e| *e > now)
                            .collect()
                    })
                    .unwrap_or_default();
                let first = live.iter().min().map(|e| *e - now);
                (
                    u32::try_from(live.len()).unwrap_or(u32::MAX),
                    permits,
                    first,
                )
            }
        };
        Occupancy::new(
            holders,
            capacity,
            lease_left,
            st.queues.get(&keys.lock).map_or(0, |q| q.len() as u64),
            (st.sequence > 0).then(|| FencingToken::new(st.sequence)),
        )
    }

    // ---- fenced resources ----------------------------------------------

    pub(crate) fn fenced_write(&self, key: &str, token: u64, value: &[u8]) -> bool {
        let mut st = self.state();
        match st.fenced.get(key) {
            Some((newest, _)) if *newest > token => false,
            _ => {
                st.fenced
                    .insert(key.to_owned(), (token, Some(value.to_vec())));
                true
            }
        }
    }

    pub(crate) fn fenced_read(&self, key: &str) -> Option<(u64, Vec<u8>)> {
        let st = self.state();
        let (token, value) = st.fenced.get(key)?;
        value.clone().map(|v| (*token, v))
    }

    pub(crate) fn fenced_remove(&self, key: &str, token: u64) -> bool {
        let mut st = self.state();
        match st.fenced.get(key) {
            Some((newest, _)) if *newest > token => false,
            _ => {
                st.fenced.insert(key.to_owned(), (token, None));
                true
            }
        }
    }

    // ---- counters --------------------------------------------------------

    /// The counter at `key` (created at 0 when missing) and the version of
    /// the write about to be made to it.
    fn counter_entry<'a>(
        st: &'a mut State,
        key: &str,
        now: i64,
        ttl: Option<Duration>,
    ) -> (&'a mut (i64, u64), u64) {
        st.sequence += 1;
        let version = st.sequence;
        let (v, ends) = st.counters.entry(key, now, || ((0, 0), None));
        if ends.is_none()
            && let Some(ttl) = ms_to_us(ttl)
        {
            *ends = Some(now.saturating_add(ttl));
        }
        (v, version)
    }

    pub(crate) fn counter_add(&self, key: &str, delta: i64, ttl: Option<Duration>) -> Result<i64> {
        let now = self.now_us();
        let mut st = self.state();
        let current = st.counters.get(key, now).map_or(0, |((v, _), _)| *v);
        let new = current.checked_add(delta).ok_or_else(|| overflow(key))?;
        let (entry, version) = Self::counter_entry(&mut st, key, now, ttl);
        *entry = (new, version);
        Ok(new)
    }

    pub(crate) fn counter_take(
        &self,
        key: &str,
        n: i64,
        ttl: Option<Duration>,
    ) -> Result<Result<i64, i64>> {
        let now = self.now_us();
        let mut st = self.state();
        let current = st.counters.get(key, now).map_or(0, |((v, _), _)| *v);
        if current < n {
            return Ok(Err(current));
        }
        let new = current.checked_sub(n).ok_or_else(|| overflow(key))?;
        let (entry, version) = Self::counter_entry(&mut st, key, now, ttl);
        *entry = (new, version);
        Ok(Ok(new))
    }

    pub(crate) fn counter_get(&self, key: &str) -> (i64, u64) {
        let now = self.now_us();
        self.state()
            .counters
            .get(key, now)
            .map_or((0, 0), |(v, _)| *v)
    }

    pub(crate) fn counter_set(
        &self,
        key: &str,
        value: i64,
        expected: Option<u64>,
        ttl: Option<Duration>,
    ) -> Result<u64, u64> {
        let now = self.now_us();
        let mut st = self.state();
        let version = st.counters.get(key, now).map_or(0, |((_, ver), _)| *ver);
        if expected.is_some_and(|e| e != version) {
            return Err(version);
        }
        let (entry, version) = Self::counter_entry(&mut st, key, now, ttl);
        *entry = (value, version);
        Ok(version)
    }

    pub(crate) fn mark_once(&self, key: &str, member: &str, ttl: Option<Duration>) -> bool {
        let now = self.now_us();
        let mut st = self.state();
        let (set, ends) = st.marks.entry(key, now, || (HashSet::new(), None));
        if ends.is_none()
            && let Some(ttl) = ms_to_us(ttl)
        {
            *ends = Some(now.saturating_add(ttl));
        }
        set.insert(member.to_owned())
    }

    // ---- rate limits -----------------------------------------------------

    pub(crate) fn rate_limit(
        &self,
        keys: &LimitKeys<'_>,
        op: LimitOp,
        cost: u64,
        peek: bool,
    ) -> Decision {
        self.limits
            .decide(keys.limiter_shared(), keys.key(), op, cost, peek)
    }

    /// The table of the limiter whose store keys start with `limiter`
    /// ([`Store::limit_table`]).
    pub(crate) fn limit_table(&self, limiter: &Arc<str>) -> Arc<LimitTable> {
        self.limits.held(limiter)
    }

    #[cfg(test)]
    fn sizes(&self) -> (usize, usize) {
        (self.state().locks.len(), self.limits.len())
    }
}

impl Store {
    /// The in-memory store (the reference implementation), on the
    /// monotonic clock: what [`Client::memory`](crate::Client::memory)
    /// uses.
    pub fn memory() -> Self {
        let store = Arc::new(MemoryStore::new(Arc::new(MonotonicClock::new())));
        Self::new(store, Vec::new())
    }
}

impl LockStore for MemoryStore {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn waiting(&self) -> Waiting {
        Waiting::Queue
    }

    fn answers_at_once(&self) -> bool {
        true
    }

    fn read_write(&self) -> bool {
        true
    }

    fn attach(&self, inbox: Weak<dyn Inbox>) {
        let _ = self.notify.set(Notify(inbox));
    }

    async fn acquire(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> Result<Outcome> {
        Ok(match keys.rw_mode() {
            None => Self::acquire(self, keys, token, lease, place),
            Some(mode) => self.rw_acquire(keys, mode, token, lease, place),
        })
    }

    async fn release(&self, keys: &Arc<LockKeys>, token: &Token) -> Result<bool> {
        Ok(match keys.rw_mode() {
            None => Self::release(self, keys, token),
            Some(mode) => self.rw_release(keys, mode, token),
        })
    }

    async fn extend(&self, keys: &Arc<LockKeys>, token: &Token, lease: Duration) -> Result<bool> {
        Ok(match keys.rw_mode() {
            None => Self::extend(self, keys, token, lease),
            Some(mode) => self.rw_extend(keys, mode, token, lease),
        })
    }

    async fn inspect(&self, keys: &Arc<LockKeys>) -> Result<Occupancy> {
        Ok(match keys.rw_mode() {
            None => Self::inspect(self, keys),
            Some(_) => self.rw_inspect(keys),
        })
    }

    async fn survey(&self, prefix: &str) -> Result<Vec<Holding>> {
        Ok(Self::survey(self, prefix))
    }
}

impl DataStore for MemoryStore {
    async fn counter_add(
        &self,
        keys: &CounterKeys,
        delta: i64,
        ttl: Option<Duration>,
    ) -> Result<i64> {
        Self::counter_add(self, &keys.value, delta, ttl)
    }

    async fn counter_take(
        &self,
        keys: &CounterKeys,
        n: i64,
        ttl: Option<Duration>,
    ) -> Result<Result<i64, i64>> {
        Self::counter_take(self, &keys.value, n, ttl)
    }

    async fn counter_get(&self, keys: &CounterKeys) -> Result<(i64, u64)> {
        Ok(Self::counter_get(self, &keys.value))
    }

    async fn counter_set(
        &self,
        keys: &CounterKeys,
        value: i64,
        expected: Option<u64>,
        ttl: Option<Duration>,
    ) -> Result<Result<u64, u64>> {
        Ok(Self::counter_set(self, &keys.value, value, expected, ttl))
    }

    async fn mark_once(
        &self,
        keys: &CounterKeys,
        member: &str,
        ttl: Option<Duration>,
    ) -> Result<bool> {
        Ok(Self::mark_once(self, &keys.marks, member, ttl))
    }

    async fn rate_limit(
        &self,
        keys: &LimitKeys<'_>,
        op: LimitOp,
        cost: u64,
        peek: bool,
    ) -> Result<LimitReply> {
        Ok(LimitReply::decided(Self::rate_limit(
            self, keys, op, cost, peek,
        )))
    }

    async fn fenced_write(&self, key: &str, token: u64, value: &[u8]) -> Result<bool> {
        Ok(Self::fenced_write(self, key, token, value))
    }

    async fn fenced_read(&self, key: &str) -> Result<Stored> {
        Ok(Self::fenced_read(self, key))
    }

    async fn fenced_remove(&self, key: &str, token: u64) -> Result<bool> {
        Ok(Self::fenced_remove(self, key, token))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::rate_limit::{Quota, gcra};

    #[tokio::test(start_paused = true)]
    async fn expired_entries_are_swept_under_a_flood_of_keys() {
        let clock = ManualClock::new();
        let store = MemoryStore::new(Arc::new(clock.clone()));
        let lease = Duration::from_millis(10);
        let op = LimitOp::Gcra(gcra::Params::new(&Quota::per_second(100)));
        let limiter: Arc<str> = "t:rl:gcra:flood:".into();
        for i in 0..100_000 {
            let keys = Arc::new(LockKeys::new("t:", &format!("k{i}"), Resource::Lock));
            assert!(matches!(
                store.acquire(&keys, &Token::random(), lease, None),
                Outcome::Acquired { .. }
            ));
            let key = format!("k{i}");
            let lk = LimitKeys::new(&limiter, &key);
            assert!(store.rate_limit(&lk, op, 1, false).allowed);
            if i % 1000 == 999 {
                tokio::time::advance(Duration::from_millis(20)).await;
                clock.advance(Duration::from_millis(20));
            }
        }
        // At most ~1000 live entries at any time, plus what awaits a sweep.
        let (locks, limits) = store.sizes();
        assert!(locks <= 4 * expiring::SWEEP_FLOOR, "{locks} locks kept");
        assert!(
            limits <= 4 * expiring::SWEEP_FLOOR,
            "{limits} limiter keys kept"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn lease_expiry_frees_the_key_and_stale_tokens_cannot_act() {
        let store = MemoryStore::new(Arc::new(ManualClock::new()));
        let keys = Arc::new(LockKeys::new("t:", "k", Resource::Lock));
        let (a, b) = (Token::random(), Token::random());
        let lease = Duration::from_millis(100);
        let Outcome::Acquired { fence: fa, .. } = store.acquire(&keys, &a, lease, None) else {
            panic!("free key not acquired")
        };
        assert!(matches!(
            store.acquire(&keys, &b, lease, None),
            Outcome::Busy(Some(_))
        ));
        tokio::time::advance(Duration::from_millis(101)).await;
        assert!(!store.extend(&keys, &a, lease), "extend after expiry");
        let Outcome::Acquired { fence: fb, .. } = store.acquire(&keys, &b, lease, None) else {
            panic!("expired key not acquired")
        };
        assert!(fb > fa);
        assert!(!store.release(&keys, &a), "non-holder released");
        assert!(store.release(&keys, &b));
    }

    pub(super) fn place(timeout_ms: u64) -> Option<Place<'static>> {
        Some(Place {
            timeout: Duration::from_millis(timeout_ms),
            channel: "",
            attempt: 1,
            // Read by line stores (Redlock) only.
            waiter: Token::random(),
            since_ms: 0,
        })
    }

    /// An inbox recording the tokens handed a lock.
    #[derive(Default)]
    pub(super) struct Seen(pub(super) Mutex<Vec<Token>>);

    impl Inbox for Seen {
        fn is_wanted(&self, _: &str) -> bool {
            false
        }
        fn deliver(&self, _: &str, _: &[u8]) {}
        fn handoff(&self, handoff: Handoff) {
            self.0.lock().unwrap().push(handoff.token);
        }
        fn wake(&self, _: &Token) {}
        fn near(&self, _: &Token) {}
        fn wake_all(&self) {}
    }

    pub(super) fn notified(store: &MemoryStore) -> Arc<Seen> {
        let seen = Arc::new(Seen::default());
        let inbox: Arc<dyn Inbox> = seen.clone();
        store.attach(Arc::downgrade(&inbox));
        seen
    }

    /// A release hands the lock to the first waiter (notified alone), the
    /// key is never free in between, nobody barges past the queue, and a
    /// waiter that leaves after the handoff passes the lock on.
    #[tokio::test(start_paused = true)]
    async fn release_hands_over_in_order_and_leaving_passes_it_on() {
        let store = MemoryStore::new(Arc::new(ManualClock::new()));
        let seen = notified(&store);
        let keys = Arc::new(LockKeys::new("t:", "k", Resource::Lock));
        let lease = Duration::from_secs(10);
        let [holder, a, b, c] = [(); 4].map(|()| Token::random());
        let Outcome::Acquired { fence: f0, .. } = store.acquire(&keys, &holder, lease, None) else {
            panic!("free key not acquired")
        };
        for w in [&a, &b] {
            assert!(matches!(
                store.acquire(&keys, w, lease, place(1000)),
                Outcome::Busy(_)
            ));
        }
        assert!(store.release(&keys, &holder));
        assert_eq!(*seen.0.lock().unwrap(), vec![a], "only the first is told");
        // Handed to a: c cannot barge in, not even with try_acquire.
        assert!(matches!(
            store.acquire(&keys, &c, lease, None),
            Outcome::Busy(_)
        ));
        // a leaves (its wait ended) before claiming: b is next.
        assert!(store.release(&keys, &a), "a held the handed lock");
        assert_eq!(*seen.0.lock().unwrap(), vec![a, b]);
        let Outcome::Acquired { fence: fb, .. } = store.acquire(&keys, &b, lease, place(1000))
        else {
            panic!("b's claim failed")
        };
        assert!(fb > f0);
        assert!(store.release(&keys, &b));
        assert!(matches!(
            store.acquire(&keys, &c, lease, None),
            Outcome::Acquired { .. }
        ));
    }

    /// A waiter that stopped refreshing its place is skipped once its
    /// timeout passed; one that died just after a refresh holds the lock
    /// for at most the rest of its timeout.
    #[tokio::test(start_paused = true)]
    async fn silent_waiters_delay_the_queue_by_at_most_their_timeout() {
        let store = MemoryStore::new(Arc::new(ManualClock::new()));
        let seen = notified(&store);
        let keys = Arc::new(LockKeys::new("t:", "k", Resource::Lock));
        let lease = Duration::from_secs(10);
        let [holder, dead, live] = [(); 3].map(|()| Token::random());
        store.acquire(&keys, &holder, lease, None);
        store.acquire(&keys, &dead, lease, place(200));
        tokio::time::advance(Duration::from_millis(150)).await;
        store.acquire(&keys, &live, lease, place(200));
        // The dead waiter's place lapses; the live one refreshed.
        tokio::time::advance(Duration::from_millis(100)).await;
        store.acquire(&keys, &live, lease, place(200));
        assert!(store.release(&keys, &holder));
        assert_eq!(
            *seen.0.lock().unwrap(),
            vec![live],
            "the dead waiter was skipped"
        );
        assert!(matches!(
            store.acquire(&keys, &live, lease, place(200)),
            Outcome::Acquired { .. }
        ));

        // Handed to a waiter that then died: free again by its deadline.
        let next = Token::random();
        store.acquire(&keys, &next, lease, place(200));
        assert!(store.release(&keys, &live));
        tokio::time::advance(Duration::from_millis(201)).await;
        let other = Token::random();
        assert!(matches!(
            store.acquire(&keys, &other, lease, None),
            Outcome::Acquired { .. }
        ));
    }

    /// Free permits go to queued waiters first, in order, and a permit
    /// handed over is claimed with the waiter's own lease and fence.
    #[tokio::test(start_paused = true)]
    async fn permits_are_handed_out_in_order() {
        let store = MemoryStore::new(Arc::new(ManualClock::new()));
        let seen = notified(&store);
        let keys = Arc::new(LockKeys::new("t:", "s", Resource::Semaphore { permits: 2 }));
        let lease = Duration::from_secs(10);
        let holders = [(); 2].map(|()| Token::random());
        let waiting = [(); 3].map(|()| Token::random());
        for h in &holders {
            assert!(matches!(
                store.acquire(&keys, h, lease, None),
                Outcome::Acquired { .. }
            ));
        }
        for w in &waiting {
            assert!(matches!(
                store.acquire(&keys, w, lease, place(1000)),
                Outcome::Busy(_)
            ));
        }
        assert!(store.release(&keys, &holders[1]));
        assert!(store.release(&keys, &holders[0]));
        assert_eq!(*seen.0.lock().unwrap(), waiting[..2].to_vec());
        let latecomer = Token::random();
        assert!(matches!(
            store.acquire(&keys, &latecomer, lease, None),
            Outcome::Busy(_)
        ));
        for w in &waiting[..2] {
            assert!(matches!(
                store.acquire(&keys, w, lease, place(1000)),
                Outcome::Acquired { .. }
            ));
        }
    }
}
