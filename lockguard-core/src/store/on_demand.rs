//! A listener started only once a wait needs it: a store whose locks wait
//! in the server (PostgreSQL's advisory locks, MySQL's user locks) rings
//! bells for its semaphores and read-write locks alone.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::{Inbox, Listener, StoreFuture};
use crate::error::Result;

/// A channel's inbox, as its client's first wait gave it, and whether its
/// subscription was needed yet.
type Channel = (Weak<dyn Inbox>, bool);

/// A [`Listener`] that subscribes a channel only once [`needed`] says a
/// wait of that channel's client needs it (a wait that a handoff of the
/// store's ends); until then [`sync`](Listener::sync) answers at once.
///
/// The inner listener must start its subscription when `sync` is called,
/// not when its future is first polled ([`ChannelTasks`](super::ChannelTasks)
/// does): `needed` drops the future.
///
/// [`needed`]: OnDemand::needed
pub struct OnDemand<L> {
    inner: L,
    channels: Mutex<HashMap<String, Channel>>,
}

impl<L: fmt::Debug> fmt::Debug for OnDemand<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OnDemand")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<L: Listener> OnDemand<L> {
    /// `inner`, subscribing each channel once needed.
    pub fn new(inner: L) -> Self {
        Self {
            inner,
            channels: Mutex::default(),
        }
    }

    fn channels(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        self.channels.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A wait of `channel`'s client needs its subscription: it starts (in
    /// the background, if its client synced it), and every later `sync`
    /// keeps it. A handoff made before it listens waits in the store's
    /// mail, which the subscription reads first thing.
    pub fn needed(&self, channel: &str) {
        let inbox = {
            let mut channels = self.channels();
            match channels.get_mut(channel) {
                Some((inbox, needed)) => {
                    *needed = true;
                    inbox.upgrade()
                }
                None => None,
            }
        };
        if let Some(inbox) = inbox {
            drop(self.inner.sync(channel, inbox));
        }
    }
}

impl<L: Listener> Listener for OnDemand<L> {
    /// Keeps the subscription of `channel` once a wait needed it
    /// ([`OnDemand::needed`]), and answers once it listens; before that,
    /// answers at once.
    fn sync<'a>(&'a self, channel: &'a str, inbox: Arc<dyn Inbox>) -> StoreFuture<'a, Result<()>> {
        let needed = {
            let mut channels = self.channels();
            let entry = channels
                .entry(channel.to_owned())
                .or_insert_with(|| (Arc::downgrade(&inbox), false));
            entry.0 = Arc::downgrade(&inbox);
            entry.1
        };
        if needed {
            self.inner.sync(channel, inbox)
        } else {
            StoreFuture::ready(Ok(()))
        }
    }
}
