//! Turns by key, for a store whose updates are compare-and-sets (etcd's
//! transactions on a revision, ZooKeeper's versioned writes): a client's
//! own updates of one key go one at a time, so tasks that share a client
//! race only other clients' writes, never each other's, and each turn
//! carries what the one before it last saw of the key.
//!
//! Sixty-four tasks on four clients decrementing one counter by
//! compare-and-set, each update a read and a conditional write, make every
//! round of writes a race of 64 where one wins: the work of an update grows
//! with the number of tasks. Taken in turns, a round is a race of four,
//! and a client whose update follows its own last write finds the key as
//! it left it: with that write remembered in the turn, it writes with no
//! read first.

use std::collections::HashMap;
use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

/// Below this many keys a map of turns is never swept.
const KEYS_FLOOR: usize = 4096;

/// Each key's turn, for the updates of one client: one [`Turn`] of a key
/// at a time, first come first served, and with it a `T` the updates of
/// the key keep between them (what the last one read or wrote; `()` for
/// none).
///
/// A key's entry, with its `T`, stays after its updates end. Once the map
/// holds 4,096 keys (or twice as many as its last sweep kept), a new key
/// sweeps it: the keys that no update holds or awaits go, with what they
/// kept. So the map holds the keys in use and at most a few thousand
/// more, however many keys a client updates in its life.
///
/// # Examples
///
/// ```
/// use lockguard_core::store::Turns;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// // Each key's last-seen version, kept between a client's updates of it.
/// let turns: Turns<Option<u64>> = Turns::default();
/// let mut turn = turns.take("counter/stock").await;
/// assert_eq!(*turn, None, "never updated: read the key first");
/// // ... read the key, write it back if unchanged ...
/// *turn = Some(7);
/// drop(turn);
/// // The next update of the key goes at once, from what the last one saw.
/// assert_eq!(*turns.take("counter/stock").await, Some(7));
/// # }
/// ```
pub struct Turns<T = ()>(Mutex<Keys<T>>);

struct Keys<T> {
    by_key: HashMap<String, Arc<tokio::sync::Mutex<T>>>,
    sweep_at: usize,
}

impl<T> Default for Turns<T> {
    fn default() -> Self {
        Self(Mutex::new(Keys {
            by_key: HashMap::new(),
            sweep_at: KEYS_FLOOR,
        }))
    }
}

impl<T> fmt::Debug for Turns<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = self.0.lock().map_or(0, |k| k.by_key.len());
        f.debug_struct("Turns").field("keys", &keys).finish()
    }
}

impl<T: Default> Turns<T> {
    /// Waits for `key`'s turn, first come first served; the next waiter's
    /// comes when the returned [`Turn`] is dropped (its update ended, or
    /// its future was dropped). The turn derefs to what the key's updates
    /// keep: `T::default()` for a key new to the map.
    pub async fn take(&self, key: &str) -> Turn<T> {
        let turn = {
            // Every update below is complete before it can panic.
            let mut keys = self.0.lock().unwrap_or_else(|p| p.into_inner());
            match keys.by_key.get(key) {
                Some(turn) => Arc::clone(turn),
                None => {
                    if keys.by_key.len() >= keys.sweep_at {
                        // Only the map's own reference left: no update
                        // holds or awaits the key's turn.
                        keys.by_key.retain(|_, t| Arc::strong_count(t) > 1);
                        keys.sweep_at = (keys.by_key.len() * 2).max(KEYS_FLOOR);
                    }
                    let turn = Arc::new(tokio::sync::Mutex::new(T::default()));
                    keys.by_key.insert(key.to_owned(), Arc::clone(&turn));
                    turn
                }
            }
        };
        Turn(turn.lock_owned().await)
    }

    /// How many keys the map holds.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .by_key
            .len()
    }
}

/// One key's turn, held by the update that runs, with what the key's
/// updates keep between them; the next update's turn comes when it is
/// dropped.
pub struct Turn<T = ()>(OwnedMutexGuard<T>);

impl<T: fmt::Debug> fmt::Debug for Turn<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Turn").field(&*self.0).finish()
    }
}

impl<T> Deref for Turn<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> DerefMut for Turn<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_update_of_a_key_at_a_time_each_after_the_last() {
        let turns: Arc<Turns<u64>> = Arc::new(Turns::default());
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (turns, inside, most) = (turns.clone(), inside.clone(), most.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..20 {
                    let mut turn = turns.take("k").await;
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    let seen = *turn;
                    tokio::task::yield_now().await;
                    // A read-modify-write of what the turn keeps: a turn
                    // taken between would lose an update.
                    *turn = seen + 1;
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
        assert_eq!(*turns.take("k").await, 16 * 20, "an update was lost");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn other_keys_do_not_wait_and_a_dropped_wait_takes_nothing() {
        let turns: Turns<Vec<&str>> = Turns::default();
        let mut a = turns.take("a").await;
        a.push("first");
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
        drop((a, b));
        // `a`'s next turn comes, with what the first kept.
        let mut a = turns.take("a").await;
        assert_eq!(*a, ["first"]);
        a.push("second");
        drop(a);
        assert_eq!(*turns.take("a").await, ["first", "second"]);
    }

    /// However many keys a client updates, the map keeps those in use and
    /// a bounded number more: a new key past the bound sweeps out the idle
    /// ones, and a key in use keeps its turn and what it holds.
    #[tokio::test(flavor = "current_thread")]
    async fn idle_keys_are_swept_and_keys_in_use_stay() {
        let turns: Turns<u32> = Turns::default();
        let mut busy = turns.take("busy").await;
        *busy = 7;
        for i in 0..10 * KEYS_FLOOR {
            *turns.take(&format!("k{i}")).await = 1;
            assert!(turns.len() <= KEYS_FLOOR + 1, "{} keys kept", turns.len());
        }
        drop(busy);
        assert_eq!(*turns.take("busy").await, 7, "a key in use was swept");
    }
}
