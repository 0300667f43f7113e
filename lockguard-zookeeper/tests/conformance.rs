//! The conformance kit on ZooKeeper: a standalone server of each test's
//! own. ZooKeeper offers counters without expiry, and no rate limiters.

use std::time::Duration;

use lockguard_core::{Builder, Client};
use lockguard_testing::ZooKeeperServer;
use lockguard_testing::conformance::{ClientFuture, Harness};
use lockguard_zookeeper::BuilderExt as _;

/// A standalone server of the test's own.
struct ZooKeeper(ZooKeeperServer);

impl ZooKeeper {
    fn start() -> Self {
        Self(ZooKeeperServer::start())
    }

    fn connect(&self, builder: Builder, session: Duration) -> ClientFuture<'_> {
        let hosts = self.0.hosts();
        Box::pin(async move {
            builder
                .zookeeper_session_timeout(session)
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
    locks, semaphores, queue, inspection, counters
);
