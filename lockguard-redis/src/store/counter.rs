//! Counters on Redis: a hash of value `v` and version `ver`, every
//! operation one script.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::RedisStore;
use crate::layout::counter_sequence;
use lockguard_core::store::CounterKeys;
use lockguard_core::store::millis_ceil;
use lockguard_core::{Error, ErrorKind, Result};

static COUNTER_ADD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/sequence.lua"),
        include_str!("scripts/counter_add.lua")
    ))
});
static COUNTER_TAKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/sequence.lua"),
        include_str!("scripts/counter_take.lua")
    ))
});
static COUNTER_SET: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("scripts/sequence.lua"),
        include_str!("scripts/counter_set.lua")
    ))
});
static MARK_ONCE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/mark_once.lua")));

fn ttl_arg(ttl: Option<Duration>) -> u64 {
    ttl.map_or(0, millis_ceil)
}

/// Redis refuses an `HINCRBY` that would overflow; say so as bad input.
fn overflow_is_invalid(key: &str) -> impl FnOnce(Error) -> Error + '_ {
    move |e| {
        let overflow =
            std::error::Error::source(&e).is_some_and(|s| s.to_string().contains("overflow"));
        if overflow {
            Error::new(
                ErrorKind::InvalidInput,
                format!("counter {key:?}: increment or decrement would overflow"),
            )
        } else {
            e
        }
    }
}

impl RedisStore {
    pub(crate) async fn counter_add(
        &self,
        keys: &CounterKeys,
        delta: i64,
        ttl: Option<Duration>,
    ) -> Result<i64> {
        let mut call = COUNTER_ADD.prepare_invoke();
        let key = keys.id();
        call.key(key)
            .key(counter_sequence(keys))
            .arg(delta)
            .arg(ttl_arg(ttl));
        self.run(&call, || format!("adding to counter {key:?}"))
            .await
            .map_err(overflow_is_invalid(key))
    }

    pub(crate) async fn counter_take(
        &self,
        keys: &CounterKeys,
        n: i64,
        ttl: Option<Duration>,
    ) -> Result<Result<i64, i64>> {
        let mut call = COUNTER_TAKE.prepare_invoke();
        let key = keys.id();
        call.key(key)
            .key(counter_sequence(keys))
            .arg(n)
            .arg(ttl_arg(ttl));
        let (taken, v): (i64, i64) = self
            .run(&call, || format!("taking from counter {key:?}"))
            .await
            .map_err(overflow_is_invalid(key))?;
        Ok(if taken == 1 { Ok(v) } else { Err(v) })
    }

    pub(crate) async fn counter_get(&self, key: &str) -> Result<(i64, u64)> {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(key).arg("v").arg("ver");
        let (v, ver): (Option<i64>, Option<u64>) = self
            .query(&cmd, || format!("reading counter {key:?}"))
            .await?;
        Ok((v.unwrap_or(0), ver.unwrap_or(0)))
    }

    pub(crate) async fn counter_set(
        &self,
        keys: &CounterKeys,
        value: i64,
        expected: Option<u64>,
        ttl: Option<Duration>,
    ) -> Result<Result<u64, u64>> {
        let mut call = COUNTER_SET.prepare_invoke();
        let key = keys.id();
        call.key(key)
            .key(counter_sequence(keys))
            .arg(value)
            .arg(expected.map(|v| v.to_string()).unwrap_or_default())
            .arg(ttl_arg(ttl));
        let (set, ver): (i64, u64) = self
            .run(&call, || format!("setting counter {key:?}"))
            .await?;
        Ok(if set == 1 { Ok(ver) } else { Err(ver) })
    }

    pub(crate) async fn mark_once(
        &self,
        key: &str,
        member: &str,
        ttl: Option<Duration>,
    ) -> Result<bool> {
        let mut call = MARK_ONCE.prepare_invoke();
        call.key(key).arg(member).arg(ttl_arg(ttl));
        let first: i64 = self
            .run(&call, || format!("marking {member:?} in {key:?}"))
            .await?;
        Ok(first == 1)
    }
}
