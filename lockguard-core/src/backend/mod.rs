//! The stores behind a client: one small set of atomic operations, each one
//! round trip, implemented in memory and on Redis.

use std::time::Duration;

use crate::error::Result;
use crate::fence::FencingToken;
use crate::key::{CounterKeys, LockKeys};
use crate::rate_limit::{Decision, gcra};
use crate::token::Token;

pub(crate) mod memory;
pub(crate) mod redis;
pub(crate) mod redlock;

/// The outcome of one attempt to take a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Taken, with this fencing token.
    Acquired(FencingToken),
    /// Taken as one slot of a Redlock semaphore: release and renew these
    /// keys (a plain lock) rather than the semaphore's.
    AcquiredSlot(FencingToken, std::sync::Arc<LockKeys>),
    /// Someone else holds it; their lease has this long left, if known.
    Held(Option<Duration>),
    /// Nobody won: concurrent Redlock attempts split the nodes between
    /// them. Retry after a short random pause, not on the next notification
    /// (which every loser gets at once), so the next round does not split
    /// the same way.
    Contended,
}

/// How a waiter keeps its place in a key's wait queue: refreshed by each of
/// its attempts, dropped when it has been silent for `timeout`, notified on
/// `channel` when the lock (or a permit) is handed to it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Place<'a> {
    pub(crate) timeout: Duration,
    pub(crate) channel: &'a str,
    /// The number of this attempt of the waiter: a grant names the attempt
    /// whose deadline it is reserved until.
    pub(crate) attempt: u32,
}

/// A lock or permit handed to a queued waiter, as announced to it: reserved
/// for it until the deadline that its attempt number `attempt` set, which
/// is at least `timeout` after that attempt was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) token: Token,
    pub(crate) fence: FencingToken,
    pub(crate) attempt: u32,
}

impl Grant {
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
pub(crate) struct LimitKeys {
    pub(crate) main: String,
}

impl LimitKeys {
    pub(crate) fn new(main: String) -> Self {
        Self { main }
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

/// The store a client talks to.
///
/// An enum rather than a trait object: every operation is a plain `async fn`
/// with no boxing on the hot path, and the set of stores is closed.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per client, behind an `Arc`
pub(crate) enum Store {
    Memory(memory::MemoryStore),
    Redis(redis::RedisStore),
    Redlock(redlock::RedlockStore),
}

impl Store {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Memory(_) => "memory",
            Self::Redis(r) if r.is_cluster() => "redis-cluster",
            Self::Redis(_) => "redis",
            Self::Redlock(_) => "redlock",
        }
    }

    /// Whether waiters queue in this store (FIFO, handed the lock by the
    /// release). Redlock waiters do not: each node would order them its own
    /// way; they retry when a release is announced.
    pub(crate) fn queues(&self) -> bool {
        !matches!(self, Self::Redlock(_))
    }

    /// The most permits a semaphore may have on this store.
    pub(crate) fn max_permits(&self) -> u32 {
        match self {
            Self::Redlock(_) => redlock::MAX_REDLOCK_PERMITS,
            Self::Memory(_) | Self::Redis(_) => crate::semaphore::MAX_PERMITS,
        }
    }

    /// One attempt to take a lock or a semaphore permit: takes it when it is
    /// free and nobody queues ahead, claims it when a release handed it to
    /// `token`, and otherwise, with a `place`, joins the queue (or keeps and
    /// refreshes the place held). Without a place it never queues.
    pub(crate) async fn acquire(
        &self,
        keys: &std::sync::Arc<LockKeys>,
        token: &Token,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> Result<Attempt> {
        match self {
            Self::Memory(m) => Ok(m.acquire(keys, token, lease, place)),
            Self::Redis(r) => r.acquire(keys, token, lease, place).await,
            Self::Redlock(r) => r.try_acquire(keys, token, lease).await,
        }
    }

    /// Gives up `token`'s lock or permit, handing it to the first live
    /// waiter in the same step; `token` also leaves the queue. True when
    /// it was still held.
    pub(crate) async fn release(
        &self,
        keys: &std::sync::Arc<LockKeys>,
        token: &Token,
    ) -> Result<bool> {
        match self {
            Self::Memory(m) => Ok(m.release(keys, token)),
            Self::Redis(r) => r.release(keys, token, false).await,
            Self::Redlock(r) => r.release(keys, token).await,
        }
    }

    pub(crate) async fn extend(
        &self,
        keys: &std::sync::Arc<LockKeys>,
        token: &Token,
        lease: Duration,
    ) -> Result<bool> {
        match self {
            Self::Memory(m) => Ok(m.extend(keys, token, lease)),
            Self::Redis(r) => r.extend(keys, token, lease).await,
            Self::Redlock(r) => r.extend(keys, token, lease).await,
        }
    }

    pub(crate) async fn fenced_write(&self, key: &str, token: u64, value: &[u8]) -> Result<bool> {
        match self {
            Self::Memory(m) => Ok(m.fenced_write(key, token, value)),
            Self::Redis(r) => r.fenced_write(key, token, value).await,
            Self::Redlock(_) => Err(redlock::unsupported("fenced write")),
        }
    }

    pub(crate) async fn fenced_read(&self, key: &str) -> Result<Option<(u64, Vec<u8>)>> {
        match self {
            Self::Memory(m) => Ok(m.fenced_read(key)),
            Self::Redis(r) => r.fenced_read(key).await,
            Self::Redlock(_) => Err(redlock::unsupported("fenced read")),
        }
    }
}

impl Store {
    pub(crate) async fn counter_add(
        &self,
        keys: &CounterKeys,
        delta: i64,
        ttl: Option<Duration>,
    ) -> Result<i64> {
        match self {
            Self::Memory(m) => m.counter_add(&keys.value, delta, ttl),
            Self::Redis(r) => r.counter_add(keys, delta, ttl).await,
            Self::Redlock(_) => Err(redlock::unsupported("counter add")),
        }
    }

    /// `Ok(new value)` when taken, `Err(current value)` when too little.
    pub(crate) async fn counter_take(
        &self,
        keys: &CounterKeys,
        n: i64,
        ttl: Option<Duration>,
    ) -> Result<Result<i64, i64>> {
        match self {
            Self::Memory(m) => m.counter_take(&keys.value, n, ttl),
            Self::Redis(r) => r.counter_take(keys, n, ttl).await,
            Self::Redlock(_) => Err(redlock::unsupported("counter take")),
        }
    }

    /// The value and its version (both 0 for a counter never written).
    pub(crate) async fn counter_get(&self, key: &str) -> Result<(i64, u64)> {
        match self {
            Self::Memory(m) => Ok(m.counter_get(key)),
            Self::Redis(r) => r.counter_get(key).await,
            Self::Redlock(_) => Err(redlock::unsupported("counter get")),
        }
    }

    /// `Ok(new version)` when set, `Err(current version)` when `expected`
    /// did not match.
    pub(crate) async fn counter_set(
        &self,
        keys: &CounterKeys,
        value: i64,
        expected: Option<u64>,
        ttl: Option<Duration>,
    ) -> Result<Result<u64, u64>> {
        match self {
            Self::Memory(m) => Ok(m.counter_set(&keys.value, value, expected, ttl)),
            Self::Redis(r) => r.counter_set(keys, value, expected, ttl).await,
            Self::Redlock(_) => Err(redlock::unsupported("counter set")),
        }
    }

    pub(crate) async fn mark_once(
        &self,
        key: &str,
        member: &str,
        ttl: Option<Duration>,
    ) -> Result<bool> {
        match self {
            Self::Memory(m) => Ok(m.mark_once(key, member, ttl)),
            Self::Redis(r) => r.mark_once(key, member, ttl).await,
            Self::Redlock(_) => Err(redlock::unsupported("mark once")),
        }
    }

    /// One rate-limit decision. `now` (µs) replaces the store's clock, for
    /// tests only.
    pub(crate) async fn rate_limit(
        &self,
        keys: &LimitKeys,
        op: LimitOp,
        cost: u64,
        now: Option<i64>,
    ) -> Result<Decision> {
        match self {
            Self::Memory(m) => Ok(m.rate_limit(keys, op, cost, now)),
            Self::Redis(r) => r.rate_limit(keys, op, cost, now).await,
            Self::Redlock(_) => Err(redlock::unsupported("rate limit")),
        }
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
    fn grant_announcements_parse_strictly() {
        let token = Token::random();
        let text = format!("{} 42 7", token.as_str());
        assert_eq!(
            Grant::parse(text.as_bytes()),
            Some(Grant {
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
            assert_eq!(Grant::parse(bad.as_bytes()), None, "{bad:?}");
        }
    }
}
