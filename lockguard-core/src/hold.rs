//! One held lock or permit: its token and fencing token, and what its
//! holder knows of its lease (until when it is certainly ours, whether the
//! store said it is gone). The guards, the watchdog and the lease watches
//! share it.
//!
//! One word per concept for a held lock. A *grant* is what the store
//! answered to an acquire that succeeded: the token, the fencing token and
//! until when the lock is certainly ours ([`Grant`]). A *hold* is one lock
//! or permit held, from its grant to its release: a [`Hold`], made from the
//! grant, which the watchdog renews, the lease watches observe and the
//! guards release. A *guard* is the user's handle on a hold (`LockGuard`,
//! `Permit`); a guard and the reentrant guards of its scope are the hold's
//! *guards* (`guard::Guards`), and the last of them to go releases it. An
//! *acquisition* is only ever the act of asking for a lock (its metrics,
//! its span), and a *lease* how long the store keeps a hold unrenewed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::runtime::Id;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::engine::Engine;
use crate::error::{Error, ErrorKind};
use crate::fence::FencingToken;
use crate::key::LockKeys;
use crate::lease::{Grant, LeaseState, valid_until};
use crate::meter::Series;
use crate::token::Token;

/// One held lock or permit, as its guards, the watchdog and the lease
/// watches see it: what it is, and what is known of its lease.
#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) engine: Arc<Engine>,
    pub(crate) name: Arc<str>,
    /// Its metrics' series.
    pub(crate) series: Series,
    /// When it was granted.
    pub(crate) since: Instant,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) token: Token,
    pub(crate) fence: FencingToken,
    pub(crate) lease: Duration,
    /// Whether the watchdog renews the lease while a guard lives.
    pub(crate) watchdog: bool,
    /// A handoff's reservation, when its grant recorded only that (shorter
    /// than the lease): the first renewal, due a third of the way into it,
    /// extends it to the lease (for a fixed lease, the only one). A hold
    /// released before that is never extended: a short hold costs the
    /// store no request for its lease.
    pub(crate) reserved: Option<Duration>,
    state: std::sync::Mutex<LeaseState>,
    /// Told of every change of `state`, and of the release.
    changed: Notify,
    /// Set when the guard is released or dropped: a confirmation that
    /// finds the lock gone after that is no loss.
    pub(crate) released: AtomicBool,
    /// Held from sending a renewal (watchdog, `extend`, confirmation) to
    /// applying its answer: renewals are sent and applied in one order, so
    /// the validity the guard counts on is the one the store ran last.
    pub(crate) renewal: tokio::sync::Mutex<()>,
    /// Where its next watchdog renewal is booked: the watchdog writes it,
    /// a release reads it to take the renewal out of the timer.
    pub(crate) booking: std::sync::Mutex<Option<Booking>>,
    /// Until when a release keeps the lock (`Lock::at_least`).
    pub(crate) keep_until: std::sync::OnceLock<Instant>,
}

/// Where a hold's next watchdog renewal is booked: the timer of
/// runtime `runtime`, at `at`, numbered `n` among the bookings due then.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Booking {
    pub(crate) runtime: Id,
    pub(crate) at: Instant,
    pub(crate) n: u64,
}

impl Hold {
    /// The hold made from `grant`, whose lease is `lease` (renewed by the
    /// watchdog when `watchdog`), granted at `since`; `reserved` when the
    /// grant recorded a handoff's shorter reservation.
    pub(crate) fn new(
        engine: Arc<Engine>,
        (name, series): (Arc<str>, Series),
        keys: Arc<LockKeys>,
        grant: Grant,
        (lease, since, watchdog, reserved): (Duration, Instant, bool, Option<Duration>),
    ) -> Self {
        Self {
            engine,
            name,
            series,
            since,
            keys,
            token: grant.token,
            fence: grant.fence,
            lease,
            watchdog,
            reserved,
            state: std::sync::Mutex::new(LeaseState {
                valid_until: grant.valid_until,
                lost: false,
            }),
            changed: Notify::new(),
            released: AtomicBool::new(false),
            renewal: tokio::sync::Mutex::new(()),
            booking: std::sync::Mutex::new(None),
            keep_until: std::sync::OnceLock::new(),
        }
    }

    /// How much longer a release must keep the lock (`Lock::at_least`):
    /// `None` when it may free it now.
    pub(crate) fn keep_for(&self) -> Option<Duration> {
        let left = self
            .keep_until
            .get()?
            .saturating_duration_since(Instant::now());
        (left >= Duration::from_millis(1)).then_some(left)
    }

    /// What is known of the lease now.
    pub(crate) fn lease_state(&self) -> LeaseState {
        *self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes what is known of the lease with `f`, which says whether it
    /// changed anything; the lease's watchers are told if it did.
    fn modify(&self, f: impl FnOnce(&mut LeaseState) -> bool) -> bool {
        let changed = f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()));
        if changed {
            self.changed.notify_waiters();
        }
        changed
    }

    /// Tells the lease's watchers that it was given up (`released` is set).
    pub(crate) fn announce_release(&self) {
        self.changed.notify_waiters();
    }

    /// How much longer the lease certainly lasts (zero once lost).
    pub(crate) fn valid_for(&self) -> Duration {
        let s = self.lease_state();
        if s.lost || self.released.load(Ordering::Acquire) {
            Duration::ZERO
        } else {
            s.valid_until.saturating_duration_since(Instant::now())
        }
    }

    /// Completes when the lock is lost or its lease is about to run out.
    pub(crate) async fn lost(hold: Arc<Self>) -> Error {
        loop {
            // Made before the state is read: a change after the read
            // completes it.
            let changed = hold.changed.notified();
            let s = hold.lease_state();
            if s.lost {
                return hold.lost_error("was lost");
            }
            if hold.released.load(Ordering::Acquire) {
                return hold.lost_error("was released");
            }
            if Instant::now() >= s.valid_until {
                return hold.lost_error("is running out");
            }
            tokio::select! {
                () = tokio::time::sleep_until(s.valid_until) => {}
                () = changed => {}
            }
        }
    }

    pub(crate) fn is_held(&self) -> bool {
        let s = self.lease_state();
        !s.lost && Instant::now() < s.valid_until && !self.released.load(Ordering::Acquire)
    }

    pub(crate) fn mark_lost(&self, why: &str) {
        let now = Instant::now();
        let newly = self.modify(|s| {
            let newly = !s.lost;
            *s = LeaseState {
                valid_until: now,
                lost: true,
            };
            newly
        });
        if newly {
            self.series.lost();
            tracing::warn!(lock = %self.name, fence = self.fence.get(), reason = why, "lease lost");
        }
    }

    /// Records a successful renewal sent at `sent_at`. A renewal that comes
    /// back after the lease had already run out locally does not revive the
    /// guard: its loss has been signalled, so it stays lost. Returns whether
    /// the guard still holds.
    pub(crate) fn renewed(&self, sent_at: Instant, lease: Duration) -> bool {
        let now = Instant::now();
        let mut revived_too_late = false;
        let mut margin = None;
        self.modify(|s| {
            if s.lost {
                false
            } else if now >= s.valid_until {
                revived_too_late = true;
                false
            } else {
                margin = Some(s.valid_until.saturating_duration_since(sent_at));
                s.valid_until = valid_until(sent_at, lease);
                true
            }
        });
        if let Some(margin) = margin {
            self.series.lease_margin(margin);
        }
        if revived_too_late {
            self.mark_lost("renewal answered after the lease had run out");
        }
        !self.lease_state().lost
    }

    /// Before a renewal sent at `sent_at` for `lease`: the guard counts on
    /// no more than that renewal would give until its answer comes, as it
    /// may shorten what the store keeps (a handoff's reservation longer
    /// than the lease). Other renewals only lengthen it.
    pub(crate) fn renewing(&self, sent_at: Instant, lease: Duration) {
        let capped = valid_until(sent_at, lease);
        self.modify(|s| {
            let cap = capped < s.valid_until;
            if cap {
                s.valid_until = capped;
            }
            cap
        });
    }

    /// The `primitive` label of its metrics.
    pub(crate) fn primitive(&self) -> &'static str {
        crate::meter::primitive(&self.keys)
    }

    pub(crate) fn lost_error(&self, why: &str) -> Error {
        Error::new(
            ErrorKind::LeaseLost,
            format!(
                "lease of lock {:?} (fencing token {}) {why}",
                self.name, self.fence
            ),
        )
    }
}
