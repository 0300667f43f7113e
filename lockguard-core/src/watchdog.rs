//! Lease renewal in the background while a guard lives.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::acquisition::Acquisition;
use crate::lease::safety_margin;

/// Renews the lease every third of it until `stop` fires (the guard was
/// released or dropped) or the lock turns out to be gone.
///
/// A renewal that fails to reach the store is retried sooner; if none
/// succeeds before the lease's end the guard is marked lost.
pub(crate) async fn run(shared: Arc<Acquisition>, mut stop: oneshot::Receiver<()>) {
    let lease = shared.lease;
    let interval = lease / 3;
    // The first renewal is due a third of the lease after the request that
    // set it was sent, not after the guard was made: a grant that arrived
    // late is renewed at once rather than after it ran out.
    let valid_until = shared.state.borrow().valid_until;
    let mut nap = (valid_until + interval + safety_margin(lease))
        .checked_sub(lease)
        .map_or(Duration::ZERO, |at| {
            at.saturating_duration_since(Instant::now())
        });
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => return,
            () = tokio::time::sleep(nap) => {}
        }
        let _turn = tokio::select! {
            biased;
            _ = &mut stop => return,
            turn = shared.renewal.lock() => turn,
        };
        let sent_at = Instant::now();
        let result = tokio::select! {
            biased;
            _ = &mut stop => return,
            r = shared.engine.store.locks.extend(&shared.keys, &shared.token, lease) => r,
        };
        // A release may have raced the renewal; say nothing then.
        if !matches!(stop.try_recv(), Err(oneshot::error::TryRecvError::Empty)) {
            return;
        }
        match result {
            Ok(true) => {
                if !shared.renewed(sent_at, lease) {
                    return;
                }
                nap = interval;
                tracing::trace!(lock = %shared.name, fence = shared.fence.get(), "lease renewed");
            }
            Ok(false) => {
                shared.mark_lost("renewal found the lock gone");
                return;
            }
            Err(e) => {
                crate::meter::store_error(shared.primitive(), "renew");
                let valid_until = shared.state.borrow().valid_until;
                let left = valid_until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    shared.mark_lost("renewals failed until the lease ran out");
                    return;
                }
                tracing::warn!(lock = %shared.name, fence = shared.fence.get(), error = %e, "lease renewal failed; retrying");
                nap = (left / 3).clamp(Duration::from_millis(10), interval);
            }
        }
    }
}
