//! A request's key as an extractor hands it to the layers: a constant, an
//! owned `String`, or a text shared with a cache of the extractor's.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// A request's key, as [`KeyExtractor::extract_key`](super::KeyExtractor::extract_key)
/// gives it: a constant (as [`Global`](super::Global)'s), an owned
/// `String`, or a text the extractor keeps and shares (as
/// [`PeerIp`](super::PeerIp) does for the addresses it saw last), so
/// that a key the same for many requests costs no allocation per request.
/// It reads as a `&str`.
///
/// ```
/// use std::sync::Arc;
/// use lockguard_tower::key::Key;
///
/// assert_eq!(&*Key::from("global"), "global");
/// assert_eq!(Key::from(String::from("user:ada")).as_str(), "user:ada");
/// assert_eq!(Key::from(Arc::<str>::from("ip:203.0.113.9")).as_str(), "ip:203.0.113.9");
/// ```
#[derive(Clone)]
pub struct Key(Repr);

#[derive(Clone)]
enum Repr {
    Static(&'static str),
    Owned(String),
    Shared(Arc<str>),
}

impl Key {
    /// The key's text.
    pub fn as_str(&self) -> &str {
        match &self.0 {
            Repr::Static(s) => s,
            Repr::Owned(s) => s,
            Repr::Shared(s) => s,
        }
    }
}

impl Deref for Key {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<&'static str> for Key {
    fn from(text: &'static str) -> Self {
        Self(Repr::Static(text))
    }
}

impl From<String> for Key {
    fn from(text: String) -> Self {
        Self(Repr::Owned(text))
    }
}

impl From<Arc<str>> for Key {
    fn from(text: Arc<str>) -> Self {
        Self(Repr::Shared(text))
    }
}

impl From<Key> for String {
    fn from(key: Key) -> Self {
        match key.0 {
            Repr::Owned(s) => s,
            Repr::Static(s) => s.to_owned(),
            Repr::Shared(s) => s.as_ref().to_owned(),
        }
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Key {}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
