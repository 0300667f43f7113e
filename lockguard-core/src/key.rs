//! Validation of user keys and the Redis key layout derived from them.

use crate::error::{Error, Result};

/// The longest key a user may pass, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

/// Checks a user-supplied key: not empty, not too long, no control characters.
pub(crate) fn validate(what: &str, key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::invalid(format!("{what} key must not be empty")));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::invalid(format!(
            "{what} key is {} bytes long, the maximum is {MAX_KEY_LEN}",
            key.len()
        )));
    }
    if key.chars().any(char::is_control) {
        return Err(Error::invalid(format!(
            "{what} key {key:?} contains control characters"
        )));
    }
    Ok(())
}

/// Whether Redis Cluster would hash `key` by a hash tag: a `{` followed later
/// by a `}` with at least one byte between them.
pub(crate) fn has_hash_tag(key: &str) -> bool {
    match key.find('{') {
        Some(open) => key[open + 1..].find('}').is_some_and(|len| len > 0),
        None => false,
    }
}

/// The store keys behind one user key of a given kind (`lock`, `counter`, ...).
///
/// Every derived key shares one hash tag, so a script touching several of them
/// stays in one Redis Cluster slot: the user's own tag when the key has one,
/// otherwise the whole user key wrapped in braces.
pub(crate) fn base(prefix: &str, kind: &str, key: &str) -> String {
    let plain = format!("{prefix}{kind}:{key}");
    if has_hash_tag(&plain) {
        plain
    } else {
        format!("{prefix}{kind}:{{{key}}}")
    }
}

/// The keys and channel of one lock, or of one semaphore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LockKeys {
    /// `None` for a lock; the number of permits for a semaphore.
    pub(crate) permits: Option<u32>,
    /// The key holding the holder's token, with the lease as its TTL.
    pub(crate) lock: String,
    /// The counter that hands out fencing tokens.
    pub(crate) fence: String,
    /// The pub/sub channel a release nobody was handed is announced on
    /// (Redlock waiters, who do not queue, listen on it).
    pub(crate) channel: String,
    /// The waiters' queue: tokens in order of arrival.
    pub(crate) queue: String,
    /// Each queued waiter's deadline and channel (and a semaphore holder's
    /// fencing token).
    pub(crate) tickets: String,
}

impl LockKeys {
    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        Self::of_kind(prefix, "lock", name, None)
    }

    pub(crate) fn semaphore(prefix: &str, name: &str, permits: u32) -> Self {
        Self::of_kind(prefix, "sem", name, Some(permits))
    }

    fn of_kind(prefix: &str, kind: &str, name: &str, permits: Option<u32>) -> Self {
        let lock = base(prefix, kind, name);
        Self {
            permits,
            fence: format!("{lock}:fence"),
            channel: format!("{lock}:released"),
            queue: format!("{lock}:queue"),
            tickets: format!("{lock}:tickets"),
            lock,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_empty_long_and_control_keys() {
        assert!(validate("lock", "").unwrap_err().is_invalid_input());
        assert!(validate("lock", &"x".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(validate("lock", "a\nb").is_err());
        assert!(validate("lock", "order:42").is_ok());
    }

    #[test]
    fn derived_keys_share_a_hash_tag() {
        let k = LockKeys::new("lg:", "order:42");
        assert_eq!(k.lock, "lg:lock:{order:42}");
        assert_eq!(k.fence, "lg:lock:{order:42}:fence");
        assert_eq!(k.queue, "lg:lock:{order:42}:queue");
        assert_eq!(k.tickets, "lg:lock:{order:42}:tickets");
        let k = LockKeys::new("lg:", "order:{42}");
        assert_eq!(k.lock, "lg:lock:order:{42}");
        assert_eq!(k.fence, "lg:lock:order:{42}:fence");
        // An empty tag does not count as a tag.
        assert_eq!(LockKeys::new("lg:", "a{}b").lock, "lg:lock:{a{}b}");
    }

    #[test]
    fn hash_tag_detection_follows_redis() {
        assert!(has_hash_tag("a{b}c"));
        assert!(!has_hash_tag("a{}c"));
        assert!(!has_hash_tag("a}b{c"));
        assert!(!has_hash_tag("{}{x}"));
    }
}
