//! The one error type of lockguard.

use std::fmt;
use std::time::Duration;

/// A specialized [`Result`](std::result::Result) whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, in a form callers can match on.
///
/// New kinds may be added in minor releases, so matches need a wildcard arm.
/// Most callers use the predicates on [`Error`] instead (`is_busy()`,
/// `is_unavailable()`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Another holder has the lock (or every permit), and the caller did not
    /// wait or gave up waiting.
    Busy,
    /// The lease of a lock this caller held ran out or was taken over; the
    /// work it protected may no longer be exclusive.
    LeaseLost,
    /// A write carried a fencing token older than one the resource has
    /// already seen.
    StaleFencingToken,
    /// The store did not answer within the configured timeout.
    Timeout,
    /// The store could not be reached: connection refused, dropped or
    /// reconnecting.
    Unavailable,
    /// A rate limiter refused the request; [`Error::retry_after`] says when
    /// to try again.
    RateLimited,
    /// The caller passed something the library cannot use: an empty key, a
    /// zero or oversized lease, a malformed URL.
    InvalidInput,
    /// The store answered with something lockguard did not expect.
    Protocol,
    /// The client's store does not offer this operation (counters and rate
    /// limiters on a Redlock client).
    Unsupported,
    /// No process-wide default client was installed where one was needed:
    /// a mistake in how the service is set up (call
    /// [`Client::install_default`](crate::Client::install_default) at
    /// start-up).
    NoDefaultClient,
    /// The service is set up in a way that cannot work, whoever calls it:
    /// a database index or database the store does not have, a key source
    /// that cannot work with how the server is served, a schema the store
    /// cannot create. Retrying does not help; the message says what to fix.
    Misconfigured,
    /// The store refused the client's credentials or permissions (a wrong
    /// password, a user without the rights lockguard needs). Retrying does
    /// not help until the credentials or grants are fixed.
    Unauthorized,
}

impl ErrorKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Busy => "busy",
            Self::RateLimited => "rate limited",
            Self::LeaseLost => "lease lost",
            Self::StaleFencingToken => "stale fencing token",
            Self::Timeout => "timed out",
            Self::Unavailable => "store unavailable",
            Self::InvalidInput => "invalid input",
            Self::Protocol => "unexpected reply from store",
            Self::NoDefaultClient => "no default client",
            Self::Misconfigured => "misconfigured",
            Self::Unauthorized => "unauthorized",
            Self::Unsupported => "unsupported",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error returned by every fallible lockguard operation.
///
/// It carries an [`ErrorKind`], a message naming what failed (usually with
/// the key), and the underlying error as its [`source`](std::error::Error::source)
/// where there is one.
///
/// Its `Debug` form is a sentence, the message and then its causes (what a
/// `main` that returns `Result` prints); `{:#?}` gives the fields.
#[derive(thiserror::Error)]
#[error("{kind}: {message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    retry_after: Option<Duration>,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.alternate() {
            return f
                .debug_struct("Error")
                .field("kind", &self.kind)
                .field("message", &self.message)
                .field("retry_after", &self.retry_after)
                .field("source", &self.source)
                .finish();
        }
        write!(f, "{self}")?;
        if let Some(after) = self.retry_after {
            write!(f, " (retry after {after:?})")?;
        }
        // Each cause once: a driver's error often repeats its own cause's
        // words.
        let mut said = self.to_string();
        let mut cause = std::error::Error::source(self);
        let mut first = true;
        while let Some(c) = cause {
            let text = c.to_string();
            if !text.is_empty() && !said.contains(&text) {
                if first {
                    f.write_str("\n\nCaused by:")?;
                    first = false;
                }
                write!(f, "\n    {text}")?;
                said.push_str(&text);
            }
            cause = c.source();
        }
        Ok(())
    }
}

impl Error {
    /// Builds an error of `kind` with a message.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            retry_after: None,
            source: None,
        }
    }

    /// Keeps `source` as the cause (what [`std::error::Error::source`]
    /// returns).
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// Attaches when trying again may succeed.
    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(retry_after);
        self
    }

    /// An error of kind [`ErrorKind::InvalidInput`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, message)
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without the kind.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// When trying again may succeed: the holder's remaining lease for a
    /// busy lock (if the store said), the limiter's `retry_after` for a
    /// rate-limited request.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Someone else holds the lock; trying again later may succeed.
    pub fn is_busy(&self) -> bool {
        self.kind == ErrorKind::Busy
    }

    /// A rate limiter refused the request.
    pub fn is_rate_limited(&self) -> bool {
        self.kind == ErrorKind::RateLimited
    }

    /// This caller's lease was lost.
    pub fn is_lease_lost(&self) -> bool {
        self.kind == ErrorKind::LeaseLost
    }

    /// A fenced write was rejected because a newer token had been seen.
    pub fn is_stale_fencing_token(&self) -> bool {
        self.kind == ErrorKind::StaleFencingToken
    }

    /// The store did not answer in time.
    pub fn is_timeout(&self) -> bool {
        self.kind == ErrorKind::Timeout
    }

    /// The store could not be used: unreachable, or did not answer in time.
    pub fn is_unavailable(&self) -> bool {
        matches!(self.kind, ErrorKind::Unavailable | ErrorKind::Timeout)
    }

    /// The caller's input was rejected.
    pub fn is_invalid_input(&self) -> bool {
        self.kind == ErrorKind::InvalidInput
    }

    /// The store does not offer the operation.
    pub fn is_unsupported(&self) -> bool {
        self.kind == ErrorKind::Unsupported
    }

    /// A mistake in how the service is set up, not in a request and not a
    /// passing outage: [`ErrorKind::Misconfigured`],
    /// [`ErrorKind::Unauthorized`] or [`ErrorKind::NoDefaultClient`].
    /// Nothing changes until the configuration does; the message says
    /// what to fix. The HTTP layers answer such an error with `500` (never
    /// letting the request through, whatever their failure mode) and log
    /// it at `error` level once per cause (see [`report_misconfigured`]).
    pub fn is_misconfigured(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::Misconfigured | ErrorKind::Unauthorized | ErrorKind::NoDefaultClient
        )
    }

    /// Whether the same call, made again later without changing anything,
    /// may succeed: the lock was busy, the limiter refused
    /// ([`retry_after`](Error::retry_after) says when), or the store was
    /// unreachable or slow. False for everything the caller or the
    /// service's set-up must change first (invalid input, a
    /// misconfiguration, unsupported operations, unexpected replies), and
    /// for a lost lease or a stale fencing token, whose work must be
    /// redone under a new lock, not retried as it was.
    ///
    /// ```
    /// use lockguard_core::{Error, ErrorKind};
    ///
    /// assert!(Error::new(ErrorKind::Unavailable, "connection refused").is_retryable());
    /// assert!(!Error::new(ErrorKind::Unauthorized, "WRONGPASS").is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::Busy | ErrorKind::RateLimited | ErrorKind::Timeout | ErrorKind::Unavailable
        )
    }
}

/// The most distinct set-up mistakes [`report_misconfigured`] remembers;
/// past that it logs each further one at most once a minute, so a flood of
/// distinct messages cannot grow memory or the log without bound.
const REMEMBERED_CAUSES: usize = 64;

/// Logs `error`, a mistake in how the service is set up
/// ([`Error::is_misconfigured`] or an invalid setting), at `error` level,
/// once per `cause` for the life of the process, so a misconfigured service
/// says what to fix once instead of on every request (and is not silent at
/// all). `cause` tells one mistake from another: the error's message when
/// it names no key, else what the mistake is about (an HTTP layer passes
/// its kind, its name and the error's kind, so a refused password is
/// logged once, not once per key). Returns whether it logged now. The HTTP
/// layers and the attribute macros call it; a service that handles such
/// errors itself may too.
///
/// ```
/// use lockguard_core::{Error, ErrorKind, report_misconfigured};
///
/// let e = Error::new(ErrorKind::Unauthorized, "redis refused the password (WRONGPASS)");
/// assert!(report_misconfigured(e.message(), &e));
/// assert!(!report_misconfigured(e.message(), &e));
/// ```
pub fn report_misconfigured(cause: &str, error: &Error) -> bool {
    use std::collections::HashSet;
    use std::sync::Mutex;
    use std::time::Instant;

    static SEEN: Mutex<Option<(HashSet<String>, Option<Instant>)>> = Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    let (causes, overflow) = seen.get_or_insert_with(|| (HashSet::new(), None));
    if causes.contains(cause) {
        return false;
    }
    if causes.len() >= REMEMBERED_CAUSES {
        if overflow.is_some_and(|at| at.elapsed() < Duration::from_secs(60)) {
            return false;
        }
        *overflow = Some(Instant::now());
    } else {
        causes.insert(cause.to_owned());
    }
    drop(seen);
    tracing::error!(kind = %error.kind(), error = %error, "lockguard is misconfigured; fix the set-up (logged once)");
    true
}

/// Input found invalid when a primitive was made (`client.lock("")`),
/// reported as [`ErrorKind::InvalidInput`] each time it is used. Cheap to
/// clone with the primitive.
#[derive(Debug, Clone)]
pub(crate) struct Invalid(std::sync::Arc<str>);

impl Invalid {
    /// The error to report.
    pub(crate) fn error(&self) -> Error {
        Error::invalid(&*self.0)
    }
}

impl From<Error> for Invalid {
    fn from(e: Error) -> Self {
        Self(e.message.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a `main` returning `Result` prints: a sentence and its causes,
    /// each once; the fields with `{:#?}`.
    #[test]
    fn debug_reads_as_a_sentence_with_its_causes() {
        let refused =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let e = Error::new(ErrorKind::Unavailable, "connecting to redis at 127.0.0.1:1")
            .with_source(refused);
        assert_eq!(
            format!("{e:?}"),
            "store unavailable: connecting to redis at 127.0.0.1:1\n\nCaused by:\n    connection refused"
        );
        let plain = Error::new(ErrorKind::Busy, "lock \"a\" is held");
        assert_eq!(format!("{plain:?}"), "busy: lock \"a\" is held");
        // A cause whose words the message already says is not repeated.
        let said =
            Error::new(ErrorKind::Unavailable, "connecting: connection refused").with_source(
                std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused"),
            );
        assert_eq!(
            format!("{said:?}"),
            "store unavailable: connecting: connection refused"
        );
        let fields = format!("{e:#?}");
        assert!(
            fields.starts_with("Error {") && fields.contains("kind: Unavailable"),
            "{fields}"
        );
    }

    #[test]
    fn display_is_lowercase_with_kind_and_message() {
        let e = Error::new(ErrorKind::Busy, "lock \"a\" is held");
        assert_eq!(e.to_string(), "busy: lock \"a\" is held");
        assert!(e.is_busy());
        assert!(!e.is_unavailable());
    }

    #[test]
    fn set_up_mistakes_are_not_retryable() {
        for kind in [
            ErrorKind::Misconfigured,
            ErrorKind::Unauthorized,
            ErrorKind::NoDefaultClient,
        ] {
            let e = Error::new(kind, "x");
            assert!(e.is_misconfigured() && !e.is_retryable(), "{kind}");
        }
        for kind in [
            ErrorKind::Busy,
            ErrorKind::RateLimited,
            ErrorKind::Timeout,
            ErrorKind::Unavailable,
        ] {
            let e = Error::new(kind, "x");
            assert!(e.is_retryable() && !e.is_misconfigured(), "{kind}");
        }
        for kind in [
            ErrorKind::InvalidInput,
            ErrorKind::LeaseLost,
            ErrorKind::StaleFencingToken,
            ErrorKind::Protocol,
            ErrorKind::Unsupported,
        ] {
            assert!(!Error::new(kind, "x").is_retryable(), "{kind}");
        }
    }

    #[test]
    fn a_misconfiguration_is_reported_once_per_cause() {
        let wrong = Error::new(ErrorKind::Unauthorized, "report-once test: WRONGPASS");
        let other = Error::new(ErrorKind::Misconfigured, "report-once test: db 99");
        assert!(report_misconfigured(wrong.message(), &wrong));
        assert!(!report_misconfigured(wrong.message(), &wrong));
        assert!(report_misconfigured(other.message(), &other));
        assert!(!report_misconfigured(other.message(), &other));
    }

    #[test]
    fn timeout_counts_as_unavailable() {
        let e = Error::new(ErrorKind::Timeout, "x");
        assert!(e.is_timeout() && e.is_unavailable());
    }
}
