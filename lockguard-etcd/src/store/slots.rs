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
//! request that could create one fails on the ended lease. A lease lives
//! as long as its client, so the retired slots are not kept for all that
//! time: past [`MAX_RETIRED`] of them, the client starts a new *round* of
//! names (`{dir}{lease}.{round}.{slot}`), whose names no earlier round
//! used, and forgets the slots of the rounds before; a key in use keeps
//! its name. The slots only
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

/// The most slots retired (or detached) in a round of names before the
/// next round starts: each is an acquisition given up mid-request, a
/// deletion that went unanswered or a lease run out, so a client reaching
/// it has lived through many; a round's names are not many more.
pub(super) const MAX_RETIRED: usize = 1_024;

#[derive(Debug, Default)]
struct State {
    /// The lease the slots are of.
    lease: i64,
    /// The round of names on that lease: names of an earlier round are
    /// never handed out again.
    round: u32,
    /// Each token's name: its slot, the lock's prefix it is under, and
    /// its round.
    by_token: HashMap<Token, Named>,
    /// The slots of this round in use, detached or retired, by lock
    /// prefix.
    used: HashMap<String, BTreeSet<u32>>,
    /// How many slots `used` holds.
    slots: usize,
    /// How many of them tokens hold (`by_token`'s of this round).
    held: usize,
}

/// A token's name.
#[derive(Debug)]
struct Named {
    dir: String,
    slot: u32,
    round: u32,
}

/// A slot taken from its token: freed or retired later (see
/// [`Slots::detach`]).
#[derive(Debug)]
pub(super) struct Detached {
    lease: i64,
    round: u32,
    dir: String,
    slot: u32,
}

/// The name of slot `slot` of round `round` under `dir` on `lease`: the
/// first round's names have no round in them, as before rounds were.
fn key_name(dir: &str, lease: i64, round: u32, slot: u32) -> String {
    if round == 0 {
        format!("{dir}{lease:x}.{slot}")
    } else {
        format!("{dir}{lease:x}.{round:x}.{slot}")
    }
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
        if let Some(named) = state.by_token.get(token)
            && named.dir == dir
        {
            return Some(key_name(dir, lease, named.round, named.slot));
        }
        state.next_round_if_full();
        let round = state.round;
        let used = state.used.entry(dir.to_owned()).or_default();
        let slot = (0..).find(|n| !used.contains(n)).unwrap_or(u32::MAX);
        used.insert(slot);
        state.slots += 1;
        state.held += 1;
        let named = Named {
            dir: dir.to_owned(),
            slot,
            round,
        };
        if let Some(old) = state.by_token.insert(*token, named) {
            // A token used under another lock: its slot there is left in
            // doubt.
            if old.round == round {
                state.held -= 1;
            }
            tracing::debug!(dir = %old.dir, slot = old.slot, "a token moved to another lock");
        }
        Some(key_name(dir, lease, round, slot))
    }

    /// The name of `token`'s key if it has a slot on `lease`.
    pub(super) fn of(&self, token: &Token, lease: i64) -> Option<String> {
        let state = self.state();
        if state.lease != lease {
            return None;
        }
        let named = state.by_token.get(token)?;
        Some(key_name(&named.dir, lease, named.round, named.slot))
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
        let Named { dir, slot, round } = state.by_token.remove(token)?;
        if round == state.round {
            state.held -= 1;
        }
        Some(Detached {
            lease: state.lease,
            round,
            dir,
            slot,
        })
    }

    /// Frees a detached slot, if its lease and its round are still the
    /// client's (a slot of an earlier round is forgotten already).
    pub(super) fn free_detached(&self, detached: Detached) {
        let mut state = self.state();
        if state.lease != detached.lease || state.round != detached.round {
            return;
        }
        let state = &mut *state;
        if let Some(used) = state.used.get_mut(&detached.dir) {
            if used.remove(&detached.slot) {
                state.slots -= 1;
            }
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
            *self = Self {
                lease,
                ..Self::default()
            };
        }
    }

    /// Starts the next round of names when this one has [`MAX_RETIRED`]
    /// slots that no token holds: its slots are forgotten (none of its
    /// names is handed out again), and the keys in use keep their names.
    fn next_round_if_full(&mut self) {
        if self.slots - self.held < MAX_RETIRED {
            return;
        }
        tracing::debug!(
            round = self.round + 1,
            retired = self.slots - self.held,
            "a new round of etcd queue key names"
        );
        self.round += 1;
        self.used.clear();
        self.slots = 0;
        self.held = 0;
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

    #[test]
    fn retired_slots_are_forgotten_in_a_new_round_of_names_never_used() {
        let slots = Slots::default();
        let lease = 0xab;
        let kept = Token::random();
        assert_eq!(name(&slots, "l/k/", &kept, lease), "l/k/ab.0");
        // Acquisitions given up on as many locks: each retires a slot.
        let mut retired = std::collections::HashSet::new();
        for i in 0..MAX_RETIRED {
            let t = Token::random();
            retired.insert(name(&slots, &format!("l/{i}/"), &t, lease));
            slots.retire(&t);
        }
        assert_eq!(slots.state().used.len(), MAX_RETIRED + 1);
        // The next name starts a round: the retired slots are forgotten,
        // and no name of theirs comes back.
        let t = Token::random();
        let next = name(&slots, "l/0/", &t, lease);
        assert_eq!(next, "l/0/ab.1.0");
        assert!(!retired.contains(&next));
        assert_eq!(
            slots.state().used.len(),
            1,
            "the earlier round's slots are forgotten"
        );
        for i in 0..MAX_RETIRED {
            let t = Token::random();
            let again = name(&slots, &format!("l/{i}/"), &t, lease);
            assert!(!retired.contains(&again), "{again} was retired");
            slots.free(&t);
        }
        // A key in use keeps its name across the round.
        assert_eq!(name(&slots, "l/k/", &kept, lease), "l/k/ab.0");
        assert_eq!(slots.of(&kept, lease).as_deref(), Some("l/k/ab.0"));
        let mine = Token::random();
        assert_eq!(name(&slots, "l/k/", &mine, lease), "l/k/ab.1.0");
        // Freeing a slot of the round before frees none of this round's.
        slots.free(&kept);
        let other = Token::random();
        assert_eq!(name(&slots, "l/k/", &other, lease), "l/k/ab.1.1");
        // Slots held or freed alone never start a round.
        for _ in 0..2 * MAX_RETIRED {
            let t = Token::random();
            assert!(name(&slots, "l/k/", &t, lease).starts_with("l/k/ab.1."));
            slots.free(&t);
        }
    }
}
