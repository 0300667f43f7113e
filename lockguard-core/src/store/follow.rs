//! Following changes: how a store that can push tells an observer of an
//! election ([`Leader::observe`](crate::Leader::observe)) that something
//! changed, so it reads again at once instead of at its next poll.

use tokio::sync::watch;

/// The store's end of a feed of changes, given to
/// [`DataStore::follow`](super::DataStore::follow): the store
/// [`ring`](ChangeBell::ring)s it on each change it sees, and drops it when
/// it can follow no longer (its watch ended, its connection was lost).
/// The observer then opens a new feed and reads again, so nothing is
/// missed. [`closed`](ChangeBell::closed) completes when the observer went
/// away: the store stops following then.
#[derive(Debug)]
pub struct ChangeBell {
    tx: watch::Sender<u64>,
}

impl ChangeBell {
    /// Says something may have changed: the observer reads again. Rings
    /// that come while it reads count as one; none is lost.
    pub fn ring(&self) {
        self.tx.send_modify(|rung| *rung = rung.wrapping_add(1));
    }

    /// Completes when nobody listens any more: stop following then.
    pub async fn closed(&self) {
        self.tx.closed().await;
    }

    /// Whether nobody listens any more.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// The observer's end of a feed: made with its bell by [`feed`].
#[derive(Debug)]
pub(crate) struct Changes {
    rx: watch::Receiver<u64>,
}

impl Changes {
    /// Waits for the next ring: true then, false once the store dropped its
    /// bell (it follows no longer).
    pub(crate) async fn changed(&mut self) -> bool {
        self.rx.changed().await.is_ok()
    }
}

/// A new feed: the bell for the store, the changes for the observer.
pub(crate) fn feed() -> (ChangeBell, Changes) {
    let (tx, rx) = watch::channel(0);
    (ChangeBell { tx }, Changes { rx })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn rings_while_away_count_as_one_and_a_dropped_bell_ends_the_feed() {
        let (bell, mut changes) = feed();
        assert!(!bell.is_closed());
        bell.ring();
        bell.ring();
        assert!(changes.changed().await);
        let again = tokio::time::timeout(std::time::Duration::from_millis(20), changes.changed());
        assert!(again.await.is_err(), "two rings while away counted twice");
        drop(bell);
        assert!(!changes.changed().await);

        let (bell, changes) = feed();
        drop(changes);
        bell.closed().await;
        assert!(bell.is_closed());
    }
}
