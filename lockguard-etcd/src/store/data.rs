//! Counters, marks and fenced values on etcd: each a key of its own,
//! changed by a transaction that compares what it read.
//!
//! A counter is `{prefix}counter/{key}`, its value in decimal; an update
//! writes it back in a transaction that holds only if its `mod_revision`
//! is still the one this client last saw (a compare-and-set). The client
//! keeps what it last wrote or read of each counter, so an update by the
//! client that wrote last is one round trip; a transaction that finds the
//! counter changed answers what it holds now, and the update is made again
//! from that (one round trip more each time another writer came between).
//! A client's own updates of one counter go one at a time, so tasks that
//! share a client never race each other's compare-and-set.
//! A refusal (a bounded decrement below zero, an overflow) is never drawn
//! from what the client remembers: it reads the counter first. Its version
//! is that revision, which never repeats. A mark is a key created only if missing.
//! A fenced value is one key whose value starts with the token that wrote
//! it, 20 decimal digits, so that etcd's byte-wise comparison of values
//! compares tokens: a write holds only if the stored value is below the
//! next token.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use lockguard_core::store::net::{self, LostRaces, path_segment};
use lockguard_core::store::{
    ChangeBell, CounterKeys, DataStore, LimitKeys, LimitOp, LimitReply, LockKeys, Stored,
};
use lockguard_core::{Error, ErrorKind, Result};

use super::{EtcdStore, unix_ms};

/// Digits of a token at the head of a fenced value.
const TOKEN_DIGITS: usize = 20;
/// After the token: a value follows.
const VALUE: u8 = b'=';
/// After the token: removed (a tombstone that keeps the token).
const REMOVED: u8 = b'-';

/// How a counter changes: from its value to a new one, or refused with the
/// value that refused it.
type Update<'a> = &'a (dyn Fn(i64) -> Result<std::result::Result<i64, i64>> + Sync);

impl EtcdStore {
    pub(super) fn data_key(&self, kind: &str, id: &str) -> String {
        format!("{}{kind}/{}", self.prefix, path_segment(id))
    }

    /// A counter as stored.
    async fn read_counter(&self, key: &str) -> Result<Counted> {
        let answer = self.get("reading a counter", key, None).await?;
        Counted::of(key, answer.first())
    }

    /// Writes `value` to the counter `key` if it is still as `read`: its
    /// deadline kept while it lives, else one `ttl` from now (none without
    /// a `ttl`), and the key attached to a lease that ends after it. What
    /// is stored then when written; what is stored now when not.
    async fn write_counter(
        &self,
        key: &str,
        read: &Counted,
        value: i64,
        ttl: Option<Duration>,
    ) -> Result<std::result::Result<Counted, Counted>> {
        let now = unix_ms();
        let deadline = read.deadline.or_else(|| {
            ttl.map(|t| now.saturating_add(u64::try_from(net::millis(t)).unwrap_or(u64::MAX)))
        });
        let (stored, options) = match deadline {
            Some(d) => {
                let us = i64::try_from(d.saturating_mul(1000)).unwrap_or(i64::MAX);
                let now_us = i64::try_from(now.saturating_mul(1000)).unwrap_or(i64::MAX);
                let lease = self.limit_lease(us, now_us).await?;
                (
                    format!("{value}@{d}"),
                    Some(PutOptions::new().with_lease(lease)),
                )
            }
            None => (value.to_string(), None),
        };
        let txn = Txn::new()
            .when([Compare::mod_revision(key, CompareOp::Equal, read.revision)])
            .and_then([TxnOp::put(key, stored, options)])
            .or_else([TxnOp::get(key, None)]);
        let answer = self.txn("updating a counter", txn).await?;
        if answer.succeeded() {
            return Ok(Ok(Counted {
                value,
                deadline,
                revision: super::revision(&answer),
                expired: false,
            }));
        }
        match answer.op_responses().pop() {
            Some(TxnOpResponse::Get(get)) => Ok(Err(Counted::of(key, get.kvs().first())?)),
            _ => Ok(Err(self.read_counter(key).await?)),
        }
    }

    /// Applies `f` to the counter `keys` names, as a compare-and-set
    /// retried until it holds: the new value, or `f`'s refusal.
    async fn counter_update(
        &self,
        keys: &CounterKeys,
        ttl: Option<Duration>,
        f: Update<'_>,
    ) -> Result<std::result::Result<i64, i64>> {
        let key = self.data_key("counter", keys.id());
        let mut last = self.counter_turns.take(&key).await;
        let (mut read, mut remembered) = match last.take() {
            Some(seen) => (seen.aged(), true),
            None => (self.read_counter(&key).await?, false),
        };
        let mut races = LostRaces::new(self.session.timeout());
        loop {
            let new = match f(read.value) {
                Ok(Ok(new)) => new,
                // A refusal (or an overflow) by a remembered state may be
                // out of date: read the counter and decide again.
                _ if remembered => {
                    read = self.read_counter(&key).await?;
                    remembered = false;
                    continue;
                }
                Ok(Err(current)) => {
                    *last = Some(read);
                    return Ok(Err(current));
                }
                Err(e) => return Err(e),
            };
            read = match self.write_counter(&key, &read, new, ttl).await? {
                Ok(written) => {
                    *last = Some(written);
                    return Ok(Ok(new));
                }
                Err(now) => now,
            };
            if std::mem::take(&mut remembered) {
                // Another writer came after this client's last look: not
                // a race lost this round, no pause.
                continue;
            }
            races
                .lost(|| format!("updating counter {:?}", keys.id()))
                .await?;
        }
    }

    /// Marks `key`, a member of `keys`' marks that expire: the marks are
    /// one generation, `{prefix}mark/{id}` holding its deadline (set by the
    /// first mark, or the first after the last generation ended), and a
    /// member counts as marked when its key holds the live generation's
    /// deadline.
    async fn mark_once_expiring(
        &self,
        keys: &CounterKeys,
        key: &str,
        ttl: Duration,
    ) -> Result<bool> {
        let set = self.data_key("mark", keys.id());
        let mut races = LostRaces::new(self.session.timeout());
        loop {
            let txn = Txn::new().and_then([TxnOp::get(set.as_str(), None), TxnOp::get(key, None)]);
            let answer = self.txn("reading marks", txn).await?;
            let reads: Vec<Option<(Vec<u8>, i64)>> = answer
                .op_responses()
                .into_iter()
                .map(|r| match r {
                    TxnOpResponse::Get(g) => g
                        .kvs()
                        .first()
                        .map(|kv| (kv.value().to_vec(), kv.mod_revision())),
                    _ => None,
                })
                .collect();
            let [set_read, member_read] = <[_; 2]>::try_from(reads).map_err(|_| {
                Error::new(ErrorKind::Protocol, "etcd answered a read of marks in part")
            })?;
            let now = unix_ms();
            let live = set_read.as_ref().and_then(|(v, _)| {
                let d: u64 = std::str::from_utf8(v).ok()?.parse().ok()?;
                (d > now).then_some(d)
            });
            let deadline = live.unwrap_or_else(|| {
                now.saturating_add(u64::try_from(net::millis(ttl)).unwrap_or(u64::MAX))
            });
            let generation = deadline.to_string();
            if live.is_some()
                && member_read
                    .as_ref()
                    .is_some_and(|(v, _)| v.as_slice() == generation.as_bytes())
            {
                return Ok(false);
            }
            let us = i64::try_from(deadline.saturating_mul(1000)).unwrap_or(i64::MAX);
            let now_us = i64::try_from(now.saturating_mul(1000)).unwrap_or(i64::MAX);
            let lease = self.limit_lease(us, now_us).await?;
            let revision = |r: &Option<(Vec<u8>, i64)>| r.as_ref().map_or(0, |(_, rev)| *rev);
            let mut puts = vec![TxnOp::put(
                key,
                generation.as_str(),
                Some(PutOptions::new().with_lease(lease)),
            )];
            if live.is_none() {
                puts.push(TxnOp::put(
                    set.as_str(),
                    generation.as_str(),
                    Some(PutOptions::new().with_lease(lease)),
                ));
            }
            let txn = Txn::new()
                .when([
                    Compare::mod_revision(set.as_str(), CompareOp::Equal, revision(&set_read)),
                    Compare::mod_revision(key, CompareOp::Equal, revision(&member_read)),
                ])
                .and_then(puts);
            if self.txn("marking once", txn).await?.succeeded() {
                return Ok(true);
            }
            // Another mark, or a new generation, came in between: look again.
            races
                .lost(|| format!("marking {:?} once", keys.id()))
                .await?;
        }
    }

    /// The fenced value's key, and what it holds.
    async fn read_fenced(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let answer = self.get("reading a fenced value", key, None).await?;
        Ok(answer.first().map(|kv| kv.value().to_vec()))
    }

    /// Writes `stored` (a token and what follows) if the stored token is
    /// at most `token`: true when written.
    async fn fenced_put(&self, key: &str, token: u64, stored: Vec<u8>) -> Result<bool> {
        let next = format!("{:0width$}", u128::from(token) + 1, width = TOKEN_DIGITS);
        let mut races = LostRaces::new(self.session.timeout());
        loop {
            let txn = Txn::new()
                .when([Compare::value(key, CompareOp::Less, next.as_str())])
                .and_then([TxnOp::put(key, stored.clone(), None)])
                .or_else([TxnOp::get(key, None)]);
            let answer = self.txn("writing a fenced value", txn).await?;
            if answer.succeeded() {
                return Ok(true);
            }
            let missing = match answer.op_responses().pop() {
                Some(TxnOpResponse::Get(get)) => get.kvs().is_empty(),
                _ => false,
            };
            if !missing {
                return Ok(false);
            }
            // etcd compares no value with a missing key: create it.
            let txn = Txn::new()
                .when([Compare::create_revision(key, CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key, stored.clone(), None)]);
            if self.txn("writing a fenced value", txn).await?.succeeded() {
                return Ok(true);
            }
            // Created meanwhile by another writer (and gone again, for the
            // loop to come round): compare with it.
            races
                .lost(|| format!("writing fenced value {key:?}"))
                .await?;
        }
    }
}

impl DataStore for EtcdStore {
    async fn counter_add(
        &self,
        keys: &CounterKeys,
        delta: i64,
        ttl: Option<Duration>,
    ) -> Result<i64> {
        let id = keys.id();
        let update = move |v: i64| {
            v.checked_add(delta)
                .map(Ok)
                .ok_or_else(|| Error::invalid("overflow"))
        };
        self.counter_update(keys, ttl, &update)
            .await
            .map_err(net::overflow_is_invalid(id))
            .map(|r| r.unwrap_or_else(|v| v))
    }

    async fn counter_take(
        &self,
        keys: &CounterKeys,
        n: i64,
        ttl: Option<Duration>,
    ) -> Result<std::result::Result<i64, i64>> {
        let id = keys.id();
        let update = move |v: i64| {
            if v < n {
                return Ok(Err(v));
            }
            v.checked_sub(n)
                .map(Ok)
                .ok_or_else(|| Error::invalid("overflow"))
        };
        self.counter_update(keys, ttl, &update)
            .await
            .map_err(net::overflow_is_invalid(id))
    }

    async fn counter_get(&self, keys: &CounterKeys) -> Result<(i64, u64)> {
        let key = self.data_key("counter", keys.id());
        let read = self.read_counter(&key).await?;
        Ok((read.value, read.version()))
    }

    async fn counter_set(
        &self,
        keys: &CounterKeys,
        value: i64,
        expected: Option<u64>,
        ttl: Option<Duration>,
    ) -> Result<std::result::Result<u64, u64>> {
        let key = self.data_key("counter", keys.id());
        if ttl.is_some() {
            // A write keeps the deadline of a counter that lives, and a
            // counter past its deadline is version 0: read it first.
            let mut last = self.counter_turns.take(&key).await;
            let mut races = LostRaces::new(self.session.timeout());
            loop {
                let read = self.read_counter(&key).await?;
                if let Some(v) = expected
                    && v != read.version()
                {
                    let version = read.version();
                    *last = Some(read);
                    return Ok(Err(version));
                }
                match self.write_counter(&key, &read, value, ttl).await? {
                    Ok(written) => {
                        let version = written.version();
                        *last = Some(written);
                        return Ok(Ok(version));
                    }
                    Err(now) if expected.is_some() => {
                        let version = now.version();
                        *last = Some(now);
                        return Ok(Err(version));
                    }
                    Err(_) => {
                        races
                            .lost(|| format!("setting counter {:?}", keys.id()))
                            .await?
                    }
                }
            }
        }
        let put = TxnOp::put(key.as_str(), value.to_string(), None);
        let txn = match expected {
            Some(version) => Txn::new()
                .when([Compare::mod_revision(
                    key.as_str(),
                    CompareOp::Equal,
                    i64::try_from(version).unwrap_or(i64::MAX),
                )])
                .and_then([put])
                .or_else([TxnOp::get(key.as_str(), None)]),
            None => Txn::new().and_then([put]),
        };
        let answer = self.txn("setting a counter", txn).await?;
        if answer.succeeded() {
            return Ok(Ok(u64::try_from(super::revision(&answer)).unwrap_or(0)));
        }
        let current = match answer.op_responses().pop() {
            Some(TxnOpResponse::Get(get)) => get.kvs().first().map_or(0, |kv| kv.mod_revision()),
            _ => 0,
        };
        Ok(Err(u64::try_from(current).unwrap_or(0)))
    }

    async fn mark_once(
        &self,
        keys: &CounterKeys,
        member: &str,
        ttl: Option<Duration>,
    ) -> Result<bool> {
        let key = format!(
            "{}/{}",
            self.data_key("mark", keys.id()),
            path_segment(member)
        );
        if let Some(ttl) = ttl {
            return self.mark_once_expiring(keys, &key, ttl).await;
        }
        let txn = Txn::new()
            .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key.as_str(), "", None)]);
        Ok(self.txn("marking once", txn).await?.succeeded())
    }

    async fn rate_limit(
        &self,
        keys: &LimitKeys<'_>,
        op: LimitOp,
        cost: u64,
        peek: bool,
    ) -> Result<LimitReply> {
        self.rate_limit_inner(keys, op, cost, peek).await
    }

    async fn fenced_write(&self, key: &str, token: u64, value: &[u8]) -> Result<bool> {
        let key = self.data_key("fenced", key);
        let mut stored = format!("{token:0TOKEN_DIGITS$}").into_bytes();
        stored.push(VALUE);
        stored.extend_from_slice(value);
        self.fenced_put(&key, token, stored).await
    }

    async fn fenced_read(&self, key: &str) -> Result<Stored> {
        let key = self.data_key("fenced", key);
        let Some(stored) = self.read_fenced(&key).await? else {
            return Ok(None);
        };
        let (token, rest) = parse_fenced(&key, &stored)?;
        Ok(match rest.split_first() {
            Some((&VALUE, value)) => Some((token, value.to_vec())),
            _ => None,
        })
    }

    async fn fenced_remove(&self, key: &str, token: u64) -> Result<bool> {
        let key = self.data_key("fenced", key);
        let mut stored = format!("{token:0TOKEN_DIGITS$}").into_bytes();
        stored.push(REMOVED);
        self.fenced_put(&key, token, stored).await
    }

    async fn follow(&self, lock: &Arc<LockKeys>, value: &str, bell: ChangeBell) -> Result<()> {
        self.follow_election(lock, value, bell).await
    }
}

/// A counter as stored: its value (0 past its deadline), the deadline
/// while it lives, and the key's `mod_revision` (0 when missing).
#[derive(Debug, Clone)]
pub(super) struct Counted {
    value: i64,
    deadline: Option<u64>,
    revision: i64,
    /// Past its deadline: as good as missing.
    expired: bool,
}

impl Counted {
    fn of(key: &str, kv: Option<&etcd_client::KeyValue>) -> Result<Self> {
        let Some(kv) = kv else {
            return Ok(Self {
                value: 0,
                deadline: None,
                revision: 0,
                expired: false,
            });
        };
        let bad = || {
            Error::new(
                ErrorKind::Protocol,
                format!("etcd key {key:?} holds no counter"),
            )
        };
        let text = std::str::from_utf8(kv.value()).map_err(|_| bad())?;
        let (value, deadline) = match text.split_once('@') {
            Some((v, d)) => (v, Some(d.parse::<u64>().map_err(|_| bad())?)),
            None => (text, None),
        };
        let value: i64 = value.parse().map_err(|_| bad())?;
        Ok(match deadline {
            // Past its deadline: gone, whatever etcd still keeps.
            Some(d) if d <= unix_ms() => Self {
                value: 0,
                deadline: None,
                revision: kv.mod_revision(),
                expired: true,
            },
            deadline => Self {
                value,
                deadline,
                revision: kv.mod_revision(),
                expired: false,
            },
        })
    }

    /// As it is now: past its deadline (since it was seen), as good as
    /// missing, at the same revision.
    fn aged(self) -> Self {
        match self.deadline {
            Some(d) if d <= unix_ms() => Self {
                value: 0,
                deadline: None,
                revision: self.revision,
                expired: true,
            },
            _ => self,
        }
    }

    /// The version a caller sees: the key's revision, 0 when missing or
    /// past its deadline.
    fn version(&self) -> u64 {
        if self.expired {
            return 0;
        }
        u64::try_from(self.revision).unwrap_or(0)
    }
}

/// A fenced value's token, and what follows it.
fn parse_fenced<'a>(key: &str, stored: &'a [u8]) -> Result<(u64, &'a [u8])> {
    let bad = || {
        Error::new(
            ErrorKind::Protocol,
            format!("etcd key {key:?} holds no fenced value"),
        )
    };
    if stored.len() < TOKEN_DIGITS {
        return Err(bad());
    }
    let (digits, rest) = stored.split_at(TOKEN_DIGITS);
    let token = std::str::from_utf8(digits)
        .ok()
        .and_then(|d| d.parse().ok())
        .ok_or_else(bad)?;
    Ok((token, rest))
}
