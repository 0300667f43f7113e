//! A multi-lock's keys taken in one step: one ZooKeeper transaction
//! (a `multi` request).
//!
//! The keys are taken together only when each is free with nobody queued:
//! its container node is missing, or has no child. One round trip reads
//! every container's stat, after a sync with the leader (a key busy on the
//! leader's state is answered busy at once, and nothing is written). Then
//! one transaction takes them all. ZooKeeper's `check` operation compares a
//! node's data version, which its children do not change, so it cannot say
//! that a container is still empty; a `delete` of the container can, since
//! it fails on a container with children. So, for each key, the
//! transaction deletes its container and creates it again (or creates a
//! missing one, which fails if it exists by then), and creates the key's
//! node in it. It succeeds only if every container was still empty when
//! it ran, and then every node exists, each first in its queue; otherwise
//! nothing changed. A container that appeared or went between the read
//! and the transaction makes it fail too: the read is made again, a few
//! times, before the keys are left to be taken one by one.
//!
//! The nodes are created by one transaction, so they share its zxid, which
//! is each key's fencing token: greater than every earlier holder's of the
//! key (whose node an earlier transaction created) and less than every
//! later one's. A recreated container numbers its children from 0 again;
//! its queue's order holds, since none of its earlier nodes is left.

use std::sync::Arc;
use std::time::Duration;

use zookeeper_client as zk;

use lockguard_core::store::{AllOrNone, LockKeys, LockSet, Token};
use lockguard_core::{Error, ErrorKind, FencingToken, Result};

use super::{ZooKeeperStore, bounded, zxid};
use crate::error::zk_error;

/// How many times the transaction is tried when a container appeared or
/// went between the read of the containers and the transaction.
const ATTEMPTS: usize = 3;

/// The largest transaction sent, in bytes of its paths: well below the
/// server's request limit (`jute.maxbuffer`, 1 MiB by default), past
/// which it would drop the connection. More keys are taken one by one.
const MAX_PATH_BYTES: usize = 256 * 1024;

/// What the read of a multi-lock's containers found.
enum Containers {
    /// Every key is free: whether each one's container exists.
    Free(Vec<bool>),
    /// The key at this index is held or has waiters.
    Busy(usize),
}

impl ZooKeeperStore {
    /// Whether `keys` (with one token each) can be taken in one
    /// transaction: locks, not semaphores nor read-write locks, whose
    /// paths fit in one request.
    pub(super) fn takes_at_once(&self, set: LockSet<'_>) -> bool {
        // Each key's container path twice and its node's once.
        let bytes: usize = set.keys().iter().map(|k| self.dir(k).len() * 3 + 64).sum();
        bytes <= MAX_PATH_BYTES
    }

    /// Takes every lock of `keys`, `keys[i]` with `tokens[i]`, in one
    /// transaction when each is free with nobody queued; see the module.
    /// `None` when the containers kept changing under the attempt: the
    /// caller takes the keys one by one.
    pub(super) async fn acquire_all_inner(
        &self,
        keys: &[Arc<LockKeys>],
        tokens: &[Token],
        lease: Duration,
    ) -> Result<Option<AllOrNone>> {
        let client = self.session.client();
        let session = client.session_id();
        let dirs: Vec<String> = keys.iter().map(|k| self.dir(k)).collect();
        for _ in 0..ATTEMPTS {
            let exists = match self.containers(&client, &dirs).await? {
                Containers::Free(exists) => exists,
                Containers::Busy(index) => {
                    return Ok(Some(AllOrNone::Busy { index, ttl: None }));
                }
            };
            let mut multi = client.new_multi_writer();
            let owners = transaction(&mut multi, &dirs, &exists, tokens)
                .map_err(|e| zk_error(e, "building a multi-lock's transaction"))?;
            // Until the answer comes, each creation's outcome is unknown: a
            // release finds the node by name.
            for token in tokens {
                self.record(token, session, None, None);
            }
            let commit = multi.commit();
            // Sent behind the transaction, on the same session, so read
            // after it: the first container, which the transaction created.
            let first = client.check_stat(&dirs[0]);
            let results = match bounded(self.response_timeout, commit).await? {
                Ok(results) => results,
                Err(zk::MultiWriteError::OperationFailed { index, source }) => {
                    // Nothing was written.
                    self.forget(tokens);
                    match source {
                        zk::Error::NotEmpty => {
                            let index = owners.get(index).copied().unwrap_or(0);
                            return Ok(Some(AllOrNone::Busy { index, ttl: None }));
                        }
                        // A container appeared or went since the read.
                        zk::Error::NodeExists | zk::Error::NoNode => {
                            tracing::debug!(
                                "a multi-lock's container appeared or went under its transaction; reading again"
                            );
                            continue;
                        }
                        e => return Err(self.failed(&client, e, "taking a multi-lock's keys")),
                    }
                }
                Err(zk::MultiWriteError::RequestFailed { source }) => {
                    // The outcome is unknown: the tokens' releases find
                    // their nodes by name.
                    return Err(self.failed(&client, source, "taking a multi-lock's keys"));
                }
            };
            // Each key's node is the last creation of the key's operations.
            let last = |i: usize| owners.get(i + 1) != owners.get(i);
            let paths: Vec<(String, zk::Stat)> = results
                .into_iter()
                .enumerate()
                .filter_map(|(i, r)| match r {
                    zk::MultiWriteResult::Create { path, stat } if last(i) => Some((path, stat)),
                    _ => None,
                })
                .collect();
            if paths.len() != dirs.len() {
                return Err(Error::new(
                    ErrorKind::Protocol,
                    format!(
                        "zookeeper answered {} created nodes for a multi-lock of {} keys",
                        paths.len(),
                        dirs.len()
                    ),
                ));
            }
            for ((path, _), token) in paths.iter().zip(tokens) {
                self.record(token, session, Some(path.clone()), None);
            }
            // A server before 3.7.2 / 3.8.1 (ZOOKEEPER-4026) answers a
            // creation in a transaction without its stat: then the
            // transaction's zxid is read from the container it created.
            let fence = match paths.iter().find(|(_, stat)| !stat.is_invalid()) {
                Some((path, stat)) => zxid(stat.czxid, path)?,
                None => match bounded(self.response_timeout, first).await? {
                    Ok(Some(stat)) => zxid(stat.czxid, &dirs[0])?,
                    Ok(None) => {
                        return Err(Error::new(
                            ErrorKind::Unavailable,
                            "the zookeeper session holding a multi-lock's keys ended",
                        ));
                    }
                    Err(e) => return Err(self.failed(&client, e, "reading a multi-lock's token")),
                },
            };
            for ((path, _), token) in paths.iter().zip(tokens) {
                self.record(token, session, Some(path.clone()), Some(fence));
                self.hold(token, lease);
            }
            return Ok(Some(AllOrNone::Acquired(
                tokens.iter().map(|_| FencingToken::new(fence)).collect(),
            )));
        }
        Ok(None)
    }

    /// The containers of `dirs` as the leader knows them, in one round
    /// trip: whether each exists, or the first that has a child.
    async fn containers(&self, client: &zk::Client, dirs: &[String]) -> Result<Containers> {
        let sync = client.sync(&self.root);
        let stats: Vec<_> = dirs.iter().map(|d| client.check_stat(d)).collect();
        match bounded(self.response_timeout, sync).await? {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(self.failed(client, e, "reading a multi-lock's keys")),
        }
        let mut exists = Vec::with_capacity(dirs.len());
        for (i, stat) in stats.into_iter().enumerate() {
            match bounded(self.response_timeout, stat).await? {
                Ok(Some(stat)) if stat.num_children > 0 => return Ok(Containers::Busy(i)),
                Ok(found) => exists.push(found.is_some()),
                Err(e) => return Err(self.failed(client, e, "reading a multi-lock's keys")),
            }
        }
        Ok(Containers::Free(exists))
    }

    /// Forgets what was recorded of `tokens`' nodes: none was created.
    fn forget(&self, tokens: &[Token]) {
        let mut nodes = self.nodes();
        for token in tokens {
            nodes.remove(token);
        }
    }
}

/// Adds to `multi`, for each key (its container `dirs[i]`, which exists
/// when `exists[i]`, and its token), the operations that take it when its
/// container is empty: the key each operation is for, by the operation's
/// index.
fn transaction(
    multi: &mut zk::MultiWriter<'_>,
    dirs: &[String],
    exists: &[bool],
    tokens: &[Token],
) -> std::result::Result<Vec<usize>, zk::Error> {
    let ephemeral = zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
    let container = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
    let mut owners = Vec::with_capacity(dirs.len() * 3);
    for (i, ((dir, exists), token)) in dirs.iter().zip(exists).zip(tokens).enumerate() {
        if *exists {
            // Fails on a container with children: the key is busy.
            multi.add_delete(dir, None)?;
            owners.push(i);
        }
        // Fails on a container that exists by now.
        multi.add_create(dir, &[], &container)?;
        multi.add_create(&format!("{dir}/{}-", token.as_str()), &[], &ephemeral)?;
        owners.extend([i, i]);
    }
    Ok(owners)
}
