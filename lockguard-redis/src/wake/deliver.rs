//! Where a pub/sub connection's messages go: straight to the client's
//! waiters, as the connection reads them.

#[cfg(feature = "cluster")]
use std::collections::VecDeque;
#[cfg(feature = "cluster")]
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Weak};
#[cfg(feature = "cluster")]
use std::time::{Duration, Instant};

use lockguard_core::store::Inbox;
use redis::aio::{AsyncPushSender, SendError};
use redis::{PushInfo, PushKind, Value};
use tokio::sync::Notify;

/// Routes pub/sub messages to a client's waiters, called by the connection
/// as it reads them: it only takes a lock and wakes a task, never blocks.
pub(crate) struct Deliver {
    inbox: Weak<dyn Inbox>,
    /// Told when the connection is lost (its keeper listens).
    lost: Arc<Notify>,
    /// Whether a loss wakes every waiter: the connection a wait relies on
    /// does; a cluster master's, which only speeds wake-ups up, does not.
    wakes_all: bool,
    /// Messages delivered lately, where one may come twice (a cluster's).
    #[cfg(feature = "cluster")]
    seen: Option<Arc<Seen>>,
}

impl Deliver {
    /// What routes the messages of the connection a wait relies on: its
    /// loss wakes every waiter. `seen` where a message may come twice.
    pub(crate) fn new(
        inbox: Weak<dyn Inbox>,
        lost: Arc<Notify>,
        #[cfg(feature = "cluster")] seen: Option<Arc<Seen>>,
    ) -> Self {
        Self {
            inbox,
            lost,
            wakes_all: true,
            #[cfg(feature = "cluster")]
            seen,
        }
    }

    /// What routes a cluster master's messages (see `masters.rs`).
    #[cfg(feature = "cluster")]
    pub(crate) fn master(inbox: Weak<dyn Inbox>, lost: Arc<Notify>, seen: Arc<Seen>) -> Self {
        Self {
            inbox,
            lost,
            wakes_all: false,
            seen: Some(seen),
        }
    }
}

impl std::fmt::Debug for Deliver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Deliver")
    }
}

impl AsyncPushSender for Deliver {
    fn send(&self, push: PushInfo) -> std::result::Result<(), SendError> {
        let Some(inbox) = self.inbox.upgrade() else {
            // The client is gone: nobody listens any more.
            return Err(SendError);
        };
        match push.kind {
            PushKind::Message => {
                if let Some(Value::BulkString(channel)) = push.data.first()
                    && let Ok(channel) = std::str::from_utf8(channel)
                {
                    // The payload is the waiter's token, or the released
                    // token for a Redlock release (the same release
                    // announced by several nodes wakes waiters once).
                    let payload = match push.data.get(1) {
                        Some(Value::BulkString(token)) => token.as_slice(),
                        _ => &[],
                    };
                    #[cfg(feature = "cluster")]
                    if self
                        .seen
                        .as_ref()
                        .is_some_and(|s| !s.first(channel, payload))
                    {
                        return Ok(());
                    }
                    inbox.deliver(channel, payload);
                }
            }
            PushKind::Disconnection => {
                if self.wakes_all {
                    tracing::debug!("pub/sub connection lost; waking every waiter to retry");
                    inbox.wake_all();
                }
                self.lost.notify_one();
            }
            _ => {}
        }
        Ok(())
    }
}

#[cfg(feature = "cluster")]
/// The messages delivered in the last [`Seen::WINDOW`], by a hash of their
/// channel and payload: a cluster's subscriber hears each release on the
/// key's master and over the bus, and delivers it once. A payload names
/// one handoff (its token, fence and attempt) or one waiter's turn, so two
/// different messages alike within the window are not expected; were one
/// dropped, its waiter's timed refresh would find what it said.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    hasher: RandomState,
    recent: std::sync::Mutex<VecDeque<(Instant, u64)>>,
}

#[cfg(feature = "cluster")]
impl Seen {
    /// How long a message is remembered: far longer than the bus delays
    /// the second copy.
    const WINDOW: Duration = Duration::from_secs(2);
    /// The most messages remembered.
    const MOST: usize = 4096;

    /// Whether this message is heard for the first time (and remembers it).
    pub(crate) fn first(&self, channel: &str, payload: &[u8]) -> bool {
        let hash = self.hasher.hash_one((channel, payload));
        let now = Instant::now();
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        while recent
            .front()
            .is_some_and(|(at, _)| now.duration_since(*at) >= Self::WINDOW)
        {
            recent.pop_front();
        }
        if recent.iter().any(|(_, h)| *h == hash) {
            return false;
        }
        if recent.len() == Self::MOST {
            recent.pop_front();
        }
        recent.push_back((now, hash));
        true
    }
}

#[cfg(all(test, feature = "cluster"))]
mod tests {
    use super::*;

    #[test]
    fn a_message_heard_twice_within_the_window_is_delivered_once() {
        let seen = Seen::default();
        assert!(seen.first("c", b"handoff 1"));
        assert!(!seen.first("c", b"handoff 1"), "the copy over the bus");
        assert!(seen.first("c", b"handoff 2"));
        assert!(seen.first("other", b"handoff 1"), "another channel");
    }

    #[test]
    fn seen_forgets_the_oldest_beyond_its_bound() {
        let seen = Seen::default();
        for i in 0..=Seen::MOST {
            assert!(seen.first("c", i.to_string().as_bytes()));
        }
        // The first was forgotten to make room; the last is remembered.
        assert!(seen.first("c", b"0"));
        assert!(!seen.first("c", Seen::MOST.to_string().as_bytes()));
    }
}
