//! One attempt on the store, and what its answer gives: a guard, or why
//! not, and the errors that say so.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Lock;
use crate::error::{Error, ErrorKind, Result};
use crate::guard::{Guards, LockGuard, PendingRelease};
use crate::key::{LockKeys, Resource};
use crate::lease::{Grant, valid_until};
use crate::store::{Outcome, Place};
use crate::token::Token;

impl Lock {
    /// One attempt; it never queues, and keeps a waiter's `place` in the
    /// line of a store whose waiters line up (Redlock). `Ok(Err(wait))`
    /// when someone else
    /// holds the lock: `Busy(ttl)` with their remaining lease, or
    /// `Contended` when a round had no winner and the caller should back
    /// off at random.
    pub(super) async fn attempt(
        &self,
        keys: &Arc<LockKeys>,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> Result<Result<LockGuard, Wait>> {
        let token = Token::random();
        let sent_at = Instant::now();
        // Until the store's answer is handled, a drop of this future (or a
        // timeout with an unknown outcome) releases the token in the
        // background: the request may have taken the lock.
        let pending = PendingRelease::new(&self.engine, keys, token);
        let outcome = self
            .engine
            .store
            .acquire(keys, &token, lease, place)
            .await?;
        pending.disarm();
        self.attempted(token, sent_at, lease, outcome)
    }

    /// [`attempt`](Lock::attempt) where the store answers at once; `None`
    /// (nothing sent) where it needs a round trip.
    pub(super) fn attempt_now(
        &self,
        keys: &Arc<LockKeys>,
        lease: Duration,
        sent_at: Instant,
    ) -> Option<Result<Result<LockGuard, Wait>>> {
        let token = Token::random();
        let store = &self.engine.store;
        let outcome = store.acquire(keys, &token, lease, None).now()?;
        Some(outcome.and_then(|outcome| self.attempted(token, sent_at, lease, outcome)))
    }

    /// What the store's answer to an attempt with `token`, sent at
    /// `sent_at`, gives.
    fn attempted(
        &self,
        token: Token,
        sent_at: Instant,
        lease: Duration,
        outcome: Outcome,
    ) -> Result<Result<LockGuard, Wait>> {
        match outcome {
            Outcome::Busy(ttl) | Outcome::Queued { ttl, .. } => Ok(Err(Wait::Busy(ttl))),
            // Our partial grants were undone by the store already.
            Outcome::Contended => Ok(Err(Wait::Contended)),
            Outcome::Acquired { fence, keys } => {
                let grant = Grant {
                    token,
                    fence,
                    valid_until: valid_until(sent_at, lease),
                };
                self.granted(keys, grant, None).map(Ok)
            }
            // Granted to an earlier wait in the server: the lease runs
            // from the grant, not from this attempt. A reservation shorter
            // than the lease is extended to it a third of the way into it,
            // unless the guard is gone by then.
            Outcome::Granted {
                fence,
                keys,
                at,
                recorded,
            } => {
                let grant = Grant {
                    token,
                    fence,
                    valid_until: valid_until(at.min(sent_at), recorded.min(lease)),
                };
                let reserved = (recorded < lease).then_some(recorded);
                self.granted(keys, grant, reserved).map(Ok)
            }
        }
    }

    /// The guard for what `grant` gave (its `keys`), or an error (and the
    /// token released) when the grant's validity has passed: a lock that
    /// might have expired is never handed out. `reserved` when the grant
    /// recorded only a handoff's reservation, shorter than the lease.
    pub(crate) fn granted(
        &self,
        keys: Arc<LockKeys>,
        grant: Grant,
        reserved: Option<Duration>,
    ) -> Result<LockGuard> {
        let kept = self.effective_lease()?;
        let lease = kept.duration();
        let now = Instant::now();
        if now >= grant.valid_until {
            drop(PendingRelease::new(&self.engine, &keys, grant.token));
            return Err(self.lapsed(lease));
        }
        let watchdog = self.lease.is_watchdog();
        let fence = grant.fence;
        let guards = Guards::new(
            self.engine.clone(),
            (self.name.clone(), self.series()),
            keys,
            grant,
            (kept, now, reserved),
        );
        if !self.at_least.is_zero() {
            guards.keep_until(now + self.at_least);
        }
        tracing::debug!(lock = %self.name, fence = fence.get(), lease_ms = lease.as_millis() as u64, watchdog, "lock acquired");
        Ok(LockGuard::new(guards))
    }

    /// The error of a grant whose answer came after its `lease` could have
    /// run out: the lock was given back, never used.
    pub(crate) fn lapsed(&self, lease: Duration) -> Error {
        Error::new(
            ErrorKind::Timeout,
            format!(
                "lock {:?} was granted too late to use its {lease:?} lease",
                self.name
            ),
        )
    }

    /// The error of a wait whose last `lapses` grants all came after their
    /// `lease` could have run out: the store takes longer to answer than
    /// the lease lasts.
    pub(crate) fn lapsed_in_a_row(&self, lease: Duration, lapses: u32) -> Error {
        Error::new(
            ErrorKind::Timeout,
            format!(
                "lock {:?} was granted too late to use its {lease:?} lease {lapses} times in a row: the store's answers take longer than the lease; give the lock a longer one",
                self.name
            ),
        )
    }

    /// The error of a multi-lock's wait in which this key, taken first,
    /// lapsed `lapses` times in a row while the keys after it were taken:
    /// its `lease` is shorter than taking every key takes.
    pub(crate) fn lapsed_while_taking_the_rest(&self, lease: Duration, lapses: u32) -> Error {
        Error::new(
            ErrorKind::Timeout,
            format!(
                "lock {:?} of a multi-lock lapsed {lapses} times in a row while the keys after it were taken: its {lease:?} lease is shorter than taking every key takes; give the multi-lock a longer lease, or none (the watchdog renews it)",
                self.name
            ),
        )
    }

    /// The error of a wait that ended while the store could not be
    /// reached: of the kind of its last failure, saying that it was retried
    /// for the whole wait.
    fn gave_up(&self, last: Error) -> Error {
        Error::new(
            last.kind(),
            format!(
                "lock {:?}: the store could not be reached at the end of the wait of {:?} (failures were retried); last: {last}",
                self.name, self.wait
            ),
        )
        .with_source(last)
    }

    /// The error of a wait that ended: the lock was busy (held with `ttl`
    /// left, if known), or, when the wait's last attempt `failed` to reach
    /// the store, that failure, retried for the whole wait.
    pub(super) fn wait_ended(&self, failed: Option<Error>, ttl: Option<Duration>) -> Error {
        match failed {
            Some(e) => self.gave_up(e),
            None => self.busy(ttl, self.wait),
        }
    }

    /// The error of a wait whose deadline passed during an attempt that
    /// `failed`: busy, with the holder's lease as last heard, when the
    /// store's latest word in this wait was an answer (`heard`: the lock
    /// was busy, with `ttl` left if known); the failure, retried for the
    /// whole wait, when its latest word was a failure or it never
    /// answered. An attempt the deadline cuts off says nothing new about
    /// the lock: under load, a round trip begun a moment before the
    /// deadline is cut off while the store is answering, and the lock was
    /// busy, not the store unreachable.
    pub(super) fn ended_during_attempt(
        &self,
        failed: Error,
        heard: Option<Option<Duration>>,
    ) -> Error {
        match heard {
            Some(ttl) => self.busy(ttl, self.wait),
            None => self.gave_up(failed),
        }
    }

    /// The busy error after waiting `waited` (zero: one attempt).
    pub(crate) fn busy(&self, ttl: Option<Duration>, waited: Duration) -> Error {
        let what = match self.keys.as_ref().map(|k| (k.rw, k.resource)) {
            Ok((Some(crate::key::RwMode::Read), _)) => format!(
                "read-write lock {:?} is held by a writer, or a writer waits ahead",
                self.name
            ),
            Ok((Some(crate::key::RwMode::Write), _)) => format!(
                "read-write lock {:?} is held by readers or a writer, or others wait ahead",
                self.name
            ),
            Ok((None, Resource::Semaphore { permits })) => {
                format!(
                    "all {permits} permits of semaphore {:?} are taken",
                    self.name
                )
            }
            _ => format!("lock {:?} is held by another owner", self.name),
        };
        let msg = if waited.is_zero() {
            what
        } else {
            format!("{what}; gave up after waiting {waited:?}")
        };
        let err = Error::new(ErrorKind::Busy, msg);
        match ttl {
            Some(ttl) => err.with_retry_after(ttl),
            None => err,
        }
    }
}

/// Why an attempt did not take the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// Someone holds it, with this much lease left if known.
    Busy(Option<Duration>),
    /// A round split the store between contenders.
    Contended,
}

impl Wait {
    pub(super) fn ttl(self) -> Option<Duration> {
        match self {
            Self::Busy(ttl) => ttl,
            Self::Contended => None,
        }
    }
}
