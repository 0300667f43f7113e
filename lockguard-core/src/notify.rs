//! Waking waiters when a lock is released.
//!
//! Every key with waiters in this client has one entry: a counter bumped on
//! each release notification (a `watch` channel, so a notification that
//! arrives between a failed attempt and the start of the wait is not lost),
//! and a local slot that lets only one waiter of this client at a time
//! contend for the key in the store, so a release wakes one request per
//! client rather than one per waiting task.
//!
//! The waiter holding the slot also offers to take the lock over directly:
//! a task of this client that releases the key then hands it over in one
//! store request (new token, new fencing token, the lock never free)
//! instead of releasing it and waking every client. At most
//! [`MAX_HANDOFFS_IN_A_ROW`] handoffs follow each other before a release is
//! public again, so waiters in other processes get their turn.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use std::time::Duration;

use tokio::sync::{oneshot, watch};
use tokio::time::Instant;

use crate::backend::redis::Subscriber;
use crate::fence::FencingToken;
use crate::token::Token;

/// How long a channel stays subscribed after its last waiter left, so a
/// key contended again soon does not pay SUBSCRIBE and UNSUBSCRIBE each time.
const UNSUBSCRIBE_GRACE: Duration = Duration::from_secs(2);

/// How close together the same release announced by several Redlock nodes
/// arrives; a later announcement with the same token is a new release.
const DUPLICATE_WINDOW: Duration = Duration::from_millis(100);

/// Consecutive local handoffs of one key before a release is public again.
pub(crate) const MAX_HANDOFFS_IN_A_ROW: u32 = 3;

/// A lock handed straight to a waiting task.
#[derive(Debug)]
pub(crate) struct Handoff {
    pub(crate) token: Token,
    pub(crate) fence: FencingToken,
    /// When the request that set the new lease was sent.
    pub(crate) sent_at: Instant,
}

/// A waiter's offer to take a lock over, with the lease it wants.
#[derive(Debug)]
pub(crate) struct Offer {
    pub(crate) tx: oneshot::Sender<Handoff>,
    pub(crate) lease: Duration,
}

#[derive(Debug)]
struct Entry {
    tx: watch::Sender<u64>,
    /// The release last announced and when, so one release announced by
    /// several nodes (within moments) wakes the waiters once.
    last_release: (Vec<u8>, Instant),
    waiters: usize,
    slot: Arc<tokio::sync::Mutex<()>>,
    offer: Option<Offer>,
    handoffs_in_a_row: u32,
}

/// The waiters of one client, by release channel.
#[derive(Debug)]
pub(crate) struct Waiters {
    entries: Mutex<HashMap<String, Entry>>,
    /// The pub/sub connections (one per Redis node), for stores whose
    /// releases come from elsewhere.
    subscribers: Vec<Arc<Subscriber>>,
}

/// One task's interest in a channel, withdrawn on drop.
#[derive(Debug)]
pub(crate) struct Registration {
    waiters: Arc<Waiters>,
    channel: String,
    pub(crate) rx: watch::Receiver<u64>,
    pub(crate) slot: Arc<tokio::sync::Mutex<()>>,
}

impl Waiters {
    pub(crate) fn new(subscribers: Vec<Subscriber>) -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
            subscribers: subscribers.into_iter().map(Arc::new).collect(),
        }
    }

    /// Brings every node's subscription for `channel` in line with whether
    /// anyone waits on it, all nodes at once. A node that fails is logged;
    /// its waiters keep their timed retries.
    async fn sync(self: &Arc<Self>, channel: &str) {
        match self.subscribers.as_slice() {
            [] => {}
            [one] => {
                if let Err(e) = one.sync(channel, self).await {
                    tracing::debug!(channel, error = %e, "pub/sub subscription change failed");
                }
            }
            many => {
                // Every node that granted the lock publishes its release, and
                // the holder's nodes are a quorum: subscriptions on a quorum
                // of nodes cannot all miss it. Wait for that many; the rest
                // (a down or paused node) finish in the background.
                let needed = many.len() / 2 + 1;
                let (tx, mut rx) = tokio::sync::mpsc::channel(many.len());
                for sub in many {
                    let (sub, waiters, channel) = (sub.clone(), self.clone(), channel.to_owned());
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        let r = sub.sync(&channel, &waiters).await;
                        if let Err(e) = &r {
                            tracing::debug!(channel, error = %e, "pub/sub subscription change failed on a node");
                        }
                        let _ = tx.send(r.is_ok()).await;
                    });
                }
                drop(tx);
                let mut done = 0;
                while let Some(ok) = rx.recv().await {
                    done += usize::from(ok);
                    if done >= needed {
                        break;
                    }
                }
            }
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers interest in `channel` and, on Redis, makes sure the channel
    /// is subscribed before returning. A failed subscription is logged and
    /// leaves the waiter on its timed retries.
    pub(crate) async fn register(
        self: &Arc<Self>,
        channel: &str,
        deadline: Option<Instant>,
    ) -> Registration {
        let (rx, slot) = {
            let mut entries = self.entries();
            let entry = entries.entry(channel.to_owned()).or_insert_with(|| Entry {
                tx: watch::Sender::new(0),
                last_release: (Vec::new(), Instant::now()),
                waiters: 0,
                slot: Arc::new(tokio::sync::Mutex::new(())),
                offer: None,
                handoffs_in_a_row: 0,
            });
            entry.waiters += 1;
            (entry.tx.subscribe(), entry.slot.clone())
        };
        let registration = Registration {
            waiters: self.clone(),
            channel: channel.to_owned(),
            rx,
            slot,
        };
        // Bounded by the caller's wait: a slow pub/sub connection leaves
        // the waiter on its timed retries rather than past its deadline.
        match deadline {
            Some(d) => {
                let _ = tokio::time::timeout_at(d, self.sync(channel)).await;
            }
            None => self.sync(channel).await,
        }
        registration
    }

    pub(crate) fn is_wanted(&self, channel: &str) -> bool {
        self.entries().contains_key(channel)
    }

    /// Wakes the waiters of `channel`.
    pub(crate) fn notify(&self, channel: &str) {
        if let Some(entry) = self.entries().get(channel) {
            entry.tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Offers to take over the lock announced on `channel` (the slot
    /// holder does, before it sleeps).
    pub(crate) fn offer(&self, channel: &str, offer: Offer) {
        if let Some(entry) = self.entries().get_mut(channel) {
            entry.offer = Some(offer);
        }
    }

    #[cfg(test)]
    pub(crate) fn has_offer(&self, channel: &str) -> bool {
        self.entries()
            .get(channel)
            .is_some_and(|e| e.offer.as_ref().is_some_and(|o| !o.tx.is_closed()))
    }

    /// The waiting task to hand the lock on `channel` to, if there is one
    /// and the run of handoffs has not reached its bound (reaching it makes
    /// this release public and starts a new run).
    pub(crate) fn take_offer(&self, channel: &str) -> Option<Offer> {
        let mut entries = self.entries();
        let entry = entries.get_mut(channel)?;
        let offer = entry.offer.take().filter(|o| !o.tx.is_closed())?;
        if entry.handoffs_in_a_row >= MAX_HANDOFFS_IN_A_ROW {
            entry.handoffs_in_a_row = 0;
            entry.offer = Some(offer);
            return None;
        }
        entry.handoffs_in_a_row += 1;
        Some(offer)
    }

    /// Wakes the waiters of `channel` for the release identified by
    /// `release`, unless that release has woken them already.
    pub(crate) fn notify_release(&self, channel: &str, release: &[u8]) {
        if let Some(entry) = self.entries().get_mut(channel) {
            let (last, at) = &entry.last_release;
            if !release.is_empty() && last == release && at.elapsed() < DUPLICATE_WINDOW {
                return;
            }
            entry.last_release = (release.to_vec(), Instant::now());
            entry.tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Wakes every waiter, after notifications may have been missed.
    pub(crate) fn notify_all(&self) {
        for entry in self.entries().values() {
            entry.tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let last = {
            let mut entries = self.waiters.entries();
            match entries.get_mut(&self.channel) {
                Some(entry) if entry.waiters <= 1 => {
                    entries.remove(&self.channel);
                    true
                }
                Some(entry) => {
                    entry.waiters -= 1;
                    false
                }
                None => false,
            }
        };
        if last
            && !self.waiters.subscribers.is_empty()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            let waiters = self.waiters.clone();
            let channel = std::mem::take(&mut self.channel);
            rt.spawn(async move {
                tokio::time::sleep(UNSUBSCRIBE_GRACE).await;
                // Does nothing if a waiter came back meanwhile.
                waiters.sync(&channel).await;
            });
        }
    }
}
