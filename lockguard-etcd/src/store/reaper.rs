//! The end of each hold's lease, as this client enforces it: one task per
//! store deletes a holder's key when the lease of its hold ends without a
//! renewal (a task per hold cost a spawn, a timer and a wake-up on every
//! release; the schedule costs an entry in an ordered map).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::Notify;
use tokio::time::Instant;

use lockguard_core::store::Token;

use super::{Node, Nodes, Role, discard_in};
use crate::session::Session;

/// The lease ends of a store's holds, earliest first, and the task that
/// deletes each hold's key when its end comes.
#[derive(Debug)]
pub(super) struct Reaper {
    ends: Mutex<Ends>,
    /// Wakes the task: an end earlier than the one it sleeps until, or
    /// the store's end.
    wake: Notify,
    /// Tells apart holds whose leases end at the same instant.
    seq: AtomicU64,
    started: AtomicBool,
    closed: AtomicBool,
    nodes: Weak<Nodes>,
    session: Weak<Session>,
}

#[derive(Debug, Default)]
struct Ends {
    due: BTreeMap<(Instant, u64), Token>,
    /// The end the task sleeps until, when it sleeps until one.
    armed: Option<Instant>,
}

/// A hold's place in its store's schedule of lease ends: it leaves the
/// schedule when dropped, with its hold or when a renewal replaces it.
#[derive(Debug)]
pub(super) struct LeaseEnd {
    at: Instant,
    seq: u64,
    reaper: Weak<Reaper>,
}

impl LeaseEnd {
    /// When the hold's lease ends.
    pub(super) fn at(&self) -> Instant {
        self.at
    }
}

impl Drop for LeaseEnd {
    fn drop(&mut self) {
        if let Some(reaper) = self.reaper.upgrade() {
            reaper.ends().due.remove(&(self.at, self.seq));
        }
    }
}

impl Reaper {
    /// The schedule of a store whose holds are `nodes`, in `session`.
    pub(super) fn new(nodes: Weak<Nodes>, session: Weak<Session>) -> Arc<Self> {
        Arc::new(Self {
            ends: Mutex::new(Ends::default()),
            wake: Notify::new(),
            seq: AtomicU64::new(0),
            started: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            nodes,
            session,
        })
    }

    fn ends(&self) -> MutexGuard<'_, Ends> {
        self.ends.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Schedules the end of `token`'s hold at `at`: unless the returned
    /// place is dropped first, the hold's key is deleted then.
    pub(super) fn schedule(self: &Arc<Self>, token: Token, at: Instant) -> LeaseEnd {
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
            reaper: Arc::downgrade(self),
        }
    }

    /// Ends the task: the store is gone.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Ends `token`'s hold, whose lease ended by `now` unless it was
    /// renewed or released since: its key is deleted in the background.
    fn expire(&self, token: Token, now: Instant) {
        let Some(nodes) = self.nodes.upgrade() else {
            return;
        };
        let node = {
            let mut map = nodes.lock().unwrap_or_else(|p| p.into_inner());
            let ended = matches!(
                map.get(&token),
                Some(Node { role: Role::Holding { end, .. }, .. }) if end.at() <= now
            );
            if ended { map.remove(&token) } else { None }
        };
        if let Some(node) = node {
            tracing::debug!(key = %node.key, "lease ended; deleting the lock's key");
            tokio::spawn(discard_in(
                self.session.clone(),
                node.key.clone(),
                node.created,
            ));
        }
    }
}

/// The task: sleeps until the earliest end, ends the holds due, and
/// sleeps again (until woken by an earlier end, or the store's end).
async fn run(reaper: Arc<Reaper>) {
    loop {
        if reaper.closed.load(Ordering::Acquire) {
            return;
        }
        let now = Instant::now();
        let (due, next) = {
            let mut ends = reaper.ends();
            let later = ends.due.split_off(&(now, u64::MAX));
            let due = std::mem::replace(&mut ends.due, later);
            let next = ends.due.keys().next().map(|(at, _)| *at);
            ends.armed = next;
            (due, next)
        };
        for token in due.into_values() {
            reaper.expire(token, now);
        }
        match next {
            Some(at) => tokio::select! {
                () = tokio::time::sleep_until(at) => {}
                () = reaper.wake.notified() => {}
            },
            None => reaper.wake.notified().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use super::*;

    fn holding(nodes: &Arc<Nodes>, reaper: &Arc<Reaper>, token: Token, lease: Duration) {
        let now = Instant::now();
        nodes.lock().unwrap().insert(
            token,
            Node {
                key: format!("/k/{}", token.as_str()),
                created: 1,
                lease: 7,
                role: Role::Holding {
                    end: reaper.schedule(token, now + lease),
                    since: now,
                },
                place: None,
            },
        );
    }

    fn held(nodes: &Arc<Nodes>, token: &Token) -> bool {
        nodes.lock().unwrap().contains_key(token)
    }

    /// Lets the reaper's task run at the paused clock's current instant.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn each_hold_ends_at_its_own_lease_end_whatever_the_order() {
        let nodes: Arc<Nodes> = Arc::new(Mutex::new(HashMap::new()));
        let reaper = Reaper::new(Arc::downgrade(&nodes), Weak::new());
        let (long, short, renewed, released) = (
            Token::random(),
            Token::random(),
            Token::random(),
            Token::random(),
        );
        holding(&nodes, &reaper, long, Duration::from_secs(10));
        settle().await;
        // Scheduled while the task sleeps until a later end: it wakes.
        holding(&nodes, &reaper, short, Duration::from_secs(1));
        holding(&nodes, &reaper, renewed, Duration::from_secs(2));
        holding(&nodes, &reaper, released, Duration::from_secs(2));
        settle().await;
        if let Some(Node {
            role: Role::Holding { end, .. },
            ..
        }) = nodes.lock().unwrap().get_mut(&renewed)
        {
            *end = reaper.schedule(renewed, Instant::now() + Duration::from_secs(5));
        }
        nodes.lock().unwrap().remove(&released);
        assert_eq!(
            reaper.ends().due.len(),
            3,
            "a renewal or release leaves one entry per hold"
        );

        tokio::time::sleep(Duration::from_millis(1_100)).await;
        settle().await;
        assert!(!held(&nodes, &short), "the 1 s hold ended at its lease end");
        assert!(held(&nodes, &long) && held(&nodes, &renewed));

        tokio::time::sleep(Duration::from_secs(2)).await;
        settle().await;
        assert!(
            held(&nodes, &renewed),
            "a renewed hold outlives its first end"
        );

        tokio::time::sleep(Duration::from_secs(3)).await;
        settle().await;
        assert!(!held(&nodes, &renewed), "and ends at its renewed end");
        assert!(held(&nodes, &long));

        tokio::time::sleep(Duration::from_secs(5)).await;
        settle().await;
        assert!(!held(&nodes, &long));
        assert!(reaper.ends().due.is_empty());
    }
}
