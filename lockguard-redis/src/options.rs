//! The Redis store's settings: plain values the builder fills in, read by
//! every other module.

use std::time::Duration;

/// How to reach Redis and how long to wait for it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RedisOptions {
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// Replicas that must confirm each lock write (`WAIT`), and for how
    /// long to wait for them.
    pub(crate) replicas: Option<(u32, Duration)>,
}

/// Certificates for `rediss://` connections: a CA to trust instead of the
/// system's, and a client certificate for servers that ask for one.
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    pub(crate) root_cert: Option<Vec<u8>>,
    pub(crate) client: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Certificates and keys are never printed.
        f.debug_struct("TlsSettings")
            .field("root_cert", &self.root_cert.is_some())
            .field("client", &self.client.is_some())
            .finish()
    }
}

impl TlsSettings {
    pub(crate) fn is_set(&self) -> bool {
        self.root_cert.is_some() || self.client.is_some()
    }

    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    pub(crate) fn certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self.client.clone().map(|(client_cert, client_key)| {
                redis::ClientTlsConfig {
                    client_cert,
                    client_key,
                }
            }),
            root_cert: self.root_cert.clone(),
        }
    }
}
