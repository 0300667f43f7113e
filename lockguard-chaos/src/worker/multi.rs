//! A multi-lock worker's operations: `multi_lock(keys)` with a fixed lease
//! shorter than its wait, recorded as one acquisition per key (invoked
//! together, completed together), so the lock checks hold every key of it
//! to the rules of single locks, from the moment it returns.
//!
//! Half the multi-locks are long: two keys only multi-locks take, held a
//! few hundred milliseconds on a long lease. Half are short: a key the
//! mixed workers lock one at a time, then one or both of the multi-only
//! keys, held a moment on a lease shorter than a long hold. Every client
//! takes a multi-lock's keys in one order (the store's keys, sorted), the
//! mixed workers' key first: a short one often takes it, then waits
//! behind a long one for a multi-only key, and its first key's lease runs
//! out meanwhile, and a mixed worker queued on that key takes it. The
//! short one must take it again before it returns (or fail): the
//! `multi-lock` check catches one that returns without. The long holds
//! keep off the mixed workers' keys, so the mixed workers' own pace is
//! kept.

use std::time::Duration;

use lockguard_core::LockGuard;

use super::{LOCK_KEYS, WAIT, Worker};
use crate::clock::now_ns;
use crate::history::{Call, Outcome};

/// The keys only multi-locks take, after the mixed workers' keys in every
/// store's order.
const MULTI_ONLY_KEYS: [&str; 2] = ["c", "d"];

/// The fixed lease of the long holds, and how long they hold.
const LONG_LEASE: Duration = Duration::from_millis(600);
const LONG_HOLD_MS: std::ops::Range<u64> = 100..250;
/// The fixed lease of the short holds: well under the long holds, so a
/// key taken first runs out while a later one is waited for (and the
/// mixed workers are kept off their key no longer than that); far under
/// the wait.
const SHORT_LEASE: Duration = Duration::from_millis(50);

/// The record of one key's part in a multi-lock.
fn acquire_call(key: &str, lease: Duration) -> Call {
    Call::Acquire {
        key: key.to_owned(),
        wait_ms: WAIT.as_millis() as u64,
        lease_ms: lease.as_millis() as u64,
        watchdog: false,
        read: false,
        permits: None,
        multi: true,
        at_least_ms: None,
    }
}

impl Worker {
    /// One multi-lock, long or short, held, then each key released;
    /// whether an operation failed.
    pub(super) async fn multi_op(&mut self) -> bool {
        self.rec.errors = 0;
        if self.brk == Some(super::Break::UncheckedMulti) {
            self.unchecked_multi().await;
            return self.rec.errors > 0;
        }
        let long = self.rng.bool();
        let (keys, lease, hold) = if long {
            let hold = self.rng.u64(LONG_HOLD_MS);
            (MULTI_ONLY_KEYS.to_vec(), LONG_LEASE, hold)
        } else {
            let mut keys = vec![LOCK_KEYS[self.rng.usize(..LOCK_KEYS.len())]];
            keys.push(MULTI_ONLY_KEYS[0]);
            if self.rng.u32(0..4) == 0 {
                keys.push(MULTI_ONLY_KEYS[1]);
            }
            (keys, SHORT_LEASE, self.rng.u64(4..14))
        };
        // Named in a random order: the store's order is the one taken.
        let mut keys: Vec<String> = keys.into_iter().map(str::to_owned).collect();
        self.rng.shuffle(&mut keys);
        let ops: Vec<u64> = keys
            .iter()
            .map(|key| self.rec.invoke(acquire_call(key, lease)))
            .collect();
        let result = self
            .client
            .multi_lock(&keys)
            .wait(WAIT)
            .lease(lease)
            .acquire()
            .await;
        let t = now_ns();
        let guard = match result {
            Ok(g) => g,
            Err(e) => {
                for op in ops {
                    self.rec.complete_at(op, t, Outcome::error(&e));
                }
                return true;
            }
        };
        for (key, op) in keys.iter().zip(ops) {
            let fence = guard
                .fencing_token(key)
                .expect("a key of the multi-lock")
                .get();
            self.rec.complete_at(op, t, Outcome::Acquired { fence });
        }
        // Each key's guard on its own, so each release is recorded exactly.
        let guards = guard.into_guards();
        for g in &guards {
            let (key, fence) = (g.name().to_owned(), g.fencing_token().get());
            if self.is_held(&key, g) && self.counters {
                self.fenced_write(&key, fence).await;
            }
        }
        tokio::time::sleep(Duration::from_millis(hold)).await;
        self.release_all(guards).await;
        self.rec.errors > 0
    }

    /// `is_held()` of each guard, then its release, recorded.
    async fn release_all(&mut self, guards: Vec<LockGuard>) {
        for g in guards {
            let (key, fence) = (g.name().to_owned(), g.fencing_token().get());
            self.is_held(&key, &g);
            self.last_fence.insert(key.clone(), fence);
            let op = self.rec.invoke(Call::Release { key, fence });
            match g.release().await {
                Ok(was_held) => self.rec.complete(op, Outcome::Released { was_held }),
                Err(e) => self.rec.complete(op, Outcome::error(&e)),
            }
        }
    }

    /// [`Break::UncheckedMulti`](super::Break::UncheckedMulti): the
    /// multi-lock of lockguard before it checked its earlier keys, played
    /// out key by key. It takes the first key on a short lease, waits past
    /// that lease as if a later key were busy, meanwhile takes the first
    /// key as another owner would (a lock of its own, on a long lease,
    /// held across the return), then takes the last key and records the
    /// multi-lock as returned, holding both, without looking at the first
    /// key again. Its first key's `is_held()` then says false, and the
    /// other owner's says true: two holders at the multi-lock's return.
    async fn unchecked_multi(&mut self) {
        let (first, last) = (LOCK_KEYS[0].to_owned(), MULTI_ONLY_KEYS[0].to_owned());
        let lease = SHORT_LEASE;
        let ops = [
            self.rec.invoke(acquire_call(&first, lease)),
            self.rec.invoke(acquire_call(&last, lease)),
        ];
        let fail = |w: &mut Self, e: &lockguard_core::Error| {
            let t = now_ns();
            for op in ops {
                w.rec.complete_at(op, t, Outcome::error(e));
            }
        };
        let client = self.client.clone();
        let lock = |key: &str, lease| client.lock(key).wait(WAIT).lease(lease);
        let early = match lock(&first, lease).acquire().await {
            Ok(g) => g,
            Err(e) => return fail(self, &e),
        };
        tokio::time::sleep(lease * 2).await;
        // The other owner: a lock of the first key, on a lease that
        // outlasts the rest (a long one: the longest a ZooKeeper client
        // of the workers keeps is 2 s).
        let other_lease = LONG_LEASE * 3;
        let op = self.rec.invoke(Call::Acquire {
            key: first.clone(),
            wait_ms: WAIT.as_millis() as u64,
            lease_ms: other_lease.as_millis() as u64,
            watchdog: false,
            read: false,
            permits: None,
            multi: false,
            at_least_ms: None,
        });
        let other = match lock(&first, other_lease).acquire().await {
            Ok(g) => {
                let fence = g.fencing_token().get();
                self.rec.complete(op, Outcome::Acquired { fence });
                g
            }
            Err(e) => {
                self.rec.complete(op, Outcome::error(&e));
                return fail(self, &e);
            }
        };
        let late = match lock(&last, lease).acquire().await {
            Ok(g) => g,
            Err(e) => {
                fail(self, &e);
                return self.release_all(vec![other]).await;
            }
        };
        // The broken part: returned, with the first key not looked at.
        let t = now_ns();
        for (op, g) in ops.into_iter().zip([&early, &late]) {
            let fence = g.fencing_token().get();
            self.rec.complete_at(op, t, Outcome::Acquired { fence });
        }
        self.release_all(vec![early, late, other]).await;
    }
}
