//! Counters, marks and fenced values on ZooKeeper: what it does well,
//! versioned compare-and-set.
//!
//! A counter is a persistent node under the root holding its value in
//! decimal; its version is the zxid of the node's last write (`mzxid`),
//! which no later write of any node repeats. An update reads the node and
//! writes it back conditional on the version read (`setData` with the
//! node's version, `create` for a missing one), again after a short random
//! pause when another write came first: atomic, two round trips when
//! uncontended, more under contention. A client's own updates of one node
//! go one at a time, so tasks that share a client never race each other's
//! writes. A read that answers (a `get`, a
//! refusal) is synced with the leader first (the `sync` sent with it, in
//! the same round trip), so a member behind the leader never answers from
//! before a write that has completed; a read a conditional write checks
//! is not. A mark is a child node of the
//! counter's mark set, created or found there; a fenced value a node
//! holding the token and the value, written the same conditional way (the
//! token alone once the value is removed: the node stays, so that older
//! tokens stay refused).
//! Expiry (`expire_after`) and rate limiting are not offered.

use std::sync::Arc;
use std::time::Duration;

use zookeeper_client as zk;

use lockguard_core::store::{
    ChangeBell, CounterKeys, DataStore, LimitKeys, LimitOp, LimitReply, LockKeys, Stored,
};
use lockguard_core::{Error, ErrorKind, Result};

use super::{ZooKeeperStore, bounded};
use lockguard_core::store::net::{LostRaces, path_segment};

/// A node's content as read: its bytes and stat, or `None` when missing.
type Read = Option<(Vec<u8>, zk::Stat)>;

/// How new a read must be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fresh {
    /// As new as the leader's state when the read was sent: a `sync`
    /// first and the read after it, both sent at once (one round trip; a
    /// session's requests are answered in order). A server behind the
    /// leader otherwise answers from its past: a `get` that begins after
    /// another has returned could see an older version, and a refusal
    /// (stock short, a version moved on) could rest on a value already
    /// replaced; ZooKeeper keeps only a session's own reads in order.
    Leader,
    /// What the connected server has: for a read whose answer a
    /// conditional write checks (a stale version fails the write), where
    /// the sync would cost the leader's round (some 0.3 ms from a
    /// follower) for nothing. A refusal decided on it is read again from
    /// the leader before it is answered.
    Member,
}

fn unsupported(what: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!(
            "{what} is not offered on a zookeeper client; it offers locks, semaphores, \
             counters without expiry, marks and fenced values"
        ),
    )
}

fn overflow(key: &str) -> Error {
    Error::invalid(format!(
        "counter {key:?}: increment or decrement would overflow"
    ))
}

/// A zxid as a version (always positive on a real ensemble).
fn version(stat: &zk::Stat) -> u64 {
    u64::try_from(stat.mzxid).unwrap_or(0)
}

fn unreadable(path: &str) -> Error {
    Error::new(
        ErrorKind::Protocol,
        format!("zookeeper node {path} does not hold what lockguard wrote there"),
    )
}

fn counter_value(path: &str, read: &Read) -> Result<i64> {
    match read {
        None => Ok(0),
        Some((data, _)) => std::str::from_utf8(data)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| unreadable(path)),
    }
}

/// A fenced node's content: `{token} {value}`, or `{token}` alone, with no
/// space, for a removed value (`None`).
fn fenced_content(path: &str, data: &[u8]) -> Result<(u64, Option<Vec<u8>>)> {
    let space = data.iter().position(|b| *b == b' ');
    let token = std::str::from_utf8(&data[..space.unwrap_or(data.len())])
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| unreadable(path))?;
    Ok((token, space.map(|s| data[s + 1..].to_vec())))
}

impl ZooKeeperStore {
    pub(super) fn data_path(&self, key: &str) -> String {
        format!("{}/{}", self.root, path_segment(key))
    }

    /// `path`'s content, as new as `fresh` says.
    async fn read(&self, client: &zk::Client, path: &str, fresh: Fresh) -> Result<Read> {
        let sync = (fresh == Fresh::Leader).then(|| client.sync(path));
        let read = client.get_data(path);
        if let Some(sync) = sync {
            match bounded(self.response_timeout, sync).await? {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(self.failed(client, e, "syncing with the leader")),
            }
        }
        match bounded(self.response_timeout, read).await? {
            Ok(read) => Ok(Some(read)),
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(self.failed(client, e, "reading a node")),
        }
    }

    /// Writes `data` if the node is still as `read` found it (still missing
    /// for `None`): the write's version, or `None` when another write came
    /// first.
    async fn write_if(
        &self,
        client: &zk::Client,
        path: &str,
        data: &[u8],
        read: &Read,
    ) -> Result<Option<u64>> {
        let written = match read {
            Some((_, stat)) => {
                bounded(
                    self.response_timeout,
                    client.set_data(path, data, Some(stat.version)),
                )
                .await?
            }
            None => {
                let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
                bounded(
                    self.response_timeout,
                    client.create(path, data, &persistent),
                )
                .await?
                .map(|(stat, _)| stat)
            }
        };
        match written {
            Ok(stat) => Ok(Some(version(&stat))),
            Err(zk::Error::BadVersion | zk::Error::NodeExists | zk::Error::NoNode) => Ok(None),
            Err(e) => Err(self.failed(client, e, "writing a node")),
        }
    }

    /// Reads the node at `path`, decides with `step` what to write (or to
    /// stop with a value), and writes it conditionally, again until no other
    /// write comes between.
    async fn update<T>(
        &self,
        path: &str,
        mut step: impl FnMut(&Read) -> Result<Result<Vec<u8>, T>>,
        done: impl Fn(u64) -> T,
    ) -> Result<T> {
        // The client's own updates of the node in turn: they race only
        // other clients' writes.
        let _turn = self.turns.take(path).await;
        let client = self.session.client();
        let mut races = LostRaces::new(self.response_timeout);
        // The first read is the member's: a write it decides is checked by
        // the write's version. A refusal, and every read after a lost
        // write, is the leader's.
        let mut fresh = Fresh::Member;
        loop {
            let read = self.read(&client, path, fresh).await?;
            let data = match step(&read)? {
                Ok(data) => data,
                Err(answer) if fresh == Fresh::Leader => return Ok(answer),
                Err(_) => {
                    fresh = Fresh::Leader;
                    continue;
                }
            };
            if let Some(version) = self.write_if(&client, path, &data, &read).await? {
                return Ok(done(version));
            }
            fresh = Fresh::Leader;
            races.lost(|| format!("updating {path}")).await?;
        }
    }

    async fn counter_update(
        &self,
        keys: &CounterKeys,
        ttl: Option<Duration>,
        f: impl Fn(i64) -> Result<Result<i64, i64>>,
    ) -> Result<Result<i64, i64>> {
        if ttl.is_some() {
            return Err(unsupported("counter expiry"));
        }
        let path = self.data_path(keys.id());
        let mut new = 0;
        let answer = self
            .update(
                &path,
                |read| {
                    let current = counter_value(&path, read)?;
                    Ok(match f(current)? {
                        Ok(value) => {
                            new = value;
                            Ok(value.to_string().into_bytes())
                        }
                        Err(current) => Err(Err(current)),
                    })
                },
                |_| Ok(()),
            )
            .await?;
        Ok(answer.map(|()| new))
    }
}

impl DataStore for ZooKeeperStore {
    async fn counter_add(
        &self,
        keys: &CounterKeys,
        delta: i64,
        ttl: Option<Duration>,
    ) -> Result<i64> {
        let key = keys.id();
        let added = self
            .counter_update(keys, ttl, |v| {
                v.checked_add(delta).map(Ok).ok_or_else(|| overflow(key))
            })
            .await?;
        Ok(added.unwrap_or_else(|v| v))
    }

    async fn counter_take(
        &self,
        keys: &CounterKeys,
        n: i64,
        ttl: Option<Duration>,
    ) -> Result<Result<i64, i64>> {
        let key = keys.id();
        self.counter_update(keys, ttl, |v| {
            if v < n {
                Ok(Err(v))
            } else {
                v.checked_sub(n).map(Ok).ok_or_else(|| overflow(key))
            }
        })
        .await
    }

    async fn counter_get(&self, keys: &CounterKeys) -> Result<(i64, u64)> {
        let path = self.data_path(keys.id());
        let read = self
            .read(&self.session.client(), &path, Fresh::Leader)
            .await?;
        let value = counter_value(&path, &read)?;
        Ok((value, read.as_ref().map_or(0, |(_, stat)| version(stat))))
    }

    async fn counter_set(
        &self,
        keys: &CounterKeys,
        value: i64,
        expected: Option<u64>,
        ttl: Option<Duration>,
    ) -> Result<Result<u64, u64>> {
        if ttl.is_some() {
            return Err(unsupported("counter expiry"));
        }
        let path = self.data_path(keys.id());
        let client = self.session.client();
        let Some(expected) = expected else {
            return self
                .update(&path, |_| Ok(Ok(value.to_string().into_bytes())), Ok)
                .await;
        };
        let of = |read: &Read| read.as_ref().map_or(0, |(_, stat)| version(stat));
        // The member's read, checked by the write's version; a refusal is
        // the leader's.
        let mut read = self.read(&client, &path, Fresh::Member).await?;
        if of(&read) != expected {
            read = self.read(&client, &path, Fresh::Leader).await?;
            if of(&read) != expected {
                return Ok(Err(of(&read)));
            }
        }
        match self
            .write_if(&client, &path, value.to_string().as_bytes(), &read)
            .await?
        {
            Some(version) => Ok(Ok(version)),
            None => {
                let now = self.read(&client, &path, Fresh::Leader).await?;
                Ok(Err(of(&now)))
            }
        }
    }

    async fn mark_once(
        &self,
        keys: &CounterKeys,
        member: &str,
        ttl: Option<Duration>,
    ) -> Result<bool> {
        if ttl.is_some() {
            return Err(unsupported("mark expiry"));
        }
        let set = self.data_path(&format!("{}:marks", keys.id()));
        let path = format!("{set}/{}", path_segment(member));
        let client = self.session.client();
        let persistent = zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());
        let container = zk::CreateMode::Container.with_acls(zk::Acls::anyone_all());
        for _ in 0..3 {
            match bounded(
                self.response_timeout,
                client.create(&path, &[], &persistent),
            )
            .await?
            {
                Ok(_) => return Ok(true),
                Err(zk::Error::NodeExists) => return Ok(false),
                Err(zk::Error::NoNode) => {
                    match bounded(self.response_timeout, client.create(&set, &[], &container))
                        .await?
                    {
                        Ok(_) | Err(zk::Error::NodeExists) => {}
                        Err(e) => return Err(self.failed(&client, e, "creating a mark set")),
                    }
                }
                Err(e) => return Err(self.failed(&client, e, "marking a member")),
            }
        }
        Err(Error::new(
            ErrorKind::Unavailable,
            format!("zookeeper removed {set} each time a mark was made in it"),
        ))
    }

    async fn rate_limit(
        &self,
        _keys: &LimitKeys<'_>,
        _op: LimitOp,
        _cost: u64,
        _peek: bool,
    ) -> Result<LimitReply> {
        Err(unsupported("rate limiting"))
    }

    async fn fenced_write(&self, key: &str, token: u64, value: &[u8]) -> Result<bool> {
        let path = self.data_path(key);
        let mut data = format!("{token} ").into_bytes();
        data.extend_from_slice(value);
        self.update(
            &path,
            |read| match read {
                Some((stored, _)) if fenced_content(&path, stored)?.0 > token => Ok(Err(false)),
                _ => Ok(Ok(data.clone())),
            },
            |_| true,
        )
        .await
    }

    async fn fenced_read(&self, key: &str) -> Result<Stored> {
        let path = self.data_path(key);
        let client = self.session.client();
        match self.read(&client, &path, Fresh::Leader).await? {
            Some((data, _)) => {
                let (token, value) = fenced_content(&path, &data)?;
                Ok(value.map(|v| (token, v)))
            }
            None => Ok(None),
        }
    }

    async fn fenced_remove(&self, key: &str, token: u64) -> Result<bool> {
        let path = self.data_path(key);
        // The token alone: the node stays, and refuses older tokens.
        let data = token.to_string().into_bytes();
        self.update(
            &path,
            |read| match read {
                Some((stored, _)) if fenced_content(&path, stored)?.0 > token => Ok(Err(false)),
                _ => Ok(Ok(data.clone())),
            },
            |_| true,
        )
        .await
    }

    async fn follow(&self, lock: &Arc<LockKeys>, value: &str, bell: ChangeBell) -> Result<()> {
        self.follow_election(lock, value, bell).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fenced_content_is_read_strictly() {
        assert_eq!(
            fenced_content("/p", b"42 paid").unwrap(),
            (42, Some(b"paid".to_vec()))
        );
        assert_eq!(fenced_content("/p", b"7 ").unwrap(), (7, Some(Vec::new())));
        assert_eq!(
            fenced_content("/p", b"7 a b").unwrap(),
            (7, Some(b"a b".to_vec()))
        );
        for bad in [&b""[..], b"x 1", b"-1 v", b" v", b"42x", b"-1"] {
            assert!(fenced_content("/p", bad).is_err(), "{bad:?}");
        }
    }

    /// A removed value's node holds its token alone: read as no value, its
    /// token kept; an empty value still has its space.
    #[test]
    fn a_token_alone_is_a_removed_value() {
        assert_eq!(fenced_content("/p", b"42").unwrap(), (42, None));
        assert_eq!(
            fenced_content("/p", u64::MAX.to_string().as_bytes()).unwrap(),
            (u64::MAX, None)
        );
        assert_ne!(
            fenced_content("/p", b"42").unwrap(),
            fenced_content("/p", b"42 ").unwrap()
        );
    }
}
