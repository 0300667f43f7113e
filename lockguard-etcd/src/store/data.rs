//! Counters, marks and fenced values on etcd: each a key of its own,
//! changed by a transaction that compares what it read.
//!
//! A counter is `{prefix}counter/{key}`, its value in decimal; an update
//! reads it and writes it back in a transaction that holds only if its
//! `mod_revision` is still the one read (a compare-and-set, two round
//! trips; one more each time a concurrent writer won). Its version is that
//! revision, which never repeats. A mark is a key created only if missing.
//! A fenced value is one key whose value starts with the token that wrote
//! it, 20 decimal digits, so that etcd's byte-wise comparison of values
//! compares tokens: a write holds only if the stored value is below the
//! next token.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use lockguard_core::store::{
    CounterKeys, DataStore, LimitKeys, LimitOp, LimitReply, Stored, net, unsupported,
};
use lockguard_core::{Error, ErrorKind, Result};

use super::{EtcdStore, escape};

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
    fn data_key(&self, kind: &str, id: &str) -> String {
        format!("{}{kind}/{}", self.prefix, escape(id))
    }

    /// A counter's value and `mod_revision` (0 and 0 when missing).
    async fn read_counter(&self, key: &str) -> Result<(i64, i64)> {
        let answer = self.get("reading a counter", key, None).await?;
        match answer.first() {
            None => Ok((0, 0)),
            Some(kv) => Ok((counter_value(key, kv.value())?, kv.mod_revision())),
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
        if ttl.is_some() {
            return Err(unsupported("etcd", "counter expiry"));
        }
        let key = self.data_key("counter", keys.id());
        let (mut value, mut revision) = self.read_counter(&key).await?;
        let mut pause = Duration::from_micros(200);
        loop {
            let new = match f(value)? {
                Ok(new) => new,
                Err(current) => return Ok(Err(current)),
            };
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.as_str(),
                    CompareOp::Equal,
                    revision,
                )])
                .and_then([TxnOp::put(key.as_str(), new.to_string(), None)])
                .or_else([TxnOp::get(key.as_str(), None)]);
            let answer = self.txn("updating a counter", txn).await?;
            if answer.succeeded() {
                return Ok(Ok(new));
            }
            (value, revision) = match answer.op_responses().pop() {
                Some(TxnOpResponse::Get(get)) => match get.kvs().first() {
                    None => (0, 0),
                    Some(kv) => (counter_value(&key, kv.value())?, kv.mod_revision()),
                },
                _ => self.read_counter(&key).await?,
            };
            // A random pause, so the writers that lost this round do not
            // meet again in the next.
            let nanos = u64::try_from(pause.as_nanos()).unwrap_or(u64::MAX);
            tokio::time::sleep(Duration::from_nanos(fastrand::u64(0..=nanos))).await;
            pause = (pause * 2).min(Duration::from_millis(20));
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
            // Created meanwhile by another writer: compare with it.
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
        let (value, revision) = self.read_counter(&key).await?;
        Ok((value, u64::try_from(revision).unwrap_or(0)))
    }

    async fn counter_set(
        &self,
        keys: &CounterKeys,
        value: i64,
        expected: Option<u64>,
        ttl: Option<Duration>,
    ) -> Result<std::result::Result<u64, u64>> {
        if ttl.is_some() {
            return Err(unsupported("etcd", "counter expiry"));
        }
        let key = self.data_key("counter", keys.id());
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
        if ttl.is_some() {
            return Err(unsupported("etcd", "expiring marks"));
        }
        let key = format!("{}/{}", self.data_key("mark", keys.id()), escape(member));
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
}

/// A counter's stored value.
fn counter_value(key: &str, value: &[u8]) -> Result<i64> {
    std::str::from_utf8(value)
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Protocol,
                format!("etcd key {key:?} holds no counter"),
            )
        })
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
