//! The client handle: one store, a key prefix, defaults, and the machinery
//! shared by every primitive it hands out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::backend::Store;
use crate::backend::memory::MemoryStore;
use crate::backend::redis::{RedisOptions, RedisStore, Subscriber};
use crate::backend::redlock::RedlockStore;
use crate::clock::{Clock, MonotonicClock};
use crate::counter::Counter;
use crate::error::{Error, ErrorKind, Result};
use crate::fence::FencedResource;
use crate::guard::Held;
use crate::lock::Lock;
use crate::notify::Waiters;
use crate::rate_limit::{Quota, RateLimiter};
use crate::semaphore::Semaphore;
use crate::token::Token;

/// The longest lease a lock accepts: one day. Longer leases are almost
/// always a unit mistake (seconds passed as milliseconds) and would keep a
/// crashed holder's lock for too long.
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);

/// The shortest lease a lock accepts. The holder stops counting on a lease
/// 1% + 2 ms before it ends, so shorter leases would leave no time to use.
pub const MIN_LEASE: Duration = Duration::from_millis(10);

/// The shortest lease the watchdog renews: it renews every third of the
/// lease, and shorter leases would flood the store with renewals.
pub const MIN_WATCHDOG_LEASE: Duration = Duration::from_millis(100);

/// The default lease of a lock renewed by the watchdog.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// How long [`Lock::acquire`] waits by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// The default longest pause between two attempts of a waiting acquire
/// when no notification arrives.
pub const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_millis(500);

/// How long a queued waiter that stops answering keeps its place by default:
/// a waiter whose process died or whose connection is gone delays the queue
/// by at most this.
pub const DEFAULT_WAITER_TIMEOUT: Duration = Duration::from_secs(1);

/// The shortest waiter timeout a client accepts.
pub const MIN_WAITER_TIMEOUT: Duration = Duration::from_millis(50);

/// The default timeout for connecting to Redis.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// The default timeout for one Redis request.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// The default prefix of every key lockguard writes.
pub const DEFAULT_PREFIX: &str = "lockguard:";

/// Defaults a client applies to the primitives it hands out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Defaults {
    pub(crate) lease: Duration,
    pub(crate) wait: Duration,
    pub(crate) retry_interval: Duration,
    pub(crate) waiter_timeout: Duration,
}

/// Who holds a lock, for reentrant acquisition: the tokio task, or, for a
/// future that is not a task (the one `block_on` runs, as under
/// `#[tokio::main]`), the thread that polls it, which is always the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Task(tokio::task::Id),
    Thread(std::thread::ThreadId),
}

impl Owner {
    fn current() -> Self {
        match tokio::task::try_id() {
            Some(id) => Self::Task(id),
            None => Self::Thread(std::thread::current().id()),
        }
    }
}

/// An owner holding a lock, for reentrant acquisition.
#[derive(Debug)]
struct Holding {
    owner: Owner,
    held: Weak<Held>,
    /// Identifies the acquisition (the `Held` may have moved out of its
    /// `Arc` by the time it is forgotten).
    token: Token,
}

/// The process-wide default client, for code (such as the attribute
/// macros) that is not handed one.
static DEFAULT: std::sync::RwLock<Option<Client>> = std::sync::RwLock::new(None);

#[derive(Debug)]
struct Inner {
    store: Arc<Store>,
    prefix: String,
    defaults: Defaults,
    waiters: Arc<Waiters>,
    holdings: Mutex<HashMap<String, Holding>>,
}

/// A handle on one store (Redis or in memory) that hands out locks and the
/// other primitives.
///
/// Cloning is cheap and clones share everything: the connection, the
/// pub/sub subscriber, and the record of which task holds which lock.
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
    inner: Arc<Inner>,
}

impl Client {
    /// A client on a fresh in-memory store, with default settings.
    ///
    /// Only clones of the returned handle share its locks.
    pub fn memory() -> Self {
        let b = Builder::default();
        let store = Store::Memory(MemoryStore::new(b.clock.clone()));
        b.build(store, Vec::new())
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
    /// through the peer, even in the same task. Two peers behave like two
    /// processes, which is what tests of the in-memory store need.
    pub fn peer(&self) -> Self {
        Self {
            inner: Arc::new(Inner {
                store: self.inner.store.clone(),
                prefix: self.inner.prefix.clone(),
                defaults: self.inner.defaults,
                waiters: self.inner.waiters.clone(),
                holdings: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// A lock on `name`. Nothing is sent until it is acquired.
    ///
    /// An invalid name (empty, longer than [`MAX_KEY_LEN`](crate::MAX_KEY_LEN)
    /// bytes, control characters) is reported by `acquire`.
    pub fn lock(&self, name: &str) -> Lock {
        Lock::new(self.clone(), name)
    }

    /// A semaphore admitting at most `permits` holders of `name` at once.
    ///
    /// A zero or oversized permit count is reported by `acquire`.
    pub fn semaphore(&self, name: &str, permits: u32) -> Semaphore {
        Semaphore::new(self.clone(), name, permits)
    }

    /// An atomic counter.
    pub fn counter(&self, name: &str) -> Counter {
        Counter::new(self.clone(), name)
    }

    /// A rate limiter named `name` (GCRA unless another algorithm is
    /// chosen), enforcing `quota` per key.
    ///
    /// A name that is empty or holds braces (which would choose the Redis
    /// Cluster slot of every key) is reported by each check.
    pub fn rate_limiter(&self, name: &str, quota: Quota) -> RateLimiter {
        RateLimiter::new(self.clone(), name, quota)
    }

    /// A value that only accepts writes with fresh fencing tokens.
    pub fn fenced(&self, name: &str) -> FencedResource {
        FencedResource::new(self.clone(), name)
    }

    /// Whether two handles are clones of one client (sharing its store and
    /// reentrancy records).
    pub fn same_client(&self, other: &Client) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The prefix of every key this client writes.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// `"memory"` or `"redis"`.
    pub fn backend_name(&self) -> &'static str {
        self.inner.store.name()
    }

    pub(crate) fn store(&self) -> &Store {
        &self.inner.store
    }

    pub(crate) fn defaults(&self) -> Defaults {
        self.inner.defaults
    }

    pub(crate) fn waiters(&self) -> &Arc<Waiters> {
        &self.inner.waiters
    }

    fn holdings(&self) -> std::sync::MutexGuard<'_, HashMap<String, Holding>> {
        self.inner
            .holdings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The lock on `key` the current task holds, if any and still valid.
    pub(crate) fn held_by_current_task(&self, key: &str) -> Option<Arc<Held>> {
        let held = {
            let holdings = self.holdings();
            let holding = holdings.get(key)?;
            if holding.owner != Owner::current() {
                return None;
            }
            holding.held.clone()
        };
        // Upgraded outside the lock: if the guard went meanwhile, this may
        // be the last reference, and dropping it releases the lock, which
        // takes the same lock to forget the holding.
        held.upgrade().filter(|h| h.is_held())
    }

    #[cfg(test)]
    pub(crate) fn holdings_len(&self) -> usize {
        self.holdings().len()
    }

    pub(crate) fn record_holding(&self, key: &str, held: &Arc<Held>, token: Token) {
        self.holdings().insert(
            key.to_owned(),
            Holding {
                owner: Owner::current(),
                held: Arc::downgrade(held),
                token,
            },
        );
    }

    pub(crate) fn forget_holding(&self, key: &str, token: &Token) {
        let mut holdings = self.holdings();
        if holdings.get(key).is_some_and(|h| h.token == *token) {
            holdings.remove(key);
        }
    }
}

/// Settings for a [`Client`] client.
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
            },
            node_timeout: crate::backend::redlock::DEFAULT_NODE_TIMEOUT,
            clock: Arc::new(MonotonicClock::new()),
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
        crate::lock::validate_lease(d.lease, true)?;
        if d.retry_interval.is_zero() {
            return Err(Error::invalid("retry interval must be greater than zero"));
        }
        if d.waiter_timeout < MIN_WAITER_TIMEOUT || d.waiter_timeout > MAX_LEASE {
            return Err(Error::invalid(format!(
                "waiter timeout must be between {MIN_WAITER_TIMEOUT:?} and {MAX_LEASE:?}, got {:?}",
                d.waiter_timeout
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

    fn build(self, store: Store, subscribers: Vec<Subscriber>) -> Client {
        // The channel this client's queued waiters are told on that a lock
        // was handed to them: one per client, unique.
        let channel = format!("{}waiters:{}", self.prefix, Token::random().as_str());
        let waiters = Arc::new(Waiters::new(channel, subscribers));
        if let Store::Memory(m) = &store {
            let waiters = Arc::downgrade(&waiters);
            m.set_notify(move |grant| {
                if let Some(w) = waiters.upgrade() {
                    w.grant(grant);
                }
            });
        }
        Client {
            inner: Arc::new(Inner {
                store: Arc::new(store),
                prefix: self.prefix,
                defaults: self.defaults,
                waiters,
                holdings: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// A client on a fresh in-memory store.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for settings that cannot work (a zero
    /// retry interval, a default lease below [`MIN_WATCHDOG_LEASE`]).
    pub fn memory(self) -> Result<Client> {
        self.validate()?;
        let store = Store::Memory(MemoryStore::new(self.clock.clone()));
        Ok(self.build(store, Vec::new()))
    }

    /// Connects to the Redis at `url`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a malformed URL or settings that
    /// cannot work, [`ErrorKind::Unavailable`] when Redis cannot be reached.
    pub async fn connect(self, url: &str) -> Result<Client> {
        self.validate()?;
        let client = crate::backend::redis::client_for(url)?;
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
        let client = crate::backend::redis::client_from_info(info)?;
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
        let subscriber = Subscriber::new(&client, self.opts)?;
        let store = RedisStore::connect(client, self.opts).await?;
        Ok(self.build(Store::Redis(store), vec![subscriber]))
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
    pub async fn connect_cluster<I, S>(self, urls: I) -> Result<Client>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.validate()?;
        let urls: Vec<String> = urls.into_iter().map(|u| u.as_ref().to_owned()).collect();
        let client = crate::backend::redis::cluster_client_for(&urls, self.opts, None)?;
        let store = RedisStore::connect_cluster(client, self.opts).await?;
        let subscriber =
            Subscriber::for_target(crate::backend::redis::SubTarget::Cluster(urls), self.opts);
        Ok(self.build(Store::Redis(store), vec![subscriber]))
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
            connect_timeout: self.opts.connect_timeout,
            response_timeout: self.node_timeout,
        };
        let mut clients = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for url in &urls {
            let client = crate::backend::redis::client_for(url)?;
            let addr = client.get_connection_info().addr().to_string();
            if !seen.insert(addr.clone()) {
                return Err(Error::invalid(format!(
                    "redlock node {addr} is listed twice; every node must be independent"
                )));
            }
            clients.push(client);
        }
        let mut set = tokio::task::JoinSet::new();
        for (i, client) in clients.iter().enumerate() {
            let client = client.clone();
            set.spawn(async move { (i, RedisStore::connect(client, opts).await) });
        }
        let mut nodes: Vec<Option<RedisStore>> = (0..clients.len()).map(|_| None).collect();
        let mut errors = Vec::new();
        while let Some(joined) = set.join_next().await {
            let Ok((i, result)) = joined else { continue };
            match result {
                Ok(store) => nodes[i] = Some(store),
                Err(e) => errors.push(e),
            }
        }
        let quorum = clients.len() / 2 + 1;
        let up = nodes.iter().filter(|n| n.is_some()).count();
        if up < quorum {
            let first = errors.first().map(ToString::to_string).unwrap_or_default();
            return Err(Error::new(
                ErrorKind::Unavailable,
                format!(
                    "redlock: only {up} of {} nodes reachable, a quorum needs {quorum} (first error: {first})",
                    clients.len()
                ),
            ));
        }
        let mut stores = Vec::new();
        let mut subscribers = Vec::new();
        for (node, client) in nodes.into_iter().zip(&clients) {
            let store = match node {
                Some(store) => store,
                None => {
                    tracing::warn!(node = %client.get_connection_info().addr(), "redlock node unreachable at start-up; will reconnect");
                    RedisStore::lazy(client.clone(), opts)?
                }
            };
            stores.push(store);
            subscribers.push(Subscriber::new(client, opts)?);
        }
        tracing::debug!(nodes = stores.len(), quorum, "connected to redlock nodes");
        Ok(self.build(Store::Redlock(RedlockStore::new(stores)), subscribers))
    }

    /// Connects to `REDIS_URL` when set (and not empty), or builds an
    /// in-memory client and says so in a log line.
    ///
    /// # Errors
    ///
    /// As [`Builder::connect`] when `REDIS_URL` is set.
    pub async fn from_env(self) -> Result<Client> {
        match std::env::var("REDIS_URL") {
            Ok(url) if !url.trim().is_empty() => self.connect(url.trim()).await,
            Ok(_) | Err(std::env::VarError::NotPresent) => {
                tracing::info!("REDIS_URL is not set; using the in-memory store");
                self.memory()
            }
            Err(e @ std::env::VarError::NotUnicode(_)) => Err(Error::new(
                ErrorKind::InvalidInput,
                "REDIS_URL is not valid unicode",
            )
            .with_source(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A task asks for a lock it took and moved away, whose lease is over,
    /// while the guard is dropped on another thread: the reference the
    /// reentrancy check takes may be the last one, and dropping it must not
    /// take the holdings lock it is still under (a deadlock before).
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
                let dropper = std::thread::spawn(move || drop(guard));
                while !dropper.is_finished() {
                    assert!(lg.held_by_current_task(&guard_key(&lg)).is_none());
                }
                dropper.join().unwrap();
                // Let the background release run.
                rt.block_on(tokio::task::yield_now());
            }
            done.send(()).unwrap();
        });
        finished
            .recv_timeout(Duration::from_secs(60))
            .expect("the reentrancy check deadlocked against a concurrent drop");
    }

    fn guard_key(lg: &Client) -> String {
        crate::key::LockKeys::new(lg.prefix(), "race").lock
    }
}
