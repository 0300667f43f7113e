//! Read-write locks on ZooKeeper: what is their own beside the lock's
//! machinery. Taking, releasing and renewing a hold go through the lock's
//! queue of nodes with the read-write rule of [`admission`](super::admission);
//! only the inspection reads the queue differently.

use lockguard_core::store::{LockKeys, Occupancy};
use lockguard_core::{FencingToken, Result};

use super::ZooKeeperStore;
use super::admission::rw_holders;

impl ZooKeeperStore {
    /// A read-write lock as one listing of its queue shows it: the readers
    /// at its head or its first writer hold, the rest wait; the newest
    /// token is the zxid of the queue's last change, as for a lock.
    pub(super) async fn rw_inspect_inner(&self, keys: &LockKeys) -> Result<Occupancy> {
        let client = self.session.client();
        let dir = self.dir(keys);
        let Some((children, stat)) = self.listing(&client, &dir).await? else {
            return Ok(Occupancy::read_write(0, false, None, 0, None));
        };
        let queue = self.in_order(&client, &dir, &children).await?;
        let (readers, writer) = rw_holders(&queue);
        let holders = readers + usize::from(writer);
        // No node of the queue was created after its last change.
        let latest = u64::try_from(stat.pzxid).unwrap_or(0);
        Ok(Occupancy::read_write(
            u32::try_from(readers).unwrap_or(u32::MAX),
            writer,
            // A holder's lease is kept by its own client.
            None,
            (queue.len() - holders) as u64,
            (latest > 0 && !queue.is_empty()).then(|| FencingToken::new(latest)),
        ))
    }
}
