//! Validation of user keys and the Redis key layout derived from them.

use std::fmt::Write as _;
use std::sync::{LazyLock, OnceLock};

use crate::error::{Error, Result};

/// The longest key a user may pass, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

/// The default prefix of every key lockguard writes.
pub const DEFAULT_PREFIX: &str = "lockguard:";

/// The most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 1_000_000;

/// What a key's holders hold: one lock, or one of a semaphore's permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Resource {
    /// A lock: one holder at a time, reentrant within a scope.
    Lock,
    /// A semaphore: at most `permits` holders at once.
    Semaphore {
        /// How many may hold it at once.
        permits: u32,
    },
}

/// Checks a user-supplied key: not empty, not too long, no control
/// characters. `what` names the key in the message (`"lock"`, `"counter"`).
///
/// Every primitive checks its key with this before it reaches the store;
/// it is public so code that builds keys (the HTTP layers) can refuse a
/// bad one with the same rules.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) saying what
/// is wrong with the key.
pub fn validate_key(what: &str, key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::invalid(format!("{what} key must not be empty")));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::invalid(format!(
            "{what} key is {} bytes long, the maximum is {MAX_KEY_LEN}",
            key.len()
        )));
    }
    if has_control(key) {
        return Err(Error::invalid(format!(
            "{what} key {key:?} contains control characters"
        )));
    }
    Ok(())
}

/// Whether `s` holds a control character: one wide pass when it is
/// printable ASCII, as most keys are.
fn has_control(s: &str) -> bool {
    // Printable ASCII throughout, the common case: one pass without early
    // exit, which the compiler turns into wide compares.
    let unusual = s
        .bytes()
        .fold(false, |seen, b| seen | !(b' '..=b'~').contains(&b));
    if !unusual {
        return false;
    }
    for b in s.bytes() {
        if b.is_ascii_control() {
            return true;
        }
        if !b.is_ascii() {
            // C1 controls are two bytes: look at characters from here on.
            return s.chars().any(char::is_control);
        }
    }
    false
}

/// Checks a part of every key that sits outside the hash tag (the client's
/// prefix, a rate limiter's name): a key's slot must be chosen by the tag
/// lockguard writes, so braces are refused here.
pub(crate) fn validate_plain(what: &str, part: &str) -> Result<()> {
    if part.len() > MAX_KEY_LEN {
        return Err(Error::invalid(format!(
            "{what} is {} bytes long, the maximum is {MAX_KEY_LEN}",
            part.len()
        )));
    }
    if has_control(part) {
        return Err(Error::invalid(format!(
            "{what} {part:?} contains control characters"
        )));
    }
    if part.contains(['{', '}']) {
        return Err(Error::invalid(format!(
            "{what} {part:?} contains a brace; braces would choose the redis cluster slot \
             of every key, so lockguard keeps them for its own hash tags"
        )));
    }
    Ok(())
}

/// Appends a user key as the hash tag of a store key: `{` + the key with
/// `\` and `}` escaped by a backslash + `}`.
///
/// The escaping makes the layout injective: no user key, of any kind, can
/// name another's key or one of the keys derived from it (`:queue`,
/// `:sum`, ...), and `"a"` and `"{a}"` are different keys. Redis Cluster
/// hashes the text between the first `{` and the first `}` after it; the
/// prefix and the kind hold no brace, so that text is the same non-empty
/// start of the escaped key for every key derived from one user key, and a
/// script's keys always share a slot.
pub(crate) fn push_tagged(out: &mut String, key: &str) {
    out.reserve(key.len() + 2);
    out.push('{');
    let mut rest = key;
    // Both are ASCII: the byte after `i` starts a character.
    while let Some(i) = rest.bytes().position(|b| b == b'\\' || b == b'}') {
        out.push_str(&rest[..i]);
        out.push('\\');
        out.push_str(&rest[i..=i]);
        rest = &rest[i + 1..];
    }
    out.push_str(rest);
    out.push('}');
}

/// The store key behind one user key of a given kind (`lock`, `counter`,
/// ...): `{prefix}{kind}:{escaped key}`. Keys derived from it append a
/// suffix after the closing brace.
pub(crate) fn base(prefix: &str, kind: &str, key: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + kind.len() + key.len() + 3);
    out.push_str(prefix);
    out.push_str(kind);
    out.push(':');
    push_tagged(&mut out, key);
    out
}

/// The Redis Cluster slot of a key: CRC16 (XMODEM) of its hash tag, or of
/// the whole key when it has none, modulo 16384.
pub(crate) fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = bytes
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            let close = rest.iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(bytes);
    crc16::State::<crc16::XMODEM>::calculate(hashed) % SLOTS
}

const SLOTS: u16 = 16384;

/// For each cluster slot, the smallest number whose decimal form hashes to
/// it: the hash tag of that slot's sequence key. Built once per process
/// (about 170 000 CRC16s: a few ms in release builds, 50 ms in debug
/// builds), when the first client is built, so no operation waits for it.
static SLOT_TAGS: LazyLock<Box<[u32]>> = LazyLock::new(|| {
    let mut tags = vec![u32::MAX; usize::from(SLOTS)];
    let mut missing = tags.len();
    let mut n = 0u32;
    while missing > 0 {
        let s = n.to_string();
        let slot = usize::from(crc16::State::<crc16::XMODEM>::calculate(s.as_bytes()) % SLOTS);
        if tags[slot] == u32::MAX {
            tags[slot] = n;
            missing -= 1;
        }
        n += 1;
    }
    tags.into_boxed_slice()
});

/// Builds the slot table now, if no client did yet (see [`SLOT_TAGS`]).
pub(crate) fn prepare() {
    LazyLock::force(&SLOT_TAGS);
}

/// The sequence that fencing tokens and counter versions of `key` are drawn
/// from: `{prefix}seq:{n}`, one key per cluster slot, in `key`'s slot so one
/// script can touch both.
///
/// Every value drawn from it is greater than the one before and than the
/// server's clock (in whole ms, times 1000), so tokens and versions strictly increase per key
/// across the key's expiry, and the store holds at most one such key per
/// slot however many keys are ever locked or counted.
pub(crate) fn sequence(prefix: &str, key: &str) -> String {
    let tag = SLOT_TAGS[usize::from(slot(key))];
    let mut out = String::with_capacity(prefix.len() + 16);
    // Writing to a String cannot fail.
    let _ = write!(out, "{prefix}seq:{{{tag}}}");
    out
}

/// The keys of one lock, or of one semaphore: what a store is asked to
/// take, release, extend or inspect.
///
/// A store keys its state by [`id`](Self::id) and lays out whatever else it
/// needs from it; [`prefix`](Self::prefix), [`name`](Self::name) and
/// [`resource`](Self::resource) say what it names.
///
/// Only the lock's own key is laid out when it is made; the keys around it
/// (the sequence, the wait queue, the tickets, the release channel) are
/// laid out the first time a store asks for them. The in-memory store,
/// which keys its state by the lock's key alone, never does: a lock made
/// per request (an HTTP layer's) costs one string, not five.
#[derive(Debug, Clone)]
pub struct LockKeys {
    /// A lock, or a semaphore and its permits.
    pub(crate) resource: Resource,
    /// The key holding the holder's token, with the lease as its TTL.
    pub(crate) lock: String,
    /// How many bytes of `lock` are the client's prefix.
    prefix_len: usize,
    around: OnceLock<Around>,
}

/// The keys around a lock's own key.
#[derive(Debug, Clone)]
struct Around {
    sequence: String,
    channel: String,
    queue: String,
    tickets: String,
}

impl PartialEq for LockKeys {
    fn eq(&self, other: &Self) -> bool {
        // The keys around it are a function of these, or (a Redlock
        // semaphore's slots) were given with a lock key of their own.
        self.resource == other.resource && self.lock == other.lock
    }
}

impl Eq for LockKeys {}

impl LockKeys {
    /// The keys of the lock (or semaphore) `name` under `prefix`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// name [`validate_key`] refuses or a prefix with a brace or a control
    /// character.
    pub fn checked(prefix: &str, name: &str, resource: Resource) -> Result<Self> {
        validate_plain("prefix", prefix)?;
        validate_key(
            match resource {
                Resource::Lock => "lock",
                Resource::Semaphore { .. } => "semaphore",
            },
            name,
        )?;
        Ok(Self::new(prefix, name, resource))
    }

    pub(crate) fn new(prefix: &str, name: &str, resource: Resource) -> Self {
        let kind = match resource {
            Resource::Lock => "lock",
            Resource::Semaphore { .. } => "sem",
        };
        Self {
            resource,
            lock: base(prefix, kind, name),
            prefix_len: prefix.len(),
            around: OnceLock::new(),
        }
    }

    /// The keys of a lock laid out after `of`'s key (a Redlock
    /// semaphore's slot `lock`): in its slot, sharing its sequence and
    /// release channel, with a queue and tickets of its own.
    pub(crate) fn beside(of: &Self, lock: String, resource: Resource) -> Self {
        let around = Around {
            sequence: of.sequence().to_owned(),
            channel: of.channel().to_owned(),
            queue: suffixed(&lock, ":queue"),
            tickets: suffixed(&lock, ":tickets"),
        };
        Self {
            resource,
            prefix_len: of.prefix_len,
            around: OnceLock::from(around),
            lock,
        }
    }

    /// The identity of the lock: unique per prefix, kind (lock or
    /// semaphore) and name, and a function of them alone. A store keys the
    /// lock's state by it.
    pub fn id(&self) -> &str {
        &self.lock
    }

    /// The client's prefix the lock lives under.
    pub fn prefix(&self) -> &str {
        &self.lock[..self.prefix_len]
    }

    /// The user's name of the lock, as given to
    /// [`Client::lock`](crate::Client::lock).
    pub fn name(&self) -> std::borrow::Cow<'_, str> {
        untag(&self.lock)
    }

    /// A lock, or a semaphore with its permits.
    pub fn resource(&self) -> Resource {
        self.resource
    }

    fn around(&self) -> &Around {
        self.around.get_or_init(|| Around {
            sequence: sequence(&self.lock[..self.prefix_len], &self.lock),
            channel: suffixed(&self.lock, ":released"),
            queue: suffixed(&self.lock, ":queue"),
            tickets: suffixed(&self.lock, ":tickets"),
        })
    }

    /// The sequence fencing tokens are drawn from, shared by every key of
    /// the lock's cluster slot (see [`sequence`]).
    pub(crate) fn sequence(&self) -> &str {
        &self.around().sequence
    }

    /// The pub/sub channel a release is announced on, on a store whose
    /// waiters line up instead of queueing (Redlock).
    pub(crate) fn channel(&self) -> &str {
        &self.around().channel
    }

    /// The waiters' queue: tokens in order of arrival.
    pub(crate) fn queue(&self) -> &str {
        &self.around().queue
    }

    /// Each queued waiter's deadline and channel (and a semaphore holder's
    /// fencing token).
    pub(crate) fn tickets(&self) -> &str {
        &self.around().tickets
    }
}

/// The user key in a store key `prefix kind:{escaped key}...`: the text
/// of the hash tag, unescaped.
fn untag(key: &str) -> std::borrow::Cow<'_, str> {
    let tagged = key.find('{').map_or(key, |open| &key[open + 1..]);
    let end = tagged.find(['\\', '}']).unwrap_or(tagged.len());
    if !tagged[end..].starts_with('\\') {
        return std::borrow::Cow::Borrowed(&tagged[..end]);
    }
    let mut out = String::with_capacity(tagged.len());
    let mut chars = tagged.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            '}' => break,
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `key` + `suffix`, in one allocation.
fn suffixed(key: &str, suffix: &str) -> String {
    let mut out = String::with_capacity(key.len() + suffix.len());
    out.push_str(key);
    out.push_str(suffix);
    out
}

/// The keys of one counter: a store keys its state by
/// [`id`](Self::id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterKeys {
    /// The hash of the counter's value and version.
    pub(crate) value: String,
    /// The set of members [`mark_once`](crate::Counter::mark_once) saw.
    pub(crate) marks: String,
    /// The sequence versions are drawn from (see [`sequence`]).
    pub(crate) sequence: String,
}

impl CounterKeys {
    /// The identity of the counter: unique per prefix and name, and a
    /// function of them alone.
    pub fn id(&self) -> &str {
        &self.value
    }

    /// The user's name of the counter, as given to
    /// [`Client::counter`](crate::Client::counter).
    pub fn name(&self) -> std::borrow::Cow<'_, str> {
        untag(&self.value)
    }

    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        let value = base(prefix, "counter", name);
        Self {
            marks: format!("{value}:marks"),
            sequence: sequence(prefix, &value),
            value,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_empty_long_and_control_keys() {
        assert!(validate_key("lock", "").unwrap_err().is_invalid_input());
        assert!(validate_key("lock", &"x".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(validate_key("lock", "a\nb").is_err());
        assert!(validate_key("lock", "order:42").is_ok());
    }

    #[test]
    fn derived_keys_share_a_hash_tag() {
        let k = LockKeys::new("lg:", "order:42", Resource::Lock);
        assert_eq!(k.lock, "lg:lock:{order:42}");
        assert_eq!(k.queue(), "lg:lock:{order:42}:queue");
        assert_eq!(k.tickets(), "lg:lock:{order:42}:tickets");
        assert_eq!(slot(k.sequence()), slot(&k.lock));
        // A user's braces are escaped, never taken as the tag.
        let k = LockKeys::new("lg:", "order:{42}", Resource::Lock);
        assert_eq!(k.lock, "lg:lock:{order:{42\\}}");
        assert_eq!(
            LockKeys::new("lg:", "a{}b", Resource::Lock).lock,
            "lg:lock:{a{\\}b}"
        );
        assert_eq!(
            LockKeys::new("lg:", "a\\b", Resource::Lock).lock,
            "lg:lock:{a\\\\b}"
        );
    }

    #[test]
    fn braces_in_a_key_never_alias_another_key() {
        // The aliases a verbatim layout allowed: a user key naming a key
        // derived from another, and "a" and "{a}" being one lock.
        let n = LockKeys::new("lg:", "n", Resource::Lock);
        assert_ne!(base("lg:", "lock", "{n}:queue"), n.queue());
        assert_ne!(base("lg:", "lock", "n}:queue"), n.queue());
        assert_ne!(
            LockKeys::new("lg:", "{a}", Resource::Lock).lock,
            LockKeys::new("lg:", "a", Resource::Lock).lock
        );
        let c = CounterKeys::new("lg:", "n");
        assert_ne!(base("lg:", "counter", "{n}:marks"), c.marks);
        assert_ne!(base("lg:", "counter", "n}:marks"), c.marks);
    }

    #[test]
    fn every_derived_key_is_in_its_base_slot() {
        for key in [
            "}", "}x", "{}", "a{}b", "\\", "x\\}", "{a}", "{", "a}b{c}", "é{ü}",
        ] {
            let k = LockKeys::new("p:", key, Resource::Lock);
            let s = slot(&k.lock);
            for other in [k.sequence(), k.queue(), k.tickets()] {
                assert_eq!(
                    slot(other),
                    s,
                    "{key:?}: {other} left the slot of {}",
                    k.lock
                );
            }
            let c = CounterKeys::new("p:", key);
            assert_eq!(slot(&c.marks), slot(&c.value));
            assert_eq!(slot(&c.sequence), slot(&c.value));
        }
    }

    #[test]
    fn slots_follow_redis() {
        // Values from `CLUSTER KEYSLOT` of a real server.
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(slot("foo{}{bar}"), slot("foo{}{bar}"));
        assert_ne!(slot("foo{}{bar}"), slot("bar"));
        assert_eq!(slot("foo{{bar}}zap"), slot("{bar"));
        assert_eq!(slot("foo{bar}{zap}"), slot("bar"));
        // Every slot has a sequence key in it.
        assert!((0..SLOTS).all(|s| slot(&format!("{{{}}}", SLOT_TAGS[usize::from(s)])) == s));
    }

    #[test]
    fn prefixes_and_names_refuse_braces() {
        assert!(
            validate_plain("prefix", "app:{x}:")
                .unwrap_err()
                .is_invalid_input()
        );
        assert!(validate_plain("prefix", "}").is_err());
        assert!(validate_plain("prefix", "a\nb").is_err());
        assert!(validate_plain("prefix", "").is_ok());
        assert!(validate_plain("prefix", "lockguard:").is_ok());
    }

    proptest::proptest! {
        /// The layout is injective: the user key is read back from any key
        /// derived from it, whatever its braces and backslashes.
        #[test]
        fn layout_is_injective(key in "[a{}\\\\:]{1,12}", suffix in "(|:queue|:tickets|:marks|:sum)") {
            let full = format!("{}{suffix}", base("p:", "lock", &key));
            let rest = full.strip_prefix("p:lock:{").unwrap();
            let mut decoded = String::new();
            let mut chars = rest.chars();
            loop {
                match chars.next().unwrap() {
                    '\\' => decoded.push(chars.next().unwrap()),
                    '}' => break,
                    c => decoded.push(c),
                }
            }
            proptest::prop_assert_eq!(&decoded, &key);
            proptest::prop_assert_eq!(chars.as_str(), suffix.as_str());
        }
    }

    #[test]
    fn keys_say_their_prefix_and_name() {
        for name in ["order:42", "a{}b", "x\\}", "{a}", "é{ü}\\"] {
            let k = LockKeys::new("lg:", name, Resource::Lock);
            assert_eq!(k.prefix(), "lg:");
            assert_eq!(k.name(), name);
            assert_eq!(CounterKeys::new("lg:", name).name(), name);
        }
        assert!(LockKeys::checked("lg:", "", Resource::Lock).is_err());
        assert!(LockKeys::checked("{lg}:", "a", Resource::Lock).is_err());
    }

    #[test]
    fn hash_tag_free_keys_keep_their_layout() {
        // Keys without braces or backslashes are stored where earlier
        // versions put them.
        assert_eq!(
            base("lockguard:", "counter", "stock:sku1"),
            "lockguard:counter:{stock:sku1}"
        );
    }
}
