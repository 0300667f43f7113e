//! The keys a client has named in its store's table of key names (a
//! database store's locks of session leases, which record nothing per
//! hold, name a key there so that a survey can list it): one write at a
//! client's first hold of a key, and once an hour after.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The keys a client named, and when: [`due`](Self::due) says whether a
/// hold of a key is to name it, [`named`](Self::named) notes that it did.
///
/// # Examples
///
/// ```
/// use lockguard_core::store::NamedKeys;
///
/// let names = NamedKeys::new();
/// assert!(names.due("order:42"));
/// names.named("order:42");
/// assert!(!names.due("order:42"));
/// ```
#[derive(Debug, Default)]
pub struct NamedKeys {
    named: Mutex<HashMap<Box<str>, Instant>>,
}

impl NamedKeys {
    /// How long a naming lasts: the key is named again at its first hold
    /// after (a store sweeps a name it has not seen for a day).
    pub const RENAME_AFTER: Duration = Duration::from_secs(3_600);

    /// The most keys remembered; past it, all are forgotten and each is
    /// named again at its next hold.
    pub const MOST: usize = 10_000;

    /// No key named yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `key` is to be named: not named within
    /// [`RENAME_AFTER`](Self::RENAME_AFTER).
    pub fn due(&self, key: &str) -> bool {
        self.keys()
            .get(key)
            .is_none_or(|at| at.elapsed() >= Self::RENAME_AFTER)
    }

    /// Notes `key` named now.
    pub fn named(&self, key: &str) {
        let mut keys = self.keys();
        if keys.len() >= Self::MOST {
            keys.clear();
        }
        keys.insert(key.into(), Instant::now());
    }

    fn keys(&self) -> std::sync::MutexGuard<'_, HashMap<Box<str>, Instant>> {
        self.named.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_most_keys_every_key_is_named_again() {
        let names = NamedKeys::new();
        for i in 0..NamedKeys::MOST {
            names.named(&i.to_string());
        }
        assert!(!names.due("0"));
        names.named("one more");
        assert!(names.due("0") && !names.due("one more"));
    }
}
