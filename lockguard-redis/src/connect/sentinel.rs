//! The constructors of clients of a Redis master found through Redis
//! Sentinel.

use lockguard_core::{Client, Error, Result};

use super::RedisBuilder;
use crate::sentinel::SentinelTarget;

impl RedisBuilder {
    /// Connects to the master that the sentinels at `sentinel_urls` name for
    /// `service` (the name in their `sentinel monitor` line), and follows it
    /// across failovers: when a request fails in a way a failover explains
    /// (the connection lost, `READONLY` from a master turned replica), the
    /// sentinels are asked again and the client switches to the master they
    /// name, the pub/sub connection too, without being rebuilt. The request
    /// that failed reports its error; waiters check at once on the new
    /// master.
    ///
    /// The master is reached without credentials and on database 0; see
    /// [`RedisBuilder::connect_sentinel_with`] for those.
    ///
    /// **TLS**: with `rediss://` sentinel URLs (all of them, or none), the
    /// master the sentinels name is reached over TLS too, and both are
    /// checked against the system's roots, or the builder's
    /// [`tls_root_certificate`](RedisBuilder::tls_root_certificate) (and
    /// [`tls_client_certificate`](RedisBuilder::tls_client_certificate)),
    /// which need the `tls-rustls` feature here: redis-rs takes
    /// certificates for the master only with rustls.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](lockguard_core::ErrorKind::InvalidInput) for no or
    /// malformed URLs, URLs that mix TLS and plain sentinels, or an empty
    /// service name;
    /// [`ErrorKind::Unsupported`](lockguard_core::ErrorKind::Unsupported) for
    /// TLS certificates without the `tls-rustls` feature;
    /// [`ErrorKind::Unavailable`](lockguard_core::ErrorKind::Unavailable) when no
    /// sentinel names a reachable master.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> lockguard_core::Result<()> {
    /// use lockguard_redis::BuilderExt as _;
    ///
    /// let lg = lockguard_core::Client::builder()
    ///     .connect_sentinel(
    ///         ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    ///         "mymaster",
    ///     )
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub async fn connect_sentinel<I, S>(self, sentinel_urls: I, service: &str) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let urls: Vec<String> = sentinel_urls
            .into_iter()
            .map(|u| u.as_ref().to_owned())
            .collect();
        let sentinels = crate::client::sentinel_infos(&urls)?;
        self.connect_sentinel_with(sentinels, service, redis::RedisConnectionInfo::default())
            .await
    }

    /// Like [`RedisBuilder::connect_sentinel`], with the sentinels' connection
    /// settings as the application has them, and `master`'s database, user
    /// and password for the master.
    ///
    /// # Errors
    ///
    /// As [`RedisBuilder::connect_sentinel`].
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub async fn connect_sentinel_with(
        self,
        sentinels: Vec<redis::ConnectionInfo>,
        service: &str,
        master: redis::RedisConnectionInfo,
    ) -> Result<Client> {
        self.validate()?;
        if sentinels.is_empty() {
            return Err(Error::invalid(
                "redis sentinel needs at least one sentinel url",
            ));
        }
        if service.trim().is_empty() {
            return Err(Error::invalid(
                "redis sentinel needs the master's service name",
            ));
        }
        let target = SentinelTarget {
            sentinels,
            service: service.to_owned(),
            master,
            tls: self.redis.tls.clone(),
        };
        let store = crate::store::connect_sentinel(target, self.redis_options()).await?;
        tracing::debug!(service, "connected to the redis master through sentinel");
        self.builder.build(store)
    }
}
