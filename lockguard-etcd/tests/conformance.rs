//! The conformance kit on etcd: one single-member server for the test
//! binary, a key prefix of each test's own. etcd offers counters, marks
//! and rate limits with their times on the clients' clocks. Then what is etcd's own: a multi-lock as
//! one transaction.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lockguard_core::{Builder, Client};
use lockguard_etcd::BuilderExt as _;
use lockguard_etcd::etcd_client;
use lockguard_etcd::testing::EtcdServer;
use lockguard_testing::conformance::{ClientFuture, Harness};

/// The binary's shared server, with a prefix of the test's own, so tests
/// running side by side share no key.
struct Etcd {
    server: &'static EtcdServer,
    prefix: String,
}

impl Etcd {
    fn start() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Self {
            server: EtcdServer::shared(),
            prefix: format!(
                "/t{}_{}/",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    fn connect(&self, builder: Builder, ttl: Duration) -> ClientFuture<'_> {
        let endpoint = self.server.endpoint();
        Box::pin(async move {
            builder
                .etcd_lease_ttl(ttl)
                .etcd_prefix(self.prefix.as_str())
                .connect_etcd(&endpoint)
                .await
                .expect("connect to etcd")
        })
    }
}

impl Harness for Etcd {
    /// A lease TTL above every lease the tests fix.
    fn client_with(&self, builder: Builder) -> ClientFuture<'_> {
        self.connect(builder, Duration::from_secs(60))
    }

    /// A crashed holder's lock goes with its client's etcd lease.
    fn client_for_lease(&self, lease: Duration) -> ClientFuture<'_> {
        self.connect(Client::builder(), lease.max(Duration::from_secs(1)))
    }

    fn keeps_leases(&self) -> bool {
        false
    }

    /// Each handoff is a watch event and the waiter's own read of the
    /// queue: 100 rounds race the same tasks in half the time of 200.
    fn contention_rounds(&self) -> usize {
        100
    }
}

lockguard_testing::conformance!(
    etcd => Etcd::start();
    locks, wake_ups, semaphores, queue, queue_wake_ups, inspection, rw_locks, counters, counter_expiry, limits, leader
);

/// A multi-lock of three free keys is one transaction: its three keys
/// share the transaction's revision, which is each key's fencing token,
/// above an earlier holder's. A multi-lock with a busy key is refused, and
/// leaves no key behind in the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_of_free_keys_is_one_etcd_transaction() {
    let etcd = Etcd::start();
    let lg = etcd.client_with(Client::builder()).await;
    let other = etcd.client_with(Client::builder()).await;
    let before = other.lock("t:b").try_acquire().await.unwrap();
    let earlier = before.fencing_token();
    assert!(before.release().await.unwrap());

    let all = lg
        .multi_lock(["t:a", "t:b", "t:c"])
        .try_acquire()
        .await
        .unwrap();
    let tokens: Vec<_> = all.guards().iter().map(|g| g.fencing_token()).collect();
    assert!(tokens.windows(2).all(|w| w[0] == w[1]), "{tokens:?}");
    assert!(tokens[0] > earlier);

    let mut admin = etcd_client::Client::connect([etcd.server.endpoint()], None)
        .await
        .expect("connect the admin client");
    let keys = admin
        .get(
            etcd.prefix.as_str(),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    assert_eq!(keys.kvs().len(), 3, "{:?}", keys.kvs());
    let revisions: Vec<i64> = keys.kvs().iter().map(|kv| kv.create_revision()).collect();
    assert!(revisions.iter().all(|r| *r as u64 == tokens[0].get()));

    let busy = other
        .multi_lock(["t:x", "t:c"])
        .try_acquire()
        .await
        .unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    let after = admin
        .get(
            etcd.prefix.as_str(),
            Some(etcd_client::GetOptions::new().with_prefix()),
        )
        .await
        .unwrap();
    assert_eq!(after.kvs().len(), 3, "the refused multi-lock left a key");
    all.release().await.unwrap();
}
