//! A store for unit tests: the in-memory store behind a wrapper that can
//! act as another store would (a longest lease, feeds of changes that end
//! as they open).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::store::{
    ChangeBell, DataStore, Inbox, LockKeys, LockStore, Occupancy, Outcome, Place, Store, Stored,
    Token, Waiting,
};

/// The in-memory store's locks and fenced values, forwarded.
#[derive(Debug)]
pub(crate) struct Forwarding {
    inner: Store,
    /// The longest lease it says it keeps.
    max_lease: Option<Duration>,
    /// How long each fenced read takes.
    read_delay: Duration,
    /// How long each extension of a lease takes to answer (after the
    /// store ran it).
    extend_delay: Duration,
    /// How many feeds of changes were asked for: each ends as it opens,
    /// and past a hundred the asking fails (so a test without a pause
    /// between them ends).
    pub(crate) follows: AtomicUsize,
    /// How many extensions of a lock's lease were asked for.
    pub(crate) extends: AtomicUsize,
}

impl Forwarding {
    /// A store that keeps leases of at most `max_lease`.
    pub(crate) fn new(max_lease: Option<Duration>) -> Arc<Self> {
        Self::with_read_delay(max_lease, Duration::ZERO)
    }

    /// A store that keeps leases of at most `max_lease`, and whose
    /// fenced reads each take `read_delay`.
    pub(crate) fn with_read_delay(max_lease: Option<Duration>, read_delay: Duration) -> Arc<Self> {
        Self::with_delays(max_lease, read_delay, Duration::ZERO)
    }

    /// A store whose extensions of a lease each answer `extend_delay`
    /// after it ran them.
    pub(crate) fn with_extend_delay(extend_delay: Duration) -> Arc<Self> {
        Self::with_delays(None, Duration::ZERO, extend_delay)
    }

    fn with_delays(
        max_lease: Option<Duration>,
        read_delay: Duration,
        extend_delay: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            inner: Store::memory(),
            max_lease,
            read_delay,
            extend_delay,
            follows: AtomicUsize::new(0),
            extends: AtomicUsize::new(0),
        })
    }

    /// A client of `this`.
    pub(crate) fn client(this: &Arc<Self>) -> crate::Client {
        crate::Client::builder()
            .build(Store::new(this.clone(), Vec::new()))
            .unwrap()
    }
}

impl LockStore for Forwarding {
    fn name(&self) -> &'static str {
        "forwarding"
    }
    fn waiting(&self) -> Waiting {
        self.inner.waiting()
    }
    fn max_lease(&self) -> Option<Duration> {
        self.max_lease
    }
    fn confirms_handoffs(&self) -> bool {
        self.inner.confirms_handoffs()
    }
    fn attach(&self, inbox: Weak<dyn Inbox>) {
        self.inner.attach(inbox)
    }
    async fn acquire(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        lease: Duration,
        place: Option<Place<'_>>,
    ) -> Result<Outcome> {
        self.inner.acquire(keys, token, lease, place).await
    }
    async fn release(&self, keys: &Arc<LockKeys>, token: &Token) -> Result<bool> {
        self.inner.release(keys, token).await
    }
    async fn extend(&self, keys: &Arc<LockKeys>, token: &Token, lease: Duration) -> Result<bool> {
        self.extends.fetch_add(1, Ordering::Relaxed);
        let extended = self.inner.extend(keys, token, lease).await;
        tokio::time::sleep(self.extend_delay).await;
        extended
    }
    async fn release_later(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        keep: Duration,
    ) -> Result<bool> {
        self.inner.release_later(keys, token, keep).await
    }
    async fn inspect(&self, keys: &Arc<LockKeys>) -> Result<Occupancy> {
        self.inner.inspect(keys).await
    }
}

impl DataStore for Forwarding {
    async fn fenced_write(&self, key: &str, token: u64, value: &[u8]) -> Result<bool> {
        self.inner.fenced_write(key, token, value).await
    }
    async fn fenced_read(&self, key: &str) -> Result<Stored> {
        tokio::time::sleep(self.read_delay).await;
        self.inner.fenced_read(key).await
    }
    async fn follow(&self, _lock: &Arc<LockKeys>, _value: &str, bell: ChangeBell) -> Result<()> {
        let follows = 1 + self.follows.fetch_add(1, Ordering::Relaxed);
        drop(bell);
        if follows > 100 {
            return Err(Error::new(ErrorKind::Unavailable, "too many follows"));
        }
        Ok(())
    }
}
