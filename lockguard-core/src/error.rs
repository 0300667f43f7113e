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
    /// No process-wide default client was installed where one was needed.
    NoDefaultClient,
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
#[derive(Debug, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct Error {
    kind: ErrorKind,
    message: String,
    retry_after: Option<Duration>,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
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

    #[test]
    fn display_is_lowercase_with_kind_and_message() {
        let e = Error::new(ErrorKind::Busy, "lock \"a\" is held");
        assert_eq!(e.to_string(), "busy: lock \"a\" is held");
        assert!(e.is_busy());
        assert!(!e.is_unavailable());
    }

    #[test]
    fn timeout_counts_as_unavailable() {
        let e = Error::new(ErrorKind::Timeout, "x");
        assert!(e.is_timeout() && e.is_unavailable());
    }
}
