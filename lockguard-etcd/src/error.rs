//! etcd's errors as lockguard's: each kind with what it means for the
//! caller.

use etcd_client::Error as EtcdError;
use lockguard_core::{Error, ErrorKind};

/// An etcd client error as lockguard's, saying what failed.
pub(crate) fn etcd_error(e: EtcdError, what: &str) -> Error {
    let kind = kind(&e);
    Error::new(kind, format!("{what}: {e}")).with_source(e)
}

/// The kind of an etcd client error.
fn kind(e: &EtcdError) -> ErrorKind {
    use tonic::Code;
    match e {
        EtcdError::InvalidArgs(_) | EtcdError::InvalidUri(_) => ErrorKind::InvalidInput,
        EtcdError::IoError(_) | EtcdError::TransportError(_) => ErrorKind::Unavailable,
        EtcdError::GRpcStatus(status) => match status.code() {
            // The client's own deadline (`Timeout expired`) and the
            // server's; a request cancelled by its connection's end is
            // an outage.
            Code::DeadlineExceeded => ErrorKind::Timeout,
            Code::Cancelled if status.message().contains("Timeout") => ErrorKind::Timeout,
            Code::Unauthenticated | Code::PermissionDenied => ErrorKind::Unauthorized,
            // etcd answers a wrong password with InvalidArgument.
            Code::InvalidArgument
                if status.message().contains("authentication failed")
                    || status.message().contains("user name is empty") =>
            {
                ErrorKind::Unauthorized
            }
            Code::InvalidArgument | Code::OutOfRange => ErrorKind::InvalidInput,
            Code::Unimplemented => ErrorKind::Unsupported,
            // No leader, a leader change, too many requests, a member
            // stopping: what a wait rides out.
            _ => ErrorKind::Unavailable,
        },
        EtcdError::LeaseKeepAliveError(_) | EtcdError::WatchError(_) => ErrorKind::Unavailable,
        _ => ErrorKind::Protocol,
    }
}

/// Whether `e` says the lease it names does not exist (expired or
/// revoked).
pub(crate) fn lease_not_found(e: &EtcdError) -> bool {
    match e {
        EtcdError::GRpcStatus(status) => status.message().contains("lease not found"),
        EtcdError::LeaseKeepAliveError(m) => m.contains("lease not found"),
        _ => false,
    }
}
