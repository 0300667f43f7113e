//! The constructors of Redis clients: [`ClientExt`] and [`BuilderExt`] add
//! them to lockguard-core's `Client` and `Builder`; [`RedisBuilder`] holds
//! the Redis store's own settings.

use std::future::Future;
use std::time::Duration;

#[cfg(doc)]
use lockguard_core::ErrorKind;
use lockguard_core::{Builder, Client, Error, MAX_LEASE, Result};

use crate::options::{RedisOptions, TlsSettings};

#[cfg(feature = "sentinel")]
mod sentinel;

/// A builder's Redis settings.
#[derive(Debug, Clone)]
struct RedisSettings {
    replicas: Option<(u32, Duration)>,
    node_timeout: Duration,
    tls: TlsSettings,
}

impl Default for RedisSettings {
    fn default() -> Self {
        Self {
            replicas: None,
            node_timeout: crate::redlock::DEFAULT_NODE_TIMEOUT,
            tls: TlsSettings::default(),
        }
    }
}

/// `Client::connect_redis(url)` and the other Redis constructors with
/// default settings. (The facade's `Client::connect(url)` picks the store
/// from the URL's scheme, and comes here for Redis URLs.)
pub trait ClientExt: Sized {
    /// Connects to the Redis at `url` (`redis://host:port/db`,
    /// `rediss://...`, `redis+unix:///path`), with default settings.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a malformed URL,
    /// [`ErrorKind::Unavailable`] when Redis cannot be reached within the
    /// connect timeout.
    fn connect_redis(url: &str) -> impl Future<Output = Result<Self>> + Send;

    /// Connects to a Redis Cluster through its seed nodes, with default
    /// settings. See [`RedisBuilder::connect_cluster`].
    ///
    /// # Errors
    ///
    /// As [`RedisBuilder::connect_cluster`].
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    fn connect_cluster<I, S>(urls: I) -> impl Future<Output = Result<Self>> + Send
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>;

    /// Connects to N independent Redis masters for Redlock, with default
    /// settings. See [`RedisBuilder::redlock`].
    ///
    /// # Errors
    ///
    /// As [`RedisBuilder::redlock`].
    fn redlock<I, S>(urls: I) -> impl Future<Output = Result<Self>> + Send
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>;
}

/// The URLs as owned strings, so a future need not hold the caller's
/// iterator.
fn owned<I, S>(urls: I) -> Vec<String>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    urls.into_iter().map(|u| u.as_ref().to_owned()).collect()
}

impl ClientExt for Client {
    fn connect_redis(url: &str) -> impl Future<Output = Result<Self>> + Send {
        RedisBuilder::new(Client::builder()).connect(url)
    }

    #[cfg(feature = "cluster")]
    fn connect_cluster<I, S>(urls: I) -> impl Future<Output = Result<Self>> + Send
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        RedisBuilder::new(Client::builder()).connect_cluster(owned(urls))
    }

    fn redlock<I, S>(urls: I) -> impl Future<Output = Result<Self>> + Send
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        RedisBuilder::new(Client::builder()).redlock(owned(urls))
    }
}

/// The Redis constructors and settings on lockguard-core's [`Builder`]: each
/// starts a [`RedisBuilder`] from the builder's settings. See
/// [`RedisBuilder`] for each.
#[allow(missing_docs)]
pub trait BuilderExt {
    fn connect_redis(self, url: &str) -> impl Future<Output = Result<Client>> + Send;
    fn connect_with(
        self,
        info: redis::ConnectionInfo,
    ) -> impl Future<Output = Result<Client>> + Send;
    fn connect_client(self, client: &redis::Client) -> impl Future<Output = Result<Client>> + Send;
    fn connect_manager(
        self,
        manager: redis::aio::ConnectionManager,
        client: &redis::Client,
    ) -> impl Future<Output = Result<Client>> + Send;
    #[cfg(feature = "cluster")]
    fn connect_cluster<I, S>(self, urls: I) -> impl Future<Output = Result<Client>> + Send
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>;
    #[cfg(feature = "cluster")]
    fn connect_cluster_with<I>(self, nodes: I) -> impl Future<Output = Result<Client>> + Send
    where
        I: IntoIterator<Item = redis::ConnectionInfo>;
    #[cfg(feature = "cluster")]
    fn connect_cluster_connection<I>(
        self,
        connection: redis::cluster_async::ClusterConnection,
        nodes: I,
    ) -> impl Future<Output = Result<Client>> + Send
    where
        I: IntoIterator<Item = redis::ConnectionInfo>;
    #[cfg(feature = "sentinel")]
    fn connect_sentinel<I, S>(
        self,
        sentinel_urls: I,
        service: &str,
    ) -> impl Future<Output = Result<Client>> + Send
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>;
    #[cfg(feature = "sentinel")]
    fn connect_sentinel_with(
        self,
        sentinels: Vec<redis::ConnectionInfo>,
        service: &str,
        master: redis::RedisConnectionInfo,
    ) -> impl Future<Output = Result<Client>> + Send;
    fn redlock<I, S>(self, urls: I) -> impl Future<Output = Result<Client>> + Send
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>;
    fn node_timeout(self, timeout: Duration) -> RedisBuilder;
    fn wait_for_replicas(self, replicas: u32, timeout: Duration) -> RedisBuilder;
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    fn tls_root_certificate(self, pem: impl Into<Vec<u8>>) -> RedisBuilder;
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    fn tls_client_certificate(
        self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> RedisBuilder;
}

impl BuilderExt for Builder {
    fn connect_redis(self, url: &str) -> impl Future<Output = Result<Client>> + Send {
        RedisBuilder::new(self).connect(url)
    }

    fn connect_with(
        self,
        info: redis::ConnectionInfo,
    ) -> impl Future<Output = Result<Client>> + Send {
        RedisBuilder::new(self).connect_with(info)
    }

    fn connect_client(self, client: &redis::Client) -> impl Future<Output = Result<Client>> + Send {
        RedisBuilder::new(self).connect_with(client.get_connection_info().clone())
    }

    fn connect_manager(
        self,
        manager: redis::aio::ConnectionManager,
        client: &redis::Client,
    ) -> impl Future<Output = Result<Client>> + Send {
        RedisBuilder::new(self).connect_manager(manager, client)
    }

    #[cfg(feature = "cluster")]
    fn connect_cluster<I, S>(self, urls: I) -> impl Future<Output = Result<Client>> + Send
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        RedisBuilder::new(self).connect_cluster(owned(urls))
    }

    #[cfg(feature = "cluster")]
    fn connect_cluster_with<I>(self, nodes: I) -> impl Future<Output = Result<Client>> + Send
    where
        I: IntoIterator<Item = redis::ConnectionInfo>,
    {
        let nodes: Vec<redis::ConnectionInfo> = nodes.into_iter().collect();
        RedisBuilder::new(self).connect_cluster_with(nodes)
    }

    #[cfg(feature = "cluster")]
    fn connect_cluster_connection<I>(
        self,
        connection: redis::cluster_async::ClusterConnection,
        nodes: I,
    ) -> impl Future<Output = Result<Client>> + Send
    where
        I: IntoIterator<Item = redis::ConnectionInfo>,
    {
        let nodes: Vec<redis::ConnectionInfo> = nodes.into_iter().collect();
        RedisBuilder::new(self).connect_cluster_connection(connection, nodes)
    }

    #[cfg(feature = "sentinel")]
    fn connect_sentinel<I, S>(
        self,
        sentinel_urls: I,
        service: &str,
    ) -> impl Future<Output = Result<Client>> + Send
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        RedisBuilder::new(self).connect_sentinel(owned(sentinel_urls), service)
    }

    #[cfg(feature = "sentinel")]
    fn connect_sentinel_with(
        self,
        sentinels: Vec<redis::ConnectionInfo>,
        service: &str,
        master: redis::RedisConnectionInfo,
    ) -> impl Future<Output = Result<Client>> + Send {
        RedisBuilder::new(self).connect_sentinel_with(sentinels, service, master)
    }

    fn redlock<I, S>(self, urls: I) -> impl Future<Output = Result<Client>> + Send
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        RedisBuilder::new(self).redlock(owned(urls))
    }

    fn node_timeout(self, timeout: Duration) -> RedisBuilder {
        RedisBuilder::new(self).node_timeout(timeout)
    }

    fn wait_for_replicas(self, replicas: u32, timeout: Duration) -> RedisBuilder {
        RedisBuilder::new(self).wait_for_replicas(replicas, timeout)
    }

    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    fn tls_root_certificate(self, pem: impl Into<Vec<u8>>) -> RedisBuilder {
        RedisBuilder::new(self).tls_root_certificate(pem)
    }

    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    fn tls_client_certificate(
        self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> RedisBuilder {
        RedisBuilder::new(self).tls_client_certificate(cert_pem, key_pem)
    }
}

/// A client's settings ([`Builder`]) and the Redis store's own: TLS
/// certificates, replica acknowledgements, Redlock's per-node timeout.
#[derive(Debug)]
#[must_use]
pub struct RedisBuilder {
    builder: Builder,
    redis: RedisSettings,
}

impl RedisBuilder {
    /// The store's settings at their defaults, with the client's settings
    /// of `builder`.
    pub fn new(builder: Builder) -> Self {
        Self {
            builder,
            redis: RedisSettings::default(),
        }
    }

    /// Checks the client's and the store's settings, and builds the key
    /// layout's one-time table (so no operation waits for it).
    fn validate(&self) -> Result<()> {
        self.builder.validate()?;
        if let Some((replicas, timeout)) = self.redis.replicas
            && (replicas == 0 || timeout.is_zero() || timeout > MAX_LEASE)
        {
            return Err(Error::invalid(format!(
                "waiting for replicas needs at least one replica and a timeout between zero and {MAX_LEASE:?}, got {replicas} and {timeout:?}"
            )));
        }
        // `WAIT` is a request like any other: the connection's response
        // timeout would cut a longer one short, as an answer that never
        // came, while the server still holds the connection in it.
        let response = self.builder.connection_settings().response_timeout;
        if let Some((_, timeout)) = self.redis.replicas
            && timeout > response / 2
        {
            return Err(Error::invalid(format!(
                "waiting for replicas for {timeout:?} needs a response timeout of at least twice that (it bounds every request, WAIT included), got {response:?}"
            )));
        }
        crate::layout::prepare();
        Ok(())
    }

    /// [`validate`](Self::validate), for a cluster client, which refuses
    /// replica acknowledgements.
    #[cfg(feature = "cluster")]
    fn validate_for_cluster(&self) -> Result<()> {
        self.validate()?;
        if self.redis.replicas.is_some() {
            return Err(Error::invalid(
                "wait_for_replicas applies to one server or Redlock nodes; a cluster client refuses it",
            ));
        }
        Ok(())
    }

    /// The options of the Redis store's connections.
    pub(crate) fn redis_options(&self) -> RedisOptions {
        let c = self.builder.connection_settings();
        RedisOptions {
            connect_timeout: c.connect_timeout,
            response_timeout: c.response_timeout,
            replicas: self.redis.replicas,
        }
    }

    /// A CA certificate (PEM) to trust for `rediss://` servers instead of
    /// the system's roots: for a private CA, as managed Redis services and
    /// self-run TLS set-ups use. It applies to every node of a cluster or a
    /// Redlock client too.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), lockguard_core::Error> {
    /// use lockguard_redis::BuilderExt as _;
    ///
    /// let ca = std::fs::read("/etc/redis/ca.crt").expect("the CA file");
    /// let lg = lockguard_core::Client::builder()
    ///     .tls_root_certificate(ca)
    ///     .connect("rediss://redis.internal:6380")
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    #[cfg_attr(
        docsrs,
        doc(cfg(any(feature = "tls-rustls", feature = "tls-native-tls")))
    )]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.redis.tls.root_cert = Some(pem.into());
        self
    }

    /// A client certificate and its private key (both PEM) for `rediss://`
    /// servers that authenticate clients (`tls-auth-clients yes`).
    #[cfg(any(feature = "tls-rustls", feature = "tls-native-tls"))]
    #[cfg_attr(
        docsrs,
        doc(cfg(any(feature = "tls-rustls", feature = "tls-native-tls")))
    )]
    pub fn tls_client_certificate(
        mut self,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.redis.tls.client = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Makes every lock and semaphore write (acquire and extend) wait until
    /// `replicas` replicas of the Redis master have it (`WAIT`), for at
    /// most `timeout`, as Redisson does. Off by default.
    ///
    /// Redis replicates asynchronously: a master that fails over right
    /// after granting a lock may be replaced by a replica that never saw
    /// it, and a second holder is then granted the same lock. With this
    /// set, an acquisition the replicas did not confirm in time is given
    /// back and fails with [`ErrorKind::Unavailable`], an extension they
    /// did not confirm counts as failed (the watchdog retries; the guard is
    /// lost if none succeeds before the lease ends), and a lock handed over
    /// from the queue reaches its waiter only once the waiter's extension
    /// of it was confirmed (one more round trip and `WAIT` per handoff;
    /// until then it waits on). The `WAIT` goes with the write's script, in
    /// one request on one connection: no round trip more, and a connection
    /// lost between the two (a reconnect, a Sentinel failover) fails the
    /// request instead of letting another connection's `WAIT`, which counts
    /// that connection's writes, confirm it. An attempt that finds the lock
    /// busy waits too (for the replicas to have the connection's earlier
    /// writes: at once when they keep up, up to `timeout` when they do
    /// not). It narrows
    /// the window, it does not close it: a replica that confirmed may still
    /// not be the one promoted, and `WAIT` does not make the write durable
    /// on disk. See the [`safety`](lockguard_core::safety) page.
    ///
    /// `WAIT` holds this client's connection until the replicas answer, so
    /// a slow or paused replica delays every request of the client by up to
    /// `timeout`: keep it short (tens of milliseconds). It must be at most
    /// half the client's response timeout (on Redlock, half the node
    /// timeout), which bounds every request, `WAIT` included; a longer one
    /// is refused when the client connects. It applies to
    /// single-server, Sentinel and Redlock clients; a cluster client
    /// refuses it.
    ///
    /// Under Sentinel, run one replica more than `replicas`: after a
    /// failover the old master rejoins as a replica only when the sentinels
    /// reconfigure it, about 10 s later, and until then a group of a master
    /// and `replicas` replicas confirms no lock write.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.redis.replicas = Some((replicas, timeout));
        self
    }

    /// Connects to the Redis at `url`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a malformed URL or settings that
    /// cannot work, [`ErrorKind::Unavailable`] when Redis cannot be reached.
    pub async fn connect(self, url: &str) -> Result<Client> {
        self.validate()?;
        let client = crate::client::client_for(url, &self.redis.tls)?;
        let lg = self.connect_redis(client).await?;
        tracing::debug!(url = %lockguard_core::store::url::redacted(url), "connected to redis");
        Ok(lg)
    }

    /// Connects with connection settings the application already has: a
    /// `redis::ConnectionInfo` carrying its address, database, user,
    /// password, protocol and (with a TLS feature of redis-rs) TLS
    /// settings. `TCP_NODELAY` is turned on: small requests would otherwise
    /// wait tens of milliseconds for Nagle's algorithm.
    ///
    /// # Errors
    ///
    /// As [`RedisBuilder::connect`]; a server that refuses the credentials is
    /// [`ErrorKind::Unavailable`] with the server's answer as the source.
    pub async fn connect_with(self, info: redis::ConnectionInfo) -> Result<Client> {
        self.validate()?;
        let client = crate::client::client_with(info, &self.redis.tls)?;
        self.connect_redis(client).await
    }

    /// Connects with the settings of a `redis::Client` the application
    /// already has; see [`RedisBuilder::connect_with`]. lockguard opens its own
    /// connections (a multiplexed one and, once a task waits, a pub/sub
    /// one); the application's client is left as it is.
    ///
    /// # Errors
    ///
    /// As [`RedisBuilder::connect_with`].
    pub async fn connect_client(self, client: &redis::Client) -> Result<Client> {
        self.connect_with(client.get_connection_info().clone())
            .await
    }

    /// A client whose commands go over the application's own
    /// `ConnectionManager`, so lockguard adds no command connection of its
    /// own: only the pub/sub connection its waiters are woken on, made from
    /// `client` (the client `manager` was made from, for its address and
    /// credentials). The manager's reconnection and response-timeout
    /// settings are the application's; this builder's response timeout
    /// still bounds each of lockguard's requests.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Unsupported`](lockguard_core::ErrorKind::Unsupported)
    /// for a server older than 6.2, and the errors of
    /// [`RedisBuilder::connect_with`] for settings that cannot work.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> lockguard_core::Result<()> {
    /// use lockguard_redis::BuilderExt as _;
    ///
    /// let app = redis::Client::open("redis://127.0.0.1:6379").unwrap();
    /// let manager = app.get_connection_manager().await.unwrap();
    /// let lg = lockguard_core::Client::builder()
    ///     .connect_manager(manager.clone(), &app)
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn connect_manager(
        self,
        manager: redis::aio::ConnectionManager,
        client: &redis::Client,
    ) -> Result<Client> {
        self.validate()?;
        let store = crate::store::connect_manager(manager, client, self.redis_options()).await?;
        self.builder.build(store)
    }

    async fn connect_redis(self, client: redis::Client) -> Result<Client> {
        let store = crate::store::connect(client, self.redis_options()).await?;
        self.builder.build(store)
    }

    /// Connects to a Redis Cluster through any of `urls` (seed nodes).
    ///
    /// Everything works on a cluster: every script touches keys of one hash
    /// tag, the user's key (escaped), so it runs in one slot whatever the
    /// key holds. Releases are announced with `PUBLISH`, which the cluster
    /// delivers to the client's pub/sub cluster connection whatever node it
    /// is on; a waiting client also subscribes on each master, so that a
    /// wake-up reaches it from the key's own node instead of over the
    /// cluster bus (where Redis's links delay a message by 40 ms now and
    /// then).
    ///
    /// Connecting takes two steps, the seed nodes and then every master,
    /// each waiting for its slowest node, so each node may take a third of
    /// the [connect timeout](Builder::connect_timeout): a
    /// master that is paused or cut off (which answers nothing) costs two
    /// thirds of it, and the client connects to the others. Their keys
    /// work meanwhile; the paused master's fail with a timeout.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for no or malformed URLs;
    /// [`ErrorKind::Unavailable`] when the cluster cannot be reached.
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub async fn connect_cluster<I, S>(self, urls: I) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let urls: Vec<String> = urls.into_iter().map(|u| u.as_ref().to_owned()).collect();
        let infos = crate::client::cluster_infos(&urls)?;
        self.connect_cluster_with(infos).await
    }

    /// Connects to a Redis Cluster through seed nodes whose connection
    /// settings the application already has (`redis::ConnectionInfo`:
    /// address, user, password, TLS), as [`RedisBuilder::connect_with`] does for
    /// one server. lockguard builds its own cluster client from them, with
    /// its timeouts, `TCP_NODELAY` and no automatic retries.
    ///
    /// # Errors
    ///
    /// As [`RedisBuilder::connect_cluster`].
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub async fn connect_cluster_with<I>(self, nodes: I) -> Result<Client>
    where
        I: IntoIterator<Item = redis::ConnectionInfo>,
    {
        self.validate_for_cluster()?;
        let infos: Vec<redis::ConnectionInfo> = nodes.into_iter().collect();
        let store =
            crate::store::connect_cluster(infos, self.redis_options(), self.redis.tls.clone())
                .await?;
        self.builder.build(store)
    }

    /// A client whose commands go over the application's own Redis Cluster
    /// connection, so lockguard adds no command connections of its own:
    /// only the pub/sub connection its waiters are woken on, made from
    /// `nodes`, the seed nodes the application's cluster client was made
    /// from (address, user, password, TLS; this builder's certificates
    /// apply to them).
    ///
    /// The connection's routing, reconnection and retry settings are the
    /// application's. **Build its client with `.retries(0)`**: redis-rs
    /// retries a request after a connection error by default, when the
    /// request may already have run, so a counter update could count twice
    /// (lockguard's own cluster clients never retry; each operation reports
    /// its error, and lock operations are safe to repeat by hand).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for no seed nodes or unusable ones,
    /// [`ErrorKind::Unsupported`](lockguard_core::ErrorKind::Unsupported)
    /// for a server older than 6.2.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> lockguard_core::Result<()> {
    /// use redis::IntoConnectionInfo as _;
    /// use lockguard_redis::BuilderExt as _;
    ///
    /// let seeds = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379"];
    /// let app = redis::cluster::ClusterClientBuilder::new(seeds)
    ///     .retries(0)
    ///     .build()
    ///     .unwrap();
    /// let conn = app.get_async_connection().await.unwrap();
    /// let nodes = seeds.iter().map(|u| u.into_connection_info().unwrap());
    /// let lg = lockguard_core::Client::builder()
    ///     .connect_cluster_connection(conn.clone(), nodes)
    ///     .await?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub async fn connect_cluster_connection<I>(
        self,
        connection: redis::cluster_async::ClusterConnection,
        nodes: I,
    ) -> Result<Client>
    where
        I: IntoIterator<Item = redis::ConnectionInfo>,
    {
        self.validate_for_cluster()?;
        let store = crate::store::connect_cluster_connection(
            connection,
            nodes.into_iter().collect(),
            self.redis_options(),
            self.redis.tls.clone(),
        )
        .await?;
        self.builder.build(store)
    }

    /// The per-node timeout of a Redlock client (default 50 ms): how long
    /// one node may take to answer before it counts as failed. Keep it far
    /// below the lease; a down or paused minority adds at most this to an
    /// operation.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.redis.node_timeout = timeout;
        self
    }

    /// Connects to N independent Redis masters (no replication between
    /// them) for Redlock locks and semaphores.
    ///
    /// Every operation needs a quorum of N/2 + 1 nodes; nodes that cannot be
    /// reached at start-up are connected later, as long as a quorum answers
    /// now. Counters, rate limiters and fenced resources are not offered on
    /// a Redlock client ([`ErrorKind::Unsupported`](lockguard_core::ErrorKind::Unsupported)).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for no URLs, a malformed or repeated URL,
    /// or a node timeout that is zero or not below the default lease;
    /// [`ErrorKind::Unavailable`] when fewer than a quorum can be reached.
    pub async fn redlock<I, S>(self, urls: I) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.validate()?;
        let urls: Vec<String> = urls.into_iter().map(|u| u.as_ref().to_owned()).collect();
        if urls.is_empty() {
            return Err(Error::invalid("redlock needs at least one redis url"));
        }
        let node_timeout = self.redis.node_timeout;
        if node_timeout.is_zero() || node_timeout >= self.builder.get_default_lease() {
            return Err(Error::invalid(format!(
                "redlock node timeout must be above zero and below the lease, got {:?}",
                node_timeout
            )));
        }
        // The node timeout bounds every request to a node, WAIT included.
        if let Some((_, wait)) = self.redis.replicas
            && wait > node_timeout / 2
        {
            return Err(Error::invalid(format!(
                "waiting for replicas for {wait:?} on redlock nodes needs a node timeout of at least twice that (it bounds every request to a node, WAIT included), got {node_timeout:?}"
            )));
        }
        let opts = RedisOptions {
            response_timeout: node_timeout,
            ..self.redis_options()
        };
        let mut clients = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for url in &urls {
            let client = crate::client::client_for(url, &self.redis.tls)?;
            let addr = client.get_connection_info().addr().to_string();
            if !seen.insert(addr.clone()) {
                return Err(Error::invalid(format!(
                    "redlock node {addr} is listed twice; every node must be independent"
                )));
            }
            clients.push(client);
        }
        let store = crate::redlock::connect(clients, opts).await?;
        self.builder.build(store)
    }
}
