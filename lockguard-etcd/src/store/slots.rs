//! The names of this client's queue keys: `{dir}{lease}.{slot}`, the
//! client's lease in hex and the lowest slot number it does not use on
//! that lock, so that a lock taken again and again by one client writes
//! the same few keys.
//!
//! etcd keeps every key ever deleted in its index until a compaction, and
//! a read of a prefix (every try, every waiter's look at its queue) visits
//! them all: keys named for each acquisition's token made a lock slower
//! with every acquisition until the cluster compacted. etcd's own lock
//! recipe names its key for the caller's lease, for the same reason.
//!
//! A name comes back only once it is certain that its last key is gone for
//! good: its deletion was answered, and no request that could create it
//! again is unanswered. A slot with any doubt on it (a create or a delete
//! that went unanswered, an acquisition given up mid-request, a key whose
//! deletion runs in the background) is retired: never used again on that
//! lease, so that the paths that look for a late key by its name (see
//! `sweep_later_in` and `Orphans`) can delete whatever holds it. The names
//! of an earlier lease are forgotten with it: its keys went with it, and a
//! request that could create one fails on the ended lease. The slots only
//! ever move on to the client's current lease, read under their lock: an
//! attempt that still holds the lease before it gets no name (it would
//! forget the current lease's slots, and hand one out twice).

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use lockguard_core::store::Token;

/// The slots this client uses, by lock, on its current lease.
#[derive(Debug, Default)]
pub(super) struct Slots {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The lease the slots are of.
    lease: i64,
    /// Each token's slot, and the lock's prefix it is under.
    by_token: HashMap<Token, (String, u32)>,
    /// The slots in use or retired, by lock prefix.
    used: HashMap<String, BTreeSet<u32>>,
}

/// A slot taken from its token: freed or retired later (see
/// [`Slots::detach`]).
#[derive(Debug)]
pub(super) struct Detached {
    lease: i64,
    dir: String,
    slot: u32,
}

impl Slots {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The name of `token`'s key under `dir` on `lease`: its slot's, or
    /// the lowest free slot's, now the token's; `None` when `lease` is not
    /// the client's lease now (`current`, read under the slots' lock).
    pub(super) fn name(
        &self,
        dir: &str,
        token: &Token,
        lease: i64,
        current: impl FnOnce() -> i64,
    ) -> Option<String> {
        let mut state = self.state();
        if current() != lease {
            return None;
        }
        state.on_lease(lease);
        let slot = match state.by_token.get(token) {
            Some((d, slot)) if d == dir => *slot,
            _ => {
                let used = state.used.entry(dir.to_owned()).or_default();
                let slot = (0..).find(|n| !used.contains(n)).unwrap_or(u32::MAX);
                used.insert(slot);
                if let Some((d, old)) = state.by_token.insert(*token, (dir.to_owned(), slot)) {
                    // A token used under another lock: its slot there is
                    // left in doubt.
                    tracing::debug!(dir = %d, slot = old, "a token moved to another lock");
                }
                slot
            }
        };
        Some(format!("{dir}{lease:x}.{slot}"))
    }

    /// The name of `token`'s key if it has a slot on `lease`.
    pub(super) fn of(&self, token: &Token, lease: i64) -> Option<String> {
        let state = self.state();
        if state.lease != lease {
            return None;
        }
        let (dir, slot) = state.by_token.get(token)?;
        Some(format!("{dir}{lease:x}.{slot}"))
    }

    /// Gives `token`'s slot back: its key is certainly gone, and nothing
    /// sent can create it again.
    pub(super) fn free(&self, token: &Token) {
        if let Some(detached) = self.detach(token) {
            self.free_detached(detached);
        }
    }

    /// Retires `token`'s slot for the lease: its key may be there, or
    /// come, for a while yet.
    pub(super) fn retire(&self, token: &Token) {
        drop(self.detach(token));
    }

    /// Takes `token`'s slot from it, still in use: to be freed when what
    /// keeps its key (a lock kept past its release) is gone, or retired
    /// by dropping it.
    pub(super) fn detach(&self, token: &Token) -> Option<Detached> {
        let mut state = self.state();
        let (dir, slot) = state.by_token.remove(token)?;
        Some(Detached {
            lease: state.lease,
            dir,
            slot,
        })
    }

    /// Frees a detached slot, if its lease is still the client's.
    pub(super) fn free_detached(&self, detached: Detached) {
        let mut state = self.state();
        if state.lease != detached.lease {
            return;
        }
        if let Some(used) = state.used.get_mut(&detached.dir) {
            used.remove(&detached.slot);
            if used.is_empty() {
                state.used.remove(&detached.dir);
            }
        }
    }
}

impl State {
    /// Forgets the slots of an earlier lease: their keys went with it.
    fn on_lease(&mut self, lease: i64) {
        if self.lease != lease {
            self.lease = lease;
            self.by_token.clear();
            self.used.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `slots`' name on `lease`, the client's lease now.
    fn name(slots: &Slots, dir: &str, token: &Token, lease: i64) -> String {
        slots
            .name(dir, token, lease, || lease)
            .expect("the current lease")
    }

    #[test]
    fn a_freed_slot_is_named_again_and_a_retired_one_never() {
        let slots = Slots::default();
        let (a, b, c, d) = (
            Token::random(),
            Token::random(),
            Token::random(),
            Token::random(),
        );
        assert_eq!(name(&slots, "l/x/", &a, 0xab), "l/x/ab.0");
        assert_eq!(
            name(&slots, "l/x/", &a, 0xab),
            "l/x/ab.0",
            "a token keeps its slot"
        );
        assert_eq!(name(&slots, "l/x/", &b, 0xab), "l/x/ab.1");
        assert_eq!(
            name(&slots, "l/y/", &c, 0xab),
            "l/y/ab.0",
            "slots are per lock"
        );
        assert_eq!(slots.of(&b, 0xab).as_deref(), Some("l/x/ab.1"));
        assert_eq!(slots.of(&b, 0xac), None);
        slots.free(&a);
        assert_eq!(slots.of(&a, 0xab), None);
        assert_eq!(
            name(&slots, "l/x/", &d, 0xab),
            "l/x/ab.0",
            "freed: named again"
        );
        slots.retire(&b);
        slots.free(&d);
        let e = Token::random();
        assert_eq!(name(&slots, "l/x/", &e, 0xab), "l/x/ab.0");
        let f = Token::random();
        assert_eq!(name(&slots, "l/x/", &f, 0xab), "l/x/ab.2", "retired: never");
        let kept = slots.detach(&e).expect("e's slot");
        let g = Token::random();
        assert_eq!(
            name(&slots, "l/x/", &g, 0xab),
            "l/x/ab.3",
            "detached: still in use"
        );
        slots.free_detached(kept);
        let h = Token::random();
        assert_eq!(name(&slots, "l/x/", &h, 0xab), "l/x/ab.0");
        // A new lease starts over: the old keys went with the old one.
        assert_eq!(name(&slots, "l/x/", &h, 0xcd), "l/x/cd.0");
        assert_eq!(name(&slots, "l/x/", &f, 0xcd), "l/x/cd.1");
        // An attempt on the lease before gets no name, and the current
        // lease's slots stay.
        let late = Token::random();
        assert_eq!(slots.name("l/x/", &late, 0xab, || 0xcd), None);
        assert_eq!(name(&slots, "l/x/", &late, 0xcd), "l/x/cd.2");
    }
}
