//! Waking waiting tasks.
//!
//! On a store with wait queues (memory, Redis, a cluster) every waiting
//! task holds a [`Ticket`]: its token, queued in the store, and a local wake
//! handle. A release hands the lock (or a permit) to the first live waiter
//! in the store and announces the [`Handoff`] to that waiter's client; the
//! client's listener routes it to that one task, which takes the lock.
//! Nobody else is woken.
//!
//! Waiters of a store without a queue (a quorum of independent nodes,
//! which would each order a queue their own way) listen on the key's
//! release channel on every node, through a [`Broadcast`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::store::{Handoff, Inbox, Listener};
use crate::token::{Token, TokenHashing};

/// How long a release channel stays subscribed after its last waiter left,
/// so a key contended again soon does not pay SUBSCRIBE and UNSUBSCRIBE
/// each time.
const UNSUBSCRIBE_GRACE: Duration = Duration::from_secs(2);

/// How close together the same release announced by several nodes arrives;
/// a later announcement with the same token is a new release.
const DUPLICATE_WINDOW: Duration = Duration::from_millis(100);

#[derive(Debug)]
struct Entry {
    tx: watch::Sender<u64>,
    /// The release last announced and when, so one release announced by
    /// several nodes (within moments) wakes the waiters once.
    last_release: (Vec<u8>, Instant),
    waiters: usize,
}

/// The waiters of one client.
#[derive(Debug)]
pub(crate) struct Waiters {
    /// The channel this client's queued waiters are notified on.
    channel: String,
    /// Queued waiters by token.
    tickets: Mutex<HashMap<Token, Arc<Slot>, TokenHashing>>,
    /// Waiters without a queue, by release channel.
    broadcasts: Mutex<HashMap<String, Entry>>,
    /// The store's message connections (one per node).
    listeners: Vec<Arc<dyn Listener>>,
    /// Whether `channel` is subscribed (always, without listeners).
    listening: AtomicBool,
    /// Whether a subscription of `channel` is under way (in a task of its
    /// own, so it goes on past the patience of the wait that began it).
    subscribing: AtomicBool,
    /// Told when a subscription of `channel` ends, done or failed.
    subscribed: Notify,
}

/// Where a queued waiter's handoff is left for it.
#[derive(Debug, Default)]
struct Slot {
    notify: Notify,
    handoff: Mutex<Option<Handoff>>,
    /// The store said the waiter came near the head of its queue.
    near: AtomicBool,
}

/// A queued waiter's wake handle, withdrawn on drop.
#[derive(Debug)]
pub(crate) struct Ticket {
    waiters: Arc<Waiters>,
    token: Token,
    slot: Arc<Slot>,
}

impl Ticket {
    /// Completes when the store handed this waiter the lock (or may have:
    /// after a lost connection every waiter is woken to check).
    pub(crate) async fn notified(&self) {
        self.slot.notify.notified().await;
    }

    /// Whether the store said, since the last call, that this waiter came
    /// near the head of its queue.
    pub(crate) fn take_near(&self) -> bool {
        self.slot.near.swap(false, Ordering::AcqRel)
    }

    /// Whether a handoff announced to this waiter waits to be taken.
    pub(crate) fn has_handoff(&self) -> bool {
        self.slot
            .handoff
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// The handoff announced to this waiter, if one was.
    pub(crate) fn take_handoff(&self) -> Option<Handoff> {
        self.slot
            .handoff
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.waiters.tickets().remove(&self.token);
    }
}

/// One waiter's interest in a release channel (on a store without a
/// queue), withdrawn on drop.
#[derive(Debug)]
pub(crate) struct Broadcast {
    waiters: Arc<Waiters>,
    channel: String,
    pub(crate) rx: watch::Receiver<u64>,
}

impl Waiters {
    pub(crate) fn new(channel: String, listeners: Vec<Arc<dyn Listener>>) -> Self {
        Self {
            channel,
            tickets: Mutex::default(),
            broadcasts: Mutex::new(HashMap::new()),
            listening: AtomicBool::new(listeners.is_empty()),
            subscribing: AtomicBool::new(false),
            subscribed: Notify::new(),
            listeners,
        }
    }

    fn inbox(self: &Arc<Self>) -> Arc<dyn Inbox> {
        self.clone()
    }

    /// The channel this client's queued waiters are notified on.
    pub(crate) fn channel(&self) -> &str {
        &self.channel
    }

    fn tickets(&self) -> std::sync::MutexGuard<'_, HashMap<Token, Arc<Slot>, TokenHashing>> {
        self.tickets.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn broadcasts(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.broadcasts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether this client's channel is subscribed, so a queued waiter
    /// hears of a handoff.
    pub(crate) fn listening(&self) -> bool {
        self.listening.load(Ordering::Acquire)
    }

    /// Subscribes this client's channel (once per client, at its first
    /// wait, so a client that never waits opens no pub/sub connection),
    /// waiting for it until `until`: the caller's deadline, or one of its
    /// refresh periods, past which its own refresh finds a handoff sooner
    /// than a subscription still under way would announce it. The
    /// subscription goes on in a task of its own (one at a time per
    /// client) and marks the client listening when it is done; a failed one
    /// is logged, and the next first wait tries again. Until then waiters
    /// rely on their timed refreshes, which also claim a lock handed to
    /// them.
    pub(crate) async fn listen(self: &Arc<Self>, until: Instant) {
        let [one] = self.listeners.as_slice() else {
            return;
        };
        let ended = self.subscribed.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        if self.listening() {
            return;
        }
        if !self.subscribing.swap(true, Ordering::AcqRel) {
            let (this, one) = (self.clone(), one.clone());
            tokio::spawn(async move {
                match one.sync(&this.channel, this.inbox()).await {
                    Ok(()) => this.listening.store(true, Ordering::Release),
                    Err(e) => {
                        tracing::debug!(error = %e, "pub/sub subscription failed; waiters rely on their refreshes");
                    }
                }
                this.subscribing.store(false, Ordering::Release);
                this.subscribed.notify_waiters();
            });
        }
        let _ = tokio::time::timeout_at(until, ended).await;
    }

    /// Registers a queued waiter, to be woken when a lock is handed to
    /// `token`.
    pub(crate) fn ticket(self: &Arc<Self>, token: Token) -> Ticket {
        let slot = Arc::new(Slot::default());
        self.tickets().insert(token, slot.clone());
        Ticket {
            waiters: self.clone(),
            token,
            slot,
        }
    }

    /// Hands `handoff` to its waiter and wakes it, if it is one of this
    /// client's.
    fn hand_over(&self, handoff: Handoff) {
        let slot = self.tickets().get(&handoff.token).cloned();
        if let Some(slot) = slot {
            *slot.handoff.lock().unwrap_or_else(|p| p.into_inner()) = Some(handoff);
            slot.notify.notify_one();
        }
    }

    /// Brings every node's subscription for `channel` in line with whether
    /// anyone waits on it, all nodes at once. A node that fails is logged;
    /// its waiters keep their timed retries.
    async fn sync(self: &Arc<Self>, channel: &str) {
        match self.listeners.as_slice() {
            [] => {}
            [one] => {
                if let Err(e) = one.sync(channel, self.inbox()).await {
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
                    let (sub, inbox, channel) = (sub.clone(), self.inbox(), channel.to_owned());
                    let tx = tx.clone();
                    tokio::spawn(async move {
                        let r = sub.sync(&channel, inbox).await;
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

    /// Registers a waiter's interest in `channel` and makes sure the
    /// channel is subscribed before returning, waiting for that until
    /// `until` (the caller's deadline or one of its retry periods; the
    /// nodes' subscriptions go on in the background). A failed
    /// subscription is logged and leaves the waiter on its timed retries.
    pub(crate) async fn broadcast(self: &Arc<Self>, channel: &str, until: Instant) -> Broadcast {
        let rx = {
            let mut entries = self.broadcasts();
            let entry = entries.entry(channel.to_owned()).or_insert_with(|| Entry {
                tx: watch::Sender::new(0),
                last_release: (Vec::new(), Instant::now()),
                waiters: 0,
            });
            entry.waiters += 1;
            entry.tx.subscribe()
        };
        let registration = Broadcast {
            waiters: self.clone(),
            channel: channel.to_owned(),
            rx,
        };
        // Bounded: a slow pub/sub connection leaves the waiter on its
        // timed retries rather than past its deadline or its next retry.
        let _ = tokio::time::timeout_at(until, self.sync(channel)).await;
        registration
    }
}

impl Inbox for Waiters {
    fn is_wanted(&self, channel: &str) -> bool {
        channel == self.channel || self.broadcasts().contains_key(channel)
    }

    /// Routes a message published on `channel`: a handoff on this client's
    /// channel goes to its waiter; a release on a key's channel wakes its
    /// waiters, unless that release has woken them already.
    fn deliver(&self, channel: &str, payload: &[u8]) {
        if channel == self.channel {
            if let Some(handoff) = Handoff::parse(payload) {
                self.hand_over(handoff);
            } else if let Some(token) = Token::parse(payload) {
                self.near(&token);
            } else {
                tracing::debug!(channel, "unreadable handoff announcement ignored");
            }
            return;
        }
        if let Some(entry) = self.broadcasts().get_mut(channel) {
            let (last, at) = &entry.last_release;
            if !payload.is_empty() && last == payload && at.elapsed() < DUPLICATE_WINDOW {
                return;
            }
            entry.last_release = (payload.to_vec(), Instant::now());
            entry.tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    fn handoff(&self, handoff: Handoff) {
        self.hand_over(handoff);
    }

    fn wake(&self, token: &Token) {
        if let Some(slot) = self.tickets().get(token) {
            slot.notify.notify_one();
        }
    }

    fn near(&self, token: &Token) {
        if let Some(slot) = self.tickets().get(token) {
            slot.near.store(true, Ordering::Release);
            slot.notify.notify_one();
        }
    }

    fn wake_all(&self) {
        for slot in self.tickets().values() {
            slot.notify.notify_one();
        }
        for entry in self.broadcasts().values() {
            entry.tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

impl Drop for Broadcast {
    fn drop(&mut self) {
        let last = {
            let mut entries = self.waiters.broadcasts();
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
            && !self.waiters.listeners.is_empty()
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
