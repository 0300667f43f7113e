//! Fixed window: a counter per key that starts a window of `period` at the
//! first request and expires with it (`INCRBY` + `PEXPIRE` in one script on
//! Redis). Exact within a window; across a window boundary up to twice the
//! quota can pass in one period (the end of one window and the start of the
//! next). Refused requests are not counted.

use super::decision::{Decision, us};

/// One window's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The cost admitted in the window so far.
    pub used: u64,
    /// When the window ends (µs), exclusive.
    pub ends_at: i64,
}

/// One step at `now` (µs on the store's clock) over the stored window.
/// Returns the decision and the window to store when allowed.
pub fn step(
    limit: u64,
    period_us: i64,
    state: Option<Window>,
    now: i64,
    cost: u64,
) -> (Decision, Option<Window>) {
    let w = match state {
        Some(w) if now < w.ends_at => w,
        _ => Window {
            used: 0,
            ends_at: now + period_us,
        },
    };
    let left = w.ends_at - now;
    if w.used + cost > limit {
        (decide(limit, false, w.used, left, left), None)
    } else {
        let w = Window {
            used: w.used + cost,
            ..w
        };
        (decide(limit, true, w.used, left, 0), Some(w))
    }
}

/// The decision from the numbers both stores produce (µs).
/// The decision from a store's own arithmetic: whether it was allowed, the
/// cost used in the window after it, and the µs until the window resets
/// and until a retry can pass.
pub fn decide(limit: u64, allowed: bool, used: u64, reset: i64, retry: i64) -> Decision {
    Decision {
        allowed,
        limit,
        remaining: limit.saturating_sub(used),
        reset_after: us(reset),
        retry_after: if allowed { us(0) } else { us(retry) },
        shadowed: false,
        decided_locally: false,
    }
}
