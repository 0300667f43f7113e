//! Validation of user keys, and the keys a store is given: identities
//! unique per prefix, kind and name, from which each store lays out its own.

use std::sync::OnceLock;

use crate::error::{Error, Result};

/// The longest key a user may pass, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

/// The default prefix of every key lockguard writes.
pub const DEFAULT_PREFIX: &str = "lockguard:";

pub use lockguard_units::MAX_PERMITS;

/// The kind of the lock keys behind elections, and (with `-term`) of
/// their announcements: `{prefix}leader:{escaped name}`.
pub(crate) const ELECTION_KIND: &str = "leader";

/// The kind of an election's announcement, a fenced value:
/// `{prefix}leader-term:{escaped name}`.
pub(crate) const ANNOUNCEMENT_KIND: &str = "leader-term";

/// The kind of the lock keys behind scheduled jobs:
/// `{prefix}schedule:{escaped name}`.
pub(crate) const SCHEDULE_KIND: &str = "schedule";

/// The kind of a scheduled job's record of the last period it ran, a
/// fenced value: `{prefix}schedule-run:{escaped name}`.
pub(crate) const SCHEDULE_RUN_KIND: &str = "schedule-run";

/// The kind of an upgradeable read-write lock's keys (its reads and
/// writes): `{prefix}urw:{escaped name}`, apart from a plain read-write
/// lock of the same name.
pub(crate) const UPGRADEABLE_KIND: &str = "urw";

/// The kind of an upgradeable read-write lock's gate, the lock its
/// upgradeable readers and its writers hold: `{prefix}urw-gate:{escaped name}`.
pub(crate) const UPGRADE_GATE_KIND: &str = "urw-gate";

/// What a key's holders hold: one lock, or one of a semaphore's permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource {
    /// A lock: one holder at a time, reentrant within a scope.
    Lock,
    /// A semaphore: at most `permits` holders at once.
    Semaphore {
        /// How many may hold it at once.
        permits: u32,
    },
}

impl Resource {
    /// How many may hold it at once: 1 for a lock.
    pub fn permits(self) -> u32 {
        match self {
            Self::Lock => 1,
            Self::Semaphore { permits } => permits,
        }
    }
}

/// Which hold of a read-write lock: one of its readers, or its writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RwMode {
    /// A reader: shares the lock with the other readers.
    Read,
    /// The writer: holds the lock alone.
    Write,
}

impl RwMode {
    /// `"read"` or `"write"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
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
    if key.is_empty() || key.len() > MAX_KEY_LEN || has_control(key) {
        return Err(invalid_key(what, key));
    }
    Ok(())
}

/// Why [`validate_key`] refused `key`.
#[cold]
#[inline(never)]
fn invalid_key(what: &str, key: &str) -> Error {
    if key.is_empty() {
        return Error::invalid(format!("{what} key must not be empty"));
    }
    if key.len() > MAX_KEY_LEN {
        return Error::invalid(format!(
            "{what} key is {} bytes long, the maximum is {MAX_KEY_LEN}",
            key.len()
        ));
    }
    Error::invalid(format!("{what} key {key:?} contains control characters"))
}

/// Whether `s` holds a control character: eight bytes at a time when it
/// is printable ASCII, as most keys are.
fn has_control(s: &str) -> bool {
    if printable_ascii(s.as_bytes()) {
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

/// Whether every byte of `bytes` is printable ASCII, `' '` to `'~'`,
/// looked at a word of eight bytes at a time with no branch per byte: a
/// key of a dozen bytes takes two words where a byte loop takes a dozen
/// rounds.
fn printable_ascii(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // A byte below `' '` borrows when `' '` is taken from it and had its
    // high bit clear; a byte above `'~'` has its high bit set once one is
    // added to it, or had it already. A word of bytes in range neither
    // borrows nor carries, so no byte sets a high bit by its neighbour.
    let outside = |word: u64| {
        let below = word.wrapping_sub(ONES * u64::from(b' ')) & !word;
        let above = word.wrapping_add(ONES) | word;
        (below | above) & HIGHS
    };
    let mut words = bytes.chunks_exact(8);
    let mut seen = 0;
    for word in &mut words {
        let mut w = [0; 8];
        w.copy_from_slice(word);
        seen |= outside(u64::from_ne_bytes(w));
    }
    // The tail, padded with spaces.
    let mut last = [b' '; 8];
    last[..words.remainder().len()].copy_from_slice(words.remainder());
    seen |= outside(u64::from_ne_bytes(last));
    seen == 0
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

/// Appends a user key to an identity: `{` + the key with `\` and `}`
/// escaped by a backslash + `}`.
///
/// The escaping makes the identities injective: no user key, of any kind,
/// can name another's identity or one a store derives from it by a suffix
/// (`:queue`, `:sum`, ...), and `"a"` and `"{a}"` are different keys. The
/// prefix and the kind hold no brace, so the text between the first `{`
/// and the first `}` after it is the same non-empty start of the escaped
/// key for every identity of one user key: a Redis Cluster store takes it
/// as its hash tag, so a script's keys share a slot.
pub(crate) fn push_escaped(out: &mut String, key: &str) {
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
    push_escaped(&mut out, key);
    out
}

/// The keys of one lock, or of one semaphore: what a store is asked to
/// take, release, extend or inspect.
///
/// A store keys its state by [`id`](Self::id) and lays out whatever else it
/// needs from it; [`prefix`](Self::prefix), [`name`](Self::name) and
/// [`resource`](Self::resource) say what it names.
///
/// Only the identity is made with the keys: what else a store keeps of a
/// lock (the Redis store's queue, sequence and tickets keys) it lays out
/// from the identity itself, so a lock made per request (an HTTP layer's)
/// costs one string on a store that needs no more.
#[derive(Clone)]
pub struct LockKeys {
    /// A lock, or a semaphore and its permits.
    pub(crate) resource: Resource,
    /// For a hold of a read-write lock, which one (`resource` is then
    /// `Lock`): the keys of its reads and writes share one identity.
    pub(crate) rw: Option<RwMode>,
    /// The identity: `{prefix}{kind}:{escaped name}`.
    pub(crate) lock: String,
    /// How many bytes of `lock` are the client's prefix.
    prefix_len: usize,
    /// The release channel of a store whose waiters line up.
    channel: OnceLock<String>,
}

impl std::fmt::Debug for LockKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockKeys")
            .field("resource", &self.resource)
            .field("rw", &self.rw)
            .field("id", &self.lock)
            .finish_non_exhaustive()
    }
}

impl PartialEq for LockKeys {
    fn eq(&self, other: &Self) -> bool {
        // The keys around it are a function of these, or (a Redlock
        // semaphore's slots) were given with a lock key of their own.
        self.resource == other.resource && self.rw == other.rw && self.lock == other.lock
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
            rw: None,
            lock: base(prefix, kind, name),
            prefix_len: prefix.len(),
            channel: OnceLock::new(),
        }
    }

    /// The keys of the lock behind the election `name` (see
    /// [`Leader`](crate::Leader)): a lock of its own kind,
    /// `{prefix}leader:{escaped name}`, so it never meets a lock, a
    /// semaphore or any other key of the same name. Every store keys a
    /// lock by its identity alone, so an election runs on each as a lock.
    pub(crate) fn election(prefix: &str, name: &str) -> Self {
        Self::of_kind(prefix, ELECTION_KIND, name)
    }

    /// The keys of a lock of `kind` (an election's, a scheduled job's),
    /// never met by a lock, a semaphore or any other kind of the same name.
    pub(crate) fn of_kind(prefix: &str, kind: &str, name: &str) -> Self {
        Self {
            resource: Resource::Lock,
            rw: None,
            lock: base(prefix, kind, name),
            prefix_len: prefix.len(),
            channel: OnceLock::new(),
        }
    }

    /// The keys of a `mode` hold of the read-write lock `name` under
    /// `prefix`: one identity, `{prefix}rw:{escaped name}`, for its reads
    /// and writes, apart from every lock's and semaphore's.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// name [`validate_key`] refuses or a prefix with a brace or a control
    /// character.
    pub fn checked_rw(prefix: &str, name: &str, mode: RwMode) -> Result<Self> {
        validate_plain("prefix", prefix)?;
        validate_key("read-write lock", name)?;
        Ok(Self::rw(prefix, name, mode))
    }

    pub(crate) fn rw(prefix: &str, name: &str, mode: RwMode) -> Self {
        Self::rw_of_kind(prefix, "rw", name, mode)
    }

    /// The keys of a `mode` hold of a read-write lock of `kind` (an
    /// upgradeable one's), never met by a plain read-write lock.
    pub(crate) fn rw_of_kind(prefix: &str, kind: &str, name: &str, mode: RwMode) -> Self {
        Self {
            resource: Resource::Lock,
            rw: Some(mode),
            lock: base(prefix, kind, name),
            prefix_len: prefix.len(),
            channel: OnceLock::new(),
        }
    }

    /// The keys of a lock that a store derives from `of`'s (a Redlock
    /// semaphore keeps each permit as a lock of its own): identity `id`
    /// under `of`'s prefix, sharing `of`'s release channel.
    pub fn derived(of: &Self, id: String, resource: Resource) -> Self {
        Self {
            resource,
            rw: None,
            prefix_len: of.prefix_len,
            channel: OnceLock::from(of.channel().to_owned()),
            lock: id,
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

    /// A lock, or a semaphore with its permits. A read-write lock's keys
    /// say [`Resource::Lock`] and name their hold in
    /// [`rw_mode`](Self::rw_mode).
    pub fn resource(&self) -> Resource {
        self.resource
    }

    /// For the keys of a read-write lock, which hold they are for (the
    /// store boundary's `LockStore::acquire` takes them on a store that
    /// offers read-write locks); `None` for a lock's or a semaphore's.
    pub fn rw_mode(&self) -> Option<RwMode> {
        self.rw
    }

    /// The channel a release is announced on, on a store whose waiters
    /// line up instead of queueing (the store boundary's `Waiting::Line`):
    /// its waiters listen there.
    pub fn channel(&self) -> &str {
        self.channel
            .get_or_init(|| suffixed(&self.lock, ":released"))
    }
}

/// The user key in a store key `prefix kind:{escaped key}...`: the text
/// of the hash tag, unescaped.
pub(crate) fn untag(key: &str) -> std::borrow::Cow<'_, str> {
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
    /// How many bytes of `value` are the client's prefix.
    prefix_len: usize,
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

    /// The identity of the counter's marks
    /// ([`mark_once`](crate::Counter::mark_once)): the counter's identity
    /// with `:marks` after it.
    pub fn marks(&self) -> &str {
        &self.marks
    }

    /// The client's prefix the counter lives under.
    pub fn prefix(&self) -> &str {
        &self.value[..self.prefix_len]
    }

    /// The keys of the counter `name` under `prefix`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a
    /// name [`validate_key`] refuses or a prefix with a brace or a control
    /// character.
    pub fn checked(prefix: &str, name: &str) -> Result<Self> {
        validate_plain("prefix", prefix)?;
        validate_key("counter", name)?;
        Ok(Self::new(prefix, name))
    }

    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        let value = base(prefix, "counter", name);
        Self {
            marks: format!("{value}:marks"),
            prefix_len: prefix.len(),
            value,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The word-wise check agrees with a byte-by-byte one, on any
        /// bytes: every byte value, at every place in a word and its tail.
        #[test]
        fn printable_ascii_is_every_byte_in_range(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            let expected = bytes.iter().all(|b| (b' '..=b'~').contains(b));
            proptest::prop_assert_eq!(printable_ascii(&bytes), expected);
        }
    }

    /// Each byte value outside the printable range is found wherever it
    /// sits, between printable neighbours at both ends of the range.
    #[test]
    fn printable_ascii_finds_every_outside_byte_at_every_place() {
        for len in 1..=17 {
            for at in 0..len {
                for b in 0..=u8::MAX {
                    for fill in [b' ', b'~'] {
                        let mut bytes = vec![fill; len];
                        bytes[at] = b;
                        let expected = (b' '..=b'~').contains(&b);
                        assert_eq!(printable_ascii(&bytes), expected, "{bytes:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn rejects_empty_long_and_control_keys() {
        assert!(validate_key("lock", "").unwrap_err().is_invalid_input());
        assert!(validate_key("lock", &"x".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(validate_key("lock", "a\nb").is_err());
        assert!(validate_key("lock", "order:42").is_ok());
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
        // A read-write lock's reads and writes share one identity, apart
        // from the lock of the same name.
        let read = LockKeys::checked_rw("lg:", "a", RwMode::Read).unwrap();
        let write = LockKeys::checked_rw("lg:", "a", RwMode::Write).unwrap();
        assert_eq!(read.id(), write.id());
        assert_ne!(read, write);
        assert_ne!(read.id(), LockKeys::new("lg:", "a", Resource::Lock).id());
        assert_eq!(
            (read.name(), read.rw_mode()),
            ("a".into(), Some(RwMode::Read))
        );
        assert!(LockKeys::checked_rw("lg:", "", RwMode::Read).is_err());
        assert!(LockKeys::checked("{lg}:", "a", Resource::Lock).is_err());
    }

    #[test]
    fn election_keys_are_their_own_kind() {
        let election = LockKeys::election("lg:", "jobs");
        assert_eq!(election.id(), "lg:leader:{jobs}");
        assert_eq!(election.name(), "jobs");
        assert_eq!(election.prefix(), "lg:");
        assert_ne!(election, LockKeys::new("lg:", "jobs", Resource::Lock));
        assert_ne!(
            base("lg:", ANNOUNCEMENT_KIND, "jobs"),
            base("lg:", "fenced", "jobs")
        );
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
