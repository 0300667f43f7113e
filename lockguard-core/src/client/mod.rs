//! The client handle: one store, a key prefix, defaults, and the machinery
//! shared by every primitive it hands out.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::memory::MemoryStore;
use crate::backend::redis::{RedisOptions, TlsSettings};
use crate::clock::{Clock, MonotonicClock};
use crate::counter::Counter;
use crate::engine::{
    DEFAULT_RETRY_INTERVAL, DEFAULT_WAIT, DEFAULT_WAITER_TIMEOUT, Defaults, Engine,
    MIN_WAITER_TIMEOUT,
};
use crate::error::{Error, ErrorKind, Result};
use crate::fenced::FencedResource;
use crate::key::DEFAULT_PREFIX;
use crate::lease::{DEFAULT_LEASE, Lease, MAX_LEASE};
use crate::limiter::RateLimiter;
use crate::lock::Lock;
use crate::rate_limit::Quota;
use crate::semaphore::Semaphore;
use crate::store::Store;
use crate::token::Token;

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sentinel")]
mod sentinel;
#[cfg(feature = "zookeeper")]
mod zookeeper;
#[cfg(feature = "zookeeper")]
pub use zookeeper::DEFAULT_ZOOKEEPER_SESSION_TIMEOUT;

/// The default timeout for connecting to Redis.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The default timeout for one Redis request.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// The process-wide default client, for code (such as the attribute
/// macros) that is not handed one.
static DEFAULT: std::sync::RwLock<Option<Client>> = std::sync::RwLock::new(None);

/// A handle on one store (Redis or in memory) that hands out locks and the
/// other primitives.
///
/// Cloning is cheap and clones share everything: the connections, the
/// pub/sub subscriber, and the identity that reentrancy goes by (see
/// [`LockGuard::scope`](crate::LockGuard::scope)).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockguard_core::Error> {
/// use lockguard_core::Client;
///
/// // Redis when REDIS_URL is set, memory otherwise.
/// let lg = Client::from_env().await?;
/// let guard = lg.lock("report:daily").acquire().await?;
/// // ... exclusive work ...
/// assert!(guard.release().await?);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    engine: Arc<Engine>,
}

impl Client {
    /// A client on a fresh in-memory store, with default settings.
    ///
    /// Only clones of the returned handle share its locks.
    pub fn memory() -> Self {
        let b = Builder::default();
        let store = Store::new(Arc::new(MemoryStore::new(b.clock.clone())), Vec::new());
        b.finish(store)
    }

    /// Connects to the Redis at `url` (`redis://host:port/db`,
    /// `rediss://...`, `redis+unix:///path`), with default settings.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a malformed URL,
    /// [`ErrorKind::Unavailable`] when Redis cannot be reached within the
    /// connect timeout.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder().connect(url).await
    }

    /// Connects to a Redis Cluster through its seed nodes, with default
    /// settings. See [`Builder::connect_cluster`].
    ///
    /// # Errors
    ///
    /// As [`Builder::connect_cluster`].
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub async fn connect_cluster<I, S>(urls: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder().connect_cluster(urls).await
    }

    /// Connects to N independent Redis masters for Redlock, with default
    /// settings. See [`Builder::redlock`].
    ///
    /// # Errors
    ///
    /// As [`Builder::redlock`].
    pub async fn redlock<I, S>(urls: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Self::builder().redlock(urls).await
    }

    /// Connects to `REDIS_URL` when it is set, or falls back to the in-memory
    /// store (and says so in an `info` log line) when it is not.
    ///
    /// # Errors
    ///
    /// As [`Client::connect`] when `REDIS_URL` is set.
    pub async fn from_env() -> Result<Self> {
        Self::builder().from_env().await
    }

    /// Makes this client the process-wide default, replacing any earlier
    /// one. Call it at start-up; the attribute macros use it when they are
    /// not given a `client`.
    pub fn install_default(&self) {
        *DEFAULT.write().unwrap_or_else(|p| p.into_inner()) = Some(self.clone());
    }

    /// The process-wide default client.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NoDefaultClient`] when none was installed with
    /// [`Client::install_default`].
    pub fn default_client() -> Result<Self> {
        DEFAULT
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::NoDefaultClient,
                    "no default lockguard client installed; call Client::install_default at start-up",
                )
            })
    }

    /// A builder for a client with non-default settings.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// A handle on the same store and connections that does not share
    /// reentrancy with this one: a lock held through `self` is not reentrant
    /// through the peer, even inside the holder's scope. Two peers behave
    /// like two processes, which is what tests of the in-memory store need.
    pub fn peer(&self) -> Self {
        Self {
            engine: Arc::new(self.engine.peer()),
        }
    }

    /// A lock on `name`. Nothing is sent until it is acquired.
    ///
    /// An invalid name (empty, longer than [`MAX_KEY_LEN`](crate::MAX_KEY_LEN)
    /// bytes, control characters) is reported by `acquire`.
    pub fn lock(&self, name: &str) -> Lock {
        Lock::new(self.engine.clone(), name)
    }

    /// A semaphore admitting at most `permits` holders of `name` at once.
    ///
    /// A zero or oversized permit count is reported by `acquire`.
    pub fn semaphore(&self, name: &str, permits: u32) -> Semaphore {
        Semaphore::new(self.engine.clone(), name, permits)
    }

    /// An atomic counter.
    pub fn counter(&self, name: &str) -> Counter {
        Counter::new(self.engine.clone(), name)
    }

    /// A rate limiter named `name` (GCRA unless another algorithm is
    /// chosen), enforcing `quota` per key.
    ///
    /// A name that is empty or holds braces (which would choose the Redis
    /// Cluster slot of every key) is reported by each check.
    pub fn rate_limiter(&self, name: &str, quota: Quota) -> RateLimiter {
        RateLimiter::new(self.engine.clone(), name, quota)
    }

    /// A value that only accepts writes with fresh fencing tokens.
    pub fn fenced(&self, name: &str) -> FencedResource {
        FencedResource::new(self.engine.clone(), name)
    }

    /// Whether two handles are clones of one client (sharing its store and
    /// the identity reentrancy goes by).
    pub fn same_client(&self, other: &Client) -> bool {
        Arc::ptr_eq(&self.engine, &other.engine)
    }

    /// The prefix of every key this client writes.
    pub fn prefix(&self) -> &str {
        &self.engine.prefix
    }

    /// The store's name: `"memory"`, `"redis"`, `"redis-cluster"` or
    /// `"redlock"`.
    pub fn backend_name(&self) -> &'static str {
        self.engine.store.locks.name()
    }
}

/// Settings for a [`Client`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// let lg = lockguard_core::Client::builder()
///     .prefix("billing:")
///     .default_wait(Duration::from_secs(2))
///     .memory()?;
/// assert_eq!(lg.prefix(), "billing:");
/// # Ok::<(), lockguard_core::Error>(())
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Builder {
    prefix: String,
    defaults: Defaults,
    opts: RedisOptions,
    node_timeout: Duration,
    clock: Arc<dyn Clock>,
    tls: TlsSettings,
    #[cfg(feature = "postgres")]
    postgres_schema: String,
    #[cfg(feature = "zookeeper")]
    zookeeper: zookeeper::ZooKeeperSettings,
}

impl Default for Builder {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_PREFIX.to_owned(),
            defaults: Defaults {
                lease: DEFAULT_LEASE,
                wait: DEFAULT_WAIT,
                retry_interval: DEFAULT_RETRY_INTERVAL,
                waiter_timeout: DEFAULT_WAITER_TIMEOUT,
            },
            opts: RedisOptions {
                connect_timeout: DEFAULT_CONNECT_TIMEOUT,
                response_timeout: DEFAULT_RESPONSE_TIMEOUT,
                replicas: None,
            },
            node_timeout: crate::backend::redlock::DEFAULT_NODE_TIMEOUT,
            clock: Arc::new(MonotonicClock::new()),
            tls: TlsSettings::default(),
            #[cfg(feature = "postgres")]
            postgres_schema: crate::backend::postgres::DEFAULT_SCHEMA.to_owned(),
            #[cfg(feature = "zookeeper")]
            zookeeper: zookeeper::ZooKeeperSettings::default(),
        }
    }
}

impl Builder {
    /// The prefix of every key the client writes (default `"lockguard:"`).
    ///
    /// It may not contain braces: lockguard chooses each key's Redis Cluster
    /// slot with a hash tag of its own, so a script's keys share a slot. A
    /// prefix with braces is refused when the client is built.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The lease of locks renewed by the watchdog (default 30 s).
    pub fn default_lease(mut self, lease: Duration) -> Self {
        self.defaults.lease = lease;
        self
    }

    /// How long `acquire` waits for a busy lock (default 10 s).
    pub fn default_wait(mut self, wait: Duration) -> Self {
        self.defaults.wait = wait;
        self
    }

    /// The longest pause between attempts when no notification arrives
    /// (default 500 ms; queued waiters refresh their place more often when
    /// the waiter timeout asks for it). Waiters also retry when the
    /// holder's lease ends, whichever comes first.
    pub fn retry_interval(mut self, interval: Duration) -> Self {
        self.defaults.retry_interval = interval;
        self
    }

    /// How long a queued waiter that stops answering keeps its place in a
    /// lock's or semaphore's wait queue (default 1 s, at least 50 ms).
    ///
    /// Waiters refresh their place every third of this while they wait; a
    /// waiter whose process died or whose connection is gone is skipped once
    /// it has been silent this long, so it delays the queue by at most this,
    /// never by a lease.
    pub fn waiter_timeout(mut self, timeout: Duration) -> Self {
        self.defaults.waiter_timeout = timeout;
        self
    }

    /// How long connecting to Redis may take (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.opts.connect_timeout = timeout;
        self
    }

    /// How long one Redis request may take (default 2 s).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.opts.response_timeout = timeout;
        self
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
        self.tls.root_cert = Some(pem.into());
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
        self.tls.client = Some((cert_pem.into(), key_pem.into()));
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
    /// back and fails with [`ErrorKind::Unavailable`], and an extension
    /// they did not confirm counts as failed (the watchdog retries; the
    /// guard is lost if none succeeds before the lease ends). It narrows
    /// the window, it does not close it: a replica that confirmed may still
    /// not be the one promoted, and `WAIT` does not make the write durable
    /// on disk. See the [`safety`](crate::safety) page.
    ///
    /// `WAIT` holds this client's connection until the replicas answer, so
    /// a slow or paused replica delays every request of the client by up to
    /// `timeout`: keep it short (tens of milliseconds). It applies to
    /// single-server and Redlock clients; a cluster client refuses it.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.opts.replicas = Some((replicas, timeout));
        self
    }

    /// The clock of the in-memory store's rate limiters and counter
    /// expiry (default: [`MonotonicClock`]). A Redis client ignores it: on
    /// Redis, time comes from the server.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    fn validate(&self) -> Result<()> {
        crate::key::validate_plain("key prefix", &self.prefix)?;
        // Every constructor validates first: the key layout's one-time
        // table is built here, not in the first operation.
        crate::key::prepare();
        let d = &self.defaults;
        Lease::Watchdog(d.lease).validate()?;
        if d.retry_interval.is_zero() {
            return Err(Error::invalid("retry interval must be greater than zero"));
        }
        if d.waiter_timeout < MIN_WAITER_TIMEOUT || d.waiter_timeout > MAX_LEASE {
            return Err(Error::invalid(format!(
                "waiter timeout must be between {MIN_WAITER_TIMEOUT:?} and {MAX_LEASE:?}, got {:?}",
                d.waiter_timeout
            )));
        }
        if let Some((replicas, timeout)) = self.opts.replicas
            && (replicas == 0 || timeout.is_zero() || timeout > MAX_LEASE)
        {
            return Err(Error::invalid(format!(
                "waiting for replicas needs at least one replica and a timeout between zero and {MAX_LEASE:?}, got {replicas} and {timeout:?}"
            )));
        }
        for (what, t) in [
            ("connect timeout", self.opts.connect_timeout),
            ("response timeout", self.opts.response_timeout),
        ] {
            if t.is_zero() || t > MAX_LEASE {
                return Err(Error::invalid(format!(
                    "{what} must be between zero and {MAX_LEASE:?}, got {t:?}"
                )));
            }
        }
        Ok(())
    }

    /// A client on `store`, a store of any crate built on the
    /// [store boundary](crate::store).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for settings that cannot work (a zero
    /// retry interval, a default lease below [`MIN_WATCHDOG_LEASE`](crate::MIN_WATCHDOG_LEASE)).
    pub fn build(self, store: Store) -> Result<Client> {
        self.validate()?;
        Ok(self.finish(store))
    }

    fn finish(self, store: Store) -> Client {
        // The channel this client's queued waiters are told on that a lock
        // was handed to them: one per client, unique.
        let channel = format!("{}waiters:{}", self.prefix, Token::random().as_str());
        Client {
            engine: Arc::new(Engine::new(store, self.prefix, self.defaults, channel)),
        }
    }

    /// A client on a fresh in-memory store.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for settings that cannot work (a zero
    /// retry interval, a default lease below [`MIN_WATCHDOG_LEASE`](crate::MIN_WATCHDOG_LEASE)).
    pub fn memory(self) -> Result<Client> {
        self.validate()?;
        let store = Store::new(Arc::new(MemoryStore::new(self.clock.clone())), Vec::new());
        Ok(self.finish(store))
    }

    /// Connects to the Redis at `url`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a malformed URL or settings that
    /// cannot work, [`ErrorKind::Unavailable`] when Redis cannot be reached.
    pub async fn connect(self, url: &str) -> Result<Client> {
        self.validate()?;
        let client = crate::backend::redis::client_for(url, &self.tls)?;
        let lg = self.connect_redis(client).await?;
        tracing::debug!(url = %crate::backend::redis::redact(url), "connected to redis");
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
    /// As [`Builder::connect`]; a server that refuses the credentials is
    /// [`ErrorKind::Unavailable`] with the server's answer as the source.
    pub async fn connect_with(self, info: redis::ConnectionInfo) -> Result<Client> {
        self.validate()?;
        let client = crate::backend::redis::client_with(info, &self.tls)?;
        self.connect_redis(client).await
    }

    /// Connects with the settings of a `redis::Client` the application
    /// already has; see [`Builder::connect_with`]. lockguard opens its own
    /// connections (a multiplexed one and, once a task waits, a pub/sub
    /// one); the application's client is left as it is.
    ///
    /// # Errors
    ///
    /// As [`Builder::connect_with`].
    pub async fn connect_client(self, client: &redis::Client) -> Result<Client> {
        self.connect_with(client.get_connection_info().clone())
            .await
    }

    async fn connect_redis(self, client: redis::Client) -> Result<Client> {
        let store = crate::backend::redis::connect(client, self.opts).await?;
        Ok(self.finish(store))
    }

    /// Connects to a Redis Cluster through any of `urls` (seed nodes).
    ///
    /// Everything works on a cluster: every script touches keys of one hash
    /// tag, the user's key (escaped), so it runs in one slot whatever the
    /// key holds. Releases are announced with `PUBLISH`, which the cluster
    /// delivers to the one subscriber connection whatever node it is on.
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
        let infos = crate::backend::redis::cluster_infos(&urls)?;
        self.connect_cluster_with(infos).await
    }

    /// Connects to a Redis Cluster through seed nodes whose connection
    /// settings the application already has (`redis::ConnectionInfo`:
    /// address, user, password, TLS), as [`Builder::connect_with`] does for
    /// one server. lockguard builds its own cluster client from them, with
    /// its timeouts, `TCP_NODELAY` and no automatic retries.
    ///
    /// # Errors
    ///
    /// As [`Builder::connect_cluster`].
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub async fn connect_cluster_with<I>(self, nodes: I) -> Result<Client>
    where
        I: IntoIterator<Item = redis::ConnectionInfo>,
    {
        self.validate()?;
        if self.opts.replicas.is_some() {
            return Err(Error::invalid(
                "wait_for_replicas applies to one server or Redlock nodes; a cluster client refuses it",
            ));
        }
        let infos: Vec<redis::ConnectionInfo> = nodes.into_iter().collect();
        let store =
            crate::backend::redis::connect_cluster(infos, self.opts, self.tls.clone()).await?;
        Ok(self.finish(store))
    }

    /// The per-node timeout of a Redlock client (default 50 ms): how long
    /// one node may take to answer before it counts as failed. Keep it far
    /// below the lease; a down or paused minority adds at most this to an
    /// operation.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// Connects to N independent Redis masters (no replication between
    /// them) for Redlock locks and semaphores.
    ///
    /// Every operation needs a quorum of N/2 + 1 nodes; nodes that cannot be
    /// reached at start-up are connected later, as long as a quorum answers
    /// now. Counters, rate limiters and fenced resources are not offered on
    /// a Redlock client ([`ErrorKind::Unsupported`]).
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
        if self.node_timeout.is_zero() || self.node_timeout >= self.defaults.lease {
            return Err(Error::invalid(format!(
                "redlock node timeout must be above zero and below the lease, got {:?}",
                self.node_timeout
            )));
        }
        let opts = RedisOptions {
            response_timeout: self.node_timeout,
            ..self.opts
        };
        let mut clients = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for url in &urls {
            let client = crate::backend::redis::client_for(url, &self.tls)?;
            let addr = client.get_connection_info().addr().to_string();
            if !seen.insert(addr.clone()) {
                return Err(Error::invalid(format!(
                    "redlock node {addr} is listed twice; every node must be independent"
                )));
            }
            clients.push(client);
        }
        let store = crate::backend::redlock::connect(clients, opts).await?;
        Ok(self.finish(store))
    }

    /// Connects to `REDIS_URL` when set (and not empty); else, with the
    /// `postgres` feature, to `DATABASE_URL` when set; else builds an
    /// in-memory client and says so in a log line (its locks are then
    /// process-local).
    ///
    /// # Errors
    ///
    /// As [`Builder::connect`] (or `Builder::connect_postgres`) when a URL
    /// is set.
    pub async fn from_env(self) -> Result<Client> {
        if let Some(url) = env_url("REDIS_URL")? {
            return self.connect(&url).await;
        }
        #[cfg(feature = "postgres")]
        if let Some(url) = env_url("DATABASE_URL")? {
            return self.connect_postgres(&url).await;
        }
        tracing::warn!(
            "REDIS_URL is not set; using the in-memory store: locks and limits hold within this process only"
        );
        self.memory()
    }
}

/// The value of the environment variable `name`, when set and not empty.
fn env_url(name: &str) -> Result<Option<String>> {
    match std::env::var(name) {
        Ok(url) if !url.trim().is_empty() => Ok(Some(url.trim().to_owned())),
        Ok(_) | Err(std::env::VarError::NotPresent) => Ok(None),
        Err(e @ std::env::VarError::NotUnicode(_)) => Err(Error::new(
            ErrorKind::InvalidInput,
            format!("{name} is not valid unicode"),
        )
        .with_source(e)),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{ErrorKind, LockGuard};

    /// Inside the scope of a guard whose lease is over, a task asks for the
    /// lock while the guard is dropped on another thread: the reference the
    /// reentrancy check takes may be the last one, and dropping it must not
    /// deadlock (it did when reentrancy was a registry behind a mutex).
    /// (Issue 11, item 3.)
    #[test]
    fn reentrancy_check_racing_the_last_drop_does_not_deadlock() {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .unwrap();
            let lg = Client::memory();
            for _ in 0..5_000 {
                let guard = rt
                    .block_on(lg.lock("race").lease(Duration::from_secs(30)).acquire())
                    .unwrap();
                // Lost: the reentrancy check upgrades and then rejects it.
                guard.mark_lost_for_test();
                // The guard moves into its own scope, to be dropped from it.
                let slot = std::sync::Mutex::new(None);
                let body = async {
                    let guard: LockGuard = slot.lock().unwrap().take().unwrap();
                    let dropper = std::thread::spawn(move || drop(guard));
                    while !dropper.is_finished() {
                        let again = lg.lock("race").try_acquire().await;
                        assert!(again.is_err() || !again.unwrap().is_reentrant());
                    }
                    dropper.join().unwrap();
                };
                let scope = guard.scope(body);
                *slot.lock().unwrap() = Some(guard);
                rt.block_on(scope);
                // Let the background releases run.
                rt.block_on(tokio::task::yield_now());
            }
            done.send(()).unwrap();
        });
        finished
            .recv_timeout(Duration::from_secs(60))
            .expect("the reentrancy check deadlocked against a concurrent drop");
    }

    #[test]
    fn waiter_timeouts_are_validated() {
        for bad in [Duration::ZERO, Duration::from_millis(49), MAX_LEASE * 2] {
            let err = Client::builder().waiter_timeout(bad).memory().unwrap_err();
            assert!(err.is_invalid_input(), "{bad:?}: {err}");
        }
        assert!(
            Client::builder()
                .waiter_timeout(crate::MIN_WAITER_TIMEOUT)
                .memory()
                .is_ok()
        );
    }

    /// A watch sees the guard's token and lease, does not keep the lock,
    /// and reports the end of the acquisition: `lost()` completes and
    /// `is_held()` turns false when the guard is released or dropped.
    #[tokio::test]
    async fn a_watch_follows_the_guard_without_holding_the_lock() {
        let lg = Client::memory();
        let guard = lg.lock("watched").acquire().await.unwrap();
        let watch = guard.watch();
        assert_eq!(watch.fencing_token(), guard.fencing_token());
        assert_eq!(watch.name(), "watched");
        assert!(watch.is_held() && watch.valid_for() > Duration::ZERO);
        let lost = watch.lost();
        assert!(guard.release().await.unwrap());
        let err = tokio::time::timeout(Duration::from_secs(5), lost)
            .await
            .expect("lost() did not complete on release");
        assert_eq!(err.kind(), ErrorKind::LeaseLost);
        assert!(!watch.is_held() && watch.valid_for() == Duration::ZERO);
        // The watch kept nothing: the key is free.
        let again = lg.lock("watched").try_acquire().await.unwrap();
        let dropped = again.watch();
        drop(again);
        tokio::time::timeout(Duration::from_secs(5), dropped.lost())
            .await
            .expect("lost() did not complete on drop");
        assert!(!dropped.is_held());
    }

    /// `release()` of the last guard releases at once, even while another
    /// reference to the acquisition is alive (a reentrancy check of the
    /// owning task holds one for a moment): the key is free when it
    /// returns, and it reports that the lock was held. (Issue 11, item 13:
    /// it returned `is_held()` and left the release to whoever dropped the
    /// last reference, its result lost.)
    #[tokio::test]
    async fn release_of_the_last_guard_releases_now() {
        let lg = Client::memory();
        let guard = lg
            .lock("now")
            .lease(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap();
        let other_reference = guard.tenancy().clone();
        assert!(guard.release().await.unwrap(), "the lock was held");
        let again = lg.peer().lock("now").try_acquire().await;
        assert!(again.is_ok(), "the key was not released: {again:?}");
        drop(other_reference);
    }

    /// Reentrant guards share the acquisition: giving up a share keeps the
    /// lock, and the last guard's release frees it and reports so.
    #[tokio::test]
    async fn the_last_of_shared_guards_releases() {
        let lg = Client::memory();
        let outer = lg.lock("shared").acquire().await.unwrap();
        let inner = outer.scope(lg.lock("shared").acquire()).await.unwrap();
        assert!(inner.is_reentrant());
        assert!(
            outer.release().await.unwrap(),
            "still held by the inner guard"
        );
        assert!(lg.peer().lock("shared").try_acquire().await.is_err());
        assert!(inner.release().await.unwrap());
        assert!(lg.peer().lock("shared").try_acquire().await.is_ok());
    }
}
