//! Following an election for its observers: two persistent watches
//! (ZooKeeper 3.6 and later), one recursive on the election lock's node
//! (a holder or waiter came or went, also when a session or a lease
//! ended) and one on its announcement's node; every event rings the
//! observer's bell. A session event ends the feed (events during a
//! reconnection can be lost, ZOOKEEPER-4698), and the observer follows
//! again and reads.

use std::sync::Arc;

use lockguard_core::Result;
use lockguard_core::store::{ChangeBell, LockKeys};
use zookeeper_client as zk;

use super::{ZooKeeperStore, bounded};

impl ZooKeeperStore {
    /// See [`DataStore::follow`](lockguard_core::store::DataStore::follow).
    pub(super) async fn follow_election(
        &self,
        lock: &Arc<LockKeys>,
        value: &str,
        bell: ChangeBell,
    ) -> Result<()> {
        let client = self.session.client();
        let lock = self
            .watch(
                &client,
                &self.dir(lock),
                zk::AddWatchMode::PersistentRecursive,
            )
            .await?;
        let value = self
            .watch(
                &client,
                &self.data_path(value),
                zk::AddWatchMode::Persistent,
            )
            .await?;
        tokio::spawn(ring_on_events(lock, value, bell));
        Ok(())
    }

    /// A persistent watch of `path`, standing.
    async fn watch(
        &self,
        client: &zk::Client,
        path: &str,
        mode: zk::AddWatchMode,
    ) -> Result<zk::PersistentWatcher> {
        match bounded(self.response_timeout, client.watch(path, mode)).await? {
            Ok(watcher) => Ok(watcher),
            // ZooKeeper before 3.6: its observers poll.
            Err(zk::Error::Unimplemented) => Err(lockguard_core::store::unsupported(
                "zookeeper",
                "following changes before ZooKeeper 3.6",
            )),
            Err(e) => Err(self.failed(client, e, "following an election")),
        }
    }
}

/// Rings `bell` on every node event, until the observer goes away or a
/// session event comes (the bell is dropped: the observer follows again).
async fn ring_on_events(
    mut lock: zk::PersistentWatcher,
    mut value: zk::PersistentWatcher,
    bell: ChangeBell,
) {
    loop {
        let event = tokio::select! {
            () = bell.closed() => return,
            event = lock.changed() => event,
            event = value.changed() => event,
        };
        if event.event_type == zk::EventType::Session {
            tracing::debug!(state = ?event.session_state, "an election's watch saw its session change; following again");
            return;
        }
        bell.ring();
    }
}
