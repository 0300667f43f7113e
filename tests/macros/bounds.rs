//! The bounds the attributes check at compile time are lockguard's own.

use std::time::Duration;

/// The macros reject at compile time what lockguard would reject at run
/// time; they keep their own copy of these numbers (a proc-macro crate
/// does not link lockguard), so a change here must change them too
/// (`lockguard-macros/src/attr.rs` and `rate.rs`). The UI pass test
/// `options.rs` runs functions at each bound.
#[test]
fn compile_time_bounds_are_lockguards() {
    assert_eq!(lockguard::MAX_LEASE, Duration::from_secs(24 * 60 * 60));
    assert_eq!(lockguard::MIN_LEASE, Duration::from_millis(10));
    assert_eq!(lockguard::MIN_WATCHDOG_LEASE, Duration::from_millis(100));
    assert_eq!(lockguard::MAX_PERMITS, 1_000_000);
    assert_eq!(lockguard::rate_limit::MAX_QUOTA, 1_000_000_000);
    assert_eq!(
        lockguard::rate_limit::MAX_PERIOD,
        Duration::from_secs(366 * 24 * 60 * 60)
    );
}
