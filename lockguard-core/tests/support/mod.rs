//! Shared test support: a store to run against, real Redis or memory.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lockguard_core::{Client, ManualClock};
#[cfg(feature = "postgres")]
use lockguard_postgres::BuilderExt as _;
use lockguard_redis::{BuilderExt as _, ClientExt as _};
use lockguard_testing::MariaDbServer;
#[cfg(feature = "postgres")]
use lockguard_testing::PostgresServer;
#[cfg(feature = "cluster")]
use lockguard_testing::RedisCluster;
use lockguard_testing::RedisServer;
use lockguard_testing::ZooKeeperServer;
use lockguard_zookeeper::BuilderExt as _;
use redis::AsyncCommands;

/// One store under test: the in-memory store, or a real `redis-server`
/// started for this test and killed when the test ends.
pub struct Env {
    pub server: Option<RedisServer>,
    /// The nodes of a Redlock store (with `server` holding shared test data).
    pub nodes: Vec<RedisServer>,
    /// A Redis Cluster under test (with `server` holding shared test data).
    #[cfg(feature = "cluster")]
    pub cluster: Option<RedisCluster>,
    /// A PostgreSQL store under test: the server shared by the test binary
    /// and a schema of this test's own.
    #[cfg(feature = "postgres")]
    pub postgres: Option<(&'static PostgresServer, String)>,
    /// A ZooKeeper store under test: a server of this test's own.
    pub zookeeper: Option<ZooKeeperServer>,
    /// A MySQL store under test: the MariaDB server shared by the test
    /// binary and a table prefix of this test's own.
    pub mysql: Option<(&'static MariaDbServer, String)>,
    /// The in-memory store's clock (unused on the real stores, where time
    /// is the server's).
    pub clock: ManualClock,
    memory: Option<Client>,
    /// Where the tests' own data goes when the store under test has no
    /// counters (ZooKeeper).
    data: Option<Client>,
    shared: Arc<AtomicU64>,
}

impl Env {
    pub fn memory() -> Self {
        let clock = ManualClock::new();
        Self {
            server: None,
            nodes: Vec::new(),
            #[cfg(feature = "cluster")]
            cluster: None,
            #[cfg(feature = "postgres")]
            postgres: None,
            zookeeper: None,
            mysql: None,
            // Every handle of the memory store is a peer of this one, with
            // its settings: a long waiter timeout, so that the tests of
            // wake-ups see the notification and not a refresh.
            memory: Some(
                Client::builder()
                    .clock(clock.clone())
                    .waiter_timeout(Duration::from_secs(30))
                    .memory()
                    .expect("valid settings"),
            ),
            data: None,
            clock,
            shared: Arc::new(AtomicU64::new(0)),
        }
    }

    pub fn redis() -> Self {
        Self {
            server: Some(RedisServer::start()),
            ..Self::bare()
        }
    }

    /// No store yet: for the constructors above.
    fn bare() -> Self {
        Self {
            server: None,
            nodes: Vec::new(),
            #[cfg(feature = "cluster")]
            cluster: None,
            #[cfg(feature = "postgres")]
            postgres: None,
            zookeeper: None,
            mysql: None,
            clock: ManualClock::new(),
            memory: None,
            data: None,
            shared: Arc::new(AtomicU64::new(0)),
        }
    }

    /// PostgreSQL: the server shared by this test binary, with a schema of
    /// this test's own (created by the first client), so tests running
    /// side by side share nothing.
    #[cfg(feature = "postgres")]
    pub fn postgres() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let schema = format!(
            "t{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        Self {
            server: None,
            nodes: Vec::new(),
            #[cfg(feature = "cluster")]
            cluster: None,
            postgres: Some((PostgresServer::shared(), schema)),
            zookeeper: None,
            mysql: None,
            clock: ManualClock::new(),
            memory: None,
            data: None,
            shared: Arc::new(AtomicU64::new(0)),
        }
    }

    /// MySQL (on MariaDB): the server shared by this test binary, with a
    /// table prefix of this test's own, so tests running side by side share
    /// nothing.
    pub fn mysql() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let prefix = format!(
            "t{}_{}_",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        Self {
            mysql: Some((MariaDbServer::shared(), prefix)),
            ..Self::bare()
        }
    }

    /// ZooKeeper: a standalone server of this test's own.
    pub fn zookeeper() -> Self {
        Self {
            zookeeper: Some(ZooKeeperServer::start()),
            ..Self::bare()
        }
    }

    /// Five independent Redis masters for Redlock, plus one more server for
    /// the tests' own data.
    pub fn redlock() -> Self {
        Self {
            nodes: (0..5).map(|_| RedisServer::start()).collect(),
            ..Self::redis()
        }
    }

    /// A three-master Redis Cluster, plus one more server for the tests'
    /// own racy data.
    #[cfg(feature = "cluster")]
    pub fn cluster() -> Self {
        Self {
            cluster: Some(RedisCluster::start(3)),
            ..Self::redis()
        }
    }

    fn cluster_urls(&self) -> Option<Vec<String>> {
        #[cfg(feature = "cluster")]
        if let Some(c) = &self.cluster {
            return Some(c.urls());
        }
        None
    }

    pub fn node_urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Whether the store keeps its own time (Redis, PostgreSQL), so tests
    /// wait in real time instead of moving the memory store's clock.
    pub fn real_time(&self) -> bool {
        self.memory.is_none()
    }

    /// A client handle with the given settings, as if in another process.
    /// On Redis each call opens separate connections; on memory each call
    /// is a peer of one handle on the one store (the settings of that
    /// handle apply).
    pub async fn client_with(&self, b: lockguard_core::Builder) -> Client {
        if let Some(server) = &self.zookeeper {
            // A session timeout above every lease the tests fix.
            return b
                .zookeeper_session_timeout(Duration::from_secs(60))
                .connect_zookeeper(&server.hosts())
                .await
                .expect("connect to zookeeper");
        }
        if let Some((server, prefix)) = &self.mysql {
            let store = lockguard_mysql::MySqlOptions::new()
                .table_prefix(prefix.as_str())
                .connect(&server.url())
                .await
                .expect("connect to mysql");
            return b.build(store).expect("valid settings");
        }
        #[cfg(feature = "postgres")]
        if let Some((server, schema)) = &self.postgres {
            return b
                .postgres_schema(schema.as_str())
                .connect_postgres(&server.url())
                .await
                .expect("connect to postgres");
        }
        if let Some(urls) = self.cluster_urls() {
            #[cfg(feature = "cluster")]
            return b
                .connect_cluster(urls)
                .await
                .expect("connect to the cluster");
            #[cfg(not(feature = "cluster"))]
            unreachable!("{urls:?}");
        }
        match (&self.server, &self.memory) {
            // A per-node timeout with room for a loaded two-core test
            // machine running a dozen servers (the default, 50 ms, is for
            // production); still far below every lease the tests use.
            (Some(_), _) if !self.nodes.is_empty() => b
                .node_timeout(Duration::from_millis(250))
                .redlock(self.node_urls())
                .await
                .expect("connect to redlock nodes"),
            (Some(server), _) => b.connect(&server.url()).await.expect("connect"),
            (None, Some(memory)) => memory.peer(),
            _ => unreachable!(),
        }
    }

    /// A client for the tests' own data (counters, fenced resources): the
    /// store under test, or for Redlock the extra single server.
    pub async fn data_client(&self) -> Client {
        if let Some(data) = &self.data {
            return data.clone();
        }
        match &self.server {
            Some(server) if !self.nodes.is_empty() => {
                Client::connect(&server.url()).await.expect("connect")
            }
            _ => self.client().await,
        }
    }

    pub async fn client(&self) -> Client {
        self.client_with(Client::builder()).await
    }

    /// A client whose holders' crashes free their locks within `lease`: on
    /// ZooKeeper, where a crashed holder's lock goes with its session, one
    /// whose session timeout is `lease`.
    pub async fn client_for_lease(&self, lease: Duration) -> Client {
        if let Some(server) = &self.zookeeper {
            return Client::builder()
                .zookeeper_session_timeout(lease)
                .connect_zookeeper(&server.hosts())
                .await
                .expect("connect to zookeeper");
        }
        let _ = lease;
        self.client().await
    }

    /// Whether a queue's size is read through inspection (PostgreSQL,
    /// ZooKeeper) rather than from the store's keys (Redis).
    pub fn queues_by_inspection(&self) -> bool {
        if self.mysql.is_some() {
            return true;
        }
        #[cfg(feature = "postgres")]
        if self.postgres.is_some() {
            return true;
        }
        if self.zookeeper.is_some() {
            return true;
        }
        false
    }

    /// Whether the store keeps each holder's lease (and so can say how long
    /// it has left): all but ZooKeeper, where a holder's client keeps it
    /// and the store knows only that the holder's session lives.
    pub fn store_keeps_leases(&self) -> bool {
        if self.zookeeper.is_some() {
            return false;
        }
        true
    }

    /// A value read and written in two separate steps, to detect two holders.
    pub async fn shared_value(&self) -> SharedValue {
        match &self.server {
            Some(server) => SharedValue::Redis(server.connection().await),
            None => SharedValue::Memory(self.shared.clone()),
        }
    }
}

#[derive(Clone)]
pub enum SharedValue {
    Redis(redis::aio::MultiplexedConnection),
    Memory(Arc<AtomicU64>),
}

impl SharedValue {
    /// A non-atomic increment: read, yield, write back.
    pub async fn racy_increment(&mut self) {
        match self {
            Self::Redis(conn) => {
                let v: Option<u64> = conn.get("racy").await.unwrap();
                let _: () = conn.set("racy", v.unwrap_or(0) + 1).await.unwrap();
            }
            Self::Memory(v) => {
                let read = v.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                v.store(read + 1, Ordering::SeqCst);
            }
        }
    }

    pub async fn get(&mut self) -> u64 {
        match self {
            Self::Redis(conn) => {
                let v: Option<u64> = conn.get("racy").await.unwrap();
                v.unwrap_or(0)
            }
            Self::Memory(v) => v.load(Ordering::SeqCst),
        }
    }
}

/// Polls `f` every 5 ms until it returns true or `within` passes.
pub async fn eventually<F, Fut>(within: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if f().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether `lg` takes the lock `name`, and gives it back, within `within`
/// (trying every 5 ms); every refusal until then must be one `expected`
/// accepts.
pub async fn takes_lock_within(
    lg: &Client,
    name: &str,
    within: Duration,
    expected: impl Fn(&lockguard_core::Error) -> bool,
) -> bool {
    let expected = &expected;
    eventually(within, || async move {
        match lg.lock(name).try_acquire().await {
            Ok(g) => g.release().await.unwrap(),
            Err(e) => {
                assert!(expected(&e), "{e}");
                false
            }
        }
    })
    .await
}

/// Runs each listed test against memory, Redis and (with the `postgres`
/// feature) PostgreSQL; with `mysql:` against MySQL (on MariaDB) alone;
/// with `redlock:` also
/// against five Redlock nodes, with `cluster:` also against a three-master
/// Redis Cluster (with the `cluster` feature), with `all:` against all four.
///
/// This suite is what a new store must pass: give it a constructor in
/// [`Env`] and an arm here, and every conformance test runs on it.
#[macro_export]
macro_rules! conformance {
    (all: $($name:ident),* $(,)?) => {
        $crate::conformance!(redlock: $($name),*);
        $crate::conformance!(@cluster $($name),*);
    };
    (cluster: $($name:ident),* $(,)?) => {
        $crate::conformance!($($name),*);
        $crate::conformance!(@cluster $($name),*);
    };
    (zookeeper: $($name:ident),* $(,)?) => {
        mod zookeeper {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Env::zookeeper()).await;
                }
            )*
        }
    };
    (mysql: $($name:ident),* $(,)?) => {
        mod mysql {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Env::mysql()).await;
                }
            )*
        }
    };
    (@cluster $($name:ident),* $(,)?) => {
        #[cfg(feature = "cluster")]
        mod cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Env::cluster()).await;
                }
            )*
        }
    };
    (redlock: $($name:ident),* $(,)?) => {
        $crate::conformance!($($name),*);
        mod redlock {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Env::redlock()).await;
                }
            )*
        }
    };
    ($($name:ident),* $(,)?) => {
        #[cfg(feature = "postgres")]
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Env::postgres()).await;
                }
            )*
        }
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Env::memory()).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::support::Env::redis()).await;
                }
            )*
        }
    };
}

/// Checks that a waiter of `waiter` (a client whose waiter timeout and retry
/// interval are long, 30 s and 20 s) is woken by the handoff when `holder`
/// releases the lock `name`: it must get the lock well before its first
/// refresh (10 s in) could claim it, so the notification reached it over
/// the waiter client's pub/sub connection.
pub async fn a_waiter_is_woken_by_the_handoff(holder: &Client, waiter: Client, name: &str) {
    let held = holder
        .lock(name)
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let owned = name.to_owned();
    let waiting = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let g = waiter
            .lock(&owned)
            .wait(Duration::from_secs(25))
            .acquire()
            .await
            .unwrap();
        let waited = started.elapsed();
        g.release().await.unwrap();
        waited
    });
    let queued = eventually(Duration::from_secs(10), || async {
        holder.lock(name).inspect().await.unwrap().waiters == 1
    })
    .await;
    assert!(queued, "the waiter never queued");
    assert!(held.release().await.unwrap());
    let waited = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the waiter was not woken")
        .unwrap();
    assert!(
        waited < Duration::from_secs(5),
        "woken by its refresh, not the handoff: {waited:?}"
    );
}

/// This test binary run again as one of its ignored tests, `test` (its
/// path without the crate's name), with `env` set so that it acts as a
/// client process; its standard output is read line by line. Killed and
/// reaped on drop, whatever way the test ends.
pub struct ChildProcess {
    child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl ChildProcess {
    pub fn spawn(test: &str, env: (&str, &str)) -> Self {
        use std::io::BufRead;
        let mut child =
            std::process::Command::new(std::env::current_exe().expect("the test binary"))
                .args(["--exact", test, "--ignored", "--nocapture", "--quiet"])
                .env(env.0, env.1)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("spawn the child process");
        let lines = std::io::BufReader::new(child.stdout.take().expect("piped")).lines();
        Self { child, lines }
    }

    /// The child's next line that starts with `word`.
    pub fn expect(&mut self, word: &str) -> String {
        for line in self.lines.by_ref() {
            let line = line.expect("the child's output");
            if line.starts_with(word) {
                return line;
            }
        }
        panic!("the child ended without saying {word:?}");
    }

    /// SIGKILLs the child and checks it was still running.
    pub fn kill(&mut self) {
        use std::os::unix::process::ExitStatusExt;
        self.child.kill().expect("SIGKILL the child");
        let status = self.child.wait().expect("reap the child");
        assert_eq!(
            status.signal(),
            Some(9),
            "the child ended before it was killed: {status}"
        );
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
