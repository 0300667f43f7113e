//! The etcd store's settings: plain values, which every other room may
//! read.

use std::time::Duration;

/// The TTL of the lease a client keeps in etcd by default: how long a
/// crashed holder's locks stay taken.
pub const DEFAULT_ETCD_LEASE_TTL: Duration = Duration::from_secs(10);

/// The key prefix under which lockguard keeps its keys by default.
pub const DEFAULT_PREFIX: &str = "/lockguard/";

/// The etcd store's own settings (the client's are a
/// [`Builder`](lockguard_core::Builder)'s); see
/// [`EtcdBuilder`](crate::EtcdBuilder) for each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EtcdOptions {
    /// The TTL of the client's lease (default 10 s).
    pub(crate) lease_ttl: Duration,
    /// The prefix of every key (default [`DEFAULT_PREFIX`]).
    pub(crate) prefix: String,
    /// User and password, when the cluster has authentication on.
    pub(crate) user: Option<(String, String)>,
    /// Whether to speak TLS to the members.
    pub(crate) tls: bool,
    /// A CA certificate (PEM) to trust beside the web's roots.
    pub(crate) tls_root: Option<Vec<u8>>,
    /// The client's certificate and key (PEM), for members that ask for
    /// one.
    pub(crate) tls_client: Option<(Vec<u8>, Vec<u8>)>,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        Self {
            lease_ttl: DEFAULT_ETCD_LEASE_TTL,
            prefix: DEFAULT_PREFIX.to_owned(),
            user: None,
            tls: false,
            tls_root: None,
            tls_client: None,
        }
    }
}
