//! A map whose entries expire, swept so a flood of distinct keys cannot
//! grow it without bound.

use std::collections::HashMap;

/// Below this many entries a map is never swept.
pub(crate) const SWEEP_FLOOR: usize = 1024;

/// Entries with an optional deadline of type `T` (an instant or a time in
/// microseconds). Expired entries are invisible at once and removed by a
/// sweep each time the map doubles in size since the last one, so inserts
/// cost amortized O(1) and the map holds at most about twice the live
/// entries (or [`SWEEP_FLOOR`]).
#[derive(Debug)]
pub(crate) struct Expiring<T, V> {
    entries: HashMap<String, (V, Option<T>)>,
    sweep_at: usize,
    /// Below this many entries the map is never swept.
    floor: usize,
}

impl<T, V> Default for Expiring<T, V> {
    fn default() -> Self {
        Self::with_floor(SWEEP_FLOOR)
    }
}

impl<T, V> Expiring<T, V> {
    /// A map never swept below `floor` entries: one of `n` shards of a
    /// map takes `SWEEP_FLOOR / n`, so that the shards together keep no
    /// more than one map would.
    pub(crate) fn with_floor(floor: usize) -> Self {
        Self {
            entries: HashMap::new(),
            sweep_at: floor,
            floor,
        }
    }
}

impl<T: Copy + Ord, V> Expiring<T, V> {
    fn live(expires: Option<T>, now: T) -> bool {
        expires.is_none_or(|e| now < e)
    }

    /// The live entry and its deadline.
    pub(crate) fn get(&self, key: &str, now: T) -> Option<(&V, Option<T>)> {
        self.entries
            .get(key)
            .filter(|(_, e)| Self::live(*e, now))
            .map(|(v, e)| (v, *e))
    }

    /// The live entry, mutable, with its deadline.
    pub(crate) fn get_mut(&mut self, key: &str, now: T) -> Option<(&mut V, &mut Option<T>)> {
        match self.entries.get_mut(key) {
            Some((v, e)) if Self::live(*e, now) => Some((v, e)),
            _ => None,
        }
    }

    /// The entry, live or expired (with `true` when live): one lookup for
    /// an update in place, where an expired entry is as good as none.
    pub(crate) fn slot_mut(&mut self, key: &str, now: T) -> Option<(&mut V, &mut Option<T>, bool)> {
        let (v, e) = self.entries.get_mut(key)?;
        let live = Self::live(*e, now);
        Some((v, e, live))
    }

    /// The live entry, or a new one from `make` (replacing an expired one).
    pub(crate) fn entry(
        &mut self,
        key: &str,
        now: T,
        make: impl FnOnce() -> (V, Option<T>),
    ) -> (&mut V, &mut Option<T>) {
        let live = self.get(key, now).is_some();
        if !live {
            self.maybe_sweep(now);
            self.entries.insert(key.to_owned(), make());
        }
        let (v, e) = self.entries.get_mut(key).expect("just inserted");
        (v, e)
    }

    /// Runs `f` on the live entry, or on a new one from `make` (replacing
    /// an expired one in place): one lookup when the key is present.
    pub(crate) fn with_entry<R>(
        &mut self,
        key: &str,
        now: T,
        make: impl FnOnce() -> (V, Option<T>),
        f: impl FnOnce(&mut V, &mut Option<T>) -> R,
    ) -> R {
        if let Some((v, e)) = self.entries.get_mut(key) {
            if !Self::live(*e, now) {
                (*v, *e) = make();
            }
            return f(v, e);
        }
        self.maybe_sweep(now);
        let (v, e) = self.entries.entry(key.to_owned()).or_insert_with(make);
        f(v, e)
    }

    /// Inserts `key`, known to be absent.
    pub(crate) fn insert_new(&mut self, key: &str, value: V, expires: Option<T>, now: T) {
        self.maybe_sweep(now);
        self.entries.insert(key.to_owned(), (value, expires));
    }

    pub(crate) fn insert(&mut self, key: &str, value: V, expires: Option<T>, now: T) {
        if let Some(slot) = self.entries.get_mut(key) {
            *slot = (value, expires);
            return;
        }
        self.maybe_sweep(now);
        self.entries.insert(key.to_owned(), (value, expires));
    }

    /// Every live entry: its key, value and deadline.
    pub(crate) fn live_entries(&self, now: T) -> impl Iterator<Item = (&str, &V, Option<T>)> {
        self.entries
            .iter()
            .filter(move |(_, (_, e))| Self::live(*e, now))
            .map(|(k, (v, e))| (k.as_str(), v, *e))
    }

    /// Whether no entry is live at `now`.
    pub(crate) fn is_empty_at(&self, now: T) -> bool {
        self.entries.values().all(|(_, e)| !Self::live(*e, now))
    }

    fn maybe_sweep(&mut self, now: T) {
        if self.entries.len() >= self.sweep_at {
            self.entries.retain(|_, (_, e)| Self::live(*e, now));
            self.sweep_at = (self.entries.len() * 2).max(self.floor);
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}
