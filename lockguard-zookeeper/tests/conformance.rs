//! The conformance kit on ZooKeeper: one standalone server for the test
//! binary, a root node of each test's own. ZooKeeper offers counters
//! without expiry, and no rate limiters. Then what is ZooKeeper's own: a
//! multi-lock as one transaction, read-write lock nodes as Curator's.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lockguard_core::{Builder, Client};
use lockguard_testing::ZooKeeperServer;
use lockguard_testing::conformance::{ClientFuture, Harness, eventually};
use lockguard_zookeeper::BuilderExt as _;
use lockguard_zookeeper::zookeeper_client as zk;

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

    fn pushes_changes(&self) -> bool {
        true
    }

    /// Each handoff is a watch event and the waiter's own requests to the
    /// ensemble (about 3 ms, 6 ms beside the other tests): 100 rounds race
    /// the same 32 tasks in half the time of 200.
    fn contention_rounds(&self) -> usize {
        100
    }
}

lockguard_testing::conformance!(
    zookeeper => ZooKeeper::start();
    locks, wake_ups, semaphores, queue, queue_wake_ups, inspection, survey, rw_locks, counters, leader
);

/// The lock nodes under the test's root: each container's name with its
/// children's names and creating zxids, sorted by container.
async fn nodes(admin: &zk::Client, root: &str) -> Vec<(String, Vec<(String, u64)>)> {
    let mut containers = admin.list_children(root).await.expect("list the root");
    containers.sort();
    let mut out = Vec::new();
    for c in containers {
        let dir = format!("{root}/{c}");
        let children = match admin.list_children(&dir).await {
            Ok(children) => children,
            // Removed by the server since it was listed: empty.
            Err(zk::Error::NoNode) => Vec::new(),
            Err(e) => panic!("list {dir}: {e}"),
        };
        let mut listed = Vec::new();
        for child in children {
            if let Some(stat) = admin
                .check_stat(&format!("{dir}/{child}"))
                .await
                .expect("stat a node")
            {
                listed.push((child, stat.czxid as u64));
            }
        }
        out.push((c, listed));
    }
    out
}

/// A multi-lock of three free keys, one of which was held before (its
/// container is left empty), is one transaction: its three nodes share the
/// transaction's zxid, which is each key's fencing token, above the key's
/// earlier one. A multi-lock with a busy key is refused naming it, and
/// leaves no node behind in the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_of_free_keys_is_one_zookeeper_transaction() {
    let zookeeper = ZooKeeper::start();
    let lg = zookeeper.client_with(Client::builder()).await;
    let other = zookeeper.client_with(Client::builder()).await;
    let admin = zk::Client::connect(&zookeeper.server.hosts())
        .await
        .expect("connect the admin client");
    let before = other.lock("t:b").try_acquire().await.unwrap();
    let earlier = before.fencing_token();
    assert!(before.release().await.unwrap());

    let guard = lg
        .multi_lock(["t:a", "t:b", "t:c"])
        .try_acquire()
        .await
        .unwrap();
    let tokens: Vec<u64> = guard.fencing_tokens().map(|(_, f)| f.get()).collect();
    assert_eq!(tokens.len(), 3);
    assert!(
        tokens.iter().all(|t| *t == tokens[0]),
        "not one transaction: {tokens:?}"
    );
    assert!(guard.fencing_token("t:b").unwrap() > earlier);
    let seen = nodes(&admin, &zookeeper.root).await;
    assert_eq!(seen.len(), 3, "{seen:?}");
    for (container, children) in &seen {
        assert_eq!(children.len(), 1, "{container}: {children:?}");
        assert_eq!(children[0].1, tokens[0], "{container}: {children:?}");
    }
    assert!(guard.release().await.unwrap());

    let held = other.lock("t:c").try_acquire().await.unwrap();
    let e = lg
        .multi_lock(["t:a", "t:b", "t:c"])
        .try_acquire()
        .await
        .unwrap_err();
    assert!(e.is_busy() && e.message().contains("t:c"), "{e}");
    let seen = nodes(&admin, &zookeeper.root).await;
    let queued: usize = seen.iter().map(|(_, children)| children.len()).sum();
    assert_eq!(queued, 1, "only the holder's node: {seen:?}");
    assert!(held.release().await.unwrap());
}

/// A read-write lock's nodes are named as Curator's: `__READ__` for a
/// reader, `__WRIT__` for a writer, after the token; two readers hold with
/// their own nodes' zxids as tokens, and a writer queued behind them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_nodes_are_marked_with_their_mode() {
    let zookeeper = ZooKeeper::start();
    let lg = zookeeper.client_with(Client::builder()).await;
    let admin = zk::Client::connect(&zookeeper.server.hosts())
        .await
        .expect("connect the admin client");
    let r1 = lg.rw_lock("doc").read().try_acquire().await.unwrap();
    let r2 = lg.rw_lock("doc").read().try_acquire().await.unwrap();
    let writer = tokio::spawn({
        let lg = lg.clone();
        async move {
            lg.rw_lock("doc")
                .write()
                .wait(Duration::from_secs(30))
                .acquire()
                .await
        }
    });
    let queued = lockguard_testing::conformance::eventually(Duration::from_secs(10), || async {
        lg.rw_lock("doc").inspect().await.unwrap().waiters == 1
    })
    .await;
    assert!(queued, "the writer never queued");
    let seen = nodes(&admin, &zookeeper.root).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    let mut children = seen[0].1.clone();
    children.sort_by_key(|(_, zxid)| *zxid);
    let marks: Vec<&str> = children
        .iter()
        .map(|(name, _)| &name.split_once('-').unwrap().1[..8])
        .collect();
    assert_eq!(marks, ["__READ__", "__READ__", "__WRIT__"], "{children:?}");
    let zxids: Vec<u64> = children.iter().map(|(_, z)| *z).collect();
    assert_eq!(
        [r1.fencing_token().get(), r2.fencing_token().get()],
        zxids[..2]
    );
    assert!(r1.release().await.unwrap());
    assert!(r2.release().await.unwrap());
    let w = writer.await.unwrap().expect("the writer acquires");
    assert_eq!(w.fencing_token().get(), zxids[2]);
    assert!(w.release().await.unwrap());
}

/// The requests `server` has read so far (`zk_packets_received`: every
/// request of every session, pings included).
fn packets(server: &ZooKeeperServer) -> u64 {
    let mntr = server.four_letter("mntr").expect("mntr");
    mntr.lines()
        .find_map(|l| l.strip_prefix("zk_packets_received"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no zk_packets_received in mntr: {mntr}"))
}

/// The watches `server` has set (`wchs`).
fn watches(server: &ZooKeeperServer) -> u64 {
    let wchs = server.four_letter("wchs").expect("wchs");
    wchs.lines()
        .find_map(|l| l.strip_prefix("Total watches:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no watch count in wchs: {wchs}"))
}

/// A client of `server` with a 60 s session, under `root`.
async fn client_of(server: &ZooKeeperServer, root: &str) -> Client {
    Client::builder()
        .zookeeper_session_timeout(Duration::from_secs(60))
        .zookeeper_root(root)
        .connect_zookeeper(&server.hosts())
        .await
        .expect("connect to zookeeper")
}

/// A handoff is two requests, as in ZooKeeper's own lock recipe: the holder
/// deletes its node, and the waiter, woken by its watch, lists the queue
/// once. The watch fired when its server had applied the deletion, so that
/// listing is as new as the deletion and needs no `sync` first (which would
/// make it three).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_waiter_lists_the_queue_once_without_a_sync() {
    const HANDOFFS: u64 = 8;
    // A server of the test's own: no other test's requests are counted.
    let server = ZooKeeperServer::start();
    let holder = client_of(&server, "/handoffs").await;
    let waiter = client_of(&server, "/handoffs").await;
    // The server counts a `mntr` too: what one costs is taken off.
    let mntr = {
        let first = packets(&server);
        packets(&server) - first
    };
    let mut requests = 0;
    for _ in 0..HANDOFFS {
        let held = holder.lock("t:handoff").try_acquire().await.unwrap();
        let watched = watches(&server);
        let waiting = tokio::spawn({
            let lock = waiter.lock("t:handoff").wait(Duration::from_secs(30));
            async move { lock.acquire().await }
        });
        assert!(
            eventually(Duration::from_secs(10), || async {
                watches(&server) > watched
            })
            .await,
            "the waiter never came to watch its predecessor"
        );
        let before = packets(&server);
        assert!(held.release().await.unwrap());
        let taken = waiting
            .await
            .unwrap()
            .expect("the waiter is handed the lock");
        requests += packets(&server) - before - mntr;
        assert!(taken.release().await.unwrap());
    }
    // Two sessions of 60 s ping once each in 20 s at most: a ping may fall
    // in a handoff, not three.
    assert!(
        (2 * HANDOFFS..=2 * HANDOFFS + 2).contains(&requests),
        "{requests} requests over {HANDOFFS} handoffs, not two each"
    );
}

/// The head waiter of a lock kept past its release (`at_least`) watches
/// the `kept` node, asking nothing while the kept time lasts (its place
/// refreshes are answered by the standing watch, not by a read and a
/// write each), and takes the lock at once when `kept` goes sooner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_locks_waiter_watches_it_and_asks_nothing_meanwhile() {
    // A server of the test's own: no other test's requests are counted.
    let server = ZooKeeperServer::start();
    let root = "/kept";
    let holder = client_of(&server, root).await;
    // Waiters refresh their place every 50 ms at most.
    let waiter = Client::builder()
        .retry_interval(Duration::from_millis(50))
        .zookeeper_session_timeout(Duration::from_secs(60))
        .zookeeper_root(root)
        .connect_zookeeper(&server.hosts())
        .await
        .expect("connect to zookeeper");
    let job = holder
        .lock("t:job")
        .at_least(Duration::from_secs(30))
        .try_acquire()
        .await
        .unwrap();
    assert!(job.release().await.unwrap());
    let watched = watches(&server);
    let waiting = tokio::spawn({
        let lock = waiter.lock("t:job").wait(Duration::from_secs(60));
        async move { lock.acquire().await }
    });
    assert!(
        eventually(Duration::from_secs(10), || async {
            watches(&server) > watched
        })
        .await,
        "the waiter never came to watch the kept node"
    );
    let before = packets(&server);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let asked = packets(&server) - before;
    // Two `mntr`s, and a ping of either session at most.
    assert!(
        asked <= 4,
        "{asked} requests in 1 s of waiting on a kept lock"
    );
    assert!(!waiting.is_finished());

    // `kept` goes (as an operator's forced release deletes it).
    let admin = zk::Client::connect(&server.hosts()).await.unwrap();
    let (lock_node, children) = nodes(&admin, root)
        .await
        .into_iter()
        .next()
        .expect("the lock's node");
    assert!(
        children.iter().any(|(name, _)| name == "kept"),
        "{children:?}"
    );
    admin
        .delete(&format!("{root}/{lock_node}/kept"), None)
        .await
        .unwrap();
    let taken = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter took the lock when the kept node went")
        .unwrap()
        .expect("the waiter is handed the lock");
    assert!(taken.release().await.unwrap());
}
