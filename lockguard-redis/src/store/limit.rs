//! Rate limiters on Redis: one script per decision, with the server's time.

use std::sync::LazyLock;

use redis::Script;

use super::RedisStore;
use crate::layout::limit_sum;
use lockguard_core::Result;
use lockguard_core::rate_limit::{Decision, fixed_window, gcra, sliding_window};
use lockguard_core::store::Token;
use lockguard_core::store::{LimitKeys, LimitOp};

static GCRA: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("scripts/gcra.lua")));
static FIXED_WINDOW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/fixed_window.lua")));
static SLIDING_WINDOW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("scripts/sliding_window.lua")));

impl RedisStore {
    pub(crate) async fn rate_limit(
        &self,
        keys: &LimitKeys<'_>,
        op: LimitOp,
        cost: u64,
        peek: bool,
    ) -> Result<Decision> {
        let what = || format!("rate limiting {:?}", keys.id());
        // The scripts take the time from the server unless given one (the
        // model tests drive them through their last argument).
        let now = "";
        let peek = if peek { "1" } else { "" };
        match op {
            LimitOp::Gcra(p) => {
                let mut call = GCRA.prepare_invoke();
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
                let mut call = FIXED_WINDOW.prepare_invoke();
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
                let mut call = SLIDING_WINDOW.prepare_invoke();
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
    }
}
