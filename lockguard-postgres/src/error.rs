//! lockguard's errors for what PostgreSQL and its drivers answer: the
//! server's SQLSTATE made an [`ErrorKind`], with the fix in the message
//! where there is one; a request's deadline; a connect that finds nobody.

use deadpool_postgres::PoolError;
use tokio_postgres::error::SqlState;

use lockguard_core::{Error, ErrorKind};

/// The error for a failed statement about `what`.
pub(crate) fn pg_error(err: tokio_postgres::Error, what: &str) -> Error {
    let (kind, message) = match err.code() {
        Some(code) => classify(
            Some(code.code()),
            err.as_db_error().map(|db| db.message()),
            what,
        ),
        // I/O, TLS and connection errors carry no SQL state.
        None => (ErrorKind::Unavailable, what.to_owned()),
    };
    Error::new(kind, message).with_source(err)
}

/// The kind and message of an error the server answered with SQLSTATE
/// `code` (and its message), about `what`; for either driver.
pub(crate) fn classify(
    code: Option<&str>,
    db_message: Option<&str>,
    what: &str,
) -> (ErrorKind, String) {
    let is = |state: &SqlState| code == Some(state.code());
    let kind = match code {
        None => ErrorKind::Unavailable,
        Some(_) if is(&SqlState::NUMERIC_VALUE_OUT_OF_RANGE) => ErrorKind::InvalidInput,
        // The session's isolation level (see schema.sql).
        Some(_) if is(&SqlState::FEATURE_NOT_SUPPORTED) => ErrorKind::Unsupported,
        // Connection failures, resources, shutdown, a read-only standby:
        // trying again later may succeed.
        Some(c)
            if c.starts_with("08")
                || c.starts_with("53")
                || c.starts_with("57")
                || c.starts_with("58")
                || is(&SqlState::T_R_SERIALIZATION_FAILURE)
                || is(&SqlState::T_R_DEADLOCK_DETECTED)
                || is(&SqlState::READ_ONLY_SQL_TRANSACTION) =>
        {
            ErrorKind::Unavailable
        }
        // The service's credentials or grants: no retry helps.
        Some(_)
            if is(&SqlState::INVALID_PASSWORD)
                || is(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION)
                || is(&SqlState::INSUFFICIENT_PRIVILEGE) =>
        {
            ErrorKind::Unauthorized
        }
        // The URL names a database the server does not have.
        Some(_) if is(&SqlState::INVALID_CATALOG_NAME) => ErrorKind::Misconfigured,
        Some(_) => ErrorKind::Protocol,
    };
    let message = match db_message {
        Some(m) if is(&SqlState::FEATURE_NOT_SUPPORTED) => format!("{what}: {m}"),
        Some(m) if kind == ErrorKind::Unauthorized => format!(
            "{what}: postgres refused the service's credentials or grants ({m}); check the user and password of the URL, and that the user may create lockguard's schema or use it"
        ),
        Some(m) if kind == ErrorKind::Misconfigured => {
            format!("{what}: {m}; create the database or name an existing one in the URL")
        }
        _ if is(&SqlState::UNDEFINED_FUNCTION)
            || is(&SqlState::UNDEFINED_TABLE)
            || is(&SqlState::INVALID_SCHEMA_NAME) =>
        {
            format!("{what}: lockguard's schema is missing or was changed")
        }
        _ => what.to_owned(),
    };
    (kind, message)
}

/// A failure of either driver, made lockguard's error by [`DbError::about`].
#[derive(Debug)]
pub(crate) enum DbError {
    Postgres(tokio_postgres::Error),
    Pool(PoolError),
    #[cfg(feature = "sqlx")]
    Sqlx(sqlx::Error),
}

impl DbError {
    /// lockguard's error for a failure while doing `what`.
    pub(crate) fn about(self, what: &str) -> Error {
        match self {
            Self::Postgres(e) => pg_error(e, what),
            Self::Pool(PoolError::Backend(e)) => pg_error(e, what),
            Self::Pool(PoolError::Timeout(_)) => Error::new(
                ErrorKind::Unavailable,
                format!("{what}: no postgres connection could be had in time"),
            ),
            Self::Pool(other) => {
                Error::new(ErrorKind::Unavailable, what.to_owned()).with_source(other)
            }
            #[cfg(feature = "sqlx")]
            Self::Sqlx(e) => sqlx_error(e, what),
        }
    }
}

/// lockguard's error for an sqlx failure: a database error is classified by
/// its SQLSTATE as tokio-postgres's are; a pool that could not hand out a
/// connection in time, or a connection that failed, is unavailable.
#[cfg(feature = "sqlx")]
fn sqlx_error(e: sqlx::Error, what: &str) -> Error {
    let (kind, message) = match &e {
        sqlx::Error::Database(db) => classify(db.code().as_deref(), Some(db.message()), what),
        sqlx::Error::PoolTimedOut => (
            ErrorKind::Unavailable,
            format!("{what}: no postgres connection could be had in time"),
        ),
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => (ErrorKind::Unavailable, what.to_owned()),
        sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::Decode(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::RowNotFound
        | sqlx::Error::TypeNotFound { .. } => (
            ErrorKind::Protocol,
            format!("{what}: unexpected reply from postgres"),
        ),
        sqlx::Error::Configuration(_) => (ErrorKind::Misconfigured, what.to_owned()),
        _ => (ErrorKind::Unavailable, what.to_owned()),
    };
    Error::new(kind, message).with_source(e)
}
