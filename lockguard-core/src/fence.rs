//! Fencing tokens.
//!
//! A lease can run out while its holder is paused (a GC pause, a stalled VM, a
//! slow disk), after which a second holder may acquire the lock while the first
//! still believes it holds it. Fencing tokens close that gap: every acquisition
//! of a key gets a number strictly greater than every earlier one, and the
//! resource the lock protects rejects writes carrying a number older than the
//! newest it has seen. [`FencedResource`](crate::FencedResource) is such a
//! resource stored in the same backend as the lock.

use std::fmt;

/// A number handed out with each acquisition of a lock, strictly greater than
/// every earlier one for the same key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// Wraps a raw token, for instance one read back from a resource.
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The raw number.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
