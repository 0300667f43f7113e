//! The Redis key layout: every key of one user key in one hash tag, so a
//! script's keys share a Redis Cluster slot, and one sequence key per slot
//! for the fencing tokens and versions of every key in it.
//!
//! A lock's identity (`LockKeys::id`, `{prefix}lock:{escaped name}`) is the
//! key holding its holder; its queue, tickets and sequence are laid out from
//! it when an operation needs them, written piece by piece straight into
//! the script's command (see `RedisLockKeys::queue_keys`). The braces
//! around the escaped name are the hash tag.

use std::sync::LazyLock;

use lockguard_core::store::{CounterKeys, LimitKeys, LockKeys, Resource};

/// The Redis store's keys of a lock, laid out from its identity when an
/// operation needs them.
pub(crate) trait RedisLockKeys {
    /// The sequence fencing tokens are drawn from, shared by every key of
    /// the lock's cluster slot (see [`sequence`]).
    fn sequence(&self) -> String;
    /// The waiters' queue: tokens in order of arrival.
    fn queue(&self) -> String;
    /// A read-write lock's writer: its token, with its lease as expiry.
    /// (The lock's identity holds its readers.)
    fn writer(&self) -> String;
    /// Gives `key` the keys of a wait-queue script for one hold, in order,
    /// each as the pieces it is made of (joined by the caller, with no
    /// string of its own): the identity, the sequence, the queue, the
    /// tickets (each queued waiter's deadline and channel, and a semaphore
    /// holder's fencing token), and for a read-write lock (`rw`) the writer
    /// and the queued readers (the other waiters write).
    fn queue_keys(&self, rw: bool, key: impl FnMut(&[&str]));
}

/// The suffixes of a lock's keys beside its identity.
const QUEUE: &str = ":queue";
const TICKETS: &str = ":tickets";
const WRITER: &str = ":writer";
const READS: &str = ":reads";

impl RedisLockKeys for LockKeys {
    fn sequence(&self) -> String {
        sequence(self.prefix(), self.id())
    }

    fn queue(&self) -> String {
        [self.id(), QUEUE].concat()
    }

    fn writer(&self) -> String {
        [self.id(), WRITER].concat()
    }

    fn queue_keys(&self, rw: bool, mut key: impl FnMut(&[&str])) {
        let id = self.id();
        key(&[id]);
        key(&sequence_parts(self.prefix(), seq_tag(id)));
        key(&[id, QUEUE]);
        key(&[id, TICKETS]);
        if rw {
            key(&[id, WRITER]);
            key(&[id, READS]);
        }
    }
}

/// The keys of a lock laid out after `of`'s key (a Redlock semaphore's
/// slot `lock`, which starts with `of`'s identity): in its slot, so
/// sharing its sequence, and its release channel, with a queue and
/// tickets of its own.
pub(crate) fn beside(of: &LockKeys, lock: String, resource: Resource) -> LockKeys {
    debug_assert!(
        lock.starts_with(of.id()),
        "{lock} is laid out beside {of:?}"
    );
    LockKeys::derived(of, lock, resource)
}

/// The sequence a counter's versions are drawn from (see [`sequence`]).
pub(crate) fn counter_sequence(keys: &CounterKeys) -> String {
    sequence(keys.prefix(), keys.id())
}

/// The running sum of a sliding log, beside the log in its hash tag.
pub(crate) fn limit_sum(keys: &LimitKeys<'_>) -> String {
    format!("{}:sum", keys.id())
}

/// The Redis Cluster slot of a key: CRC16 (XMODEM) of its hash tag, or of
/// the whole key when it has none, modulo 16384.
pub(crate) fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(bytes);
    crc16::State::<crc16::XMODEM>::calculate(hashed) % SLOTS
}

const SLOTS: u16 = 16384;

/// For each cluster slot, the smallest number whose decimal form hashes to
/// it, in decimal: the hash tag of that slot's sequence key. Built once per
/// process (about 170 000 CRC16s: a few ms in release builds, 50 ms in
/// debug builds), when the first client is built, so no operation waits
/// for it.
static SLOT_TAGS: LazyLock<SlotTags> = LazyLock::new(|| {
    let mut tags = vec![u32::MAX; usize::from(SLOTS)];
    let mut missing = tags.len();
    let mut n = 0u32;
    while missing > 0 {
        let s = n.to_string();
        let slot = usize::from(crc16::State::<crc16::XMODEM>::calculate(s.as_bytes()) % SLOTS);
        if tags[slot] == u32::MAX {
            tags[slot] = n;
            missing -= 1;
        }
        n += 1;
    }
    let mut text = String::new();
    let ends = tags
        .iter()
        .map(|tag| {
            text.push_str(&tag.to_string());
            text.len()
        })
        .collect();
    SlotTags { text, ends }
});

/// Every slot's tag in decimal, one after the other: slot `s`'s ends at
/// `ends[s]` and starts where slot `s - 1`'s ends.
struct SlotTags {
    text: String,
    ends: Box<[usize]>,
}

impl SlotTags {
    /// Slot `slot`'s tag.
    fn of(&self, slot: u16) -> &str {
        let s = usize::from(slot);
        let start = s.checked_sub(1).map_or(0, |before| self.ends[before]);
        &self.text[start..self.ends[s]]
    }
}

/// Builds the slot table now, if no client did yet (see [`SLOT_TAGS`]).
pub(crate) fn prepare() {
    LazyLock::force(&SLOT_TAGS);
}

/// The sequence that fencing tokens and counter versions of `key` are drawn
/// from: `{prefix}seq:{n}`, one key per cluster slot, in `key`'s slot so one
/// script can touch both.
///
/// Every value drawn from it is greater than the one before and than the
/// server's clock (in whole ms, times 1000), so tokens and versions strictly increase per key
/// across the key's expiry, and the store holds at most one such key per
/// slot however many keys are ever locked or counted.
pub(crate) fn sequence(prefix: &str, key: &str) -> String {
    sequence_parts(prefix, seq_tag(key)).concat()
}

/// The pieces of the sequence key of the slot whose hash tag is `tag`.
fn sequence_parts<'a>(prefix: &'a str, tag: &'a str) -> [&'a str; 4] {
    [prefix, "seq:{", tag, "}"]
}

/// The hash tag of `key`'s sequence (see [`SLOT_TAGS`]).
fn seq_tag(key: &str) -> &'static str {
    SLOT_TAGS.of(slot(key))
}

/// The waiting line of a Redlock lock on each node: its waiters scored by
/// when they began to wait (`line`), and by when their place lapses
/// (`alive`). Every node gets the same waiter ids and scores, so every node
/// orders the line alike and agrees on its head, and a waiter takes a free
/// lock only when no live waiter is ahead of it: the head gets a quorum as
/// soon as the lock is free. See `redlock_acquire.lua`.
#[derive(Debug)]
pub(crate) struct RedlockLine {
    pub(crate) line: String,
    pub(crate) alive: String,
}

impl RedlockLine {
    pub(crate) fn of(keys: &LockKeys) -> Self {
        Self {
            line: format!("{}:line", keys.id()),
            alive: format!("{}:line:alive", keys.id()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockguard_core::store::RwMode;

    fn keys(prefix: &str, name: &str) -> LockKeys {
        LockKeys::checked(prefix, name, Resource::Lock).unwrap()
    }

    fn counter(prefix: &str, name: &str) -> CounterKeys {
        CounterKeys::checked(prefix, name).unwrap()
    }

    /// A wait-queue script's keys, each joined.
    fn joined(k: &LockKeys, rw: bool) -> Vec<String> {
        let mut all = Vec::new();
        k.queue_keys(rw, |parts| all.push(parts.concat()));
        all
    }

    #[test]
    fn derived_keys_share_a_hash_tag() {
        let k = keys("lg:", "order:42");
        assert_eq!(k.id(), "lg:lock:{order:42}");
        assert_eq!(k.queue(), "lg:lock:{order:42}:queue");
        assert_eq!(
            joined(&k, false),
            [
                k.id().to_owned(),
                k.sequence(),
                k.queue(),
                "lg:lock:{order:42}:tickets".to_owned()
            ]
        );
        assert_eq!(
            joined(&k, true)[4..],
            [
                "lg:lock:{order:42}:writer".to_owned(),
                "lg:lock:{order:42}:reads".to_owned()
            ]
        );
        assert_eq!(slot(&k.sequence()), slot(k.id()));
        // The sequence's tag is its slot's number, in decimal.
        let tag = seq_tag(k.id());
        assert_eq!(k.sequence(), format!("lg:seq:{{{tag}}}"));
        // A key's sequence is in the slot of the key's hash tag.
        assert_eq!(slot(&format!("{{{}}}", seq_tag("{5}"))), slot("5"));
        // A user's braces are escaped, never taken as the tag.
        let k = keys("lg:", "order:{42}");
        assert_eq!(k.id(), "lg:lock:{order:{42\\}}");
        assert_eq!(keys("lg:", "a{}b").id(), "lg:lock:{a{\\}b}");
        assert_eq!(keys("lg:", "a\\b").id(), "lg:lock:{a\\\\b}");
    }

    #[test]
    fn braces_in_a_key_never_alias_another_key() {
        // The aliases a verbatim layout allowed: a user key naming a key
        // derived from another, and "a" and "{a}" being one lock.
        let n = keys("lg:", "n");
        assert_ne!(keys("lg:", "{n}:queue").id().to_owned(), n.queue());
        assert_ne!(keys("lg:", "n}:queue").id().to_owned(), n.queue());
        assert_ne!(keys("lg:", "{a}").id(), keys("lg:", "a").id());
        let c = counter("lg:", "n");
        assert_ne!(counter("lg:", "{n}:marks").id().to_owned(), c.marks());
        assert_ne!(counter("lg:", "n}:marks").id().to_owned(), c.marks());
    }

    #[test]
    fn every_derived_key_is_in_its_base_slot() {
        for key in [
            "}", "}x", "{}", "a{}b", "\\", "x\\}", "{a}", "{", "a}b{c}", "é{ü}",
        ] {
            let k = keys("p:", key);
            let s = slot(k.id());
            for other in joined(&k, false) {
                assert_eq!(
                    slot(&other),
                    s,
                    "{key:?}: {other} left the slot of {}",
                    k.id()
                );
            }
            let rw = LockKeys::checked_rw("p:", key, RwMode::Write).unwrap();
            let s = slot(rw.id());
            for other in joined(&rw, true) {
                assert_eq!(
                    slot(&other),
                    s,
                    "{key:?}: {other} left the slot of {}",
                    k.id()
                );
            }
            let c = counter("p:", key);
            assert_eq!(slot(c.marks()), slot(c.id()));
            assert_eq!(slot(&counter_sequence(&c)), slot(c.id()));
        }
    }

    #[test]
    fn slots_follow_redis() {
        // Values from `CLUSTER KEYSLOT` of a real server.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("foo{}{bar}"), slot("foo{}{bar}"));
        assert_ne!(slot("foo{}{bar}"), slot("bar"));
        assert_eq!(slot("foo{{bar}}zap"), slot("{bar"));
        assert_eq!(slot("foo{bar}{zap}"), slot("bar"));
        // Every slot has a sequence key in it.
        assert!((0..SLOTS).all(|s| slot(&format!("{{{}}}", SLOT_TAGS.of(s))) == s));
    }
}
