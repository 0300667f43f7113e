//! The stores a run drives, how a worker connects to one, and what each
//! offers.

use std::time::Duration;

use lockguard_core::{Client, Result};
use lockguard_mysql::MySqlOptions;
use lockguard_postgres::BuilderExt as _;
use lockguard_redis::BuilderExt as _;
use lockguard_zookeeper::BuilderExt as _;

/// A store kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Redis,
    Redlock,
    Cluster,
    Sentinel,
    Postgres,
    MySql,
    ZooKeeper,
}

/// Every kind, in the order a full run goes through them.
pub(crate) const ALL: [Kind; 7] = [
    Kind::Redis,
    Kind::Redlock,
    Kind::Postgres,
    Kind::MySql,
    Kind::ZooKeeper,
    Kind::Sentinel,
    Kind::Cluster,
];

/// How long one store request may take in the workers: short, so a paused
/// server costs a bounded wait, far above a healthy round trip.
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_millis(1000);

/// The ZooKeeper session timeout of the workers: a lease may be at most two
/// thirds of it, and the longest the workers take is 1 s; a worker paused
/// for 1.3 s keeps its session (its lease is lost all the same).
pub(crate) const ZK_SESSION: Duration = Duration::from_secs(3);

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Redis => "redis",
            Kind::Redlock => "redlock",
            Kind::Cluster => "cluster",
            Kind::Sentinel => "sentinel",
            Kind::Postgres => "postgres",
            Kind::MySql => "mysql",
            Kind::ZooKeeper => "zookeeper",
        }
    }

    pub(crate) fn parse(s: &str) -> Option<Self> {
        ALL.into_iter().find(|k| k.name() == s)
    }

    /// Whether the store offers counters (and fenced values).
    pub(crate) fn has_counters(self) -> bool {
        !matches!(self, Kind::Redlock)
    }

    /// Whether the store offers rate limiters.
    pub(crate) fn has_limiter(self) -> bool {
        !matches!(self, Kind::Redlock | Kind::ZooKeeper)
    }
}

/// Where a worker connects: the store kind and its address in one string
/// (URLs joined by commas for several nodes), plus the key prefix (or
/// PostgreSQL schema) that keeps one run's keys apart from another's.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) kind: Kind,
    pub(crate) addr: String,
    pub(crate) namespace: String,
}

impl Target {
    /// Parses a user's `--target` URL: `redis://`, `rediss://`,
    /// `postgres://` / `postgresql://`, `mysql://`, or
    /// `zookeeper://host:port,...`.
    pub(crate) fn from_url(url: &str, namespace: String) -> std::result::Result<Self, String> {
        let (kind, addr) = if url.starts_with("redis://") || url.starts_with("rediss://") {
            (Kind::Redis, url.to_owned())
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            (Kind::Postgres, url.to_owned())
        } else if url.starts_with("mysql://") {
            (Kind::MySql, url.to_owned())
        } else if let Some(hosts) = url.strip_prefix("zookeeper://") {
            (Kind::ZooKeeper, hosts.trim_end_matches('/').to_owned())
        } else {
            return Err(format!(
                "--target {url:?}: expected redis://, rediss://, postgres://, postgresql://, mysql:// or zookeeper://HOST:PORT,..."
            ));
        };
        Ok(Self {
            kind,
            addr,
            namespace,
        })
    }

    fn urls(&self) -> Vec<&str> {
        self.addr.split(',').collect()
    }

    /// A client of this store made through the public API, as an
    /// application would, with short timeouts.
    pub(crate) async fn connect(&self) -> Result<Client> {
        let b = Client::builder()
            .response_timeout(RESPONSE_TIMEOUT)
            .connect_timeout(RESPONSE_TIMEOUT);
        // PostgreSQL keeps a run apart by schema and MySQL by table prefix
        // (they ignore the key prefix); the others by key prefix.
        let b = b.prefix(format!("{}:", self.namespace));
        match self.kind {
            Kind::Redis => b.connect(&self.addr).await,
            Kind::Redlock => {
                // Room for a loaded two-core machine (the default, 50 ms,
                // is for production); far below every lease used.
                b.node_timeout(Duration::from_millis(250))
                    .redlock(self.urls())
                    .await
            }
            Kind::Cluster => b.connect_cluster(self.urls()).await,
            Kind::Sentinel => {
                // Every acquisition and renewal confirmed by the one replica,
                // the one a failover promotes: locks survive a failover.
                // (Counters and limits are not waited for; see the checks.)
                b.wait_for_replicas(1, Duration::from_millis(250))
                    .connect_sentinel(self.urls(), lockguard_testing::SENTINEL_SERVICE)
                    .await
            }
            Kind::Postgres => {
                b.postgres_schema(self.namespace.as_str())
                    .connect_postgres(&self.addr)
                    .await
            }
            Kind::MySql => {
                let store = MySqlOptions::new()
                    .table_prefix(format!("{}_", self.namespace))
                    .connect_timeout(RESPONSE_TIMEOUT)
                    .response_timeout(RESPONSE_TIMEOUT)
                    .connect(&self.addr)
                    .await?;
                b.build(store)
            }
            Kind::ZooKeeper => {
                b.zookeeper_session_timeout(ZK_SESSION)
                    .connect_zookeeper(&self.addr)
                    .await
            }
        }
    }

    /// The arguments that hand this target to a worker process.
    pub(crate) fn to_args(&self) -> Vec<String> {
        vec![
            "--store".into(),
            self.kind.name().into(),
            "--addr".into(),
            self.addr.clone(),
            "--namespace".into(),
            self.namespace.clone(),
        ]
    }
}
