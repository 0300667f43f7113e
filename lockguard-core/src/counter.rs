//! Atomic counters: one round trip per operation, never a lost update.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::Engine;
use crate::error::{Error, ErrorKind, Invalid, Result};
use crate::key::CounterKeys;
use crate::rate_limit::MAX_PERIOD;
use crate::store::Store;

/// How many times [`Counter::update`] retries after losing a race.
pub const MAX_UPDATE_ATTEMPTS: u32 = 64;

/// A counter's value with the version that wrote it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Versioned {
    /// The value (0 for a counter never written).
    pub value: i64,
    /// The version of the write that left this value (0 for a counter
    /// never written). Every write gives the counter a version greater
    /// than any it had before, also across its expiry and a step back of
    /// the store's clock, so a version read once never matches a later
    /// write (versions grow, but not by one).
    pub version: u64,
}

/// An atomic 64-bit counter in the store.
///
/// Made by [`Client::counter`](crate::Client::counter). Every operation is one round trip (one
/// Lua script on Redis) and atomic. Each write bumps a version, which
/// [`Counter::compare_and_set`] and [`Counter::update`] use for optimistic
/// concurrency without lost updates.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockguard_core::Error> {
/// let lg = lockguard_core::Client::memory();
/// let stock = lg.counter("stock:sku-1");
/// stock.set(2).await?;
/// assert_eq!(stock.decr_if_at_least(1).await?, Some(1));
/// assert_eq!(stock.decr_if_at_least(2).await?, None); // never below zero
///
/// let buyers = lg.counter("sale:buyers");
/// assert!(buyers.mark_once("user-7").await?);
/// assert!(!buyers.mark_once("user-7").await?); // once per user
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Counter {
    engine: Arc<Engine>,
    name: Arc<str>,
    keys: Result<CounterKeys, Invalid>,
    ttl: Option<Duration>,
}

impl Counter {
    pub(crate) fn new(engine: Arc<Engine>, name: &str) -> Self {
        let keys = crate::key::validate_key("counter", name)
            .map(|()| CounterKeys::new(&engine.prefix, name))
            .map_err(Invalid::from);
        Self {
            engine,
            name: name.into(),
            keys,
            ttl: None,
        }
    }

    /// Makes the counter expire `ttl` after a write finds it without an
    /// expiry (its first write, or the first after it expired). Later
    /// writes keep that expiry: a counter per day that resets itself.
    pub fn expire_after(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// The counter's key as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The store's counters, or `Unsupported` on a store without them.
    fn store(&self) -> Result<&Store> {
        Ok(&self.engine.store)
    }

    fn keys(&self) -> Result<(&CounterKeys, Option<Duration>)> {
        let keys = self.keys.as_ref().map_err(Invalid::error)?;
        if let Some(ttl) = self.ttl
            && (ttl < Duration::from_millis(1) || ttl > MAX_PERIOD)
        {
            return Err(Error::invalid(format!(
                "counter expiry must be between 1ms and {MAX_PERIOD:?}, got {ttl:?}"
            )));
        }
        Ok((keys, self.ttl))
    }

    /// Adds `n` (which may be negative) and returns the new value.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] when the result would overflow an `i64`;
    /// the store's errors.
    pub async fn incr_by(&self, n: i64) -> Result<i64> {
        let (keys, ttl) = self.keys()?;
        self.store()?.counter_add(keys, n, ttl).await
    }

    /// Subtracts `n` and returns the new value, which may go below zero;
    /// see [`Counter::decr_if_at_least`] for stock.
    ///
    /// # Errors
    ///
    /// As [`Counter::incr_by`].
    pub async fn decr_by(&self, n: i64) -> Result<i64> {
        let neg = n.checked_neg().ok_or_else(|| {
            Error::invalid(format!("counter {:?}: cannot subtract {n}", self.name))
        })?;
        self.incr_by(neg).await
    }

    /// The current value (0 for a counter never written).
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn get(&self) -> Result<i64> {
        Ok(self.get_versioned().await?.value)
    }

    /// The current value and its version.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn get_versioned(&self) -> Result<Versioned> {
        let (keys, _) = self.keys()?;
        let (value, version) = self.store()?.counter_get(keys).await?;
        Ok(Versioned { value, version })
    }

    /// Sets the value, whatever it was.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn set(&self, value: i64) -> Result<()> {
        let (keys, ttl) = self.keys()?;
        self.store()?
            .counter_set(keys, value, None, ttl)
            .await?
            .map(drop)
            .map_err(|_| Error::new(ErrorKind::Protocol, "unconditional set was refused"))
    }

    /// Subtracts `n` only if the value is at least `n`, so the counter never
    /// goes below zero: `Some(new value)` when taken, `None` when fewer than
    /// `n` are left. The atomic "take from stock".
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for an `n` below 1; the store's errors.
    pub async fn decr_if_at_least(&self, n: i64) -> Result<Option<i64>> {
        if n < 1 {
            return Err(Error::invalid(format!(
                "counter {:?}: the amount to take must be at least 1, got {n}",
                self.name
            )));
        }
        let (keys, ttl) = self.keys()?;
        Ok(self.store()?.counter_take(keys, n, ttl).await?.ok())
    }

    /// Sets the value to `new` only if the counter's version is still
    /// `expected_version` (from [`Counter::get_versioned`]); returns whether
    /// it was set.
    ///
    /// # Errors
    ///
    /// The store's errors.
    pub async fn compare_and_set(&self, expected_version: u64, new: i64) -> Result<bool> {
        let (keys, ttl) = self.keys()?;
        Ok(self
            .store()?
            .counter_set(keys, new, Some(expected_version), ttl)
            .await?
            .is_ok())
    }

    /// Applies `f` to the value optimistically: read with its version,
    /// compute, compare-and-set, and retry from a fresh read when another
    /// writer got there first. Returns the value written.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Busy`] after [`MAX_UPDATE_ATTEMPTS`] lost races; the
    /// store's errors.
    pub async fn update(&self, mut f: impl FnMut(i64) -> i64) -> Result<i64> {
        for _ in 0..MAX_UPDATE_ATTEMPTS {
            let current = self.get_versioned().await?;
            let new = f(current.value);
            if self.compare_and_set(current.version, new).await? {
                return Ok(new);
            }
            tokio::task::yield_now().await;
        }
        Err(Error::new(
            ErrorKind::Busy,
            format!(
                "counter {:?}: update lost {MAX_UPDATE_ATTEMPTS} races in a row",
                self.name
            ),
        ))
    }

    /// Records `member` and says whether this was its first time: once per
    /// user, per order, per anything. The marks share the counter's expiry.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for an empty member; the store's errors.
    pub async fn mark_once(&self, member: &str) -> Result<bool> {
        if member.is_empty() {
            return Err(Error::invalid(format!(
                "counter {:?}: mark member must not be empty",
                self.name
            )));
        }
        let (keys, ttl) = self.keys()?;
        self.store()?.mark_once(keys, member, ttl).await
    }
}
