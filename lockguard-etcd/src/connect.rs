//! The constructors of etcd clients: [`ClientExt`] and [`BuilderExt`] add
//! them to lockguard-core's `Client` and `Builder`.

use std::future::Future;
use std::time::Duration;

use etcd_client::ConnectOptions;
use lockguard_core::store::Store;
use lockguard_core::store::net;
use lockguard_core::{Builder, Client, Error, MAX_LEASE, Result};

use crate::options::EtcdOptions;
use crate::session::Session;
use crate::store::EtcdStore;

/// `Client::connect_etcd(endpoints)`: a client with default settings on
/// the etcd cluster at `endpoints`.
pub trait ClientExt: Sized {
    /// Connects to the etcd cluster at `endpoints`
    /// (`"etcd1:2379,etcd2:2379,etcd3:2379"`), with default settings; see
    /// [`EtcdBuilder::connect_etcd`].
    ///
    /// # Errors
    ///
    /// As [`EtcdBuilder::connect_etcd`].
    fn connect_etcd(endpoints: &str) -> impl Future<Output = Result<Self>> + Send;
}

impl ClientExt for Client {
    async fn connect_etcd(endpoints: &str) -> Result<Self> {
        EtcdBuilder::new(Client::builder())
            .connect_etcd(endpoints)
            .await
    }
}

/// The etcd constructors on lockguard-core's [`Builder`]: each starts an
/// [`EtcdBuilder`] from the builder's settings.
pub trait BuilderExt {
    /// See [`EtcdBuilder::etcd_lease_ttl`].
    fn etcd_lease_ttl(self, ttl: Duration) -> EtcdBuilder;

    /// See [`EtcdBuilder::etcd_prefix`].
    fn etcd_prefix(self, prefix: impl Into<String>) -> EtcdBuilder;

    /// See [`EtcdBuilder::etcd_user`].
    fn etcd_user(self, user: impl Into<String>, password: impl Into<String>) -> EtcdBuilder;

    /// See [`EtcdBuilder::connect_etcd`].
    ///
    /// # Errors
    ///
    /// As [`EtcdBuilder::connect_etcd`].
    fn connect_etcd(self, endpoints: &str) -> impl Future<Output = Result<Client>> + Send;
}

impl BuilderExt for Builder {
    fn etcd_lease_ttl(self, ttl: Duration) -> EtcdBuilder {
        EtcdBuilder::new(self).etcd_lease_ttl(ttl)
    }

    fn etcd_prefix(self, prefix: impl Into<String>) -> EtcdBuilder {
        EtcdBuilder::new(self).etcd_prefix(prefix)
    }

    fn etcd_user(self, user: impl Into<String>, password: impl Into<String>) -> EtcdBuilder {
        EtcdBuilder::new(self).etcd_user(user, password)
    }

    fn connect_etcd(self, endpoints: &str) -> impl Future<Output = Result<Client>> + Send {
        EtcdBuilder::new(self).connect_etcd(endpoints)
    }
}

/// A client's settings ([`Builder`]) and the etcd store's own.
#[derive(Debug)]
pub struct EtcdBuilder {
    builder: Builder,
    options: EtcdOptions,
}

impl EtcdBuilder {
    /// The store's settings at their defaults, with the client's settings
    /// of `builder`.
    pub fn new(builder: Builder) -> Self {
        Self {
            builder,
            options: EtcdOptions::default(),
        }
    }

    /// The TTL of the lease the client keeps in etcd (default 10 s, whole
    /// seconds, rounded up; etcd grants at least its minimum, 1.5 election
    /// timeouts). Every key of the client's holds and queue places is
    /// attached to it: a holder whose process dies frees its locks when
    /// etcd expires it. A live holder's lease counts for at most two
    /// thirds of it (a watchdog lease is shortened to that, a longer fixed
    /// lease is refused).
    pub fn etcd_lease_ttl(mut self, ttl: Duration) -> Self {
        self.options.lease_ttl = ttl;
        self
    }

    /// The prefix of every key lockguard writes (default
    /// [`DEFAULT_PREFIX`](crate::DEFAULT_PREFIX), `"/lockguard/"`).
    /// Clients that share locks must use the same prefix (and the same
    /// client prefix).
    pub fn etcd_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.options.prefix = prefix.into();
        self
    }

    /// Authenticates as `user` with `password`, on a cluster with
    /// authentication on.
    pub fn etcd_user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.options.user = Some((user.into(), password.into()));
        self
    }

    /// Speaks TLS to the members (`https://`), trusting the web's root
    /// certificates (feature `tls-rustls`).
    #[cfg(feature = "tls-rustls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls-rustls")))]
    pub fn etcd_tls(mut self) -> Self {
        self.options.tls = true;
        self
    }

    /// Speaks TLS to the members, trusting the CA certificate `pem` (PEM)
    /// beside the web's roots: for members whose certificates a private CA
    /// signed (feature `tls-rustls`).
    #[cfg(feature = "tls-rustls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls-rustls")))]
    pub fn etcd_tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.options.tls = true;
        self.options.tls_root = Some(pem.into());
        self
    }

    /// Speaks TLS to the members and shows them this client certificate
    /// and its private key (both PEM), for members that authenticate
    /// clients by certificate (`--client-cert-auth`; feature
    /// `tls-rustls`).
    #[cfg(feature = "tls-rustls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls-rustls")))]
    pub fn etcd_tls_client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.options.tls = true;
        self.options.tls_client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Connects to the etcd cluster at `endpoints`, a list of members
    /// (`"etcd1:2379,etcd2:2379,etcd3:2379"`), and grants the client's
    /// lease. The client moves to another member when one fails; when its
    /// lease ran out while the cluster could not be reached, it grants a
    /// new one by itself (the locks held under the old one are lost, and
    /// their guards say so).
    ///
    /// etcd offers locks, semaphores, read-write locks, multi-key locks in
    /// one transaction, counters and marks (their expiry, and rate
    /// limiters, on the deciding client's clock) and fenced values.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](lockguard_core::ErrorKind::InvalidInput)
    /// for a malformed list of members, prefix or settings;
    /// [`ErrorKind::Unavailable`](lockguard_core::ErrorKind::Unavailable)
    /// when no member grants a lease within the connect timeout;
    /// [`ErrorKind::Unauthorized`](lockguard_core::ErrorKind::Unauthorized)
    /// for credentials the cluster refuses.
    pub async fn connect_etcd(self, endpoints: &str) -> Result<Client> {
        self.validate()?;
        let members = members(endpoints, self.options.tls)?;
        let settings = self.builder.connection_settings();
        let mut options = ConnectOptions::new()
            .with_connect_timeout(settings.connect_timeout)
            .with_keep_alive(Duration::from_secs(5), settings.response_timeout)
            .with_require_leader(true);
        if let Some((user, password)) = &self.options.user {
            // etcd's tokens expire (5 minutes by default): a client lives
            // longer, and asks for a new one when its own has.
            options = options
                .with_user(user.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        #[cfg(feature = "tls-rustls")]
        if self.options.tls {
            let mut tls = etcd_client::TlsOptions::new().with_enabled_roots();
            if let Some(pem) = &self.options.tls_root {
                tls = tls.ca_certificate(etcd_client::Certificate::from_pem(pem));
            }
            if let Some((cert, key)) = &self.options.tls_client {
                tls = tls.identity(etcd_client::Identity::from_pem(cert, key));
            }
            options = options.with_tls(tls);
        }
        let setup = settings.connect_timeout.max(settings.response_timeout);
        let client = crate::store::bounded(
            setup,
            "connecting to etcd",
            etcd_client::Client::connect(&members, Some(options)),
        )
        .await
        .map_err(net::unreachable)?;
        let session = Session::open(client, self.options.lease_ttl, settings.response_timeout)
            .await
            .map_err(net::unreachable)?;
        // etcd grants a lease to anyone: a read under the prefix says now,
        // rather than at the first lock, that the credentials (or their
        // absence) are refused.
        crate::store::bounded(
            settings.response_timeout,
            "reading under lockguard's prefix",
            session.client().get(
                self.options.prefix.as_str(),
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_count_only(),
                ),
            ),
        )
        .await
        .map_err(net::unreachable)?;
        let store = EtcdStore::new(session, self.options.prefix.clone());
        tracing::debug!(endpoints, "connected to etcd");
        self.builder
            .build(Store::new(store, Vec::new()).at(&members.join(",")))
    }

    fn validate(&self) -> Result<()> {
        self.builder.validate()?;
        let prefix = &self.options.prefix;
        if prefix.is_empty() || prefix.chars().any(char::is_control) {
            return Err(Error::invalid(format!(
                "etcd prefix must be a non-empty key prefix such as \"/lockguard/\", got {prefix:?}"
            )));
        }
        let t = self.options.lease_ttl;
        if t < Duration::from_secs(1) || t > MAX_LEASE {
            return Err(Error::invalid(format!(
                "etcd lease TTL must be between 1s and {MAX_LEASE:?}, got {t:?}"
            )));
        }
        Ok(())
    }
}

/// The members' URLs, `http://host:port` (`https://` with TLS).
fn members(endpoints: &str, tls: bool) -> Result<Vec<String>> {
    let scheme = if tls { "https" } else { "http" };
    let mut out = Vec::new();
    for member in endpoints.split(',').map(str::trim) {
        let ok = member.rsplit_once(':').is_some_and(|(host, port)| {
            lockguard_core::store::url::port_ok(host, port) && !host.contains(char::is_whitespace)
        });
        if !ok {
            return Err(Error::invalid(format!(
                "etcd member {member:?} is not host:port (list them as \"etcd1:2379,etcd2:2379\")"
            )));
        }
        out.push(format!("{scheme}://{member}"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_settings_are_invalid_input() {
        for prefix in ["", "\n"] {
            let err = Client::builder()
                .etcd_prefix(prefix)
                .connect_etcd("127.0.0.1:1")
                .await
                .unwrap_err();
            assert!(err.is_invalid_input(), "{prefix:?}: {err}");
        }
        for ttl in [Duration::ZERO, Duration::from_millis(500), MAX_LEASE * 2] {
            let err = Client::builder()
                .etcd_lease_ttl(ttl)
                .connect_etcd("127.0.0.1:1")
                .await
                .unwrap_err();
            assert!(err.is_invalid_input(), "{ttl:?}: {err}");
        }
        for endpoints in ["", "  ", "127.0.0.1", "127.0.0.1:notaport", "a:1,,b:2"] {
            let err = Client::connect_etcd(endpoints).await.unwrap_err();
            assert!(err.is_invalid_input(), "{endpoints:?}: {err}");
        }
    }

    #[tokio::test]
    async fn an_unreachable_cluster_is_unavailable() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = Client::builder()
            .connect_timeout(Duration::from_millis(500))
            .connect_etcd(&format!("127.0.0.1:{port}"))
            .await
            .unwrap_err();
        assert!(err.is_unavailable(), "{err}");
    }
}
