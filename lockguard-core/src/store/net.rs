//! The toolkit of a store that talks to a server: one rule for each thing
//! every such store does alike, so that the stores cannot drift apart.
//!
//! - [`within`]: a request's deadline, and the one message of its timeout;
//! - [`unreachable`](fn@unreachable): when a failed connect means the server cannot be
//!   reached;
//! - [`overflow_is_invalid`]: a counter's arithmetic that left its range;
//! - [`millis`], [`ttl_millis`], [`permits`]: the units of statements and
//!   scripts;
//! - [`spawn_sweeper`]: a task that removes expired state now and then;
//! - [`sql_identifier`]: a table or column name quoted for SQL text;
//! - [`path_segment`]: a key as one segment of a store's path (a
//!   ZooKeeper node's name, a piece of an etcd key);
//! - [`keep_listening`]: a listening connection kept open for as long as
//!   the client lives;
//! - [`InFlight`]: an acquisition sent on a connection, whose release
//!   waits until the connection has run it;
//! - [`LostRaces`]: the pauses of an update by compare-and-set after each
//!   race it lost, and the bound past which it gives up;
//! - URLs in messages go through [`url::redacted`](super::url::redacted).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::{Flight, Resource, millis_ceil};
use crate::error::{Error, ErrorKind, Result};

/// The answer of a request to the `store` server given `timeout` (what
/// `tokio::time::timeout(timeout, request).await` gives), or the timeout
/// error: "`what`: no answer from `store` within `timeout`".
///
/// Callers await the timeout in place, `within(t, "redis", what,
/// tokio::time::timeout(t, request).await)`: an `async fn` taking the
/// request's future by value would keep it twice in its state (the
/// argument and the running timeout), and every caller would move a
/// future of that size at each call.
///
/// # Errors
///
/// The request's own error, or [`ErrorKind::Timeout`] when it did not
/// answer in time.
pub fn within<T>(
    timeout: Duration,
    store: &str,
    what: impl FnOnce() -> String,
    answer: std::result::Result<Result<T>, tokio::time::error::Elapsed>,
) -> Result<T> {
    answer.unwrap_or_else(|_| {
        Err(Error::new(
            ErrorKind::Timeout,
            format!("{}: no answer from {store} within {timeout:?}", what()),
        ))
    })
}

/// The error of a connect: one that did not answer in time, or answered
/// something that is not the store's protocol, means the server cannot be
/// reached ([`ErrorKind::Unavailable`], the cause kept as its source); one
/// the server refused (credentials, permissions, a setting) stays the
/// set-up mistake it is.
pub fn unreachable(e: Error) -> Error {
    if e.is_misconfigured() {
        return e;
    }
    match e.kind() {
        ErrorKind::Timeout | ErrorKind::Protocol => {
            Error::new(ErrorKind::Unavailable, e.message().to_owned()).with_source(e)
        }
        _ => e,
    }
}

/// Maps a store's range error from arithmetic on the counter `key`
/// ([`ErrorKind::InvalidInput`]) to the one message every store gives for
/// it: the increment or decrement would overflow.
pub fn overflow_is_invalid(key: &str) -> impl FnOnce(Error) -> Error + '_ {
    move |e| {
        if e.is_invalid_input() {
            Error::new(
                ErrorKind::InvalidInput,
                format!("counter {key:?}: increment or decrement would overflow"),
            )
            .with_source(e)
        } else {
            e
        }
    }
}

/// Milliseconds for a statement or a script (`PX`, a lease column),
/// rounded up so a sub-millisecond remainder never shortens a lease.
pub fn millis(d: Duration) -> i64 {
    i64::try_from(millis_ceil(d)).unwrap_or(i64::MAX)
}

/// A fencing token as a statement answers it: positive, or a
/// [`ErrorKind::Protocol`] error about `what`.
///
/// # Errors
///
/// [`ErrorKind::Protocol`] for none, zero or a negative number.
pub fn fence(n: Option<i64>, what: &dyn Fn() -> String) -> Result<crate::FencingToken> {
    n.and_then(|n| u64::try_from(n).ok())
        .filter(|n| *n > 0)
        .map(crate::FencingToken::new)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Protocol,
                format!("{}: unexpected fencing token {n:?}", what()),
            )
        })
}

/// A span of the server's clock a statement answers in microseconds, such
/// as how long a wait waited: none, or a negative one (the clock stepped
/// back), is zero.
pub fn micros(us: Option<i64>) -> Duration {
    Duration::from_micros(us.and_then(|us| u64::try_from(us).ok()).unwrap_or(0))
}

/// A counter's time to live in milliseconds, 0 for none.
pub fn ttl_millis(ttl: Option<Duration>) -> i64 {
    ttl.map_or(0, millis)
}

/// How many may hold a resource, as a statement's 32-bit integer (at most
/// [`MAX_PERMITS`](crate::key::MAX_PERMITS), which fits).
pub fn permits(resource: Resource) -> i32 {
    i32::try_from(resource.permits()).unwrap_or(i32::MAX)
}

/// A task that removes expired state now and then ([`spawn_sweeper`]);
/// it stops when this is dropped (with the store that keeps it).
#[derive(Debug)]
pub struct Sweeper(tokio::task::AbortHandle);

impl Drop for Sweeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs `sweep` every `every`, starting at a random point of the first
/// interval so that clients started together do not sweep together, each
/// run given `timeout`. `sweep` answers how much it removed (`None` when it
/// failed: it is tried again at the next interval). The task stops when
/// the [`Sweeper`] is dropped.
///
/// # Panics
///
/// Outside a Tokio runtime.
pub fn spawn_sweeper<F, S>(every: Duration, timeout: Duration, sweep: S) -> Sweeper
where
    S: Fn() -> F + Send + 'static,
    F: Future<Output = Option<i64>> + Send,
{
    let task = tokio::spawn(async move {
        let first = every.mul_f64(0.5 + fastrand::f64() / 2.0);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + first, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match tokio::time::timeout(timeout, sweep()).await {
                Ok(Some(n)) if n > 0 => tracing::debug!(removed = n, "swept expired state"),
                Ok(Some(_)) => {}
                _ => tracing::debug!("sweeping expired state failed; tried again later"),
            }
        }
    });
    Sweeper(task.abort_handle())
}

/// Quotes an SQL identifier (`name`, or `schema.name`, quoted part by part
/// with `quote`), refusing what cannot be one: empty parts, more than two,
/// a part longer than `max_len` bytes, or one holding the quote or a NUL.
/// `what` names it in the error.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`] naming `what` and `name`.
pub fn sql_identifier(what: &str, name: &str, quote: char, max_len: usize) -> Result<String> {
    let parts: Vec<&str> = name.split('.').collect();
    if name.is_empty()
        || parts.len() > 2
        || parts
            .iter()
            .any(|p| p.is_empty() || p.len() > max_len || p.contains([quote, '\0']))
    {
        return Err(Error::invalid(format!(
            "{what} {name:?} is not a usable identifier"
        )));
    }
    Ok(parts
        .iter()
        .map(|p| format!("{quote}{p}{quote}"))
        .collect::<Vec<_>>()
        .join("."))
}

/// A key as one segment of a store's path: bytes outside a plain set
/// (letters, digits and `-_:.{}@+=,`; so `/` and `%` among the rest) are
/// written `%XX`, so that no key's segment holds a separator and no two
/// keys share one.
///
/// ```
/// use lockguard_core::store::net::path_segment;
///
/// assert_eq!(path_segment("lockguard:lock:{order:42}"), "lockguard:lock:{order:42}");
/// assert_eq!(path_segment("a/b"), "a%2Fb");
/// assert_eq!(path_segment("100%"), "100%25");
/// assert_eq!(path_segment("é"), "%C3%A9");
/// ```
pub fn path_segment(key: &str) -> String {
    let mut segment = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b"-_:.{}@+=,".contains(&b) {
            segment.push(char::from(b));
        } else {
            segment.push_str(&format!("%{b:02X}"));
        }
    }
    segment
}

/// The key whose [`path_segment`] is `segment`, if any: what a store that
/// lists its paths (a survey) reads back. A text no key gives (a `%` not
/// followed by two hex digits, an escape where none was needed, bytes
/// that are not UTF-8) is `None`.
///
/// ```
/// use lockguard_core::store::net::{path_segment, path_unsegment};
///
/// for key in ["lockguard:lock:{order:42}", "a/b", "100%", "é"] {
///     assert_eq!(path_unsegment(&path_segment(key)).as_deref(), Some(key));
/// }
/// for not_ours in ["a%2", "a%zz", "a%2f", "a%+1b", "a b", "%FF", "%41"] {
///     assert_eq!(path_unsegment(not_ours), None, "{not_ours}");
/// }
/// ```
pub fn path_unsegment(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            if !hex.bytes().all(|h| h.is_ascii_hexdigit()) {
                return None;
            }
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    let key = String::from_utf8(out).ok()?;
    // Only the segment the key gives: one spelling per key.
    (path_segment(&key) == segment).then_some(key)
}

/// What a connection does once its caller stopped waiting for a statement
/// it sent: answer when the connection has run it (a `SELECT 1` queued
/// behind it), and leave the connection as it should be left.
pub type Drain<C> = fn(C) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// An acquisition sent on a connection `C`, and its [`Flight`]s (one per
/// token it takes with: a release of the token waits for them). The
/// flights end when the statement answered ([`landed`](Self::landed)), or,
/// dropped before that (its caller stopped waiting), once the connection
/// has run it: the drop sends the connection to `drain` in the background.
pub struct InFlight<C: Send + 'static> {
    conn: Option<C>,
    flights: Vec<Flight>,
    drain: Drain<C>,
}

impl<C: Send + 'static> std::fmt::Debug for InFlight<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlight")
            .field("flights", &self.flights.len())
            .finish_non_exhaustive()
    }
}

impl<C: Send + 'static> InFlight<C> {
    /// An acquisition about to go out on `conn`, with its `flights`.
    pub fn new(conn: C, flights: Vec<Flight>, drain: Drain<C>) -> Self {
        Self {
            conn: Some(conn),
            flights,
            drain,
        }
    }

    /// The connection the statement goes out on.
    ///
    /// # Panics
    ///
    /// Never: the connection is there until the value is dropped.
    pub fn conn(&mut self) -> &mut C {
        self.conn.as_mut().expect("present until landed or dropped")
    }

    /// The statement answered: the flights are over, and the connection
    /// is handed back.
    pub fn landed(mut self) -> C {
        self.flights.clear();
        self.conn.take().expect("present until landed or dropped")
    }
}

impl<C: Send + 'static> Drop for InFlight<C> {
    fn drop(&mut self) {
        let flights = std::mem::take(&mut self.flights);
        let Some(conn) = self.conn.take().filter(|_| !flights.is_empty()) else {
            return;
        };
        // Outside a runtime nothing can be sent; the release then goes
        // without waiting (the lease bounds what a late acquisition holds).
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let drain = (self.drain)(conn);
            rt.spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(30), drain).await;
                drop(flights);
            });
        }
    }
}

/// How one session of a store's listening connection ended (see
/// [`keep_listening`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stopped {
    /// The client is gone: listening ends.
    ClientGone,
    /// The connection failed: listening connects again.
    Lost,
}

/// A store's listening connection (a PostgreSQL or MySQL bell): how to open
/// one, and how to listen on it until it fails or the client is gone.
pub trait Listening: Send + Sync {
    /// The open connection.
    type Conn: Send;

    /// Opens a connection and makes it listen: wake-ups sent after this
    /// answers reach it.
    fn open(&self) -> impl Future<Output = Result<Self::Conn>> + Send;

    /// Delivers what arrives on `conn` to `inbox` until `conn` fails or
    /// the client is gone.
    fn listen(
        &self,
        conn: Self::Conn,
        inbox: &std::sync::Weak<dyn super::Inbox>,
    ) -> impl Future<Output = Stopped> + Send;
}

/// Keeps `listening` connected for as long as the client lives: opens a
/// connection (telling `started` whether it listens), listens on it, and
/// after a failure connects again with a backoff from 20 ms to 1 s. After
/// each lost connection every waiter checks, since wake-ups may have been
/// sent while nobody listened; meanwhile waiters fall back to their timed
/// attempts.
pub async fn keep_listening<L: Listening>(
    store: &'static str,
    listening: L,
    inbox: std::sync::Weak<dyn super::Inbox>,
    started: super::Started,
) {
    let mut backoff = Duration::from_millis(20);
    loop {
        match listening.open().await {
            Ok(conn) => {
                backoff = Duration::from_millis(20);
                started.listening();
                let stopped = listening.listen(conn, &inbox).await;
                let Some(i) = inbox.upgrade() else { return };
                i.wake_all();
                drop(i);
                if stopped == Stopped::ClientGone {
                    return;
                }
            }
            Err(e) => {
                tracing::debug!(store, error = %e, "listening connection failed");
                started.failed(&e);
                if inbox.strong_count() == 0 {
                    return;
                }
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// How many request timeouts an update by compare-and-set may spend losing
/// races to other writers before it gives up.
const CONTENDED_TIMEOUTS: u32 = 10;

/// The races an update by compare-and-set lost (etcd's transactions on a
/// revision, ZooKeeper's versioned writes): after each, a random pause up
/// to a bound that doubles from 200 µs to 20 ms, so that the writers that
/// lost a round do not meet again in the next; and once ten request
/// timeouts have passed since the first attempt, a timeout instead: a
/// retry loop with no deadline is a trap the design notes list.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
///
/// use lockguard_core::store::net::LostRaces;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let mut races = LostRaces::new(Duration::from_millis(100));
/// // A conditional write found the key changed: pause, then read again.
/// races.lost(|| "updating counter/stock".to_owned()).await.unwrap();
/// tokio::time::sleep(Duration::from_secs(1)).await;
/// let e = races.lost(|| "updating counter/stock".to_owned()).await.unwrap_err();
/// assert!(e.is_timeout());
/// # }
/// ```
#[derive(Debug)]
pub struct LostRaces {
    pause: Duration,
    started: tokio::time::Instant,
    budget: Duration,
}

impl LostRaces {
    /// No race lost yet, for an update whose requests are bounded by
    /// `request_timeout`.
    pub fn new(request_timeout: Duration) -> Self {
        Self {
            pause: Duration::from_micros(200),
            started: tokio::time::Instant::now(),
            budget: request_timeout.saturating_mul(CONTENDED_TIMEOUTS),
        }
    }

    /// After a lost race: a random pause, then `Ok` to try again.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Timeout`] once the update has spent its ten request
    /// timeouts: "`what`: other writes kept coming first for ...".
    pub async fn lost(&mut self, what: impl FnOnce() -> String) -> Result<()> {
        if self.started.elapsed() >= self.budget {
            return Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "{}: other writes kept coming first for {:?}",
                    what(),
                    self.budget
                ),
            ));
        }
        let nanos = u64::try_from(self.pause.as_nanos()).unwrap_or(u64::MAX);
        tokio::time::sleep(Duration::from_nanos(fastrand::u64(0..=nanos))).await;
        self.pause = (self.pause * 2).min(Duration::from_millis(20));
        Ok(())
    }
}
