//! A worker's upgradeable read-write lock operations: a plain read, a
//! write, or an upgradeable read that upgrades half the time. Each is
//! recorded as holds the lock checks know:
//!
//! - on [`URW_KEY`], the read or write hold (an upgrade ends the read and
//!   starts a write), so the checks hold a writer to overlapping nobody
//!   and the fences to the order of the holds;
//! - on [`URW_GATE_KEY`], for the upgradeable reader and every writer, an
//!   exclusive hold for the guard's whole life, with the fence of the read
//!   or write it began with: no two upgraders (nor an upgrader and a
//!   writer) at once, and none between a read and its upgrade.

use std::time::Duration;

use lockguard_core::{Result, UpgradeableGuard};

use super::{LEASE, WAIT, Worker};
use crate::clock::now_ns;
use crate::history::{Call, Outcome};

/// The upgradeable read-write lock the workers share.
pub(crate) const URW_KEY: &str = "urw";

/// The exclusive hold its upgradeable reader and writers are recorded
/// with.
pub(crate) const URW_GATE_KEY: &str = "urw-gate";

impl Worker {
    /// One read in four, one write in four, an upgradeable read otherwise
    /// (upgraded half the time): acquire, a moment's hold (a fenced write
    /// for a write), release.
    pub(super) async fn upgradeable_op(&mut self) {
        let roll = self.rng.u32(0..4);
        if roll == 0 {
            return self.upgradeable_plain_read().await;
        }
        let writes = roll == 1;
        let urw = self.client.upgradeable_rw_lock(URW_KEY);
        let lock = if writes {
            urw.write()
        } else {
            urw.upgradeable_read()
        };
        // Two waits, the gate's and the hold's.
        let wait_ms = 2 * WAIT.as_millis() as u64;
        let acquire = |key: &str, read: bool| Call::Acquire {
            key: key.to_owned(),
            wait_ms,
            lease_ms: LEASE.as_millis() as u64,
            watchdog: false,
            read,
            permits: None,
            multi: false,
            at_least_ms: None,
        };
        let gate_op = self.rec.invoke(acquire(URW_GATE_KEY, false));
        let hold_op = self.rec.invoke(acquire(URW_KEY, !writes));
        let mut guard = match lock.wait(WAIT).lease(LEASE).acquire().await {
            Ok(g) => g,
            Err(e) => {
                self.rec.complete(hold_op, Outcome::error(&e));
                return self.rec.complete(gate_op, Outcome::error(&e));
            }
        };
        let first = guard.fencing_token().get();
        self.rec
            .complete(hold_op, Outcome::Acquired { fence: first });
        self.rec
            .complete(gate_op, Outcome::Acquired { fence: first });
        let mut fence = first;
        if self.gated_is_held(first, fence, &guard) && writes && self.counters {
            self.fenced_write(URW_KEY, fence).await;
        }
        tokio::time::sleep(Duration::from_millis(self.rng.u64(4..14))).await;
        if !writes && self.rng.bool() && self.gated_is_held(first, fence, &guard) {
            let release = self.rec.invoke(Call::Release {
                key: URW_KEY.to_owned(),
                fence,
            });
            let upgrade = self.rec.invoke(acquire(URW_KEY, false));
            match guard.upgrade().await {
                Ok(()) => {
                    self.rec
                        .complete(release, Outcome::Released { was_held: true });
                    fence = guard.fencing_token().get();
                    self.rec.complete(upgrade, Outcome::Acquired { fence });
                    if self.gated_is_held(first, fence, &guard) && self.counters {
                        self.fenced_write(URW_KEY, fence).await;
                    }
                    tokio::time::sleep(Duration::from_millis(self.rng.u64(4..14))).await;
                }
                Err(e) => {
                    // The read given back, maybe taken again with another
                    // fence: recorded as over, and the guard let go.
                    self.rec.complete(release, Outcome::error(&e));
                    self.rec.complete(upgrade, Outcome::error(&e));
                    let op = self.rec.invoke(Call::Release {
                        key: URW_GATE_KEY.to_owned(),
                        fence: first,
                    });
                    let out = released(guard.release().await);
                    return self.rec.complete(op, out);
                }
            }
        }
        self.gated_is_held(first, fence, &guard);
        let gate = self.rec.invoke(Call::Release {
            key: URW_GATE_KEY.to_owned(),
            fence: first,
        });
        let hold = self.rec.invoke(Call::Release {
            key: URW_KEY.to_owned(),
            fence,
        });
        let out = released(guard.release().await);
        self.rec.complete(hold, out.clone());
        self.rec.complete(gate, out);
    }

    /// A plain read of the upgradeable read-write lock.
    async fn upgradeable_plain_read(&mut self) {
        let read = self.client.upgradeable_rw_lock(URW_KEY).read();
        let op = self.rec.invoke(Call::Acquire {
            key: URW_KEY.to_owned(),
            wait_ms: WAIT.as_millis() as u64,
            lease_ms: LEASE.as_millis() as u64,
            watchdog: false,
            read: true,
            permits: None,
            multi: false,
            at_least_ms: None,
        });
        let guard = match read.wait(WAIT).lease(LEASE).acquire().await {
            Ok(g) => g,
            Err(e) => return self.rec.complete(op, Outcome::error(&e)),
        };
        let fence = guard.fencing_token().get();
        self.rec.complete(op, Outcome::Acquired { fence });
        self.held_now(URW_KEY, fence, || guard.is_held());
        tokio::time::sleep(Duration::from_millis(self.rng.u64(4..14))).await;
        self.held_now(URW_KEY, fence, || guard.is_held());
        let op = self.rec.invoke(Call::Release {
            key: URW_KEY.to_owned(),
            fence,
        });
        let out = released(guard.release().await);
        self.rec.complete(op, out);
    }

    /// `is_held()` of a gated guard, recorded for its gate (with the fence
    /// it began with) and for its hold now.
    fn gated_is_held(&mut self, first: u64, fence: u64, guard: &UpgradeableGuard) -> bool {
        let t = now_ns();
        let yes = guard.is_held();
        let t2 = now_ns();
        for (key, fence) in [(URW_GATE_KEY, first), (URW_KEY, fence)] {
            let call = Call::IsHeld {
                key: key.to_owned(),
                fence,
            };
            self.rec.record(call, t, t2, Outcome::Held { yes });
        }
        yes
    }

    /// `is_held` asked now, recorded with the time taken before the call
    /// (see [`Worker::is_held`]).
    fn held_now(&mut self, key: &str, fence: u64, is_held: impl FnOnce() -> bool) {
        let t = now_ns();
        let yes = is_held();
        let t2 = now_ns();
        let call = Call::IsHeld {
            key: key.to_owned(),
            fence,
        };
        self.rec.record(call, t, t2, Outcome::Held { yes });
    }
}

/// A release's outcome as recorded.
fn released(answer: Result<bool>) -> Outcome {
    match answer {
        Ok(was_held) => Outcome::Released { was_held },
        Err(e) => Outcome::error(&e),
    }
}
