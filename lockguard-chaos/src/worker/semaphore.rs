//! A worker's semaphore operations: a permit of one semaphore, recorded as
//! a hold with the semaphore's number of permits, so the `permits` check
//! holds the store to at most that many holders at once, and the fence
//! checks to fresh, increasing tokens.

use std::time::Duration;

use lockguard_core::Permit;

use super::{LEASE, WAIT, Worker};
use crate::clock::now_ns;
use crate::history::{Call, Outcome};

/// The semaphore the workers share, and its permits: fewer than the
/// workers, so they queue.
pub(crate) const SEMAPHORE_KEY: &str = "sem";
const PERMITS: u32 = 2;

/// The record of an attempt at a permit of the shared semaphore.
fn acquire_call(key: &str) -> Call {
    Call::Acquire {
        key: key.to_owned(),
        wait_ms: WAIT.as_millis() as u64,
        lease_ms: LEASE.as_millis() as u64,
        watchdog: false,
        read: false,
        permits: Some(PERMITS),
        multi: false,
        at_least_ms: None,
    }
}

impl Worker {
    /// Acquire a permit, hold it a moment, release it.
    pub(super) async fn semaphore_op(&mut self) {
        let key = SEMAPHORE_KEY.to_owned();
        let op = self.rec.invoke(acquire_call(&key));
        let acquired = self
            .client
            .semaphore(&key, PERMITS)
            .wait(WAIT)
            .lease(LEASE)
            .acquire()
            .await;
        let permit = match acquired {
            Ok(p) => p,
            Err(e) => return self.rec.complete(op, Outcome::error(&e)),
        };
        let fence = permit.watch().fencing_token().get();
        self.rec.complete(op, Outcome::Acquired { fence });
        self.permit_is_held(&key, fence, &permit);
        tokio::time::sleep(Duration::from_millis(self.rng.u64(4..14))).await;
        self.permit_is_held(&key, fence, &permit);
        let op = self.rec.invoke(Call::Release { key, fence });
        match permit.release().await {
            Ok(was_held) => self.rec.complete(op, Outcome::Released { was_held }),
            Err(e) => self.rec.complete(op, Outcome::error(&e)),
        }
    }

    /// [`Break::Overbook`](super::Break::Overbook): every permit of a
    /// semaphore of one permit more than the shared one's, recorded as the
    /// shared one's, held at once.
    pub(super) async fn overbook_op(&mut self) {
        let key = SEMAPHORE_KEY.to_owned();
        let semaphore = self
            .client
            .semaphore(&key, PERMITS + 1)
            .wait(WAIT)
            .lease(LEASE);
        let mut held = Vec::new();
        for _ in 0..=PERMITS {
            let op = self.rec.invoke(acquire_call(&key));
            match semaphore.acquire().await {
                Ok(p) => {
                    let fence = p.watch().fencing_token().get();
                    self.rec.complete(op, Outcome::Acquired { fence });
                    held.push((fence, p));
                }
                Err(e) => self.rec.complete(op, Outcome::error(&e)),
            }
        }
        tokio::time::sleep(Duration::from_millis(self.rng.u64(4..14))).await;
        for (fence, permit) in held {
            self.permit_is_held(&key, fence, &permit);
            let op = self.rec.invoke(Call::Release {
                key: key.clone(),
                fence,
            });
            match permit.release().await {
                Ok(was_held) => self.rec.complete(op, Outcome::Released { was_held }),
                Err(e) => self.rec.complete(op, Outcome::error(&e)),
            }
        }
    }

    /// `is_held()` of a permit, recorded as [`Worker::is_held`] records a
    /// lock's.
    fn permit_is_held(&mut self, key: &str, fence: u64, permit: &Permit) {
        let t = now_ns();
        let yes = permit.is_held();
        let t2 = now_ns();
        let call = Call::IsHeld {
            key: key.to_owned(),
            fence,
        };
        self.rec.record(call, t, t2, Outcome::Held { yes });
    }
}
