//! The conformance kit on Redis: a standalone server, Redlock on five
//! masters, (with the `cluster` feature) a three-master Cluster, and (with
//! the `sentinel` feature) a master found through a sentinel;
//! and what only a Redis client is asked.

use std::time::Duration;

use lockguard_core::{Builder, Client, ErrorKind};
use lockguard_redis::{BuilderExt as _, ClientExt as _};
use lockguard_testing::RedisServer;
use lockguard_testing::conformance::{ClientFuture, Harness};

/// A standalone `redis-server` of the test's own.
struct Redis(RedisServer);

impl Redis {
    fn start() -> Self {
        Self(RedisServer::start())
    }
}

impl Harness for Redis {
    fn client_with(&self, builder: Builder) -> ClientFuture<'_> {
        let url = self.0.url();
        Box::pin(async move { builder.connect_redis(&url).await.expect("connect to redis") })
    }
}

/// Five independent masters, and one more server for the tests' own data
/// (a Redlock client offers no counters).
struct Redlock {
    nodes: Vec<RedisServer>,
    data: RedisServer,
}

impl Redlock {
    fn start() -> Self {
        Self {
            nodes: (0..5).map(|_| RedisServer::start()).collect(),
            data: RedisServer::start(),
        }
    }
}

impl Harness for Redlock {
    fn client_with(&self, builder: Builder) -> ClientFuture<'_> {
        let urls: Vec<String> = self.nodes.iter().map(RedisServer::url).collect();
        Box::pin(async move {
            // A per-node timeout with room for a loaded two-core machine
            // running a dozen servers (the default, 50 ms, is for
            // production); still far below every lease the tests use.
            builder
                .node_timeout(Duration::from_millis(250))
                .redlock(urls)
                .await
                .expect("connect to the redlock nodes")
        })
    }

    fn data_client(&self) -> ClientFuture<'_> {
        let url = self.data.url();
        Box::pin(async move { Client::connect_redis(&url).await.expect("connect to redis") })
    }

    /// Five round trips per attempt, and every release wakes all 31
    /// waiters to find the head of the line.
    fn contention_rounds(&self) -> usize {
        10
    }
}

/// The binary's shared three-master Redis Cluster, with a key prefix of
/// the test's own (its keys, queues and channels), so tests running side
/// by side share nothing: a cluster of each test's own cost every test
/// 2 s to form.
#[cfg(feature = "cluster")]
struct Cluster {
    cluster: &'static lockguard_testing::RedisCluster,
    prefix: String,
}

#[cfg(feature = "cluster")]
impl Cluster {
    fn start() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self {
            cluster: lockguard_testing::RedisCluster::shared(),
            prefix: format!("t{n}:"),
        }
    }
}

#[cfg(feature = "cluster")]
impl Harness for Cluster {
    fn client_with(&self, builder: Builder) -> ClientFuture<'_> {
        let urls = self.cluster.urls();
        Box::pin(async move {
            builder
                .prefix(&self.prefix)
                .connect_cluster(urls)
                .await
                .expect("connect to the cluster")
        })
    }

    /// The same scripts as a standalone server's, whose suite races 200
    /// rounds: 100 here, 3,200 acquisitions, for the cluster's routing.
    fn contention_rounds(&self) -> usize {
        100
    }
}

/// A master watched by a sentinel, of the test's own: the connection
/// finds the master through it, as under any group (failovers are the
/// fault tests' and the history checker's).
#[cfg(feature = "sentinel")]
struct Sentinel(lockguard_testing::SentinelGroup);

#[cfg(feature = "sentinel")]
impl Sentinel {
    fn start() -> Self {
        Self(lockguard_testing::SentinelGroup::start(0, 1))
    }
}

#[cfg(feature = "sentinel")]
impl Harness for Sentinel {
    fn client_with(&self, builder: Builder) -> ClientFuture<'_> {
        let urls = self.0.sentinel_urls();
        Box::pin(async move {
            builder
                .connect_sentinel(urls, lockguard_testing::SENTINEL_SERVICE)
                .await
                .expect("connect through the sentinels")
        })
    }

    /// The same scripts on the same kind of server as the standalone
    /// suite's 200 rounds: 100 here, 3,200 acquisitions, for the
    /// connection found through a sentinel.
    fn contention_rounds(&self) -> usize {
        100
    }
}

lockguard_testing::conformance!(
    redis => Redis::start();
    locks, wake_ups, semaphores, queue, queue_wake_ups, inspection, survey, rw_locks, counters, counter_expiry, limits, leader
);

lockguard_testing::conformance!(redlock => Redlock::start(); locks, wake_ups, semaphores, rw_refused, leader);

#[cfg(feature = "cluster")]
lockguard_testing::conformance!(
    cluster => Cluster::start();
    locks, wake_ups, semaphores, inspection, survey, rw_locks, counters, counter_expiry, limits, leader
);

/// A Redlock client says inspection is unsupported: its nodes may each
/// know a different holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_inspection_is_unsupported() {
    let store = Redlock::start();
    let lg = store.client_with(Client::builder()).await;
    let err = lg.lock("k").inspect().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    // Nor can it list its locks, or free one by force.
    let err = lg.locks("*").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
    let err = lg
        .force_release(lockguard_core::LockKind::Lock, "k")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unsupported, "{err}");
}

/// A key prefix with braces outside the hash tag (which would pick every
/// key's cluster slot) is refused before anything connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_braced_prefix_is_refused_by_connect() {
    let server = RedisServer::start();
    for prefix in ["app:{x}:", "}", "{"] {
        let err = Client::builder()
            .prefix(prefix)
            .connect_redis(&server.url())
            .await
            .unwrap_err();
        assert!(err.is_invalid_input(), "{prefix:?}: {err}");
    }
}

#[cfg(feature = "sentinel")]
lockguard_testing::conformance!(
    sentinel => Sentinel::start();
    locks, wake_ups, semaphores, queue, queue_wake_ups, inspection, survey, rw_locks, counters, counter_expiry, limits, leader
);
