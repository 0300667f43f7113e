//! The stores behind a client: one small set of atomic operations, each one
//! round trip, implemented in memory and on Redis.

use std::time::Duration;

use crate::error::Result;
use crate::fence::FencingToken;
use crate::key::LockKeys;
use crate::token::Token;

pub(crate) mod memory;
pub(crate) mod redis;

/// The outcome of one attempt to take a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Taken, with this fencing token.
    Acquired(FencingToken),
    /// Someone else holds it; their lease has this long left, if known.
    Held(Option<Duration>),
}

/// The store a client talks to.
///
/// An enum rather than a trait object: every operation is a plain `async fn`
/// with no boxing on the hot path, and the set of stores is closed.
#[derive(Debug)]
pub(crate) enum Store {
    Memory(memory::MemoryStore),
    Redis(redis::RedisStore),
}

impl Store {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Self::Memory(_) => "memory",
            Self::Redis(_) => "redis",
        }
    }

    pub(crate) async fn try_lock(
        &self,
        keys: &LockKeys,
        token: &Token,
        lease: Duration,
    ) -> Result<Attempt> {
        match self {
            Self::Memory(m) => Ok(m.try_lock(keys, token, lease)),
            Self::Redis(r) => r.try_lock(keys, token, lease).await,
        }
    }

    pub(crate) async fn release(&self, keys: &LockKeys, token: &Token) -> Result<bool> {
        match self {
            Self::Memory(m) => Ok(m.release(keys, token)),
            Self::Redis(r) => r.release(keys, token).await,
        }
    }

    pub(crate) async fn extend(
        &self,
        keys: &LockKeys,
        token: &Token,
        lease: Duration,
    ) -> Result<bool> {
        match self {
            Self::Memory(m) => Ok(m.extend(keys, token, lease)),
            Self::Redis(r) => r.extend(keys, token, lease).await,
        }
    }

    pub(crate) async fn fenced_write(&self, key: &str, token: u64, value: &[u8]) -> Result<bool> {
        match self {
            Self::Memory(m) => Ok(m.fenced_write(key, token, value)),
            Self::Redis(r) => r.fenced_write(key, token, value).await,
        }
    }

    pub(crate) async fn fenced_read(&self, key: &str) -> Result<Option<(u64, Vec<u8>)>> {
        match self {
            Self::Memory(m) => Ok(m.fenced_read(key)),
            Self::Redis(r) => r.fenced_read(key).await,
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
