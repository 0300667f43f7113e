//! The local cache of refused keys: once the store refuses a key, the same
//! process refuses it too, without a round trip, until the store's
//! `retry_after` has passed.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::time::Instant;

use crate::rate_limit::Decision;

/// One refused key: until when, and for what cost.
#[derive(Debug, Clone, Copy)]
struct Refused {
    /// When the store said a request of `cost` may pass again.
    until: Instant,
    /// When the store said the key is back to its full limit.
    reset: Instant,
    cost: u64,
    limit: u64,
}

/// Keys the store refused, each until its `retry_after` ends, at most
/// `capacity` of them.
///
/// It only ever refuses: a key is answered locally only while the store
/// itself would refuse it (its deadline is counted from when the store's
/// answer arrived, so it ends a little after the store's), and a request
/// costing less than the refused one still goes to the store. So the cache
/// never admits more than the store would. When it is full of keys whose
/// deadline has not passed, new refusals are simply not cached.
#[derive(Debug)]
pub(crate) struct RefusedCache {
    capacity: usize,
    entries: Mutex<HashMap<String, Refused>>,
}

impl RefusedCache {
    /// How many refusals it remembers at most.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Refused>> {
        // Every update is complete before it could panic: a poisoned map
        // is still consistent.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The local refusal of `cost` units of `key` at `now`, if the store
    /// refused at least that much and its wait has not ended.
    pub(crate) fn lookup(&self, key: &str, cost: u64, now: Instant) -> Option<Decision> {
        let mut entries = self.entries();
        let refused = *entries.get(key)?;
        if now >= refused.until {
            entries.remove(key);
            return None;
        }
        if cost < refused.cost {
            return None;
        }
        Some(Decision {
            allowed: false,
            limit: refused.limit,
            remaining: 0,
            reset_after: refused.reset.saturating_duration_since(now),
            retry_after: refused.until - now,
            shadowed: false,
            decided_locally: false,
        })
    }

    /// Remembers the store's answer `decision` for `cost` units of `key`,
    /// received at `now`.
    pub(crate) fn record(&self, key: &str, cost: u64, decision: &Decision, now: Instant) {
        let mut entries = self.entries();
        if decision.allowed || decision.retry_after.is_zero() {
            entries.remove(key);
            return;
        }
        if entries.len() >= self.capacity && !entries.contains_key(key) {
            entries.retain(|_, r| r.until > now);
            if entries.len() >= self.capacity {
                return;
            }
        }
        entries.insert(
            key.to_owned(),
            Refused {
                until: now + decision.retry_after,
                reset: now + decision.reset_after,
                cost,
                limit: decision.limit,
            },
        );
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries().len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn refusal(retry_ms: u64) -> Decision {
        Decision {
            allowed: false,
            limit: 5,
            remaining: 0,
            reset_after: Duration::from_millis(retry_ms * 2),
            retry_after: Duration::from_millis(retry_ms),
            shadowed: false,
            decided_locally: false,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn refuses_until_the_store_would_admit_and_not_for_smaller_costs() {
        let cache = RefusedCache::new(10);
        let now = Instant::now();
        cache.record("k", 2, &refusal(1000), now);
        let d = cache
            .lookup("k", 2, now + Duration::from_millis(400))
            .unwrap();
        assert!(!d.allowed && d.remaining == 0 && d.limit == 5);
        assert_eq!(d.retry_after, Duration::from_millis(600));
        assert_eq!(d.reset_after, Duration::from_millis(1600));
        assert!(
            cache.lookup("k", 3, now).is_some(),
            "a larger cost is refused too"
        );
        assert!(
            cache.lookup("k", 1, now).is_none(),
            "a smaller cost may pass"
        );
        assert!(cache.lookup("other", 2, now).is_none());
        assert!(
            cache
                .lookup("k", 2, now + Duration::from_millis(1000))
                .is_none()
        );
        assert_eq!(cache.len(), 0, "an ended refusal is dropped");
        // An admission forgets the key.
        cache.record("k", 1, &refusal(1000), now);
        let mut allowed = refusal(0);
        allowed.allowed = true;
        cache.record("k", 1, &allowed, now);
        assert!(cache.lookup("k", 1, now).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn stays_within_its_capacity() {
        let cache = RefusedCache::new(2);
        let now = Instant::now();
        cache.record("a", 1, &refusal(100), now);
        cache.record("b", 1, &refusal(1000), now);
        cache.record("c", 1, &refusal(1000), now);
        assert_eq!(cache.len(), 2);
        assert!(cache.lookup("c", 1, now).is_none(), "full: not cached");
        // Once "a" has ended, its place is free.
        let later = now + Duration::from_millis(200);
        cache.record("c", 1, &refusal(1000), later);
        assert!(cache.lookup("c", 1, later).is_some());
        assert!(cache.len() <= 2);
    }
}
