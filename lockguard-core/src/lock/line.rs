//! The wait in the key's line, on a store without a queue (Redlock):
//! waiters line up by when they began to wait and attempt again when a
//! release is announced.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Lock;
use super::attempt::Wait;
use super::pace::{Backoff, contention_backoff, final_stretch, jitter};
use crate::error::Result;
use crate::guard::{LockGuard, PendingRelease};
use crate::key::LockKeys;
use crate::store::Place;
use crate::token::Token;

impl Lock {
    /// Waits on a store without a queue (Redlock): the waiter takes its
    /// place in the key's line, ordered by when it began to wait, and
    /// attempts again when a release is announced on the key's channel,
    /// when the holder's lease ends, or after a jittered retry interval (at
    /// most a third of the waiter timeout, which keeps its place). Only the
    /// first live waiter of the line can take a free lock.
    pub(super) async fn wait_in_line(
        &self,
        keys: &Arc<LockKeys>,
        lease: Duration,
    ) -> Result<LockGuard> {
        let started = Instant::now();
        let deadline = started.checked_add(self.wait);
        // The store's latest answer in this wait, while its latest attempt
        // was answered: the lock was busy, with this lease left if known.
        let mut heard = match self
            .by_deadline(deadline, self.attempt(keys, lease, None))
            .await
        {
            Ok(Ok(guard)) => return Ok(guard),
            Ok(Err(wait)) => Some(wait.ttl()),
            // Retried below while the wait lasts.
            Err(e) if e.is_unavailable() => None,
            Err(e) => return Err(e),
        };
        tracing::debug!(lock = %self.name, "lock busy; waiting for a release");
        let _waiting = crate::meter::waiting(self.primitive(), self.metric_label());
        let mut registration = self
            .engine
            .waiters
            .broadcast(keys.channel(), self.subscription_bound(deadline))
            .await;
        let waiter = Token::random();
        let since_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        // Dropping this (the lock was taken, the wait ended, the future was
        // dropped) takes the waiter out of the line on every node, in the
        // background.
        let _leave = PendingRelease::new(&self.engine, keys, waiter);
        let timeout = self.engine.defaults.waiter_timeout;
        let refresh = self.refresh();
        let mut backoff = Backoff::default();
        let mut attempt: u32 = 0;
        loop {
            // Outcome again at once: a release may have come before the
            // subscription.
            registration.rx.borrow_and_update();
            attempt = attempt.wrapping_add(1);
            let place = Place {
                timeout,
                channel: "",
                attempt,
                waiter,
                since_ms,
            };
            let attempt = self.attempt(keys, lease, Some(place));
            let (wait, failed) = match self.by_deadline(deadline, attempt).await {
                Ok(Ok(guard)) => return Ok(guard),
                Ok(Err(wait)) => (wait, None),
                Err(e) if e.is_unavailable() && deadline.is_some_and(|d| d <= Instant::now()) => {
                    return Err(self.ended_during_attempt(e, heard));
                }
                // No quorum reachable: retried with backoff while the wait
                // lasts.
                Err(e) if e.is_unavailable() => (Wait::Busy(None), Some(e)),
                Err(e) => return Err(e),
            };
            heard = failed.is_none().then(|| wait.ttl());
            let now = Instant::now();
            let remaining = match deadline {
                Some(d) if d <= now => return Err(self.wait_ended(failed, wait.ttl())),
                Some(d) => d - now,
                None => Duration::MAX,
            };
            if failed.is_some() {
                tokio::time::sleep(final_stretch(backoff.next(), remaining)).await;
                continue;
            }
            backoff = Backoff::default();
            if wait == Wait::Contended {
                // Every contender of the split round is notified at once;
                // a random pause instead keeps the next round from splitting.
                tokio::time::sleep(contention_backoff().min(remaining)).await;
                continue;
            }
            let nap = final_stretch(
                jitter(refresh)
                    .min(wait.ttl().unwrap_or(Duration::MAX))
                    .max(Duration::from_millis(1)),
                remaining,
            );
            tokio::select! {
                _ = registration.rx.changed() => {}
                () = tokio::time::sleep(nap) => {
                    if deadline.is_some_and(|d| d <= Instant::now()) {
                        return Err(self.busy(wait.ttl(), self.wait));
                    }
                }
            }
        }
    }
}
