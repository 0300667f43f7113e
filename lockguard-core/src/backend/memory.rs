//! The in-memory store: the same semantics as Redis, inside one process.
//!
//! Time is tokio's clock, so tests with paused time drive leases.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::Attempt;
use crate::fence::FencingToken;
use crate::key::LockKeys;
use crate::token::Token;

/// Below this many entries a map is never swept.
const SWEEP_FLOOR: usize = 1024;

#[derive(Debug)]
struct LockEntry {
    token: Token,
    expires_at: Instant,
}

#[derive(Debug, Default)]
struct Locks {
    entries: HashMap<String, LockEntry>,
    /// Sweep expired entries once the map grows past this size.
    sweep_at: usize,
    /// One counter for every key: strictly increasing per key as the
    /// guarantee asks, and it needs no state per key.
    fence: u64,
}

impl Locks {
    fn live(&self, key: &str, now: Instant) -> Option<&LockEntry> {
        self.entries.get(key).filter(|e| e.expires_at > now)
    }

    /// Drops expired entries when the map has doubled since the last sweep,
    /// so a flood of distinct keys costs amortized O(1) per insert and the
    /// map stays bounded by the number of live locks.
    fn maybe_sweep(&mut self, now: Instant) {
        if self.entries.len() >= self.sweep_at.max(SWEEP_FLOOR) {
            self.entries.retain(|_, e| e.expires_at > now);
            self.sweep_at = self.entries.len() * 2;
        }
    }
}

/// The in-memory store.
#[derive(Debug, Default)]
pub(crate) struct MemoryStore {
    locks: Mutex<Locks>,
    fenced: Mutex<HashMap<String, (u64, Vec<u8>)>>,
}

impl MemoryStore {
    fn locks(&self) -> std::sync::MutexGuard<'_, Locks> {
        // A panic while holding this mutex cannot leave the map half-updated
        // (every update is a single insert or remove), so poison is ignored.
        self.locks.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn try_lock(&self, keys: &LockKeys, token: &Token, lease: Duration) -> Attempt {
        let now = Instant::now();
        let mut locks = self.locks();
        if let Some(held) = locks.live(&keys.lock, now) {
            return Attempt::Held(Some(held.expires_at - now));
        }
        locks.maybe_sweep(now);
        locks.fence += 1;
        let fence = locks.fence;
        locks.entries.insert(
            keys.lock.clone(),
            LockEntry {
                token: token.clone(),
                expires_at: now + lease,
            },
        );
        Attempt::Acquired(FencingToken::new(fence))
    }

    pub(crate) fn release(&self, keys: &LockKeys, token: &Token) -> bool {
        let now = Instant::now();
        let mut locks = self.locks();
        if locks
            .live(&keys.lock, now)
            .is_some_and(|e| e.token == *token)
        {
            locks.entries.remove(&keys.lock);
            true
        } else {
            false
        }
    }

    pub(crate) fn extend(&self, keys: &LockKeys, token: &Token, lease: Duration) -> bool {
        let now = Instant::now();
        let mut locks = self.locks();
        match locks.entries.get_mut(&keys.lock) {
            Some(e) if e.expires_at > now && e.token == *token => {
                e.expires_at = now + lease;
                true
            }
            _ => false,
        }
    }

    pub(crate) fn fenced_write(&self, key: &str, token: u64, value: &[u8]) -> bool {
        let mut fenced = self.fenced.lock().unwrap_or_else(|p| p.into_inner());
        match fenced.get(key) {
            Some((newest, _)) if *newest > token => false,
            _ => {
                fenced.insert(key.to_owned(), (token, value.to_vec()));
                true
            }
        }
    }

    pub(crate) fn fenced_read(&self, key: &str) -> Option<(u64, Vec<u8>)> {
        let fenced = self.fenced.lock().unwrap_or_else(|p| p.into_inner());
        fenced.get(key).cloned()
    }

    #[cfg(test)]
    fn lock_entries(&self) -> usize {
        self.locks().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn expired_entries_are_swept_under_a_flood_of_keys() {
        let store = MemoryStore::default();
        let lease = Duration::from_millis(10);
        for i in 0..100_000 {
            let keys = LockKeys::new("t:", &format!("k{i}"));
            assert!(matches!(
                store.try_lock(&keys, &Token::random(), lease),
                Attempt::Acquired(_)
            ));
            if i % 1000 == 999 {
                tokio::time::advance(Duration::from_millis(20)).await;
            }
        }
        // At most ~1000 live entries at any time, plus what awaits a sweep.
        assert!(
            store.lock_entries() <= 4 * SWEEP_FLOOR,
            "{} entries kept",
            store.lock_entries()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn lease_expiry_frees_the_key_and_stale_tokens_cannot_act() {
        let store = MemoryStore::default();
        let keys = LockKeys::new("t:", "k");
        let (a, b) = (Token::random(), Token::random());
        let lease = Duration::from_millis(100);
        let Attempt::Acquired(fa) = store.try_lock(&keys, &a, lease) else {
            panic!("free key not acquired")
        };
        assert!(matches!(
            store.try_lock(&keys, &b, lease),
            Attempt::Held(Some(_))
        ));
        tokio::time::advance(Duration::from_millis(101)).await;
        assert!(!store.extend(&keys, &a, lease), "extend after expiry");
        let Attempt::Acquired(fb) = store.try_lock(&keys, &b, lease) else {
            panic!("expired key not acquired")
        };
        assert!(fb > fa);
        assert!(!store.release(&keys, &a), "non-holder released");
        assert!(store.release(&keys, &b));
    }
}
