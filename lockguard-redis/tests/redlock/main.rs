//! Redlock against five real `redis-server` processes that are killed,
//! paused with SIGSTOP and restarted empty.

#[path = "../support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockguard_core::{Client, ErrorKind};
use lockguard_redis::DEFAULT_NODE_TIMEOUT;
use lockguard_redis::{BuilderExt as _, ClientExt as _};
use lockguard_testing::RedisServer;

fn nodes(n: usize) -> Vec<RedisServer> {
    (0..n).map(|_| RedisServer::start()).collect()
}

fn urls(nodes: &[RedisServer]) -> Vec<String> {
    nodes.iter().map(RedisServer::url).collect()
}

async fn client(nodes: &[RedisServer]) -> Client {
    client_with_timeout(nodes, lockguard_redis::DEFAULT_NODE_TIMEOUT).await
}

async fn client_with_timeout(nodes: &[RedisServer], node_timeout: Duration) -> Client {
    Client::builder()
        .connect_timeout(Duration::from_millis(300))
        .node_timeout(node_timeout)
        .redlock(urls(nodes))
        .await
        .expect("redlock client")
}

/// Acquire-and-release latencies of `rounds` uncontended cycles.
async fn cycle_latencies(lg: &Client, key: &str, rounds: usize) -> Vec<Duration> {
    let mut out = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        let g = lg
            .lock(key)
            .lease(Duration::from_secs(5))
            .try_acquire()
            .await
            .expect("acquire with a quorum up");
        out.push(started.elapsed());
        assert!(g.release().await.unwrap());
    }
    out.sort();
    out
}

fn summary(lat: &[Duration]) -> String {
    format!(
        "p50 {:?}, max {:?} over {}",
        lat[lat.len() / 2],
        lat[lat.len() - 1],
        lat.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_nodes_acquire_fast() {
    let nodes = nodes(5);
    let lg = client(&nodes).await;
    let lat = cycle_latencies(&lg, "healthy", 50).await;
    println!("redlock acquire, 5 healthy nodes: {}", summary(&lat));
    assert!(
        lat[lat.len() / 2] < DEFAULT_NODE_TIMEOUT,
        "{}",
        summary(&lat)
    );
}

/// Two of five nodes down: a quorum remains and locks keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_down_still_lock() {
    let mut nodes = nodes(5);
    let lg = client(&nodes).await;
    nodes[0].kill();
    nodes[3].kill();
    let lat = cycle_latencies(&lg, "minority-down", 30).await;
    println!("redlock acquire, 2 of 5 nodes down: {}", summary(&lat));
    // Mutual exclusion still holds.
    let g = lg.lock("minority-down").acquire().await.unwrap();
    let other = client(&nodes[..]).await;
    assert!(
        other
            .lock("minority-down")
            .try_acquire()
            .await
            .unwrap_err()
            .is_busy()
    );
    assert!(g.release().await.unwrap());
}

/// Three of five down: no quorum, a clear unavailable error (not busy),
/// within the per-node timeout plus a small bound; for killed nodes and for
/// paused ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_of_five_down_fail_with_a_quorum_error() {
    let mut nodes = nodes(5);
    let lg = client(&nodes).await;
    for i in [0, 2, 4] {
        nodes[i].kill();
    }
    // The node timeout plus room for a loaded machine (the chaos test runs
    // beside this one); far below the waits a hang would show.
    let bound = DEFAULT_NODE_TIMEOUT + Duration::from_millis(300);
    let mut worst = Duration::ZERO;
    for _ in 0..10 {
        let started = Instant::now();
        let err = lg.lock("majority-down").try_acquire().await.unwrap_err();
        worst = worst.max(started.elapsed());
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        assert!(!err.is_busy());
    }
    println!("redlock acquire, 3 of 5 killed: fails in at most {worst:?}");
    assert!(worst < bound, "{worst:?}");

    for i in [0, 2, 4] {
        nodes[i].restart();
    }
    nodes[1].pause();
    nodes[2].pause();
    nodes[3].pause();
    let mut worst = Duration::ZERO;
    for _ in 0..5 {
        let started = Instant::now();
        let err = lg.lock("majority-paused").try_acquire().await.unwrap_err();
        worst = worst.max(started.elapsed());
        assert!(err.is_unavailable(), "{err}");
    }
    println!("redlock acquire, 3 of 5 paused: fails in at most {worst:?}");
    assert!(worst < bound, "{worst:?}");
    for node in &mut nodes[1..4] {
        node.resume();
    }
}

/// A paused minority adds at most the per-node timeout: a quorum answers
/// without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_minority_adds_at_most_the_node_timeout() {
    let mut nodes = nodes(5);
    let lg = client(&nodes).await;
    nodes[1].pause();
    let one = cycle_latencies(&lg, "paused-1", 30).await;
    nodes[4].pause();
    let two = cycle_latencies(&lg, "paused-2", 30).await;
    nodes[1].resume();
    nodes[4].resume();
    println!("redlock acquire, 1 of 5 paused: {}", summary(&one));
    println!("redlock acquire, 2 of 5 paused: {}", summary(&two));
    // A quorum answers without the paused nodes: the typical acquire does
    // not wait for them at all, and none waits much past one node timeout
    // (plus room for a loaded machine).
    let bound = DEFAULT_NODE_TIMEOUT + Duration::from_millis(300);
    for lat in [&one, &two] {
        assert!(
            lat[lat.len() / 2] < DEFAULT_NODE_TIMEOUT,
            "{}",
            summary(lat)
        );
        assert!(lat[lat.len() - 1] < bound, "{}", summary(lat));
    }
}

/// A node restarted empty (no persistence) while a lock is held: the other
/// four still hold it, so nobody else acquires, renewals keep their quorum,
/// and the next holder's fencing token is still greater.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_restarted_empty_during_a_held_lock() {
    let mut nodes = nodes(5);
    // A node timeout with room for a loaded machine (the default, 50 ms,
    // is for production: under a load of 7 on two cores a node's answer
    // came later, and `b` saw no quorum instead of a busy lock).
    let a = client_with_timeout(&nodes, Duration::from_millis(250)).await;
    let b = client_with_timeout(&nodes, Duration::from_millis(250)).await;
    let lease = Duration::from_millis(600);
    let held = a.lock("restart").watchdog(lease).acquire().await.unwrap();
    nodes[2].restart();
    let until = Instant::now() + lease * 2;
    while Instant::now() < until {
        assert!(b.lock("restart").try_acquire().await.unwrap_err().is_busy());
        tokio::time::sleep(lease / 6).await;
    }
    assert!(held.is_held(), "renewals lost their quorum");
    let token = held.fencing_token();
    assert!(held.release().await.unwrap());
    let next = b.lock("restart").acquire().await.unwrap();
    assert!(
        next.fencing_token() > token,
        "{} after {token}",
        next.fencing_token()
    );
    next.release().await.unwrap();
}

/// 16 contenders increment a shared value under the lock (read, then
/// write: not atomic) while nodes are killed and restarted at random, a
/// minority at a time, each kept down longer than a lease before it comes
/// back empty (the delayed restart Redlock requires). No update is lost.
///
/// Runs for `LOCKGUARD_CHAOS_SECS` seconds (default 6), and on until at
/// least 100 acquisitions went through the chaos (at most 60 s: a loaded
/// machine gets there later, not never).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_loses_no_update() {
    let secs: u64 = std::env::var("LOCKGUARD_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let lease = Duration::from_secs(3);
    let data = RedisServer::start();
    let mut nodes = nodes(5);
    // A node timeout with room for a loaded CI machine; still far below
    // the lease.
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(client_with_timeout(&nodes, Duration::from_millis(250)).await);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let acquired = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for t in 0..16 {
        let lg = clients[t % 4].clone();
        let (stop, acquired) = (stop.clone(), acquired.clone());
        let mut conn = data.connection().await;
        tasks.push(tokio::spawn(async move {
            let mut failures = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let guard = match lg
                    .lock("chaos")
                    .lease(lease)
                    .wait(Duration::from_secs(2))
                    .acquire()
                    .await
                {
                    Ok(g) => g,
                    Err(e) => {
                        assert!(e.is_busy() || e.is_unavailable(), "{e}");
                        failures += 1;
                        continue;
                    }
                };
                let v: Option<u64> = redis::cmd("GET")
                    .arg("counter")
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
                let _: () = redis::cmd("SET")
                    .arg("counter")
                    .arg(v.unwrap_or(0) + 1)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                assert!(guard.is_held(), "lease ran out during the update");
                acquired.fetch_add(1, Ordering::SeqCst);
                let _ = guard.release().await;
            }
            failures
        }));
    }
    // The chaos: every 300 ms, kill a random live node if fewer than two are
    // down; bring back nodes that have been down for longer than a lease.
    let progress = acquired.clone();
    let chaos = std::thread::spawn(move || {
        let mut rng = fastrand::Rng::with_seed(42);
        let mut down: Vec<(usize, Instant)> = Vec::new();
        let (mut kills, mut restarts) = (0, 0);
        let started = Instant::now();
        let deadline = started + Duration::from_secs(secs);
        let give_up = started + Duration::from_secs(60);
        while Instant::now() < give_up
            && (Instant::now() < deadline || progress.load(Ordering::SeqCst) < 100)
        {
            std::thread::sleep(Duration::from_millis(300));
            down.retain(|&(i, at)| {
                if at.elapsed() > lease + Duration::from_millis(300) {
                    nodes[i].restart();
                    restarts += 1;
                    false
                } else {
                    true
                }
            });
            if down.len() < 2 {
                let i = rng.usize(0..nodes.len());
                if !down.iter().any(|(d, _)| *d == i) {
                    nodes[i].kill();
                    kills += 1;
                    down.push((i, Instant::now()));
                }
            }
        }
        (nodes, kills, restarts)
    });
    let (nodes, kills, restarts) = tokio::task::spawn_blocking(move || chaos.join().unwrap())
        .await
        .unwrap();
    stop.store(true, Ordering::SeqCst);
    let mut failures = 0;
    for t in tasks {
        failures += t.await.unwrap();
    }
    drop(nodes);
    let mut conn = data.connection().await;
    let total: Option<u64> = redis::cmd("GET")
        .arg("counter")
        .query_async(&mut conn)
        .await
        .expect("reading the shared value");
    let acquired = acquired.load(Ordering::SeqCst);
    println!(
        "chaos at least {secs}s: {acquired} acquisitions, {failures} failed attempts, {kills} kills, {restarts} restarts"
    );
    assert!(kills >= 2, "the chaos killed only {kills} nodes");
    // Enough acquisitions that many fell between kills and restarts.
    assert!(acquired >= 100, "only {acquired} acquisitions in 60 s");
    assert_eq!(total.unwrap_or(0), acquired, "lost updates");
}

#[tokio::test]
async fn redlock_bad_input_and_unsupported_operations() {
    let nodes = nodes(3);
    for e in [
        Client::redlock(Vec::<String>::new()).await.unwrap_err(),
        Client::redlock([nodes[0].url(), nodes[0].url()])
            .await
            .unwrap_err(),
        Client::redlock(["not a url"]).await.unwrap_err(),
        Client::builder()
            .node_timeout(Duration::ZERO)
            .redlock(urls(&nodes))
            .await
            .unwrap_err(),
    ] {
        assert!(e.is_invalid_input(), "{e}");
    }
    let lg = client(&nodes).await;
    let e = lg
        .semaphore("s", lockguard_redis::MAX_REDLOCK_PERMITS + 1)
        .try_acquire()
        .await
        .unwrap_err();
    assert!(e.is_invalid_input(), "{e}");
    let e = lg.counter("c").incr_by(1).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    let e = lg
        .rate_limiter("r", lockguard_core::Quota::per_second(1))
        .check("k")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    // A quorum must be reachable at start-up.
    let mut down = nodes;
    down[0].kill();
    down[1].kill();
    let e = Client::builder()
        .connect_timeout(Duration::from_millis(300))
        .redlock(urls(&down))
        .await
        .unwrap_err();
    assert!(e.is_unavailable(), "{e}");
}

/// A semaphore with more permits than Redlock allows is refused before
/// anything is sent: no node sees a script, not even a background release.
/// (Issue 11, item 2.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_semaphore_is_refused_before_reaching_any_node() {
    let nodes = nodes(3);
    let lg = client(&nodes).await;
    let mut admins = Vec::new();
    for n in &nodes {
        let mut admin = n.connection().await;
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut admin)
            .await
            .unwrap();
        admins.push(admin);
    }
    let sem = lg.semaphore("big", lockguard_redis::MAX_REDLOCK_PERMITS + 1);
    let err = sem.try_acquire().await.unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    let err = sem
        .wait(Duration::from_millis(100))
        .acquire()
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err}");
    // A background release would have been spawned by now; give it the
    // node timeout many times over to arrive.
    tokio::time::sleep(DEFAULT_NODE_TIMEOUT * 10).await;
    for admin in &mut admins {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(admin)
            .await
            .unwrap();
        assert!(
            !info.contains("cmdstat_eval"),
            "a script reached a node:\n{info}"
        );
    }
}

/// Subscribers on `channel` of one node.
async fn numsub(node: &RedisServer, channel: &str) -> i64 {
    let mut conn = node.connection().await;
    let n: Vec<(String, i64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query_async(&mut conn)
        .await
        .unwrap();
    n.first().map_or(0, |(_, n)| *n)
}

/// Spawns a wait of at most `wait` for `key` on `lg`, then its release.
fn wait_then_release(
    lg: &Client,
    key: &'static str,
    wait: Duration,
) -> tokio::task::JoinHandle<bool> {
    let lg = lg.clone();
    tokio::spawn(async move {
        lg.lock(key)
            .wait(wait)
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap()
    })
}

/// A SUBSCRIBE that timed out on a paused node but ran when the node came
/// back is undone once nobody waits on the channel: no subscription is
/// left behind for good. (Issue 11, item 10.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_whose_answer_was_lost_is_undone() {
    let mut nodes = nodes(3);
    let holder = client(&nodes).await;
    let waiter = client(&nodes).await;
    // A first wait opens the waiter's pub/sub connections on every node.
    let warm = holder.lock("warm").acquire().await.unwrap();
    let warm_waiter = wait_then_release(&waiter, "warm", Duration::from_secs(5));
    let channel_warm = "lockguard:lock:{warm}:released";
    for n in &nodes {
        let mut subscribed = false;
        for _ in 0..1000 {
            if numsub(n, channel_warm).await > 0 {
                subscribed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(subscribed, "the waiter never subscribed on a node");
    }
    assert!(warm.release().await.unwrap());
    assert!(warm_waiter.await.unwrap());

    let guard = holder.lock("leak").acquire().await.unwrap();
    nodes[0].pause();
    let task = wait_then_release(&waiter, "leak", Duration::from_secs(10));
    // The subscription request to the paused node times out (50 ms).
    tokio::time::sleep(Duration::from_millis(300)).await;
    nodes[0].resume();
    let channel = "lockguard:lock:{leak}:released";
    let mut seen = false;
    for _ in 0..200 {
        if numsub(&nodes[0], channel).await > 0 {
            seen = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(seen, "the late SUBSCRIBE never ran on the resumed node");
    assert!(guard.release().await.unwrap());
    assert!(task.await.unwrap());
    // Nobody waits now: after the unsubscribe grace (2 s), no node keeps it.
    let mut left = -1;
    for _ in 0..100 {
        left = numsub(&nodes[0], channel).await;
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(left, 0, "the subscription was left behind on the node");
}

/// `try_acquire` until the nodes that just came back answer; a busy lock
/// is an answer too. Bounded: a few seconds at most.
async fn try_acquire_once_reachable(
    lg: &Client,
    key: &str,
    lease: Duration,
) -> lockguard_core::Result<lockguard_core::LockGuard> {
    let mut last = None;
    for _ in 0..100 {
        match lg.lock(key).lease(lease).try_acquire().await {
            Err(e) if e.is_unavailable() => last = Some(e),
            other => return other,
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    panic!("the nodes never answered: {last:?}");
}

/// The shape that gave a smaller token: a node that missed every
/// acquisition, and a node of the bare quorum that granted them restarted
/// empty (after the lease, as a delayed restart asks), then a quorum of the
/// two. Tokens come from sequences that start above the node's clock, so
/// an emptied node still hands out a greater token than any before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_increasing_when_emptied_nodes_form_the_quorum() {
    let mut n = nodes(3);
    let lg = client(&n).await;
    let lease = Duration::from_millis(300);
    n[2].kill();
    let mut last = 0;
    for _ in 0..10 {
        let g = try_acquire_once_reachable(&lg, "fence", lease)
            .await
            .unwrap();
        assert!(g.fencing_token().get() > last);
        last = g.fencing_token().get();
        assert!(g.release().await.unwrap());
    }
    n[2].restart();
    n[0].kill();
    tokio::time::sleep(lease * 2).await;
    n[0].restart();
    n[1].pause();
    let g = try_acquire_once_reachable(&lg, "fence", lease)
        .await
        .unwrap();
    assert!(
        g.fencing_token().get() > last,
        "token {} after {last}",
        g.fencing_token()
    );
    n[1].resume();
    assert!(g.release().await.unwrap());
}

/// The limit `docs/safety.md` states: a node restarted empty at once, while
/// a lock is held on a bare quorum that includes it, lets a second client
/// form a quorum with a node that missed the first acquisition. The same
/// restart with every node persisting each write (`appendfsync always`)
/// keeps the lock, and the second client is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_persistence_or_a_delayed_restart_keeps_exclusion() {
    let lease = Duration::from_secs(10);
    for persistent in [false, true] {
        let mut n: Vec<RedisServer> = (0..3)
            .map(|_| {
                if persistent {
                    RedisServer::start_with_args(&[
                        "--appendonly",
                        "yes",
                        "--appendfsync",
                        "always",
                    ])
                } else {
                    RedisServer::start()
                }
            })
            .collect();
        let a = client(&n).await;
        let held = try_acquire_once_reachable(&a, "x", lease).await.unwrap();
        // Every node's grant must have landed before the test acts on it:
        // the attempt returns at a quorum, and a grant still on its way to
        // node 0 when it restarts is never written, persisted or not.
        for node in &n {
            let conn = node.connection().await;
            let granted = support::eventually(Duration::from_secs(5), || {
                let mut conn = conn.clone();
                async move {
                    let v: Option<String> = redis::cmd("GET")
                        .arg("lockguard:lock:{x}")
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    v.is_some()
                }
            })
            .await;
            assert!(granted, "node {} never granted the lock", node.port());
        }
        // Node 2 forgets the acquisition, as a node that missed it would.
        // (Killing node 2 instead races with the request the client sends
        // again once the node is back, which may grant.)
        let mut two = n[2].connection().await;
        let _: () = redis::cmd("DEL")
            .arg("lockguard:lock:{x}")
            .query_async(&mut two)
            .await
            .unwrap();
        n[0].restart();
        // The second client connects after the restarts: a connection
        // broken by a restart fails its next request, and an attempt that
        // sees one node fail, one busy and one free is refused as busy,
        // which is not the case this test is about.
        let b = client(&n).await;
        let second = try_acquire_once_reachable(&b, "x", lease).await;
        assert!(held.is_held());
        if persistent {
            assert!(
                second.unwrap_err().is_busy(),
                "persisted lock was forgotten"
            );
        } else {
            // Two holders: why safety.md asks for persistence or a delayed
            // restart on every node.
            let second = second.expect("an emptied node joined a new quorum");
            assert!(second.release().await.unwrap());
        }
        // The first holder's connections to the restarted nodes may fail
        // once while they reconnect; its lease frees what a release misses.
        let _ = held.release().await;
    }
}

/// How many waiters `node` has in the line of lock `name`.
async fn line_len(node: &RedisServer, name: &str) -> u64 {
    let mut conn = node.connection().await;
    redis::cmd("ZCARD")
        .arg(format!("lockguard:lock:{{{name}}}:line"))
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// Redlock waiters are served in the order they began to wait, across
/// clients (one each, as separate processes would have), however the
/// releases' announcements race: every node lines them up by the same
/// score, and only the head of the line takes the free lock. Six waiters
/// arrive one after another, each once the one before is in the line on
/// every node; each holds the lock for a moment. They must be served
/// 0, 1, ..., 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_served_in_the_order_they_arrived() {
    let nodes = nodes(3);
    let holder = client(&nodes).await;
    let held = holder
        .lock("fair")
        .lease(Duration::from_secs(30))
        .acquire()
        .await
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for i in 0..6u64 {
        let lg = client(&nodes).await;
        let tx = tx.clone();
        tasks.push(tokio::spawn(async move {
            let g = lg
                .lock("fair")
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .unwrap();
            tx.send(i).unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(g.release().await.unwrap());
        }));
        for node in &nodes {
            let lined = support::eventually(Duration::from_secs(10), || async {
                line_len(node, "fair").await == i + 1
            })
            .await;
            assert!(lined, "waiter {i} never joined the line");
        }
    }
    drop(tx);
    assert!(held.release().await.unwrap());
    let mut served = Vec::new();
    while let Some(i) = rx.recv().await {
        served.push(i);
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(served, (0..6).collect::<Vec<_>>(), "served out of order");
    // Everyone served left the line on every node.
    for node in &nodes {
        let left = support::eventually(Duration::from_secs(5), || async {
            line_len(node, "fair").await == 0
        })
        .await;
        assert!(left, "the line kept waiters that were served");
    }
}

/// Permits of a Redlock semaphore, taken at once by clients of their own,
/// never share a fencing token: each is a value a quorum gave its holder
/// alone. (The highest count among two quorums can be the same value; the
/// permits hold at once, so that value would be handed out twice.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_permits_never_share_a_fencing_token() {
    const CLIENTS: usize = 8;
    const EACH: usize = 40;
    let nodes = nodes(3);
    let mut workers = Vec::new();
    for _ in 0..CLIENTS {
        let lg = client(&nodes).await;
        workers.push(tokio::spawn(async move {
            let sem = lg
                .semaphore("permits", CLIENTS as u32)
                .lease(Duration::from_secs(5))
                .wait(Duration::from_secs(10));
            let mut fences = Vec::with_capacity(EACH);
            for _ in 0..EACH {
                let permit = sem.acquire().await.expect("a permit for every client");
                fences.push(permit.fencing_token().get());
                tokio::task::yield_now().await;
                assert!(permit.release().await.unwrap());
            }
            fences
        }));
    }
    let mut fences = Vec::new();
    for w in workers {
        fences.extend(w.await.unwrap());
    }
    let taken = fences.len();
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(
        fences.len(),
        taken,
        "{} of {taken} permits' tokens were handed out more than once",
        taken - fences.len()
    );
}
