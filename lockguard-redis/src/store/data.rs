//! The data operations of the Redis store, every one a script (or one
//! plain command): counters (a hash of value `v` and version `ver`) and
//! their marks, rate limiters (one script per decision, with the server's
//! time), and fenced values.

use std::sync::LazyLock;
use std::time::Duration;

use super::RedisStore;
use super::eval::{Eval, Lua};
use crate::layout::{counter_sequence, limit_sum};
use lockguard_core::rate_limit::{Decision, fixed_window, gcra, sliding_window};
use lockguard_core::store::{
    CounterKeys, DataStore, LimitKeys, LimitOp, StoreFuture, Stored, Token, millis_ceil,
};
use lockguard_core::{Error, ErrorKind, Result};

static COUNTER_ADD: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("scripts/sequence.lua"),
        include_str!("scripts/counter_add.lua")
    ))
});
static COUNTER_TAKE: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
        include_str!("scripts/sequence.lua"),
        include_str!("scripts/counter_take.lua")
    ))
});
static COUNTER_SET: LazyLock<Lua> = LazyLock::new(|| {
    Lua::new(concat!(
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

impl DataStore for RedisStore {
    fn counter_add<'a>(
        &'a self,
        keys: &'a CounterKeys,
        delta: i64,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<i64>> {
        StoreFuture::boxed(async move {
            let mut call = Eval::new(&COUNTER_ADD, 2);
            let key = keys.id();
            call.key(key)
                .key(counter_sequence(keys))
                .arg(delta)
                .arg(ttl_arg(ttl));
            self.run(&call, || format!("adding to counter {key:?}"))
                .await
                .map_err(overflow_is_invalid(key))
        })
    }

    fn counter_take<'a>(
        &'a self,
        keys: &'a CounterKeys,
        n: i64,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<Result<i64, i64>>> {
        StoreFuture::boxed(async move {
            let mut call = Eval::new(&COUNTER_TAKE, 2);
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
        })
    }

    fn counter_get<'a>(&'a self, keys: &'a CounterKeys) -> StoreFuture<'a, Result<(i64, u64)>> {
        StoreFuture::boxed(async move {
            let key = keys.id();
            let mut cmd = redis::cmd("HMGET");
            cmd.arg(key).arg("v").arg("ver");
            let (v, ver): (Option<i64>, Option<u64>) = self
                .query(&cmd, || format!("reading counter {key:?}"))
                .await?;
            Ok((v.unwrap_or(0), ver.unwrap_or(0)))
        })
    }

    fn counter_set<'a>(
        &'a self,
        keys: &'a CounterKeys,
        value: i64,
        expected: Option<u64>,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<Result<u64, u64>>> {
        StoreFuture::boxed(async move {
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
        })
    }

    fn mark_once<'a>(
        &'a self,
        keys: &'a CounterKeys,
        member: &'a str,
        ttl: Option<Duration>,
    ) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::boxed(async move {
            let key = keys.marks();
            let mut call = Eval::new(&MARK_ONCE, 1);
            call.key(key).arg(member).arg(ttl_arg(ttl));
            let first: i64 = self
                .run(&call, || format!("marking {member:?} in {key:?}"))
                .await?;
            Ok(first == 1)
        })
    }

    fn rate_limit<'a>(
        &'a self,
        keys: &'a LimitKeys<'_>,
        op: LimitOp,
        cost: u64,
        peek: bool,
    ) -> StoreFuture<'a, Result<Decision>> {
        StoreFuture::boxed(async move {
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
                    Ok(gcra::decide(p, allowed == 1, used, retry))
                }
                LimitOp::Fixed { limit, period_us } => {
                    let window_ms = period_us.unsigned_abs().div_ceil(1000);
                    let mut call = Eval::new(&FIXED_WINDOW, 1);
                    call.key(keys.id())
                        .arg(limit)
                        .arg(window_ms)
                        .arg(cost)
                        .arg(peek);
                    let (allowed, used, ttl_ms): (i64, u64, i64) = self.run(&call, what).await?;
                    // Redis lets a key go only once its expiry time has passed,
                    // so the window is over 1 ms after the TTL it reports.
                    let reset = (ttl_ms + 1) * 1000;
                    Ok(fixed_window::decide(
                        limit,
                        allowed == 1,
                        used,
                        reset,
                        reset,
                    ))
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
                    Ok(sliding_window::decide(
                        limit,
                        allowed == 1,
                        used,
                        reset,
                        retry,
                    ))
                }
                _ => Err(lockguard_core::store::unsupported(
                    "redis",
                    "this rate-limit algorithm",
                )),
            }
        })
    }

    fn fenced_write<'a>(
        &'a self,
        key: &'a str,
        token: u64,
        value: &'a [u8],
    ) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::boxed(async move {
            let mut call = Eval::new(&FENCED_WRITE, 1);
            call.key(key).arg(token).arg(value);
            let n: i64 = self
                .run(&call, || format!("fenced write to {key:?}"))
                .await?;
            Ok(n == 1)
        })
    }

    fn fenced_read<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Result<Stored>> {
        StoreFuture::boxed(async move {
            let mut cmd = redis::cmd("HMGET");
            cmd.arg(key).arg("fence").arg("value");
            let (fence, value): (Option<u64>, Option<Vec<u8>>) = self
                .query(&cmd, || format!("reading fenced resource {key:?}"))
                .await?;
            // A fence without a value is a removed value's tombstone.
            Ok(fence.zip(value))
        })
    }

    fn fenced_remove<'a>(&'a self, key: &'a str, token: u64) -> StoreFuture<'a, Result<bool>> {
        StoreFuture::boxed(async move {
            let mut call = Eval::new(&FENCED_REMOVE, 1);
            call.key(key).arg(token);
            let n: i64 = self
                .run(&call, || format!("fenced removal of {key:?}"))
                .await?;
            Ok(n == 1)
        })
    }
}
