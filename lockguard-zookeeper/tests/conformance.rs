//! The conformance kit on ZooKeeper: one standalone server for the test
//! binary, a root node of each test's own. ZooKeeper offers counters
//! without expiry, and no rate limiters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lockguard_core::{Builder, Client};
use lockguard_testing::ZooKeeperServer;
use lockguard_testing::conformance::{ClientFuture, Harness};
use lockguard_zookeeper::BuilderExt as _;

/// The binary's shared server, with a root of the test's own, so tests
/// running side by side share no node.
struct ZooKeeper {
    server: &'static ZooKeeperServer,
    root: String,
}

impl ZooKeeper {
    fn start() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Self {
            server: ZooKeeperServer::shared(),
            root: format!(
                "/t{}_{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    fn connect(&self, builder: Builder, session: Duration) -> ClientFuture<'_> {
        let hosts = self.server.hosts();
        Box::pin(async move {
            builder
                .zookeeper_session_timeout(session)
                .zookeeper_root(self.root.as_str())
                .connect_zookeeper(&hosts)
                .await
                .expect("connect to zookeeper")
        })
    }
}

impl Harness for ZooKeeper {
    /// A session timeout above every lease the tests fix.
    fn client_with(&self, builder: Builder) -> ClientFuture<'_> {
        self.connect(builder, Duration::from_secs(60))
    }

    /// A crashed holder's lock goes with its session.
    fn client_for_lease(&self, lease: Duration) -> ClientFuture<'_> {
        self.connect(Client::builder(), lease)
    }

    fn keeps_leases(&self) -> bool {
        false
    }
}

lockguard_testing::conformance!(
    zookeeper => ZooKeeper::start();
    locks, semaphores, queue, inspection, rw_locks, counters, leader
);
