//! State split by key into shards, each behind a lock of its own, so that
//! operations on different keys from different cores neither wait for one
//! another nor write the same cache lines.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// `T`s chosen by key; see the module docs.
#[derive(Debug)]
pub(crate) struct Shards<T> {
    shards: Box<[Shard<T>]>,
    /// `64 - log2(shards)`: a hash shifted right by this is a shard index.
    shift: u32,
}

/// One shard, on cache lines of its own: a neighbour's lock being taken
/// must not evict this one's (128 bytes: x86 fetches lines in pairs).
#[derive(Debug)]
#[repr(align(128))]
struct Shard<T>(Mutex<T>);

impl<T> Shards<T> {
    /// Four shards per core (at least 4, at most 64), as a concurrent map
    /// would have, so that contention on one shard stays rare; each made
    /// by `make`, given the number of shards.
    pub(crate) fn new(make: impl Fn(usize) -> T) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Self::with_count(cores.saturating_mul(4).clamp(4, 64), make)
    }

    /// `count` shards (rounded up to a power of two), each made by `make`.
    pub(crate) fn with_count(count: usize, make: impl Fn(usize) -> T) -> Self {
        let count = count.max(1).next_power_of_two();
        Self {
            shards: (0..count).map(|_| Shard(Mutex::new(make(count)))).collect(),
            shift: 64 - count.trailing_zeros(),
        }
    }

    /// The shard of `key`, locked. Every update of a shard is complete
    /// before anything can panic, so a poisoned lock still guards
    /// consistent state.
    pub(crate) fn lock(&self, key: &str) -> MutexGuard<'_, T> {
        self.shards[self.index(key)]
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `f` holds for every shard, each locked in turn.
    pub(crate) fn all(&self, mut f: impl FnMut(&T) -> bool) -> bool {
        self.shards
            .iter()
            .all(|s| f(&s.0.lock().unwrap_or_else(PoisonError::into_inner)))
    }

    /// Each shard in turn, locked.
    #[cfg(test)]
    pub(crate) fn each(&self) -> impl Iterator<Item = MutexGuard<'_, T>> {
        self.shards
            .iter()
            .map(|s| s.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The shard index of `key`: a multiplicative hash of the key's bytes,
    /// eight at a time, whose top bits pick the shard. It only spreads
    /// keys; a key chosen to land on a crowded shard makes that shard as
    /// contended as one lock for everything, never wrong. (The map inside
    /// a shard keeps its own keyed hash.)
    fn index(&self, key: &str) -> usize {
        const K: u64 = 0x9E37_79B9_7F4A_7C15;
        let bytes = key.as_bytes();
        let mut chunks = bytes.chunks_exact(8);
        let mut h = bytes.len() as u64;
        for c in &mut chunks {
            let mut word = [0; 8];
            word.copy_from_slice(c);
            h = (h ^ u64::from_le_bytes(word))
                .wrapping_mul(K)
                .rotate_left(29);
        }
        let mut last = [0; 8];
        last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        h = (h ^ u64::from_le_bytes(last)).wrapping_mul(K);
        // `shift` is 64 for a single shard, which `checked_shr` maps to 0.
        usize::try_from(h.checked_shr(self.shift).unwrap_or(0)).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_spread_over_every_shard_and_each_key_keeps_its_shard() {
        let shards = Shards::with_count(8, |_| ());
        let mut seen = [0usize; 8];
        for i in 0..8000 {
            let key = format!("lockguard:rl:api:{{client-{i}}}");
            let index = shards.index(&key);
            assert_eq!(index, shards.index(&key), "a key moved shards");
            seen[index] += 1;
        }
        // 1000 per shard on average; none starved or crowded.
        assert!(
            seen.iter().all(|&n| (700..1300).contains(&n)),
            "uneven spread: {seen:?}"
        );
    }

    #[test]
    fn one_shard_takes_every_key() {
        let shards = Shards::with_count(1, |_| ());
        assert_eq!(shards.index("a"), 0);
        assert_eq!(shards.index("a much longer key than eight bytes"), 0);
        assert_eq!(Shards::with_count(5, |_| ()).shards.len(), 8);
    }
}
