//! A survey of the in-memory store: every lock, semaphore and read-write
//! lock held or awaited, with its holders and its waiters in order.

use std::collections::BTreeMap;

use tokio::time::Instant;

use super::MemoryStore;
use crate::fence::FencingToken;
use crate::key::RwMode;
use crate::store::{Holder, Holding, Waiter, is_read_write_id};

impl MemoryStore {
    /// See [`LockStore::survey`](crate::store::LockStore::survey).
    pub(super) fn survey(&self, prefix: &str) -> Vec<Holding> {
        let now = Instant::now();
        let st = self.state();
        let mut found: BTreeMap<&str, (Vec<Holder>, Vec<Waiter>)> = BTreeMap::new();
        let lease = |ends: Option<Instant>| ends.map(|e| e.saturating_duration_since(now));
        for (id, (token, fence), ends) in st.locks.live_entries(now) {
            let holder = Holder::new(*token, None, Some(FencingToken::new(*fence)), lease(ends));
            found.entry(id).or_default().0.push(holder);
        }
        for (id, holders, _) in st.permits.live_entries(now) {
            let live = holders.iter().filter(|(_, (e, _))| *e > now);
            let listed = live.map(|(t, (e, f))| {
                Holder::new(*t, None, Some(FencingToken::new(*f)), lease(Some(*e)))
            });
            found.entry(id).or_default().0.extend(listed);
        }
        for (id, holders, _) in st.rw.live_entries(now) {
            found.entry(id).or_default().0.extend(holders.listed(now));
        }
        for (id, queue) in &st.queues {
            let rw = is_read_write_id(prefix, id);
            let live = queue.iter().filter(|w| w.deadline > now).map(|w| {
                let mode = rw.then_some(if w.reads { RwMode::Read } else { RwMode::Write });
                Waiter::new(w.token, mode)
            });
            found.entry(id).or_default().1.extend(live);
        }
        let latest = (st.sequence > 0).then(|| FencingToken::new(st.sequence));
        found
            .into_iter()
            .filter(|(id, (holders, waiters))| {
                id.starts_with(prefix) && !(holders.is_empty() && waiters.is_empty())
            })
            .map(|(id, (holders, waiters))| Holding::new(id.to_owned(), holders, waiters, latest))
            .collect()
    }
}
