//! A worker's read-write lock operations: a read (shared) or a write
//! (exclusive) hold of one key, recorded like a lock's hold, with
//! `read` marking the shared ones, so the lock checks hold a writer to
//! overlapping nobody and every fence to the order of the holds.

use std::time::Duration;

use lockguard_core::{ReadGuard, Result, WriteGuard};

use super::{LEASE, WAIT, Worker};
use crate::clock::now_ns;
use crate::history::{Call, Outcome};

/// A read or a write hold.
enum Held {
    Read(ReadGuard),
    Write(WriteGuard),
}

impl Held {
    fn is_held(&self) -> bool {
        match self {
            Held::Read(g) => g.is_held(),
            Held::Write(g) => g.is_held(),
        }
    }

    async fn release(self) -> Result<bool> {
        match self {
            Held::Read(g) => g.release().await,
            Held::Write(g) => g.release().await,
        }
    }
}

/// The read-write lock the workers share.
pub(crate) const RW_KEY: &str = "rw";

impl Worker {
    /// Three reads in four, a write otherwise: acquire, a moment's hold
    /// (a fenced write for a writer), release.
    pub(super) async fn rw_op(&mut self) {
        let read = self.rng.u32(0..4) != 0;
        let key = RW_KEY.to_owned();
        let rw = self.client.rw_lock(&key);
        let op = self.rec.invoke(Call::Acquire {
            key: key.clone(),
            wait_ms: WAIT.as_millis() as u64,
            lease_ms: LEASE.as_millis() as u64,
            watchdog: false,
            read,
            permits: None,
            multi: false,
            at_least_ms: None,
        });
        let acquired = if read {
            let g = rw.read().wait(WAIT).lease(LEASE).acquire().await;
            g.map(|g| (g.fencing_token().get(), Held::Read(g)))
        } else {
            let g = rw.write().wait(WAIT).lease(LEASE).acquire().await;
            g.map(|g| (g.fencing_token().get(), Held::Write(g)))
        };
        let (fence, guard) = match acquired {
            Ok(held) => held,
            Err(e) => return self.rec.complete(op, Outcome::error(&e)),
        };
        self.rec.complete(op, Outcome::Acquired { fence });
        if self.rw_is_held(&key, fence, &guard) && !read && self.counters {
            self.fenced_write(&key, fence).await;
        }
        tokio::time::sleep(Duration::from_millis(self.rng.u64(4..14))).await;
        self.rw_is_held(&key, fence, &guard);
        let op = self.rec.invoke(Call::Release { key, fence });
        match guard.release().await {
            Ok(was_held) => self.rec.complete(op, Outcome::Released { was_held }),
            Err(e) => self.rec.complete(op, Outcome::error(&e)),
        }
    }

    /// `is_held()` of a read or write hold, recorded as
    /// [`Worker::is_held`] records a lock's.
    fn rw_is_held(&mut self, key: &str, fence: u64, guard: &Held) -> bool {
        let t = now_ns();
        let yes = guard.is_held();
        let t2 = now_ns();
        let call = Call::IsHeld {
            key: key.to_owned(),
            fence,
        };
        self.rec.record(call, t, t2, Outcome::Held { yes });
        yes
    }
}
