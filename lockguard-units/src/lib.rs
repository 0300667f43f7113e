//! The units of lockguard, written once: the grammar of durations
//! (`"30s"`, `"1m30s"`) and rates (`"10/s"`, `"5/250ms"`), and the limits
//! every lease, quota and permit count is held to.
//!
//! Both `lockguard-core` (configuration read with serde, quotas read from
//! text, the checks at run time) and `lockguard-macros` (the attributes'
//! options, checked at compile time) depend on it, so `"1m30s"` means the
//! same in an attribute and in a configuration file, and an attribute is
//! refused at compile time exactly when the client would refuse it at run
//! time. It depends on nothing but std. Applications use these items
//! through `lockguard`, which re-exports the limits.
//!
//! ```
//! use std::time::Duration;
//! use lockguard_units::{duration, rate, MAX_LEASE};
//!
//! assert_eq!(duration::parse("1m30s"), Ok(Duration::from_secs(90)));
//! let r = rate::parse("10/s").unwrap();
//! assert_eq!((r.count, r.period), (10, Duration::from_secs(1)));
//! assert!(Duration::from_secs(30) <= MAX_LEASE);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub mod duration;
mod limits;
pub mod rate;

pub use limits::{
    MAX_LEASE, MAX_PERIOD, MAX_PERMITS, MAX_QUOTA, MIN_LEASE, MIN_WATCHDOG_LEASE, QuotaFault,
    check_quota,
};
