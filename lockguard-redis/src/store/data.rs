//! The data operations of the Redis store, every one a script (or one
//! plain command): counters (a hash of value `v` and version `ver`) and
//! their marks, rate limiters (one script per decision, with the server's
//! time), and fenced values.

use std::sync::LazyLock;
use std::time::Duration;

use super::RedisStore;
use super::eval::{Eval, Lua};
use crate::layout::{counter_sequence, limit_sum};
use lockguard_core::Result;
use lockguard_core::store::{
    CounterKeys, DataStore, LimitKeys, LimitOp, LimitReply, Stored, Token, millis_ceil,
};

static COUNTER_ADD: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("scripts/sequence_draw.lua"),
        include_str!("scripts/sequence.lua"),
        include_str!("scripts/counter_add.lua")
    ))
});
static COUNTER_TAKE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("scripts/sequence_draw.lua"),
        include_str!("scripts/sequence.lua"),
        include_str!("scripts/counter_take.lua")
    ))
});
static COUNTER_SET: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("scripts/sequence_draw.lua"),
        include_str!("scripts/sequence.lua"),
        include_str!("scripts/counter_set.lua")
    ))
});
static MARK_ONCE: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("scripts/mark_once.lua")));

static GCRA: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("scripts/gcra.lua")));
static FIXED_WINDOW: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/fixed_window.lua")));
static SLIDING_WINDOW: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/sliding_window.lua")));
static FENCED_WRITE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/fenced_write.lua")));
static FENCED_REMOVE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("scripts/fenced_remove.lua")));

fn ttl_arg(ttl: Option<Duration>) -> u64 {
    ttl.map_or(0, millis_ceil)
}

impl DataStore for RedisStore {
    async fn counter_add(
        &self,
        keys: &CounterKeys,
        delta: i64,
        ttl: Option<Duration>,
    ) -> Result<i64> {
        let mut call = Eval::new(&COUNTER_ADD, 2);
        let key = keys.id();
        call.key(key)
            .key(counter_sequence(keys))
            .arg(delta)
            .arg(ttl_arg(ttl));
        self.run(&call, || format!("adding to counter {key:?}"))
            .await
            .map_err(lockguard_core::store::net::overflow_is_invalid(key))
    }

    async fn counter_take(
        &self,
        keys: &CounterKeys,
        n: i64,
        ttl: Option<Duration>,
    ) -> Result<Result<i64, i64>> {
        let mut call = Eval::new(&COUNTER_TAKE, 2);
        let key = keys.id();
        call.key(key)
            .key(counter_sequence(keys))
            .arg(n)
            .arg(ttl_arg(ttl));
        let (taken, v): (i64, i64) = self
            .run(&call, || format!("taking from counter {key:?}"))
            .await
            .map_err(lockguard_core::store::net::overflow_is_invalid(key))?;
        Ok(if taken == 1 { Ok(v) } else { Err(v) })
    }

    async fn counter_get(&self, keys: &CounterKeys) -> Result<(i64, u64)> {
        let key = keys.id();
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(key).arg("v").arg("ver");
        let (v, ver): (Option<i64>, Option<u64>) = self
            .query(&cmd, || format!("reading counter {key:?}"))
            .await?;
        Ok((v.unwrap_or(0), ver.unwrap_or(0)))
    }

    async fn counter_set(
        &self,
        keys: &CounterKeys,
        value: i64,
        expected: Option<u64>,
        ttl: Option<Duration>,
    ) -> Result<Result<u64, u64>> {
        let mut call = Eval::new(&COUNTER_SET, 2);
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

    async fn mark_once(
        &self,
        keys: &CounterKeys,
        member: &str,
        ttl: Option<Duration>,
    ) -> Result<bool> {
        let key = keys.marks();
        let mut call = Eval::new(&MARK_ONCE, 1);
        call.key(key).arg(member).arg(ttl_arg(ttl));
        let first: i64 = self
            .run(&call, || format!("marking {member:?} in {key:?}"))
            .await?;
        Ok(first == 1)
    }

    async fn rate_limit(
        &self,
        keys: &LimitKeys<'_>,
        op: LimitOp,
        cost: u64,
        peek: bool,
    ) -> Result<LimitReply> {
        let what = || format!("rate limiting {:?}", keys.id());
        // The scripts take the time from the server unless given one (the
        // model tests drive them through their last argument).
        let now = "";
        let peek = if peek { "1" } else { "" };
        match op {
            LimitOp::Gcra(p) => {
                let mut call = Eval::new(&GCRA, 1);
                call.key(keys.id())
                    .arg(p.t)
                    .arg(p.tau)
                    .arg(cost)
                    .arg(now)
                    .arg(peek);
                let (allowed, used, retry): (i64, i64, i64) = self.run(&call, what).await?;
                Ok(LimitReply::gcra(allowed == 1, used, retry))
            }
            LimitOp::Fixed { limit, .. } => {
                let window_ms = op.period_ms();
                let mut call = Eval::new(&FIXED_WINDOW, 1);
                call.key(keys.id())
                    .arg(limit)
                    .arg(window_ms)
                    .arg(cost)
                    .arg(peek);
                let (allowed, used, ttl_ms): (i64, u64, i64) = self.run(&call, what).await?;
                Ok(LimitReply::fixed_ms(allowed == 1, used, ttl_ms))
            }
            LimitOp::Sliding { limit, period_us } => {
                let member = Token::random();
                let mut call = Eval::new(&SLIDING_WINDOW, 2);
                call.key(keys.id())
                    .key(limit_sum(keys))
                    .arg(limit)
                    .arg(period_us)
                    .arg(cost)
                    .arg(member.as_str())
                    .arg(now)
                    .arg(peek);
                let (allowed, used, reset, retry): (i64, u64, i64, i64) =
                    self.run(&call, what).await?;
                Ok(LimitReply::window(allowed == 1, used, reset, retry))
            }
            _ => Err(lockguard_core::store::unsupported(
                "redis",
                "this rate-limit algorithm",
            )),
        }
    }

    async fn fenced_write(&self, key: &str, token: u64, value: &[u8]) -> Result<bool> {
        let mut call = Eval::new(&FENCED_WRITE, 1);
        call.key(key).arg(token).arg(value);
        let n: i64 = self
            .run(&call, || format!("fenced write to {key:?}"))
            .await?;
        Ok(n == 1)
    }

    async fn fenced_read(&self, key: &str) -> Result<Stored> {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(key).arg("fence").arg("value");
        let (fence, value): (Option<u64>, Option<Vec<u8>>) = self
            .query(&cmd, || format!("reading fenced resource {key:?}"))
            .await?;
        // A fence without a value is a removed value's tombstone.
        Ok(fence.zip(value))
    }

    async fn fenced_remove(&self, key: &str, token: u64) -> Result<bool> {
        let mut call = Eval::new(&FENCED_REMOVE, 1);
        call.key(key).arg(token);
        let n: i64 = self
            .run(&call, || format!("fenced removal of {key:?}"))
            .await?;
        Ok(n == 1)
    }
}
