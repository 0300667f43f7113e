//! A lock released before its `at_least` has passed (a scheduled job's
//! lock): kept by a persistent node that outlives the holder's session.
//!
//! A holder's node is ephemeral: it goes with its session, when the
//! holder's client is dropped or its process exits. A lock kept only by
//! that node would be free the moment a job that ended early returned
//! from `main`, and another replica would run the same job in the same
//! period. So the release of a lock that must stay taken turns the hold
//! into a persistent child of the lock's container, `kept`, in one
//! transaction: `kept` is written (created, or overwritten when an earlier
//! one is left) and the holder's node deleted, or neither when the node is
//! gone. `kept`'s data is how long it keeps the lock, in milliseconds from
//! the write, on the ZooKeeper leader's clock (the node's `mtime`), then
//! the token of the hold it keeps and that hold's fencing token: a survey
//! lists the kept lock held by that token, and a forced release of that
//! token deletes `kept`.
//!
//! A node that comes to the head of the queue while `kept` is there reads
//! it, and the leader's time now, from a write of its own (it touches its
//! own node, which changes nothing else); while the kept time lasts the
//! lock is busy for as long as is left (a waiter stays at the head,
//! watching `kept`, and asks again then, or when `kept` goes sooner; a
//! `try_acquire` gives its node up). Once it has passed,
//! the node deletes `kept` (for the version it read) and holds. Both times
//! are the leader's clock at a write: a change of leader between them
//! counts the skew between the two servers' clocks, which NTP bounds.
//!
//! `kept` is no queue node (it has no sequence number), so the queue's
//! order leaves it out; and it keeps the container from being removed, so
//! a multi-lock's one-step attempt finds the key busy and takes it in
//! order, through the rule above. A `kept` that nobody takes over stays,
//! one small node per lock name, until the lock is next taken.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use zookeeper_client as zk;

use lockguard_core::Result;
use lockguard_core::store::{LockKeys, Token};

use super::{ZooKeeperStore, bounded};

/// The name of the persistent child that keeps a released lock.
pub(super) const KEPT: &str = "kept";

/// `kept`'s data: the kept time, in whole milliseconds rounded up (a kept
/// lock is never let go early), the token of the hold it keeps, and that
/// hold's fencing token when known.
fn encode(keep: Duration, token: &Token, fence: Option<u64>) -> String {
    let ms = u64::try_from(keep.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
    match fence {
        Some(fence) => format!("{ms} {} {fence}", token.as_str()),
        None => format!("{ms} {}", token.as_str()),
    }
}

/// Until when `kept` keeps the lock, in milliseconds on the leader's
/// clock: its write's time (`written`, its `mtime`) plus its kept time;
/// `None` for data that is no kept time (then it keeps nothing).
fn kept_until(data: &[u8], written: i64) -> Option<i64> {
    let ms: i64 = std::str::from_utf8(data)
        .ok()?
        .split_ascii_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(written.saturating_add(ms))
}

/// The hold `kept` keeps: its token and its fencing token, as `encode`
/// wrote them (`None` for a `kept` that names none).
pub(super) fn kept_holder(data: &[u8]) -> Option<(Token, Option<u64>)> {
    let mut fields = std::str::from_utf8(data).ok()?.split_ascii_whitespace();
    let token = Token::parse(fields.nth(1)?.as_bytes())?;
    Some((token, fields.next().and_then(|f| f.parse().ok())))
}

/// This machine's wall clock, in ms since the Unix epoch: against a
/// `kept`'s time for what writes nothing (an estimate as good as the
/// clocks agree).
pub(super) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// How much longer a `kept` with `data`, written at `written`, keeps its
/// lock at `now` (ms since the epoch), if at all.
pub(super) fn kept_left_at(data: &[u8], written: i64, now: i64) -> Option<Duration> {
    kept_until(data, written)
        .filter(|until| *until > now)
        .map(|until| Duration::from_millis(u64::try_from(until - now).unwrap_or(0)))
}

impl ZooKeeperStore {
    /// Turns `token`'s hold of `keys` into a `kept` node that keeps the
    /// lock for `keep` more, and deletes the holder's node; whether it
    /// still held.
    pub(super) async fn release_later_inner(
        &self,
        keys: &Arc<LockKeys>,
        token: &Token,
        keep: Duration,
    ) -> Result<bool> {
        let client = self.session.client();
        // Not held here (a lease that ended, an ended session): a release
        // finds and removes whatever is left.
        let Some((path, created)) = self.held_at(token, client.session_id()) else {
            return self.release_inner(keys, token).await;
        };
        let kept = format!("{}/{KEPT}", self.dir(keys));
        let data = encode(keep, token, created);
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        // Created when missing, overwritten when an earlier one is left:
        // tried both ways, since another may appear or go in between.
        for create in [true, false, true] {
            let mut multi = client.new_multi_writer();
            let built = if create {
                multi.add_create(&kept, data.as_bytes(), &persistent)
            } else {
                multi.add_set_data(&kept, data.as_bytes(), None)
            };
            built
                .and_then(|()| multi.add_delete(&path, None))
                .map_err(|e| self.failed(&client, e, "keeping a released lock"))?;
            match bounded(self.response_timeout, multi.commit()).await? {
                Ok(_) => {
                    self.nodes().remove(token);
                    return Ok(true);
                }
                Err(zk::MultiWriteError::OperationFailed {
                    index: 0,
                    source: zk::Error::NodeExists | zk::Error::NoNode,
                }) => {
                    continue;
                }
                // The holder's node is gone: the lock was no longer ours.
                Err(zk::MultiWriteError::OperationFailed {
                    index: 1,
                    source: zk::Error::NoNode,
                }) => {
                    self.nodes().remove(token);
                    return Ok(false);
                }
                Err(zk::MultiWriteError::OperationFailed { source, .. })
                | Err(zk::MultiWriteError::RequestFailed { source }) => {
                    return Err(self.failed(&client, source, "keeping a released lock"));
                }
            }
        }
        Err(lockguard_core::Error::new(
            lockguard_core::ErrorKind::Unavailable,
            "the kept node of a released lock kept appearing and going",
        ))
    }

    /// For the node at `path`, come to the head of the queue of `dir`
    /// while `kept` is there: how much longer `kept` keeps the lock, with
    /// a watch of `kept` (it fires when `kept` goes sooner, by a forced
    /// release), or `None` once it has passed and `kept` is deleted (the
    /// node may hold).
    pub(super) async fn kept_for(
        &self,
        client: &zk::Client,
        dir: &str,
        path: &str,
    ) -> Result<Option<(Duration, zk::OneshotWatcher)>> {
        let kept = format!("{dir}/{KEPT}");
        let read = client.get_and_watch_data(&kept);
        // The leader's time now: a write of our own node that changes
        // nothing it holds (an empty lock node stays empty).
        let touch = client.set_data(path, &[], None);
        let (data, stat, watcher) = match bounded(self.response_timeout, read).await? {
            Ok(found) => found,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(e) => return Err(self.failed(client, e, "reading a kept lock")),
        };
        let now = match bounded(self.response_timeout, touch).await? {
            Ok(stat) => stat.mtime,
            Err(e) => return Err(self.failed(client, e, "reading the ensemble's time")),
        };
        if let Some(left) = kept_left_at(&data, stat.mtime, now) {
            return Ok(Some((left, watcher)));
        }
        match bounded(
            self.response_timeout,
            client.delete(&kept, Some(stat.version)),
        )
        .await?
        {
            // Rewritten since the read: read again.
            Err(zk::Error::BadVersion) => Box::pin(self.kept_for(client, dir, path)).await,
            Ok(()) | Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(self.failed(client, e, "deleting a kept lock")),
        }
    }

    /// How much longer the `kept` node of `dir` keeps its lock, for an
    /// inspection (which writes nothing): its time against this
    /// machine's clock, an estimate as good as the clocks agree.
    pub(super) async fn kept_left(
        &self,
        client: &zk::Client,
        dir: &str,
    ) -> Result<Option<Duration>> {
        Ok(self
            .read_kept(client, dir)
            .await?
            .and_then(|(data, stat)| kept_left_at(&data, stat.mtime, now_ms())))
    }

    /// The `kept` node of `dir`, its data and its stat, if there is one.
    pub(super) async fn read_kept(
        &self,
        client: &zk::Client,
        dir: &str,
    ) -> Result<Option<(Vec<u8>, zk::Stat)>> {
        let kept = format!("{dir}/{KEPT}");
        match bounded(self.response_timeout, client.get_data(&kept)).await? {
            Ok(found) => Ok(Some(found)),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(self.failed(client, e, "reading a kept lock")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_times_round_up_and_count_from_the_write() {
        let token = Token::random();
        let t = token.as_str();
        assert_eq!(
            encode(Duration::from_micros(1500), &token, None),
            format!("2 {t}")
        );
        assert_eq!(
            encode(Duration::from_secs(5), &token, Some(42)),
            format!("5000 {t} 42")
        );
        assert_eq!(
            kept_until(format!("5000 {t} 42").as_bytes(), 1_000),
            Some(6_000)
        );
        // What a client before the token was kept wrote.
        assert_eq!(kept_until(b"5000", 1_000), Some(6_000));
        assert_eq!(kept_until(b"soon", 1_000), None);
        assert_eq!(
            kept_left_at(b"5000", 1_000, 5_500),
            Some(Duration::from_millis(500))
        );
        assert_eq!(kept_left_at(b"5000", 1_000, 6_000), None);
    }

    #[test]
    fn the_kept_hold_is_named_with_its_fence_when_known() {
        let token = Token::random();
        let data = encode(Duration::from_secs(5), &token, Some(42));
        assert_eq!(kept_holder(data.as_bytes()), Some((token, Some(42))));
        let data = encode(Duration::from_secs(5), &token, None);
        assert_eq!(kept_holder(data.as_bytes()), Some((token, None)));
        assert_eq!(kept_holder(b"5000"), None);
        assert_eq!(kept_holder(b"5000 not-a-token"), None);
    }
}
