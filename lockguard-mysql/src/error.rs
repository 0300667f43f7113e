//! lockguard's errors for what MySQL and its driver answer.

use lockguard_core::{Error, ErrorKind, Result};

/// MySQL's server error codes lockguard tells apart.
mod code {
    pub(super) const ACCESS_DENIED: u16 = 1045;
    pub(super) const DB_ACCESS_DENIED: u16 = 1044;
    pub(super) const TABLE_ACCESS_DENIED: u16 = 1142;
    pub(super) const BAD_DB: u16 = 1049;
    pub(super) const TOO_MANY_CONNECTIONS: u16 = 1040;
    pub(super) const SERVER_SHUTDOWN: u16 = 1053;
    pub(super) const NO_SUCH_TABLE: u16 = 1146;
    pub(super) const LOCK_WAIT_TIMEOUT: u16 = 1205;
    pub(super) const DEADLOCK: u16 = 1213;
    pub(super) const NO_SUCH_PROCEDURE: u16 = 1305;
    pub(super) const QUERY_INTERRUPTED: u16 = 1317;
    pub(super) const DATA_TOO_LONG: u16 = 1406;
    pub(super) const OUT_OF_RANGE: u16 = 1264;
    pub(super) const VALUE_OUT_OF_RANGE: u16 = 1690;
    pub(super) const READ_ONLY: u16 = 1290;
    pub(super) const CONNECTION_KILLED: u16 = 1927;
    /// ER_BINLOG_STMT_MODE_AND_ROW_ENGINE: `binlog_format = STATEMENT`
    /// and a write InnoDB logs only by row (any, at READ COMMITTED).
    pub(super) const BINLOG_STATEMENT_FORMAT: u16 = 1665;
}

/// Whether `err` is a statement interrupted by `KILL QUERY`: how a bell is
/// rung.
pub(crate) fn is_interrupted(err: &mysql_async::Error) -> bool {
    matches!(err, mysql_async::Error::Server(e) if e.code == code::QUERY_INTERRUPTED)
}

/// Whether `err` says the connection is gone: the server ended the
/// session (restarted, killed it, or timed it out idle) or the link broke.
pub(crate) fn is_gone(err: &mysql_async::Error) -> bool {
    use mysql_async::{DriverError, Error as E};
    match err {
        E::Io(_) => true,
        E::Driver(DriverError::ConnectionClosed) => true,
        E::Server(e) => matches!(e.code, code::CONNECTION_KILLED | code::SERVER_SHUTDOWN),
        _ => false,
    }
}

/// Whether `err` says a table does not exist.
pub(crate) fn is_no_such_table(err: &mysql_async::Error) -> bool {
    matches!(err, mysql_async::Error::Server(e) if e.code == code::NO_SUCH_TABLE)
}

/// Whether `err` is a transaction InnoDB rolled back to break a deadlock:
/// nothing of it happened, and it may be sent again.
pub(crate) fn is_deadlock(err: &mysql_async::Error) -> bool {
    matches!(err, mysql_async::Error::Server(e) if e.code == code::DEADLOCK)
}

/// The error for a failed statement about `what`.
pub(crate) fn mysql_error(err: mysql_async::Error, what: &str) -> Error {
    use mysql_async::Error as E;
    let (kind, message) = match &err {
        E::Server(e) => match e.code {
            code::DEADLOCK
            | code::LOCK_WAIT_TIMEOUT
            | code::QUERY_INTERRUPTED
            | code::CONNECTION_KILLED
            | code::TOO_MANY_CONNECTIONS
            | code::SERVER_SHUTDOWN
            | code::READ_ONLY => (ErrorKind::Unavailable, what.to_owned()),
            // The service's credentials or grants: no retry helps.
            code::ACCESS_DENIED | code::DB_ACCESS_DENIED | code::TABLE_ACCESS_DENIED => (
                ErrorKind::Unauthorized,
                format!(
                    "{what}: mysql refused the service's credentials or grants ({}); check the user and password of the URL, and that the user may create lockguard's tables and procedures or use them (a server with require_secure_transport answers a client without TLS this way too: add require_ssl=true to the URL)",
                    e.message
                ),
            ),
            code::BAD_DB => (
                ErrorKind::Misconfigured,
                format!(
                    "{what}: {}; create the database or name an existing one in the URL",
                    e.message
                ),
            ),
            // The server's setting: every write of a READ COMMITTED
            // session (lockguard's) is refused until it changes.
            code::BINLOG_STATEMENT_FORMAT => (
                ErrorKind::Misconfigured,
                format!(
                    "{what}: the server writes its binary log in STATEMENT format, in which \
                     InnoDB refuses the writes of lockguard's READ COMMITTED sessions, and \
                     MariaDB the draws of the locks' sequence ({}); set \
                     binlog_format = ROW (or MIXED) on the server: SET GLOBAL binlog_format = \
                     'ROW' for new sessions, and binlog_format = ROW in its configuration",
                    e.message
                ),
            ),
            code::DATA_TOO_LONG | code::OUT_OF_RANGE | code::VALUE_OUT_OF_RANGE => {
                (ErrorKind::InvalidInput, what.to_owned())
            }
            code::NO_SUCH_TABLE | code::NO_SUCH_PROCEDURE => (
                ErrorKind::Protocol,
                format!("{what}: lockguard's tables are missing or were changed"),
            ),
            _ => (ErrorKind::Protocol, what.to_owned()),
        },
        E::Url(_) => (ErrorKind::InvalidInput, what.to_owned()),
        // I/O, a closed connection, a pool shut down: trying again later
        // may succeed.
        E::Io(_) | E::Driver(_) => (ErrorKind::Unavailable, what.to_owned()),
        E::Other(_) => (ErrorKind::Protocol, what.to_owned()),
    };
    Error::new(kind, message).with_source(err)
}

/// The error for an answer lockguard cannot read.
pub(crate) fn garbage(what: &str, detail: impl std::fmt::Debug) -> Error {
    Error::new(
        ErrorKind::Protocol,
        format!("{what}: unexpected reply from mysql ({detail:?})"),
    )
}

/// Reads `row` as `T`, or a protocol error naming `what` (the driver's own
/// conversion panics on a mismatch).
pub(crate) fn read_row<T: mysql_async::prelude::FromRow>(
    row: mysql_async::Row,
    what: &dyn Fn() -> String,
) -> Result<T> {
    mysql_async::from_row_opt(row).map_err(|e| garbage(&what(), e.0))
}
