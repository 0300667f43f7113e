//! The wait in the key's queue in the store: a waiter joins the queue
//! with its first attempt, keeps its place by attempting again at its
//! pace, and is woken by the release that hands it the lock.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Lock;
use super::pace::{Backoff, final_stretch, jitter};
use crate::error::Result;
use crate::fence::FencingToken;
use crate::guard::{LockGuard, PendingRelease};
use crate::key::LockKeys;
use crate::lease::{Grant, valid_until};
use crate::notify::Ticket;
use crate::store::{Outcome, Place};
use crate::token::Token;

/// How many of a waiter's latest attempts it remembers the send time of: a
/// grant naming an older one has lapsed or is about to.
const RECENT_ATTEMPTS: usize = 8;

/// The least validity a handoff must have left to be taken without asking
/// the store: time to confirm it.
const MIN_HANDOFF_VALIDITY: Duration = Duration::from_millis(20);

/// How many grants in a row may come too late to use before a wait gives
/// up: a stall of the store or of this process makes one, a lease shorter
/// than the store takes to answer makes every one.
pub(crate) const LAPSES_IN_A_ROW: u32 = 5;

impl Lock {
    /// Waits in the key's queue in the store until the lock is handed over
    /// (or found free with nobody ahead). A grant whose answer came after
    /// its lease could have run out (a store or a client that stalled past
    /// the lease) is given back, and the wait queues again with a new token
    /// while its deadline lasts: a blip shorter than the wait is ridden
    /// out, as any other. Grants that all come too late (a lease shorter
    /// than the store takes to answer) end the wait with an error after
    /// [`LAPSES_IN_A_ROW`], rather than take and give back the lock until
    /// the deadline, or for good on a wait with none.
    pub(super) async fn wait_in_queue(
        &self,
        keys: &Arc<LockKeys>,
        lease: Duration,
    ) -> Result<LockGuard> {
        let deadline = Instant::now().checked_add(self.wait);
        if let Some(guard) = self.first_wait(keys, lease, deadline).await? {
            return Ok(guard);
        }
        let started = Instant::now();
        let mut lapses = 0;
        loop {
            if let Some(guard) = self.queue_once(keys, lease, deadline, started).await? {
                return Ok(guard);
            }
            if deadline.is_some_and(|d| d <= Instant::now()) {
                return Err(self.lapsed(lease));
            }
            lapses += 1;
            if lapses >= LAPSES_IN_A_ROW {
                return Err(self.lapsed_in_a_row(lease, lapses));
            }
            tracing::debug!(lock = %self.name, "the lock was granted too late to use its lease; queueing again");
        }
    }

    /// This client's first wait: try first, so a client that never waits
    /// never opens a pub/sub connection; then listen before queueing, so
    /// no handoff is announced before anyone hears it (for a refresh
    /// period at most: see `subscription_bound`). The guard when that try
    /// took the lock; `None` to queue (at once on a client that listens).
    async fn first_wait(
        &self,
        keys: &Arc<LockKeys>,
        lease: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<LockGuard>> {
        let waiters = &self.engine.waiters;
        if waiters.listening() {
            return Ok(None);
        }
        match self
            .by_deadline(deadline, self.attempt(keys, lease, None))
            .await
        {
            Ok(Ok(guard)) => return Ok(Some(guard)),
            Ok(Err(_)) => {}
            // The queue's attempts retry it until the deadline.
            Err(e) if e.is_unavailable() => {
                tracing::debug!(lock = %self.name, error = %e, "attempt failed; retrying while the wait lasts");
            }
            Err(e) => return Err(e),
        }
        waiters.listen(self.subscription_bound(deadline)).await;
        Ok(None)
    }

    /// One stay in the key's queue, with one token: the guard, or `None`
    /// when the lock was granted too late to use its lease (the token is
    /// given back in the background as this returns).
    async fn queue_once(
        &self,
        keys: &Arc<LockKeys>,
        lease: Duration,
        deadline: Option<Instant>,
        started: Instant,
    ) -> Result<Option<LockGuard>> {
        let _waiting = crate::meter::waiting(self.primitive(), self.metric_label());
        let token = Token::random();
        let waiters = &self.engine.waiters;
        let ticket = waiters.ticket(token);
        let timeout = self.engine.defaults.waiter_timeout;
        let refresh = self.refresh();
        // How far apart this waiter refreshes: `refresh`, or a third of
        // how long the store keeps its place while it is far from the head
        // of a long queue (until the store says it came near).
        let mut pace = refresh;
        let mut sent = Sent::default();
        // Until the lock is handed out, dropping this (the future was
        // dropped, or the wait ended) takes the token out of the queue and
        // passes on a lock handed to it, in the background.
        let leave = PendingRelease::new(&self.engine, keys, token);
        let mut backoff = Backoff::default();
        // The store's latest answer in this stay, while its latest attempt
        // was answered: the lock was busy, with this lease left if known.
        let mut heard: Option<Option<Duration>> = None;
        loop {
            let (attempt, sent_at, first) = sent.next();
            let place = Place {
                timeout,
                channel: waiters.channel(),
                attempt,
                waiter: token,
                since_ms: 0,
            };
            let attempt_result = self
                .by_deadline(
                    deadline,
                    self.engine.store.acquire(keys, &token, lease, Some(place)),
                )
                .await;
            // A lock granted to an earlier wait in the server: its lease
            // runs from the grant, not from this attempt. A reservation
            // shorter than the lease is extended to it a third of the way
            // into it, unless the guard is gone by then.
            let (since, recorded) = match &attempt_result {
                Ok(Outcome::Granted { at, recorded, .. }) => {
                    ((*at).min(sent_at), (*recorded).min(lease))
                }
                _ => (sent_at, lease),
            };
            let reserved = (recorded < lease).then_some(recorded);
            let (ttl, failed) = match attempt_result {
                Ok(Outcome::Acquired { fence, keys } | Outcome::Granted { fence, keys, .. }) => {
                    let grant = Grant {
                        token,
                        fence,
                        valid_until: valid_until(since, recorded),
                    };
                    if grant.valid_until <= Instant::now() {
                        // `leave` gives the token back as this returns.
                        return Ok(None);
                    }
                    return self
                        .take(leave, ticket, keys, grant, started, reserved)
                        .map(Some);
                }
                Ok(Outcome::Busy(ttl)) => {
                    pace = refresh;
                    (ttl, None)
                }
                Ok(Outcome::Queued { ttl, kept }) => {
                    pace = if kept > timeout { kept / 3 } else { refresh };
                    (ttl, None)
                }
                // Nobody won this round: try again at the next refresh.
                Ok(Outcome::Contended) => (None, None),
                Err(e) if e.is_unavailable() && deadline.is_some_and(|d| d <= Instant::now()) => {
                    return Err(self.ended_during_attempt(e, heard));
                }
                // A store that cannot be reached (a restart, a failover, a
                // new session) is retried with backoff while the wait lasts.
                Err(e) if e.is_unavailable() => {
                    tracing::debug!(lock = %self.name, error = %e, "attempt failed while waiting; retrying");
                    // Its outcome is unknown: it may have claimed a lock
                    // handed to us and given it back (a grant the replicas
                    // did not confirm is released, to the next waiter). No
                    // handoff named by it or an earlier attempt is used:
                    // the next attempt claims the lock if it is still ours.
                    sent.forget();
                    let _stale = ticket.take_handoff();
                    (None, Some(e))
                }
                Err(e) => return Err(e),
            };
            heard = failed.is_none().then_some(ttl);
            if first {
                tracing::debug!(lock = %self.name, "lock busy; queued");
            }
            let now = Instant::now();
            let remaining = match deadline {
                Some(d) if d <= now => return Err(self.wait_ended(failed, ttl)),
                Some(d) => d - now,
                None => Duration::MAX,
            };
            // After a failure, at the next step of the backoff.
            let nap = match failed {
                Some(_) => backoff.next(),
                None => {
                    backoff = Backoff::default();
                    calm(pace, refresh, ttl)
                }
            };
            let until = now + final_stretch(nap, remaining);
            let nap = Nap {
                refresh,
                ttl,
                failed: failed.is_some(),
                deadline,
            };
            if !nap.take(&ticket, until, &mut pace).await {
                if deadline.is_some_and(|d| d <= Instant::now()) {
                    return Err(self.wait_ended(failed, ttl));
                }
                continue;
            }
            // A handoff is ours until the deadline the attempt it names set:
            // take the lock now, valid from that attempt of ours, and
            // extend it to our lease in the background (see `take`). A handoff we
            // cannot place (too old, or about to lapse) is claimed by the
            // next attempt instead, if it is still ours.
            let Some(grant) = handed(&ticket, &sent, token, timeout) else {
                continue;
            };
            if self.engine.store.confirms_handoffs() {
                let Some(grant) = self.confirm_handoff(keys, grant, lease, deadline).await? else {
                    // Not confirmed: the next attempt claims the lock if it
                    // is still ours, and confirms it as any acquisition.
                    continue;
                };
                if grant.valid_until <= Instant::now() {
                    return Ok(None);
                }
                return self
                    .take(leave, ticket, keys.clone(), grant, started, None)
                    .map(Some);
            }
            return self
                .take(leave, ticket, keys.clone(), grant, started, Some(timeout))
                .map(Some);
        }
    }

    /// The guard of the lock `grant` gave this waiter: its place is left
    /// as it is (`leave` disarmed, `ticket` dropped). A handoff the store
    /// did not confirm is `reserved` (the waiter's reservation): the
    /// hold's first renewal extends it to the lease, a third of the way
    /// into a reservation shorter than the lease, at once otherwise (a
    /// fixed lease is shortened to itself).
    fn take(
        &self,
        leave: PendingRelease<'_>,
        ticket: Ticket,
        keys: Arc<LockKeys>,
        grant: Grant,
        started: Instant,
        reserved: Option<Duration>,
    ) -> Result<LockGuard> {
        leave.disarm();
        drop(ticket);
        let fence = grant.fence;
        let guard = self.granted(keys, grant, reserved)?;
        self.log_acquired(fence, started);
        Ok(guard)
    }

    /// Confirms a handoff before it is used, on a store that
    /// [`confirms_handoffs`](crate::store::LockStore::confirms_handoffs):
    /// extends it with our lease, which the store confirms with its
    /// replicas. The grant, valid from the extension, once it is confirmed;
    /// `None` when it was not (gone, or the store or its replicas did not
    /// answer in time): the wait goes on.
    async fn confirm_handoff(
        &self,
        keys: &Arc<LockKeys>,
        grant: Grant,
        lease: Duration,
        deadline: Option<Instant>,
    ) -> Result<Option<Grant>> {
        let sent_at = Instant::now();
        let extended = self
            .by_deadline(
                deadline,
                self.engine.store.extend(keys, &grant.token, lease),
            )
            .await;
        match extended {
            Ok(true) => Ok(Some(Grant {
                valid_until: valid_until(sent_at, lease),
                ..grant
            })),
            Ok(false) => {
                tracing::debug!(lock = %self.name, "the lock handed over was gone before it was confirmed; waiting on");
                Ok(None)
            }
            Err(e) if e.is_unavailable() && deadline.is_none_or(|d| d > Instant::now()) => {
                tracing::debug!(lock = %self.name, error = %e, "confirming the lock handed over failed; waiting on");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn log_acquired(&self, fence: FencingToken, started: Instant) {
        tracing::debug!(
            lock = %self.name,
            fence = fence.get(),
            waited_ms = started.elapsed().as_millis() as u64,
            "lock acquired after waiting"
        );
    }
}

/// When each of a waiter's recent attempts was sent, by its number: a
/// handoff is reserved for the waiter until at least its `timeout` after
/// the attempt it names.
#[derive(Debug)]
struct Sent {
    attempt: u32,
    recent: VecDeque<(u32, Instant)>,
}

impl Default for Sent {
    fn default() -> Self {
        Self {
            attempt: 0,
            recent: VecDeque::with_capacity(RECENT_ATTEMPTS),
        }
    }
}

impl Sent {
    /// Numbers the next attempt and notes that it is sent now: its number,
    /// when, and whether it is the first this waiter remembers.
    fn next(&mut self) -> (u32, Instant, bool) {
        // Numbers only tell recent attempts apart: wrapping is harmless.
        self.attempt = self.attempt.wrapping_add(1);
        let first = self.recent.is_empty();
        let sent_at = Instant::now();
        if self.recent.len() == RECENT_ATTEMPTS {
            self.recent.pop_front();
        }
        self.recent.push_back((self.attempt, sent_at));
        (self.attempt, sent_at, first)
    }

    /// Forgets every attempt: no handoff naming one of them is used.
    fn forget(&mut self) {
        self.recent.clear();
    }

    /// When `attempt` was sent, if it is recent.
    fn at(&self, attempt: u32) -> Option<Instant> {
        self.recent
            .iter()
            .find(|(a, _)| *a == attempt)
            .map(|&(_, at)| at)
    }
}

/// A queued waiter's nap between two attempts of a calm wait (no failure):
/// woken by the handoff, or at the next refresh at `pace`, or when the
/// holder's lease ends (never a zero nap: a lease about to end gets a
/// millisecond, not a spin). Near the head, also when the holder's lease
/// ends (the holder may have died). Far from it, not: the waiters near the
/// head take a lock nobody hands over, and a far waiter would only queue
/// again (its nap is also shortened when it comes near).
fn calm(pace: Duration, refresh: Duration, ttl: Option<Duration>) -> Duration {
    let nap = jitter(pace);
    let nap = if pace > refresh {
        nap
    } else {
        nap.min(ttl.unwrap_or(Duration::MAX))
    };
    nap.max(Duration::from_millis(1))
}

/// What a waiter's nap goes by, besides its ticket and pace.
struct Nap {
    refresh: Duration,
    /// The holder's remaining lease, if known.
    ttl: Option<Duration>,
    /// Whether the attempt before it failed (the nap is a backoff step).
    failed: bool,
    deadline: Option<Instant>,
}

impl Nap {
    /// Naps until `until` or a wake-up on `ticket`: `true` when woken by
    /// something to act on (a handoff), `false` at `until`. A wake-up
    /// saying the waiter came near the head of its queue sets `pace` to
    /// the refresh and shortens the nap to match; there is nothing to send
    /// yet.
    async fn take(&self, ticket: &Ticket, mut until: Instant, pace: &mut Duration) -> bool {
        loop {
            tokio::select! {
                () = ticket.notified() => {
                    if ticket.take_near() && !ticket.has_handoff() {
                        if *pace > self.refresh && !self.failed {
                            *pace = self.refresh;
                            let now = Instant::now();
                            let left = self.deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(now));
                            until = until.min(now + final_stretch(calm(*pace, self.refresh, self.ttl), left));
                        }
                        continue;
                    }
                    break true;
                }
                () = tokio::time::sleep_until(until) => break false,
            }
        }
    }
}

/// The grant of a handoff `ticket` holds for `token`, valid from the
/// attempt it names; `None` when there is none, or it cannot be placed
/// (too old) or is about to lapse.
fn handed(ticket: &Ticket, sent: &Sent, token: Token, timeout: Duration) -> Option<Grant> {
    let handoff = ticket.take_handoff()?;
    let at = sent.at(handoff.attempt)?;
    let grant = Grant {
        token,
        fence: handoff.fence,
        valid_until: valid_until(at, timeout),
    };
    if grant.valid_until <= Instant::now() + MIN_HANDOFF_VALIDITY {
        return None;
    }
    Some(grant)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, ErrorKind};

    mod subscription {
        use std::sync::atomic::{AtomicUsize, Ordering};

        use tokio::sync::watch;

        use crate::clock::MonotonicClock;
        use crate::store::memory::MemoryStore;
        use crate::store::{Inbox, Listener, Store, StoreFuture};
        use crate::{Client, Result};

        use super::*;

        /// A client's subscription: it answers once `open` says so, with
        /// its value (`Ok` for true); `calls` counts the subscriptions.
        #[derive(Debug)]
        struct Gated {
            calls: AtomicUsize,
            open: watch::Receiver<Option<bool>>,
        }

        impl Listener for Gated {
            fn sync<'a>(&'a self, _: &'a str, _: Arc<dyn Inbox>) -> StoreFuture<'a, Result<()>> {
                self.calls.fetch_add(1, Ordering::SeqCst);
                let mut open = self.open.clone();
                StoreFuture::new(async move {
                    let said = *open.wait_for(Option::is_some).await.unwrap();
                    if said == Some(true) {
                        Ok(())
                    } else {
                        Err(Error::new(ErrorKind::Unavailable, "no pub/sub connection"))
                    }
                })
            }
        }

        /// A client over the in-memory store (which hands locks over
        /// itself) whose wake-ups also come through `listener`, and its
        /// guard of the lock `k` (a 60 s lease), which others wait for.
        async fn holding_k(listener: Arc<Gated>) -> (Client, LockGuard) {
            let memory = MemoryStore::new(Arc::new(MonotonicClock::new()));
            let store = Store::new(Arc::new(memory), vec![listener]);
            let lg = Client::builder().build(store).unwrap();
            let held = lg
                .lock("k")
                .lease(Duration::from_secs(60))
                .acquire()
                .await
                .unwrap();
            (lg, held)
        }

        fn gated() -> (Arc<Gated>, watch::Sender<Option<bool>>) {
            let (tx, open) = watch::channel(None);
            let listener = Gated {
                calls: AtomicUsize::new(0),
                open,
            };
            (Arc::new(listener), tx)
        }

        /// A client's first wait whose subscription hangs (a pub/sub
        /// connection held up by a hung server) queues after one refresh
        /// period, not at the end of its wait, and is handed the lock.
        #[tokio::test(start_paused = true)]
        async fn a_hung_subscription_holds_up_a_first_wait_one_refresh_at_most() {
            let (listener, _open) = gated();
            let (lg, held) = holding_k(listener.clone()).await;
            let refresh = Duration::from_millis(100);
            let lock = lg
                .lock("k")
                .wait(Duration::from_secs(30))
                .retry_interval(refresh);
            let waiting = tokio::spawn(async move { lock.acquire().await });
            tokio::time::sleep(refresh / 2).await;
            assert_eq!(lg.lock("k").inspect().await.unwrap().waiters, 0);
            tokio::time::sleep(refresh).await;
            assert_eq!(
                lg.lock("k").inspect().await.unwrap().waiters,
                1,
                "the first wait did not queue within a refresh period of its hung subscription"
            );
            assert!(held.release().await.unwrap());
            let guard = tokio::time::timeout(refresh * 2, waiting)
                .await
                .expect("the queued waiter was not handed the lock")
                .unwrap()
                .unwrap();
            assert!(guard.release().await.unwrap());
            assert_eq!(listener.calls.load(Ordering::SeqCst), 1);
        }

        /// First waits that come while the client's subscription is under
        /// way start no other; once it is done, waits start none at all;
        /// a failed one is tried again by the next first wait.
        #[tokio::test(start_paused = true)]
        async fn one_subscription_at_a_time_and_again_after_a_failure() {
            let (listener, open) = gated();
            let (lg, held) = holding_k(listener.clone()).await;
            let wait = |lg: &Client| {
                let lock = lg
                    .lock("k")
                    .wait(Duration::from_millis(300))
                    .retry_interval(Duration::from_millis(100));
                async move { lock.acquire().await.map(drop) }
            };
            let waits: Vec<_> = (0..3).map(|_| tokio::spawn(wait(&lg))).collect();
            for w in waits {
                assert!(w.await.unwrap().unwrap_err().is_busy());
            }
            assert_eq!(
                listener.calls.load(Ordering::SeqCst),
                1,
                "a second subscription began"
            );
            open.send_replace(Some(false));
            tokio::time::sleep(Duration::from_millis(1)).await;
            assert!(wait(&lg).await.unwrap_err().is_busy());
            let calls = || listener.calls.load(Ordering::SeqCst);
            assert_eq!(calls(), 2, "a failed subscription was not tried again");
            open.send_replace(Some(true));
            assert!(wait(&lg).await.unwrap_err().is_busy());
            assert_eq!(calls(), 3);
            assert!(wait(&lg).await.unwrap_err().is_busy());
            assert_eq!(calls(), 3, "a wait subscribed again once listening");
            drop(held);
        }
    }
}
