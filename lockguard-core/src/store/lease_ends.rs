//! The ends of the leases a store keeps on the client: one task per store
//! ends each hold whose lease ran out without a renewal.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::Token;

/// What a store does with a hold whose lease end came: called with the
/// hold's token and the instant the task looked (the hold may have been
/// renewed or released meanwhile: the store checks).
type Expire = Box<dyn Fn(Token, Instant) + Send + Sync>;

/// The schedule of lease ends of a store whose server keeps no lease per
/// hold (ZooKeeper's nodes and etcd's keys live as long as the client's
/// session or lease): the client ends a hold whose lease ran out without
/// a renewal, by deleting what holds it in the store.
///
/// Each hold's end is an entry of an ordered map; one task, started with
/// the first, sleeps until the earliest end and calls the store's `expire`
/// for each hold whose end came. A [`LeaseEnd`] is a hold's entry: it
/// leaves the schedule when dropped, with its hold (released) or when a
/// renewal replaces it with a later one. The task is woken only by an end
/// earlier than the one it sleeps until, so a store keeps its holds'
/// leases for an entry each, not a task, a timer and a wake-up each.
/// Call [`LeaseEnds::close`] when the store goes: the task ends.
///
/// # Examples
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
///
/// use lockguard_core::store::{LeaseEnds, Token};
/// use tokio::time::Instant;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let ended = Arc::new(Mutex::new(Vec::new()));
/// let ends = LeaseEnds::new({
///     let ended = ended.clone();
///     move |token, _now| ended.lock().unwrap().push(token)
/// });
/// let (held, released) = (Token::random(), Token::random());
/// let now = Instant::now();
/// let _held_end = ends.schedule(held, now + Duration::from_millis(20));
/// drop(ends.schedule(released, now + Duration::from_millis(10)));
/// tokio::time::sleep(Duration::from_millis(60)).await;
/// assert_eq!(*ended.lock().unwrap(), vec![held]);
/// ends.close();
/// # }
/// ```
pub struct LeaseEnds {
    ends: Mutex<Ends>,
    /// Wakes the task: an end earlier than the one it sleeps until, or
    /// the store's end.
    wake: Notify,
    /// Tells apart holds whose leases end at the same instant.
    seq: AtomicU64,
    started: AtomicBool,
    closed: AtomicBool,
    expire: Expire,
}

impl fmt::Debug for LeaseEnds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseEnds")
            .field("scheduled", &self.ends().due.len())
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Default)]
struct Ends {
    due: BTreeMap<(Instant, u64), Token>,
    /// The end the task sleeps until, when it sleeps until one.
    armed: Option<Instant>,
}

/// A hold's place in a [`LeaseEnds`] schedule: it leaves the schedule
/// when dropped, with its hold or when a renewal replaces it.
#[derive(Debug)]
pub struct LeaseEnd {
    at: Instant,
    seq: u64,
    ends: Weak<LeaseEnds>,
}

impl LeaseEnd {
    /// When the hold's lease ends.
    pub fn at(&self) -> Instant {
        self.at
    }
}

impl Drop for LeaseEnd {
    fn drop(&mut self) {
        if let Some(ends) = self.ends.upgrade() {
            ends.ends().due.remove(&(self.at, self.seq));
        }
    }
}

impl LeaseEnds {
    /// A schedule that calls `expire` for each hold whose lease end came
    /// (from its task: `expire` must not block; a deletion it starts runs
    /// in a task of its own).
    pub fn new(expire: impl Fn(Token, Instant) + Send + Sync + 'static) -> Arc<Self> {
        Arc::new(Self {
            ends: Mutex::new(Ends::default()),
            wake: Notify::new(),
            seq: AtomicU64::new(0),
            started: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            expire: Box::new(expire),
        })
    }

    fn ends(&self) -> MutexGuard<'_, Ends> {
        self.ends.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Schedules the end of `token`'s hold at `at`: unless the returned
    /// place is dropped first, `expire` is called for it then. The first
    /// call starts the task, on the current Tokio runtime.
    pub fn schedule(self: &Arc<Self>, token: Token, at: Instant) -> LeaseEnd {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let earlier = {
            let mut ends = self.ends();
            ends.due.insert((at, seq), token);
            let earlier = ends.armed.is_none_or(|armed| at < armed);
            if earlier {
                ends.armed = Some(at);
            }
            earlier
        };
        if !self.started.swap(true, Ordering::AcqRel) {
            tokio::spawn(run(self.clone()));
        } else if earlier {
            self.wake.notify_one();
        }
        LeaseEnd {
            at,
            seq,
            ends: Arc::downgrade(self),
        }
    }

    /// Ends the task: the store is gone, and nothing scheduled expires.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.wake.notify_one();
    }
}

/// The task: sleeps until the earliest end, expires the holds due, and
/// sleeps again (until woken by an earlier end, or the schedule's close).
async fn run(ends: Arc<LeaseEnds>) {
    loop {
        if ends.closed.load(Ordering::Acquire) {
            return;
        }
        let now = Instant::now();
        let (due, next) = {
            let mut state = ends.ends();
            let later = state.due.split_off(&(now, u64::MAX));
            let due = std::mem::replace(&mut state.due, later);
            let next = state.due.keys().next().map(|(at, _)| *at);
            state.armed = next;
            (due, next)
        };
        for token in due.into_values() {
            (ends.expire)(token, now);
        }
        match next {
            Some(at) => tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                () = ends.wake.notified() => {}
            },
            None => ends.wake.notified().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Let the schedule's task run at the paused clock's current instant.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn each_hold_ends_at_its_own_lease_end_whatever_the_order() {
        let ended = Arc::new(Mutex::new(Vec::new()));
        let ends = LeaseEnds::new({
            let ended = ended.clone();
            move |token, _| ended.lock().unwrap().push(token)
        });
        let gone = |t: &Token| ended.lock().unwrap().contains(t);
        let (long, short, renewed, released) = (
            Token::random(),
            Token::random(),
            Token::random(),
            Token::random(),
        );
        let at = |s: u64| Instant::now() + Duration::from_secs(s);
        let _long = ends.schedule(long, at(10));
        settle().await;
        // Scheduled while the task sleeps until a later end: it wakes.
        let _short = ends.schedule(short, at(1));
        let first_end = ends.schedule(renewed, at(2));
        let released_end = ends.schedule(released, at(2));
        settle().await;
        // A renewal: the new end first, then the old one dropped.
        let renewed_end = ends.schedule(renewed, at(5));
        drop(first_end);
        drop(released_end);
        assert_eq!(ends.ends().due.len(), 3, "one entry per hold");

        tokio::time::sleep(Duration::from_millis(1_100)).await;
        settle().await;
        assert!(gone(&short), "the 1 s hold ended at its lease end");
        assert!(!gone(&long) && !gone(&renewed));

        tokio::time::sleep(Duration::from_secs(2)).await;
        settle().await;
        assert!(!gone(&renewed), "a renewed hold outlives its first end");
        assert!(!gone(&released), "a released hold never ends");

        tokio::time::sleep(Duration::from_secs(3)).await;
        settle().await;
        assert!(gone(&renewed), "and ends at its renewed end");
        assert!(!gone(&long));
        drop(renewed_end);

        tokio::time::sleep(Duration::from_secs(5)).await;
        settle().await;
        assert!(gone(&long));
        assert_eq!(ended.lock().unwrap().len(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_closed_schedule_expires_nothing() {
        let ended = Arc::new(Mutex::new(Vec::new()));
        let ends = LeaseEnds::new({
            let ended = ended.clone();
            move |token, _| ended.lock().unwrap().push(token)
        });
        let _end = ends.schedule(Token::random(), Instant::now() + Duration::from_secs(1));
        settle().await;
        ends.close();
        tokio::time::sleep(Duration::from_secs(2)).await;
        settle().await;
        assert!(ended.lock().unwrap().is_empty());
    }
}
