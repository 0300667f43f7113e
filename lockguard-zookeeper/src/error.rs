//! ZooKeeper's errors as lockguard's: each kind with what it means for the
//! caller.

use lockguard_core::{Error, ErrorKind};
use zookeeper_client as zk;

/// A ZooKeeper error as lockguard's, saying what failed.
pub(crate) fn zk_error(e: zk::Error, what: &str) -> Error {
    let kind = match &e {
        zk::Error::BadArguments(_) | zk::Error::InvalidAcl => ErrorKind::InvalidInput,
        zk::Error::Unimplemented => ErrorKind::Unsupported,
        // The service's credentials or the nodes' ACLs: no retry helps.
        zk::Error::AuthFailed | zk::Error::NoAuth => ErrorKind::Unauthorized,
        zk::Error::UnmarshalError { .. }
        | zk::Error::UnexpectedError(_)
        | zk::Error::UnexpectedErrorCode(_)
        | zk::Error::MarshallingError
        | zk::Error::RuntimeInconsistent => ErrorKind::Protocol,
        _ => ErrorKind::Unavailable,
    };
    Error::new(kind, format!("{what}: {e}")).with_source(e)
}
