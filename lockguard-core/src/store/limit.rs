//! What crosses the store boundary for a rate-limit decision: the key, the
//! algorithm, and the store's raw answer, of which the client makes the
//! [`Decision`] in one place.

use std::sync::{Arc, OnceLock};

use crate::rate_limit::{Decision, fixed_window, gcra, sliding_window};

/// The key of one rate-limited key of one limiter: the limiter
/// ([`limiter`](Self::limiter)) and the user's key ([`key`](Self::key)),
/// or both as one identity ([`id`](Self::id)), made only when a store asks.
#[derive(Debug, Clone)]
pub struct LimitKeys<'k> {
    limiter: &'k Arc<str>,
    key: &'k str,
    id: OnceLock<String>,
}

impl<'k> LimitKeys<'k> {
    /// The key `key` of the limiter `limiter` (an identity from the
    /// client: its prefix, the algorithm and the limiter's name).
    pub(crate) fn new(limiter: &'k Arc<str>, key: &'k str) -> Self {
        Self {
            limiter,
            key,
            id: OnceLock::new(),
        }
    }

    /// The limiter's identity under the client's prefix
    /// (`{prefix}rl:{algorithm}:{name}:`): two limiters never share one.
    pub fn limiter(&self) -> &'k str {
        self.limiter
    }

    /// The limiter's identity as the client keeps it: the same allocation
    /// for every check of one limiter.
    pub(crate) fn limiter_shared(&self) -> &'k Arc<str> {
        self.limiter
    }

    /// The user's key, as given to the limiter.
    pub fn key(&self) -> &'k str {
        self.key
    }

    /// The identity of this key of this limiter, `{limiter}{escaped key}`
    /// (the key escaped as [`LockKeys::id`](crate::store::LockKeys::id)
    /// escapes a lock's name): key the state by it. Two different
    /// limiters, or keys, never share one.
    pub fn id(&self) -> &str {
        self.id.get_or_init(|| {
            let mut out = String::with_capacity(self.limiter.len() + self.key.len() + 2);
            out.push_str(self.limiter);
            crate::key::push_escaped(&mut out, self.key);
            out
        })
    }
}

impl PartialEq for LimitKeys<'_> {
    fn eq(&self, other: &Self) -> bool {
        (&**self.limiter, self.key) == (&**other.limiter, other.key)
    }
}

impl Eq for LimitKeys<'_> {}

/// One rate-limit algorithm with its constants.
///
/// A store runs the step of [`crate::rate_limit`] that matches, on its own
/// clock, over the key's state read under the key's lock (or in one
/// script), and answers what the step gave ([`LimitReply`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LimitOp {
    /// GCRA: [`gcra::step`].
    Gcra(gcra::Params),
    /// A fixed window: [`fixed_window::step`].
    Fixed {
        /// Requests (cost units) per window.
        limit: u64,
        /// The window, in µs.
        period_us: i64,
    },
    /// A sliding log: [`sliding_window::step`].
    Sliding {
        /// Requests (cost units) per rolling period.
        limit: u64,
        /// The period, in µs.
        period_us: i64,
    },
}

impl LimitOp {
    /// The window or period in whole milliseconds, rounded up (a store
    /// whose keys expire by the millisecond); 0 for GCRA.
    pub fn period_ms(&self) -> u64 {
        match *self {
            Self::Gcra(_) => 0,
            Self::Fixed { period_us, .. } | Self::Sliding { period_us, .. } => {
                period_us.unsigned_abs().div_ceil(1000)
            }
        }
    }

    /// The decision of the store's answer to this step.
    #[inline]
    pub(crate) fn decide(&self, reply: LimitReply) -> Decision {
        let Raw {
            allowed,
            used,
            reset_us,
            retry_us,
        } = match reply.0 {
            Reply::Decided(decision) => return decision,
            Reply::Raw(raw) => raw,
        };
        let count = used.max(0).unsigned_abs();
        match *self {
            Self::Gcra(p) => gcra::decide(p, allowed, used, retry_us),
            Self::Fixed { limit, .. } => {
                fixed_window::decide(limit, allowed, count, reset_us, retry_us)
            }
            Self::Sliding { limit, .. } => {
                sliding_window::decide(limit, allowed, count, reset_us, retry_us)
            }
        }
    }
}

/// A store's answer to one rate-limit step, as its step gave it: whether
/// the request was allowed, what is used, and the times to the reset and
/// to a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitReply(Reply);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reply {
    Raw(Raw),
    /// The in-memory store runs the client's own step in process.
    Decided(Decision),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Raw {
    allowed: bool,
    used: i64,
    reset_us: i64,
    retry_us: i64,
}

impl LimitReply {
    /// A GCRA step's answer: whether it was `allowed`, how far (in µs)
    /// the theoretical arrival time is ahead of now after it (`used`, which
    /// is also the time to a full budget), and the µs to wait before a
    /// retry can pass.
    pub fn gcra(allowed: bool, used_us: i64, retry_us: i64) -> Self {
        Self::raw(allowed, used_us, used_us, retry_us)
    }

    /// A window's answer (fixed or sliding): whether it was `allowed`,
    /// the cost `used` in the window, the µs until the window resets, and
    /// the µs to wait before a retry can pass.
    pub fn window(allowed: bool, used: u64, reset_us: i64, retry_us: i64) -> Self {
        Self::raw(allowed, count(used), reset_us, retry_us)
    }

    /// A fixed window's answer where the window is a key that expires by
    /// the millisecond, with `left_ms` its time to live: the window is
    /// over 1 ms after that (the store lets a key go only once its expiry
    /// time has passed), which is when it resets and a retry can pass.
    pub fn fixed_ms(allowed: bool, used: u64, left_ms: i64) -> Self {
        let reset = left_ms.saturating_add(1).saturating_mul(1000);
        Self::raw(allowed, count(used), reset, reset)
    }

    pub(crate) fn decided(decision: Decision) -> Self {
        Self(Reply::Decided(decision))
    }

    fn raw(allowed: bool, used: i64, reset_us: i64, retry_us: i64) -> Self {
        Self(Reply::Raw(Raw {
            allowed,
            used,
            reset_us,
            retry_us,
        }))
    }
}

/// A count as the reply keeps it (no count comes near `i64::MAX`).
fn count(used: u64) -> i64 {
    i64::try_from(used).unwrap_or(i64::MAX)
}
