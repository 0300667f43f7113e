//! Surveys and forced releases on etcd: every lock held or awaited under
//! a client's prefix, read from the queue keys, and the end of a hold
//! another client made.
//!
//! A survey is one range read of every queue key under
//! `{prefix}lock/{the client's prefix, as a path segment}`, in creation
//! order; the keys are grouped by their lock (a key's path up to its last
//! `/`, the lock's identity as [`path_segment`] writes it). Who holds is
//! the store's own rule ([`waits`]) by each key's mark: a lock's first
//! key (also one kept past its release, which holds until its own lease
//! ends), a read-write lock's readers ahead of its first writer, or that
//! writer. A semaphore's count of permits is not kept in the store, so
//! its holders are its first key, which holds whatever the count, and the
//! keys written as held when they came to hold ([`mark::HELD`]; a key
//! admitted a moment ago that has not been written so yet is listed
//! waiting). Each holder's fencing token is what its acquisition drew: its
//! key's create revision, a semaphore permit's the revision of its write.
//!
//! Each key's value names the token of its acquisition after its mark.
//!
//! A forced release reads the lock's queue and deletes the token's key
//! when it holds under the same rule, compared on the key's create
//! revision, as the holder's own release would: the waiter watching it
//! takes the lock. The holder's client learns it at its next renewal,
//! whose transaction compares the key's create revision and finds it gone.

use std::collections::BTreeMap;

use etcd_client::{Compare, CompareOp, GetOptions, SortOrder, SortTarget, Txn, TxnOp};

use lockguard_core::store::net::{path_segment, path_unsegment};
use lockguard_core::store::{Holder, Holding, LockKeys, RwMode, Token, Waiter};
use lockguard_core::{Error, ErrorKind, Result};

use super::{Admission, Entry, EtcdStore, Queue, fence, kept_left, last_get, latest, mark, waits};

impl EtcdStore {
    /// See [`LockStore::survey`](lockguard_core::store::LockStore::survey).
    pub(super) async fn survey_inner(&self, prefix: &str) -> Result<Vec<Holding>> {
        let locks = format!("{}lock/", self.prefix);
        let under = format!("{locks}{}", path_segment(prefix));
        let options = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend);
        let kvs = self.get("listing locks", &under, Some(options)).await?;
        // Each lock's keys, by its path segment: in creation order, as read.
        let mut queues: BTreeMap<&str, Vec<(Token, Entry)>> = BTreeMap::new();
        for kv in &kvs {
            let Some(segment) = kv
                .key_str()
                .ok()
                .and_then(|k| k.strip_prefix(locks.as_str()))
                .and_then(|rest| rest.rsplit_once('/'))
                .map(|(segment, _)| segment)
            else {
                tracing::debug!(key = ?kv.key(), "not a lockguard queue key; left out of the survey");
                continue;
            };
            let entry = Entry::of(kv);
            let token = entry.token.ok_or_else(|| {
                Error::new(
                    ErrorKind::Protocol,
                    format!(
                        "etcd key {} in a lock's queue holds no lockguard token",
                        entry.key
                    ),
                )
            })?;
            queues.entry(segment).or_default().push((token, entry));
        }
        let mut found = Vec::with_capacity(queues.len());
        for (segment, keys) in queues {
            let Some(id) = path_unsegment(segment).filter(|id| id.starts_with(prefix)) else {
                tracing::debug!(
                    segment,
                    "not a lockguard lock's queue; left out of the survey"
                );
                continue;
            };
            let (tokens, entries): (Vec<Token>, Vec<Entry>) = keys.into_iter().unzip();
            let queue = Queue::sorted(entries);
            let mut holders = Vec::new();
            let mut waiters = Vec::new();
            for (rank, (token, entry)) in tokens.into_iter().zip(&queue.entries).enumerate() {
                let (holds, mode) = holds(&queue, rank)?;
                if !holds {
                    waiters.push(Waiter::new(token, mode));
                    continue;
                }
                // What the acquisition drew (see `take`): a permit's write,
                // everyone else's creation.
                let drawn = if entry.mark == mark::HELD {
                    entry.modified
                } else {
                    entry.created
                };
                // A kept lock's key holds until its own lease ends.
                let left = kept_left(entry);
                holders.push(Holder::new(token, mode, Some(fence(drawn)?), left));
            }
            found.push(Holding::new(id, holders, waiters, latest(&queue)));
        }
        Ok(found)
    }

    /// See [`LockStore::evict`](lockguard_core::store::LockStore::evict):
    /// `token`'s key, the one whose value holds it, deleted when the
    /// lock's queue shows it holding.
    pub(super) async fn evict_inner(&self, keys: &LockKeys, token: &Token) -> Result<bool> {
        let dir = self.dir(keys);
        let txn = Txn::new().and_then([Self::listing(&dir)]);
        let queue = Queue::of(&last_get(&self.txn("reading a lock's queue", txn).await?)?);
        let Some(rank) = queue.entries.iter().position(|e| e.token == Some(*token)) else {
            return Ok(false);
        };
        let mine = &queue.entries[rank];
        let key = mine.key.clone();
        let admission = match mine.mark.as_slice() {
            mark::READ => Admission::Read,
            mark::WRITE => Admission::Write,
            _ => Admission::of(keys),
        };
        if waits(&queue, rank, admission).is_some() {
            return Ok(false);
        }
        // The key as read: a key of the same name created since is no
        // hold of this token's.
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.as_str(),
                CompareOp::Equal,
                mine.created,
            )])
            .and_then([TxnOp::delete(key.as_str(), None)]);
        let answer = self.txn("deleting a holder's key", txn).await?;
        if answer.succeeded() {
            tracing::debug!(key = %key, "forced release: deleted a holder's key");
        }
        Ok(answer.succeeded())
    }
}

/// Whether the key at `rank` of `queue` holds, by the store's rule for
/// its mark, and its mode of a read-write lock.
fn holds(queue: &Queue, rank: usize) -> Result<(bool, Option<RwMode>)> {
    let entry = &queue.entries[rank];
    let (admission, mode) = match entry.mark.as_slice() {
        mark::READ => (Admission::Read, Some(RwMode::Read)),
        mark::WRITE => (Admission::Write, Some(RwMode::Write)),
        // A semaphore's key written when it came to hold.
        mark::HELD => return Ok((true, None)),
        // A lock's first key holds, kept or not; so does a semaphore's,
        // whatever its count.
        mark::LOCK | mark::PERMIT => (Admission::Permits(1), None),
        kept if kept.starts_with(mark::KEPT) => (Admission::Permits(1), None),
        other => {
            return Err(Error::new(
                ErrorKind::Protocol,
                format!(
                    "etcd key {} in a lock's queue holds {:?}, no mark lockguard writes",
                    entry.key,
                    String::from_utf8_lossy(other)
                ),
            ));
        }
    };
    Ok((waits(queue, rank, admission).is_none(), mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, created: i64, mark: &[u8]) -> Entry {
        Entry {
            key: key.to_owned(),
            created,
            modified: created,
            mark: mark.to_vec(),
            token: None,
        }
    }

    fn holding(queue: &Queue) -> Vec<(bool, Option<RwMode>)> {
        (0..queue.entries.len())
            .map(|rank| holds(queue, rank).unwrap())
            .collect()
    }

    #[test]
    fn holders_are_the_keys_the_rule_admits() {
        let lock = Queue::sorted(vec![entry("b", 2, mark::LOCK), entry("a", 1, mark::LOCK)]);
        assert_eq!(lock.entries[0].key, "a");
        assert_eq!(holding(&lock), [(true, None), (false, None)]);
        let kept = Queue::sorted(vec![
            entry("a", 1, b"k:1700000000000"),
            entry("b", 2, mark::LOCK),
        ]);
        assert_eq!(holding(&kept), [(true, None), (false, None)]);
        let semaphore = Queue::sorted(vec![
            entry("a", 1, mark::PERMIT),
            entry("b", 2, mark::HELD),
            entry("c", 3, mark::PERMIT),
        ]);
        assert_eq!(
            holding(&semaphore),
            [(true, None), (true, None), (false, None)]
        );
        let rw = Queue::sorted(vec![
            entry("a", 1, mark::READ),
            entry("b", 2, mark::READ),
            entry("c", 3, mark::WRITE),
            entry("d", 4, mark::READ),
        ]);
        let (r, w) = (Some(RwMode::Read), Some(RwMode::Write));
        assert_eq!(holding(&rw), [(true, r), (true, r), (false, w), (false, r)]);
        let writer = Queue::sorted(vec![entry("c", 3, mark::WRITE), entry("d", 4, mark::READ)]);
        assert_eq!(holding(&writer), [(true, w), (false, r)]);
        let foreign = Queue::sorted(vec![entry("x", 1, b"?")]);
        let e = holds(&foreign, 0).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    }
}
