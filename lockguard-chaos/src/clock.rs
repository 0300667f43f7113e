//! One clock for every process of a run.
//!
//! Histories from several worker processes are merged and compared, so
//! their timestamps must come from one clock: the kernel's
//! `CLOCK_MONOTONIC`, which every process on the machine reads alike and
//! which no wall-clock adjustment moves. (`std::time::Instant` reads the
//! same clock but keeps its value private, so it cannot be written down.)

/// Nanoseconds on `CLOCK_MONOTONIC`, the same in every process of the
/// machine.
pub(crate) fn now_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    // The monotonic clock counts from boot: never negative.
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs * 1_000_000_000 + nanos
}

/// `ns` as milliseconds with a fraction, for reports.
pub(crate) fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The clock agrees with `Instant` (the same clock) on how much time
    /// passed, and never goes back.
    #[test]
    fn monotonic_and_in_step_with_instant() {
        let (a, i) = (now_ns(), std::time::Instant::now());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (b, e) = (now_ns(), i.elapsed());
        assert!(b > a);
        let diff = (b - a).abs_diff(e.as_nanos() as u64);
        assert!(diff < 5_000_000, "clocks disagree by {diff} ns");
    }
}
