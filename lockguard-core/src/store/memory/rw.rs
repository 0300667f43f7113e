//! Read-write locks in the in-memory store: many readers or one writer,
//! one FIFO queue for both, handoffs to the run of readers at its head.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{Holders, MemoryStore, Queue, Step, Taken, reservation};
use crate::fence::FencingToken;
use crate::key::{LockKeys, RwMode};
use crate::store::{Handoff, Holder, Occupancy, Outcome, Place};
use crate::token::Token;

/// A read-write lock's holders: its readers, or its writer; each with its
/// lease end (or, handed over and not yet claimed, its reservation) and
/// fencing token.
#[derive(Debug, Default)]
pub(super) struct RwHolders {
    readers: Holders,
    writer: Option<(Token, Instant, u64)>,
}

impl RwHolders {
    /// Forgets the holders whose lease has ended.
    fn prune(&mut self, now: Instant) {
        self.readers.retain(|_, (e, _)| *e > now);
        if self.writer.is_some_and(|(_, e, _)| e <= now) {
            self.writer = None;
        }
    }

    /// When the last lease ends: the entry's deadline (now, when nobody
    /// holds it, so the entry is free to sweep).
    fn ends(&self, now: Instant) -> Option<Instant> {
        let readers = self.readers.values().map(|(e, _)| *e);
        Some(
            readers
                .chain(self.writer.map(|(_, e, _)| e))
                .fold(now, Instant::max),
        )
    }

    /// Its live holders, for a survey: readers or the writer, with
    /// their fences and leases left.
    pub(super) fn listed(&self, now: Instant) -> Vec<Holder> {
        let hold = |mode, token, ends: Instant, fence| {
            Holder::new(
                token,
                Some(mode),
                Some(FencingToken::new(fence)),
                Some(ends - now),
            )
        };
        let readers = self.readers.iter().filter(|(_, (e, _))| *e > now);
        let mut out: Vec<Holder> = readers
            .map(|(t, (e, f))| hold(RwMode::Read, *t, *e, *f))
            .collect();
        out.extend(
            self.writer
                .filter(|(_, e, _)| *e > now)
                .map(|(t, e, f)| hold(RwMode::Write, t, e, f)),
        );
        out
    }

    /// Whether a `mode` hold fits beside the holders.
    fn admits(&self, mode: RwMode) -> bool {
        match mode {
            RwMode::Read => self.writer.is_none(),
            RwMode::Write => self.writer.is_none() && self.readers.is_empty(),
        }
    }

    fn insert(&mut self, mode: RwMode, token: Token, ends: Instant, fence: u64) {
        match mode {
            RwMode::Read => {
                self.readers.insert(token, (ends, fence));
            }
            RwMode::Write => self.writer = Some((token, ends, fence)),
        }
    }

    /// `token`'s live `mode` hold: its lease end and fencing token.
    fn held(&mut self, mode: RwMode, token: &Token) -> Option<(&mut Instant, u64)> {
        match mode {
            RwMode::Read => self.readers.get_mut(token).map(|(e, f)| (e, *f)),
            RwMode::Write => match &mut self.writer {
                Some((t, e, f)) if t == token => Some((e, *f)),
                _ => None,
            },
        }
    }

    /// How long until a `mode` hold could fit: until the writer's lease
    /// ends, or the last reader's.
    fn busy_for(&self, now: Instant) -> Option<Duration> {
        match self.writer {
            Some((_, e, _)) => Some(e - now),
            None => self.readers.values().map(|(e, _)| *e - now).max(),
        }
    }
}

impl Queue<'_> {
    /// Hands the lock to the head of the queue for as long as it fits: the
    /// run of readers there while no writer holds it, or the one writer
    /// there when nobody does; stops before `me` (a waiter asking for
    /// itself).
    fn admit(&mut self, holders: &mut RwHolders, me: Option<&Token>) {
        while let Some(first) = self.head().filter(|w| Some(&w.token) != me) {
            let mode = if first.reads {
                RwMode::Read
            } else {
                RwMode::Write
            };
            if !holders.admits(mode) {
                return;
            }
            self.waiters.pop_front();
            let fence = self.next_fence();
            self.handed.push(Handoff {
                token: first.token,
                fence: FencingToken::new(fence),
                attempt: first.attempt,
            });
            let reserved = reservation(first.deadline, self.now);
            holders.insert(mode, first.token, reserved, fence);
        }
    }
}

impl Step<'_> {
    /// One attempt at a `mode` hold: claims one handed to `token`, or takes
    /// one that fits when nobody queues ahead (after handing the lock to
    /// the head of the queue as far as it fits).
    fn rw_lock(&mut self, key: &str, mode: RwMode, token: &Token, lease: Duration) -> Taken {
        let now = self.queue.now;
        let queue = &mut self.queue;
        let fresh = || (RwHolders::default(), None);
        self.rw.with_entry(key, now, fresh, |holders, ends| {
            holders.prune(now);
            let taken = if let Some((e, fence)) = holders.held(mode, token) {
                // Handed to us by a release: claim it with our own lease.
                *e = now + lease;
                Ok(FencingToken::new(fence))
            } else {
                queue.admit(holders, Some(token));
                let ahead = queue.head().is_some_and(|w| w.token != *token);
                if !ahead && holders.admits(mode) {
                    let fence = queue.next_fence();
                    holders.insert(mode, *token, now + lease, fence);
                    queue.leave(token);
                    Ok(FencingToken::new(fence))
                } else {
                    Err(holders.busy_for(now))
                }
            };
            *ends = holders.ends(now);
            taken
        })
    }

    /// Gives up `token`'s `mode` hold and hands the lock on as far as it
    /// fits; whether it was held.
    fn rw_unlock(&mut self, key: &str, mode: RwMode, token: &Token) -> bool {
        let now = self.queue.now;
        let Some((holders, ends)) = self.rw.get_mut(key, now) else {
            return false;
        };
        holders.prune(now);
        let held = match mode {
            RwMode::Read => holders.readers.remove(token).is_some(),
            RwMode::Write => {
                let mine = holders.writer.is_some_and(|(t, _, _)| t == *token);
                if mine {
                    holders.writer = None;
                }
                mine
            }
        };
        self.queue.admit(holders, None);
        *ends = holders.ends(now);
        held
    }
}

impl MemoryStore {
    /// One attempt at a read or write hold; see
    /// [`LockStore::acquire`](crate::store::LockStore::acquire) for read-write keys.
    pub(super) fn rw_acquire(
        &self,
        keys: &Arc<LockKeys>,
        mode: RwMode,
        token: &Token,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> Outcome {
        let taken = self.step(keys, |step| {
            let taken = step.rw_lock(&keys.lock, mode, token, lease);
            if taken.is_err()
                && let Some(place) = place
            {
                step.queue.keep_place(token, place, mode == RwMode::Read);
            }
            taken
        });
        match taken {
            Ok(fence) => Outcome::Acquired {
                fence,
                keys: keys.clone(),
            },
            Err(ttl) => Outcome::Busy(ttl),
        }
    }

    /// Gives up `token`'s hold; `token` also leaves the queue.
    pub(super) fn rw_release(&self, keys: &LockKeys, mode: RwMode, token: &Token) -> bool {
        self.step(keys, |step| {
            step.queue.leave(token);
            step.rw_unlock(&keys.lock, mode, token)
        })
    }

    pub(super) fn rw_extend(
        &self,
        keys: &LockKeys,
        mode: RwMode,
        token: &Token,
        lease: Duration,
    ) -> bool {
        let now = Instant::now();
        let mut st = self.state();
        let Some((holders, ends)) = st.rw.get_mut(&keys.lock, now) else {
            return false;
        };
        match holders.held(mode, token) {
            Some((e, _)) if *e > now => {
                *e = now + lease;
                *ends = (*ends).max(Some(now + lease));
                true
            }
            _ => false,
        }
    }

    pub(super) fn rw_inspect(&self, keys: &LockKeys) -> Occupancy {
        let now = Instant::now();
        let st = self.state();
        let (readers, writer, first) = match st.rw.get(&keys.lock, now) {
            Some((holders, _)) => {
                let readers: Vec<Instant> = holders
                    .readers
                    .values()
                    .map(|(e, _)| *e)
                    .filter(|e| *e > now)
                    .collect();
                let writer = holders.writer.map(|(_, e, _)| e).filter(|e| *e > now);
                let first = readers.iter().copied().chain(writer).min();
                let count = u32::try_from(readers.len()).unwrap_or(u32::MAX);
                (count, writer.is_some(), first)
            }
            None => (0, false, None),
        };
        Occupancy::read_write(
            readers,
            writer,
            first.map(|e| e - now),
            st.queues.get(&keys.lock).map_or(0, |q| q.len() as u64),
            (st.sequence > 0).then(|| FencingToken::new(st.sequence)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::notified;
    use super::*;
    use crate::clock::ManualClock;

    fn keys(mode: RwMode) -> Arc<LockKeys> {
        Arc::new(LockKeys::rw("t:", "rw", mode))
    }

    fn place() -> Option<Place<'static>> {
        place_for(Duration::from_secs(1))
    }

    fn place_for(timeout: Duration) -> Option<Place<'static>> {
        super::super::tests::place(timeout.as_millis() as u64)
    }

    fn fence(attempt: Outcome) -> u64 {
        match attempt {
            Outcome::Acquired { fence, .. } => fence.get(),
            other => panic!("not acquired: {other:?}"),
        }
    }

    /// A writer queued behind readers blocks later readers; its release
    /// admits the run of readers behind it at once, up to the next writer.
    #[tokio::test(start_paused = true)]
    async fn readers_queue_behind_a_waiting_writer_and_enter_together() {
        let store = MemoryStore::new(Arc::new(ManualClock::new()));
        let seen = notified(&store);
        let (r, w) = (keys(RwMode::Read), keys(RwMode::Write));
        let lease = Duration::from_secs(10);
        let [r0, w1, r2, r3, w4] = [(); 5].map(|()| Token::random());
        let f0 = fence(store.rw_acquire(&r, RwMode::Read, &r0, lease, None));
        assert!(matches!(
            store.rw_acquire(&w, RwMode::Write, &w1, lease, place()),
            Outcome::Busy(Some(_))
        ));
        for t in [&r2, &r3] {
            assert!(matches!(
                store.rw_acquire(&r, RwMode::Read, t, lease, place()),
                Outcome::Busy(_)
            ));
        }
        store.rw_acquire(&w, RwMode::Write, &w4, lease, place());
        // A reader trying without a place is refused too: a writer waits.
        let late = Token::random();
        assert!(matches!(
            store.rw_acquire(&r, RwMode::Read, &late, lease, None),
            Outcome::Busy(_)
        ));
        let seen_now = || seen.0.lock().unwrap().clone();
        assert!(store.rw_release(&r, RwMode::Read, &r0));
        assert_eq!(seen_now(), vec![w1]);
        let f1 = fence(store.rw_acquire(&w, RwMode::Write, &w1, lease, place()));
        assert!(f1 > f0);
        assert!(store.rw_release(&w, RwMode::Write, &w1));
        assert_eq!(seen_now(), vec![w1, r2, r3], "the run of readers at once");
        let occupancy = store.rw_inspect(&r);
        assert_eq!((occupancy.readers, occupancy.writer), (2, false));
        assert_eq!(occupancy.waiters, 1);
        for t in [&r2, &r3] {
            assert!(fence(store.rw_acquire(&r, RwMode::Read, t, lease, place())) > f1);
        }
        assert!(store.rw_release(&r, RwMode::Read, &r2));
        assert!(store.rw_release(&r, RwMode::Read, &r3));
        assert_eq!(seen_now(), vec![w1, r2, r3, w4]);
        assert!(!store.rw_release(&r, RwMode::Read, &r3), "released twice");
    }

    /// A writer that stopped refreshing its place (its process died) stops
    /// blocking the readers behind it once its timeout has passed; one
    /// handed the lock and dead holds it only until its reservation ends.
    #[tokio::test(start_paused = true)]
    async fn dead_waiters_are_skipped_after_their_timeout() {
        let store = MemoryStore::new(Arc::new(ManualClock::new()));
        let (r, w) = (keys(RwMode::Read), keys(RwMode::Write));
        let lease = Duration::from_secs(10);
        let timeout = Duration::from_millis(200);
        let [holder, dead, live] = [(); 3].map(|()| Token::random());
        fence(store.rw_acquire(&r, RwMode::Read, &holder, lease, None));
        store.rw_acquire(&w, RwMode::Write, &dead, lease, place_for(timeout));
        // Behind the (live) writer, a reader waits.
        assert!(matches!(
            store.rw_acquire(&r, RwMode::Read, &live, lease, place_for(timeout)),
            Outcome::Busy(_)
        ));
        tokio::time::advance(Duration::from_millis(150)).await;
        store.rw_acquire(&r, RwMode::Read, &live, lease, place_for(timeout));
        tokio::time::advance(Duration::from_millis(100)).await;
        // The writer's place lapsed: the reader joins the holder.
        fence(store.rw_acquire(&r, RwMode::Read, &live, lease, place_for(timeout)));
        assert_eq!(store.rw_inspect(&r).readers, 2);

        // A writer handed the lock dies before claiming it: free again by
        // the end of its reservation.
        let next = Token::random();
        store.rw_acquire(&w, RwMode::Write, &next, lease, place_for(timeout));
        assert!(store.rw_release(&r, RwMode::Read, &holder));
        assert!(store.rw_release(&r, RwMode::Read, &live));
        assert!(store.rw_inspect(&r).writer, "handed to the writer");
        tokio::time::advance(timeout + Duration::from_millis(1)).await;
        fence(store.rw_acquire(&r, RwMode::Read, &Token::random(), lease, None));
    }
}
