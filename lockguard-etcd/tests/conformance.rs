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

    fn pushes_changes(&self) -> bool {
        true
    }

    /// Each handoff is a watch event and the waiter's own read of the
    /// queue (about 15 ms in a debug build on two cores): 50 rounds race
    /// the same 32 tasks, 1,600 acquisitions, in 25 s, as MySQL's do.
    fn contention_rounds(&self) -> usize {
        50
    }
}

lockguard_testing::conformance!(
    etcd => Etcd::start();
    locks, wake_ups, semaphores, queue, queue_wake_ups, inspection, survey, rw_locks, counters, limits, leader
);

// The kit's `counter_expiry` group writes a counter with a 3 s expiry 200
// times after it expired and reads it after each write: on etcd, where an
// update is a compare-and-set (a read and a logged write), a loaded
// two-core machine took longer than the expiry, which then (rightly) ended
// the counter between a write and the read after it. The group's two
// tests that fit etcd's pace run here as they are; the third is below,
// with an expiry etcd's pace fits.
mod counter_expiry {
    use super::*;
    use lockguard_testing::conformance::{Time, counters, run};

    #[test]
    fn expiry_resets_a_counter() {
        run(Etcd::start, Time::Real, counters::expiry_resets_a_counter);
    }

    #[test]
    fn versions_do_not_repeat_after_expiry() {
        run(
            Etcd::start,
            Time::Real,
            counters::versions_do_not_repeat_after_expiry,
        );
    }
}

/// A counter written many times before it expired, then written again: no
/// version of the new counter is one seen before (the kit's
/// `versions_grow_past_more_writes_than_microseconds`, with a 15 s expiry
/// and 100 writes each side, which etcd's compare-and-sets fit on a loaded
/// machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_versions_grow_after_an_expiry() {
    let etcd = Etcd::start();
    let lg = etcd.client_with(Client::builder()).await;
    let ttl = Duration::from_secs(15);
    let c = lg.counter("busy").expire_after(ttl);
    for _ in 0..100 {
        c.incr_by(1).await.unwrap();
    }
    let seen = c.get_versioned().await.unwrap().version;
    assert_ne!(seen, 0);
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    assert_eq!(c.get_versioned().await.unwrap().version, 0, "expired");
    for _ in 0..100 {
        c.incr_by(1).await.unwrap();
        let now = c.get_versioned().await.unwrap().version;
        assert!(now > seen, "version {now} after {seen} was seen");
    }
}

/// A client remembers what it last wrote of a counter, and updates it in
/// one round trip from that; another client's writes in between cost a
/// retry, never a wrong answer: a bounded decrement that the remembered
/// value would refuse reads the counter first and succeeds, and one that
/// the counter as it is refuses is refused with its real value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_a_remembered_counter_never_decides_alone() {
    let etcd = Etcd::start();
    let a = etcd.client_with(Client::builder()).await;
    let b = etcd.client_with(Client::builder()).await;
    let (ca, cb) = (a.counter("stock"), b.counter("stock"));
    assert_eq!(ca.incr_by(5).await.unwrap(), 5);
    // `a` remembers 5; `b` takes it all, then puts 10 back.
    assert_eq!(cb.decr_if_at_least(5).await.unwrap(), Some(0));
    assert_eq!(cb.incr_by(10).await.unwrap(), 10);
    // From 5 remembered, the write finds 10 and makes its change from it.
    assert_eq!(ca.incr_by(1).await.unwrap(), 11);
    // `a` remembers 11; `b` takes 11, leaving 0, then adds 3.
    assert_eq!(cb.decr_if_at_least(11).await.unwrap(), Some(0));
    assert_eq!(cb.incr_by(3).await.unwrap(), 3);
    // 11 remembered would allow 4; the counter holds 3, which refuses it.
    assert_eq!(ca.decr_if_at_least(4).await.unwrap(), None);
    assert_eq!(ca.get().await.unwrap(), 3);
    // `a` remembers 3 (refused at it); `b` adds 7: 3 would refuse 6, the
    // counter (10) allows it.
    assert_eq!(cb.incr_by(7).await.unwrap(), 10);
    assert_eq!(ca.decr_if_at_least(6).await.unwrap(), Some(4));
    assert_eq!(cb.get().await.unwrap(), 4);
}

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
