//! Turns by key, for a store whose updates are compare-and-sets (etcd's
//! transactions on a revision, ZooKeeper's versioned writes): a client's
//! own updates of one key go one at a time, so tasks that share a client
//! race only other clients' writes, never each other's.
//!
//! Sixty-four tasks on four clients decrementing one counter by
//! compare-and-set, each update a read and a conditional write, make every
//! round of writes a race of 64 where one wins: the work of an update grows
//! with the number of tasks. Taken in turns, a round is a race of four,
//! and a client whose update follows its own last write finds the key as
//! it left it.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

/// Each key's turn, for the updates of one client: one [`Turn`] of a key
/// at a time. A key's entry lasts while an update of it holds or awaits
/// its turn, so the map holds the keys being updated, not every key ever
/// updated.
///
/// # Examples
///
/// ```
/// use lockguard_core::store::Turns;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let turns = Turns::default();
/// let turn = turns.take("counter/stock").await;
/// // ... read the key, write it back if unchanged ...
/// drop(turn);
/// // The next update of the key goes at once.
/// let _next = turns.take("counter/stock").await;
/// # }
/// ```
#[derive(Default)]
pub struct Turns(Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl fmt::Debug for Turns {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = self.0.lock().map_or(0, |t| t.len());
        f.debug_struct("Turns").field("keys", &keys).finish()
    }
}

impl Turns {
    /// Waits for `key`'s turn, first come first served; the next waiter's
    /// comes when the returned [`Turn`] is dropped (its update ended, or
    /// its future was dropped).
    pub async fn take(&self, key: &str) -> Turn<'_> {
        let turn = {
            let mut turns = self.0.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(turns.entry(key.to_owned()).or_default())
        };
        let mut waiting = Waiting {
            turns: self,
            key,
            lock: Some(Box::pin(turn.lock_owned())),
        };
        let held = waiting.lock.as_mut().expect("set above").await;
        // Its turn came: nothing to forget when `waiting` goes.
        waiting.lock = None;
        Turn {
            held: Some(held),
            turns: self,
            key: key.to_owned(),
        }
    }

    /// Forgets `key` unless an update holds or awaits its turn: only the
    /// map's own reference is left. Under the map's lock, where every new
    /// update takes its reference.
    fn forget_if_idle(&self, key: &str) {
        let mut turns = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if turns.get(key).is_some_and(|t| Arc::strong_count(t) == 1) {
            turns.remove(key);
        }
    }

    /// How many keys an update holds or awaits the turn of.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// An update waiting for its key's turn.
struct Waiting<'a, 'k> {
    turns: &'a Turns,
    key: &'k str,
    /// The wait, holding a reference to the key's turn.
    lock: Option<Pin<Box<dyn Future<Output = OwnedMutexGuard<()>> + Send>>>,
}

impl Drop for Waiting<'_, '_> {
    fn drop(&mut self) {
        // A wait given up before its turn came: its reference goes first,
        // then the entry when that was the last.
        if self.lock.take().is_some() {
            self.turns.forget_if_idle(self.key);
        }
    }
}

/// One key's turn, held by the update that runs; the next update's turn
/// comes when it is dropped.
pub struct Turn<'a> {
    held: Option<OwnedMutexGuard<()>>,
    turns: &'a Turns,
    key: String,
}

impl fmt::Debug for Turn<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Turn").field("key", &self.key).finish()
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        drop(self.held.take());
        self.turns.forget_if_idle(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_update_of_a_key_at_a_time_and_the_entry_goes_after() {
        let turns = Arc::new(Turns::default());
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (turns, inside, most) = (turns.clone(), inside.clone(), most.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..20 {
                    let _turn = turns.take("k").await;
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(
            most.load(Ordering::SeqCst),
            1,
            "two updates of one key at once"
        );
        assert_eq!(turns.len(), 0, "an entry outlived its updates");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn other_keys_do_not_wait_and_a_dropped_wait_leaves_nothing() {
        let turns = Turns::default();
        let a = turns.take("a").await;
        // Another key's turn comes at once.
        let b = tokio::time::timeout(Duration::from_secs(5), turns.take("b"))
            .await
            .expect("another key's turn waited");
        // A wait for `a` given up before its turn came.
        assert!(
            tokio::time::timeout(Duration::from_millis(10), turns.take("a"))
                .await
                .is_err()
        );
        assert_eq!(turns.len(), 2);
        drop(b);
        assert_eq!(turns.len(), 1);
        drop(a);
        assert_eq!(turns.len(), 0);
        // And the key's turn comes again.
        drop(turns.take("a").await);
    }
}
