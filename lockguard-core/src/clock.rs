//! Time for the in-memory store's limiters and counter expiry.
//!
//! On Redis, time always comes from the server (`TIME` inside the scripts),
//! so clients whose clocks disagree still agree on every decision; a clock
//! given to a Redis client is not used for decisions. The in-memory store
//! reads the client's clock, which tests replace with a [`ManualClock`].

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of the current time for the in-memory store.
pub trait Clock: Send + Sync + Debug + 'static {
    /// The time since the Unix epoch. Must never go backwards.
    fn now(&self) -> Duration;
}

/// The default clock: wall-clock time at start-up plus the monotonic time
/// elapsed since, so it never jumps backwards. It follows tokio's clock, so
/// tests with paused time (`tokio::time::pause`) drive it too.
#[derive(Debug)]
pub struct MonotonicClock {
    start_wall: Duration,
    start: tokio::time::Instant,
}

impl MonotonicClock {
    /// A clock starting at the current wall-clock time.
    pub fn new() -> Self {
        Self {
            start_wall: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
            start: tokio::time::Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Duration {
        self.start_wall + self.start.elapsed()
    }
}

/// A clock that moves only when told to, for tests.
///
/// Clones share the same time.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use lockguard_core::{Clock, ManualClock};
/// let clock = ManualClock::new();
/// let t0 = clock.now();
/// clock.advance(Duration::from_millis(250));
/// assert_eq!(clock.now() - t0, Duration::from_millis(250));
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    micros: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock at a fixed, arbitrary moment (1.7 × 10⁹ s after the epoch).
    pub fn new() -> Self {
        Self::starting_at(Duration::from_secs(1_700_000_000))
    }

    /// A clock at `since_epoch`.
    pub fn starting_at(since_epoch: Duration) -> Self {
        Self {
            micros: Arc::new(AtomicU64::new(
                u64::try_from(since_epoch.as_micros()).unwrap_or(u64::MAX),
            )),
        }
    }

    /// Moves the clock forward by `by` (microsecond resolution).
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_micros()).unwrap_or(u64::MAX);
        self.micros.fetch_add(by, Ordering::SeqCst);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_micros(self.micros.load(Ordering::SeqCst))
    }
}

/// Microseconds since the epoch, as the limiter arithmetic uses them.
pub(crate) fn micros(clock: &dyn Clock) -> i64 {
    i64::try_from(clock.now().as_micros()).unwrap_or(i64::MAX)
}
