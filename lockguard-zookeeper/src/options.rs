//! The ZooKeeper store's settings: plain values, which every other room
//! may read.

use std::time::Duration;

/// The session timeout a ZooKeeper client asks for by default.
pub const DEFAULT_ZOOKEEPER_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// The persistent node under which lockguard keeps its nodes by default.
pub const DEFAULT_ROOT: &str = "/lockguard";

/// The ZooKeeper store's own settings (the client's are a
/// [`Builder`](lockguard_core::Builder)'s); see
/// [`ZooKeeperBuilder`](crate::ZooKeeperBuilder) for each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ZooKeeperOptions {
    /// The session timeout asked of the ensemble (default 10 s).
    pub(crate) session_timeout: Duration,
    /// The persistent node lockguard keeps its nodes under (default
    /// [`DEFAULT_ROOT`]).
    pub(crate) root: String,
}

impl Default for ZooKeeperOptions {
    fn default() -> Self {
        Self {
            session_timeout: DEFAULT_ZOOKEEPER_SESSION_TIMEOUT,
            root: DEFAULT_ROOT.to_owned(),
        }
    }
}
