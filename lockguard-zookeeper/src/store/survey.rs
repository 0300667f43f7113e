//! Surveys and forced releases on ZooKeeper: every lock held or awaited
//! under a client's prefix, read from the lock nodes, and the end of a
//! hold another client made.
//!
//! A survey lists the root's children once and keeps the lock nodes whose
//! identity (the node's name, [`path_segment`](lockguard_core::store::net::path_segment) undone) starts with the
//! prefix; one round trip lists their children, each answer with the lock
//! node's stat (its `pzxid` is the newest token, as an inspection reports
//! it), and a second one reads the stats of the nodes it needs: each
//! holder's, for its fencing token (the zxid that created its node, a
//! semaphore permit's the zxid of its touch), and every node of a
//! semaphore. Who holds is the store's own rule ([`Admission::waits`]): a
//! lock's first node; a read-write lock's readers ahead of its first
//! writer, or that writer. A semaphore's count of permits is not kept in
//! the store, so its holders are its first node, which holds whatever the
//! count, and the nodes that touched themselves when they came to hold (a
//! node admitted a moment ago that has not touched itself yet is listed
//! waiting). A lock kept past its release (see `kept`) is held by the
//! hold `kept` names, with its fence and the kept time left (against this
//! machine's clock), and every node of its queue waits.
//!
//! A forced release finds the holder's node by its token, in a listing
//! synced with the leader, and deletes it when it holds under the same
//! rule, as the holder's own release would: the waiter watching it is
//! woken and takes the lock. The holder's client learns it at its next
//! renewal, which finds its node gone. A kept lock's forced release
//! deletes `kept`, for the version read: the head of its queue watches
//! `kept` and takes the lock.

use zookeeper_client as zk;

use lockguard_core::store::net::path_unsegment;
use lockguard_core::store::{Holder, Holding, LockKeys, RwMode, Token, Waiter};
use lockguard_core::{Error, ErrorKind, FencingToken, Result};

use super::admission::{Admission, mode_of};
use super::{ZooKeeperStore, bounded, kept, synced_children, zxid};

/// The kind in a semaphore's identity, `{prefix}sem:{escaped name}`
/// (`LockKeys::id`): its holders are told by their touch.
const SEMAPHORE_KIND: &str = "sem";

/// One node of a lock's queue, as a survey reads it.
#[derive(Debug)]
struct Queued {
    /// Its name in the lock node.
    name: String,
    token: Token,
    /// Its mode, of a read-write lock's node.
    mode: Option<RwMode>,
    /// Whether it holds, as far as its name and place tell.
    holds: bool,
}

/// A lock node with a queue, as a survey lists it.
#[derive(Debug)]
struct Listed {
    /// The lock's identity.
    id: String,
    /// Its path.
    dir: String,
    /// Whether it is a semaphore's.
    semaphore: bool,
    /// Its queue, in order.
    queue: Vec<Queued>,
    /// The hold a `kept` node keeps, while its time lasts: its token, its
    /// fence, and the time left.
    kept: Option<(Token, Option<u64>, std::time::Duration)>,
    /// The zxid of the last change to its children.
    pzxid: i64,
}

impl ZooKeeperStore {
    /// See [`LockStore::survey`](lockguard_core::store::LockStore::survey).
    pub(super) async fn survey_inner(&self, prefix: &str) -> Result<Vec<Holding>> {
        let client = self.session.client();
        let names = match bounded(self.response_timeout, client.list_children(&self.root)).await? {
            Ok(names) => names,
            Err(zk::Error::NoNode) => return Ok(Vec::new()),
            Err(e) => return Err(self.failed(&client, e, "listing the lock nodes")),
        };
        // A lock's identity ends with its escaped name's closing brace;
        // the nodes of what is derived from one (a counter's marks) have a
        // suffix after it.
        let nodes: Vec<(String, String)> = names
            .iter()
            .filter_map(|name| {
                let id = identity(name)?;
                (id.starts_with(prefix) && id.ends_with('}'))
                    .then(|| (id, format!("{}/{name}", self.root)))
            })
            .collect();
        // Every lock node's children in one round trip.
        let requests: Vec<_> = nodes
            .iter()
            .map(|(_, dir)| client.get_children(dir))
            .collect();
        let mut listings = Vec::with_capacity(nodes.len());
        for ((id, dir), request) in nodes.into_iter().zip(requests) {
            match bounded(self.response_timeout, request).await? {
                Ok((children, stat)) => listings.push((id, dir, children, stat)),
                // Removed since the root was listed: nobody holds it.
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(self.failed(&client, e, "listing a lock's queue")),
            }
        }
        let mut locks = Vec::new();
        for (id, dir, children, stat) in listings {
            let queue = self.in_order(&client, &dir, &children).await?;
            let kept = if children.iter().any(|c| c == kept::KEPT) {
                self.kept_hold(&client, &dir).await?
            } else {
                None
            };
            if queue.is_empty() && kept.is_none() {
                continue;
            }
            let semaphore = kind(prefix, &id) == Some(SEMAPHORE_KIND);
            let queue = queued(&dir, &queue, kept.is_some())?;
            locks.push(Listed {
                id,
                dir,
                semaphore,
                queue,
                kept,
                pzxid: stat.pzxid,
            });
        }
        // The stats of every holder, and of every node of a semaphore, in
        // one round trip.
        let requests: Vec<Vec<_>> = locks
            .iter()
            .map(|lock| {
                lock.queue
                    .iter()
                    .map(|n| {
                        (lock.semaphore || n.holds)
                            .then(|| client.check_stat(&format!("{}/{}", lock.dir, n.name)))
                    })
                    .collect()
            })
            .collect();
        let mut found = Vec::with_capacity(locks.len());
        for (lock, requests) in locks.into_iter().zip(requests) {
            let mut holders = Vec::new();
            let mut waiters = Vec::new();
            let mut latest = u64::try_from(lock.pzxid).unwrap_or(0);
            if let Some((token, fence, left)) = lock.kept {
                let fence = fence.map(FencingToken::new);
                holders.push(Holder::new(token, None, fence, Some(left)));
            }
            for (node, request) in lock.queue.into_iter().zip(requests) {
                let Some(request) = request else {
                    waiters.push(Waiter::new(node.token, node.mode));
                    continue;
                };
                let path = format!("{}/{}", lock.dir, node.name);
                let stat = match bounded(self.response_timeout, request).await? {
                    Ok(Some(stat)) => stat,
                    // Gone since the listing: it no longer holds or waits.
                    Ok(None) => continue,
                    Err(e) => return Err(self.failed(&client, e, "reading a lock's queue")),
                };
                if !lock.semaphore {
                    let fence = FencingToken::new(zxid(stat.czxid, &path)?);
                    holders.push(Holder::new(node.token, node.mode, Some(fence), None));
                } else if node.holds || stat.data_length > 0 {
                    // A permit's token is its holder's touch (the first
                    // node's creation while it has not touched itself).
                    let fence = zxid(stat.mzxid, &path)?;
                    latest = latest.max(fence);
                    let fence = Some(FencingToken::new(fence));
                    holders.push(Holder::new(node.token, node.mode, fence, None));
                } else {
                    waiters.push(Waiter::new(node.token, node.mode));
                }
            }
            if holders.is_empty() && waiters.is_empty() {
                continue;
            }
            let latest = (latest > 0).then(|| FencingToken::new(latest));
            found.push(Holding::new(lock.id, holders, waiters, latest));
        }
        Ok(found)
    }

    /// See [`LockStore::evict`](lockguard_core::store::LockStore::evict):
    /// the node of `token` in the lock's queue, found in a listing synced
    /// with the leader, deleted when it holds.
    pub(super) async fn evict_inner(&self, keys: &LockKeys, token: &Token) -> Result<bool> {
        let client = self.session.client();
        let dir = self.dir(keys);
        let children = match bounded(self.response_timeout, synced_children(&client, &dir)).await? {
            Ok(children) => children,
            Err(zk::Error::NoNode) => return Ok(false),
            Err(e) => return Err(self.failed(&client, e, "listing a lock's queue")),
        };
        if children.iter().any(|c| c == kept::KEPT) {
            // Kept past its release: no node of the queue holds, and
            // `kept` holds for the token it names.
            return self.evict_kept(&client, &dir, token).await;
        }
        let queue = self.in_order(&client, &dir, &children).await?;
        let mine = format!("{}-", token.as_str());
        let Some(rank) = queue.iter().position(|n| n.starts_with(&mine)) else {
            return Ok(false);
        };
        let name = queue[rank];
        let rule = mode_of(name).map_or_else(|| Admission::of(keys), Admission::rw);
        if rule.waits(&queue, rank).is_some() {
            return Ok(false);
        }
        let path = format!("{dir}/{name}");
        match bounded(self.response_timeout, client.delete(&path, None)).await? {
            Ok(()) => {
                tracing::debug!(node = %path, "forced release: deleted a holder's node");
                Ok(true)
            }
            // Released (or its session ended) since the listing.
            Err(zk::Error::NoNode) => Ok(false),
            Err(e) => Err(self.failed(&client, e, "deleting a holder's node")),
        }
    }
}

impl ZooKeeperStore {
    /// The hold the `kept` node of `dir` keeps, while its time lasts.
    async fn kept_hold(
        &self,
        client: &zk::Client,
        dir: &str,
    ) -> Result<Option<(Token, Option<u64>, std::time::Duration)>> {
        let Some((data, stat)) = self.read_kept(client, dir).await? else {
            return Ok(None);
        };
        let Some(left) = kept::kept_left_at(&data, stat.mtime, kept::now_ms()) else {
            return Ok(None);
        };
        Ok(kept::kept_holder(&data).map(|(token, fence)| (token, fence, left)))
    }

    /// Deletes the `kept` node of `dir` when it keeps `token`'s hold: the
    /// head of the queue, which watches it, takes the lock.
    async fn evict_kept(&self, client: &zk::Client, dir: &str, token: &Token) -> Result<bool> {
        let Some((data, stat)) = self.read_kept(client, dir).await? else {
            return Ok(false);
        };
        let path = format!("{dir}/{}", kept::KEPT);
        if kept::kept_holder(&data).is_none_or(|(kept, _)| kept != *token) {
            return Ok(false);
        }
        match bounded(
            self.response_timeout,
            client.delete(&path, Some(stat.version)),
        )
        .await?
        {
            Ok(()) => {
                tracing::debug!(node = %path, "forced release: deleted a kept lock");
                Ok(true)
            }
            // Gone, or written again by another hold, since the read.
            Err(zk::Error::NoNode | zk::Error::BadVersion) => Ok(false),
            Err(e) => Err(self.failed(client, e, "deleting a kept lock")),
        }
    }
}

/// The nodes of `queue` (the queue nodes of the lock node `dir`, in
/// order) with their tokens and modes, each marked holding when the
/// store's rule admits it by its place: a lock's and a semaphore's first
/// node, a read-write lock's head. None holds while the lock is `kept`.
fn queued(dir: &str, queue: &[&str], kept: bool) -> Result<Vec<Queued>> {
    queue
        .iter()
        .enumerate()
        .map(|(rank, name)| {
            let token = name
                .split_once('-')
                .and_then(|(t, _)| Token::parse(t.as_bytes()))
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::Protocol,
                        format!(
                            "zookeeper node {dir}/{name} in a lock's queue is not named for a \
                             lockguard token"
                        ),
                    )
                })?;
            let mode = mode_of(name);
            let rule = mode.map_or(Admission::Permits(1), Admission::rw);
            Ok(Queued {
                name: (*name).to_owned(),
                token,
                mode,
                holds: !kept && rule.waits(queue, rank).is_none(),
            })
        })
        .collect()
}

/// The kind of the identity `id` under `prefix`: `lock`, `sem`, `rw`, ...
fn kind<'a>(prefix: &str, id: &'a str) -> Option<&'a str> {
    Some(id.strip_prefix(prefix)?.split_once(':')?.0)
}

/// The identity a node under the root is named for: its name with
/// [`path_segment`](lockguard_core::store::net::path_segment) undone. `None` (logged) for a name that no identity
/// gives: not a node of lockguard's.
fn identity(name: &str) -> Option<String> {
    let id = path_unsegment(name);
    if id.is_none() {
        tracing::debug!(node = name, "not a lockguard node; left out of the survey");
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_are_the_nodes_the_rule_admits() {
        let t = |c: char| c.to_string().repeat(32);
        let lock = [
            format!("{}-0000000001", t('a')),
            format!("{}-0000000002", t('b')),
        ];
        let lock: Vec<&str> = lock.iter().map(String::as_str).collect();
        let listed = queued("/r/l", &lock, false).unwrap();
        let holds: Vec<bool> = listed.iter().map(|n| n.holds).collect();
        assert_eq!(holds, [true, false]);
        assert_eq!(listed[1].token.as_str(), t('b'));
        let kept: Vec<bool> = queued("/r/l", &lock, true)
            .unwrap()
            .iter()
            .map(|n| n.holds)
            .collect();
        assert_eq!(kept, [false, false], "a kept lock is held by no node");

        let rw = [
            format!("{}-__READ__0000000001", t('a')),
            format!("{}-__READ__0000000002", t('b')),
            format!("{}-__WRIT__0000000003", t('c')),
            format!("{}-__READ__0000000004", t('d')),
        ];
        let rw: Vec<&str> = rw.iter().map(String::as_str).collect();
        let listed = queued("/r/rw", &rw, false).unwrap();
        let holds: Vec<(bool, Option<RwMode>)> = listed.iter().map(|n| (n.holds, n.mode)).collect();
        assert_eq!(
            holds,
            [
                (true, Some(RwMode::Read)),
                (true, Some(RwMode::Read)),
                (false, Some(RwMode::Write)),
                (false, Some(RwMode::Read)),
            ]
        );

        let bad = ["abc-0000000001"];
        let e = queued("/r/l", &bad, false).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    }
}
