//! Rate limiters: GCRA (the default), fixed window and sliding window log.
//!
//! Every decision is one round trip (one Lua script on Redis) and takes its
//! time from the store (`TIME` on Redis), so clients with skewed clocks
//! agree; except on etcd, which has no clock a transaction can read: there
//! a decision runs on the deciding client's clock, as a compare-and-set
//! (one round trip more after each race another client's write wins).
//! Accuracy and cost per algorithm:
//!
//! | algorithm | admits | state per key | round trips |
//! |---|---|---|---|
//! | [`Algorithm::Gcra`] | `burst` at once, then one per `period / count`, exactly (µs) | one integer | 1 |
//! | [`Algorithm::FixedWindow`] | exactly `count` per window; up to `2 × count` across a window boundary | one integer | 1 |
//! | [`Algorithm::SlidingWindow`] | at most `count` in every rolling `period`, exactly | one entry per admitted request | 1 |

//!
//! This module holds the algorithms as pure steps over a key's state and
//! the store's time ([`Quota`], [`Decision`], [`Algorithm`]); the stores
//! keep the state, and [`RateLimiter`](crate::RateLimiter) runs them.

mod decision;
pub mod fixed_window;
pub mod gcra;
mod quota;
pub mod sliding_window;

pub use decision::{Decision, ceil_secs};
pub use quota::{MAX_PERIOD, MAX_QUOTA, Quota};

/// Which algorithm a [`RateLimiter`](crate::RateLimiter) runs.
///
/// With the `serde` feature it reads and writes as `"gcra"`,
/// `"fixed_window"` or `"sliding_window"`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
#[non_exhaustive]
pub enum Algorithm {
    /// Generic cell rate algorithm: a token bucket with `burst` capacity
    /// refilled at `count / period`, stored as one timestamp.
    #[default]
    Gcra,
    /// A counter per window of `period` starting at its first request.
    FixedWindow,
    /// A log of admitted requests over the last `period`.
    SlidingWindow,
}

impl Algorithm {
    /// The part of a limiter's keys that names the algorithm.
    pub(crate) fn key_kind(self) -> &'static str {
        match self {
            Self::Gcra => "gcra",
            Self::FixedWindow => "fw",
            Self::SlidingWindow => "sw",
        }
    }
}
