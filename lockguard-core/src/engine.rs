//! What every primitive of one client works with: the store, the key
//! prefix, the defaults, and the client's waiters. Guards, locks and
//! counters hold an `Arc<Engine>`, not the client.

use std::sync::Arc;
use std::time::Duration;

use crate::notify::Waiters;
use crate::store::Store;

/// How long [`Lock::acquire`](crate::Lock::acquire) waits by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// The default longest pause between two attempts of a waiting acquire
/// when no notification arrives.
pub const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_millis(500);

/// How long a queued waiter that stops answering keeps its place by default:
/// a waiter whose process died or whose connection is gone delays the queue
/// by at most this.
pub const DEFAULT_WAITER_TIMEOUT: Duration = Duration::from_secs(1);

/// The shortest waiter timeout a client accepts.
pub const MIN_WAITER_TIMEOUT: Duration = Duration::from_millis(50);

/// Defaults a client applies to the primitives it hands out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Defaults {
    pub(crate) lease: Duration,
    pub(crate) wait: Duration,
    pub(crate) retry_interval: Duration,
    pub(crate) waiter_timeout: Duration,
}

/// One client's store, prefix, defaults and waiters.
#[derive(Debug)]
pub(crate) struct Engine {
    pub(crate) store: Store,
    pub(crate) prefix: String,
    pub(crate) defaults: Defaults,
    pub(crate) waiters: Arc<Waiters>,
    /// The lock series its primitives record to, named once per labels.
    pub(crate) series: Arc<crate::meter::SeriesNames>,
}

impl Engine {
    /// An engine over `store` whose waiters are told of handoffs on
    /// `channel`.
    pub(crate) fn new(store: Store, prefix: String, defaults: Defaults, channel: String) -> Self {
        let waiters = Arc::new(Waiters::new(channel, store.listeners.clone()));
        let inbox: Arc<dyn crate::store::Inbox> = waiters.clone();
        store.attach(Arc::downgrade(&inbox));
        Self {
            store,
            prefix,
            defaults,
            waiters,
            series: Arc::default(),
        }
    }

    /// Another engine on the same store and waiters: a separate identity
    /// for reentrancy, as a second client would be.
    pub(crate) fn peer(&self) -> Self {
        Self {
            store: self.store.clone(),
            prefix: self.prefix.clone(),
            defaults: self.defaults,
            waiters: self.waiters.clone(),
            series: self.series.clone(),
        }
    }
}
