//! The wait queue on a real `redis-server`: FIFO order across clients, no
//! starvation of one client's tasks, dead waiter processes, departing
//! waiters, a handoff target losing its connections, a restart with a full
//! queue, and semaphore permits in order.
//!
//! Each client here is its own `Lockguard` with its own connections, as
//! separate processes have; one test runs a real child process.

#[path = "../support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockguard_core::Lockguard;
use lockguard_testing::RedisServer;
use tokio::sync::mpsc;

use support::eventually;

/// The sorted set of waiters of lock (or semaphore) `name`.
fn queue_key(kind: &str, name: &str) -> String {
    format!("lockguard:{kind}:{{{name}}}:queue")
}

/// How many waiters the store has queued for `kind`/`name`.
async fn queued(server: &RedisServer, kind: &str, name: &str) -> u64 {
    let mut conn = server.connection().await;
    redis::cmd("ZCARD")
        .arg(queue_key(kind, name))
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// Waits (bounded) until exactly `n` waiters are queued.
async fn until_queued(server: &RedisServer, kind: &str, name: &str, n: u64) {
    let reached = eventually(Duration::from_secs(10), || async {
        queued(server, kind, name).await == n
    })
    .await;
    assert!(
        reached,
        "{n} waiters never queued on {kind} {name:?} (now {})",
        queued(server, kind, name).await
    );
}

async fn client(server: &RedisServer, waiter_timeout: Duration) -> Lockguard {
    Lockguard::builder()
        .waiter_timeout(waiter_timeout)
        .connect(&server.url())
        .await
        .expect("connect")
}

/// Eight clients queue one after another while the lock is held; a release
/// serves them in exactly that order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_order_across_8_clients() {
    let server = RedisServer::start();
    let holder = client(&server, Duration::from_secs(1)).await;
    let guard = holder.lock("fifo").acquire().await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    for i in 0..8u64 {
        let lg = client(&server, Duration::from_secs(1)).await;
        let tx = tx.clone();
        tokio::spawn(async move {
            let g = lg
                .lock("fifo")
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .expect("acquire");
            tx.send(i).unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
            assert!(g.release().await.unwrap(), "lost the lock while holding it");
        });
        until_queued(&server, "lock", "fifo", i + 1).await;
    }
    drop(tx);
    assert!(guard.release().await.unwrap());
    let mut order = Vec::new();
    while let Some(i) = tokio::time::timeout(Duration::from_secs(20), rx.recv())
        .await
        .expect("a waiter was never served")
    {
        order.push(i);
    }
    assert_eq!(order, (0..8).collect::<Vec<_>>());
}

/// Two tasks in each of three clients take turns on one key for three
/// seconds: every task gets a fair share and none waits much longer than
/// the others' holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_starvation_two_tasks_per_client() {
    let server = RedisServer::start();
    let hold = Duration::from_millis(2);
    let run = Duration::from_secs(3);
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let lg = client(&server, Duration::from_secs(1)).await;
        for _ in 0..2 {
            let (lg, inside) = (lg.clone(), inside.clone());
            tasks.push(tokio::spawn(async move {
                let started = Instant::now();
                let (mut count, mut longest) = (0u32, Duration::ZERO);
                while started.elapsed() < run {
                    let asked = Instant::now();
                    let g = lg
                        .lock("hot")
                        .wait(Duration::from_secs(10))
                        .acquire()
                        .await
                        .expect("acquire");
                    longest = longest.max(asked.elapsed());
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    tokio::time::sleep(hold).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert!(g.release().await.unwrap());
                    count += 1;
                }
                (count, longest)
            }));
        }
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    println!("acquisitions and longest wait per task: {results:?}");
    let counts: Vec<u32> = results.iter().map(|r| r.0).collect();
    let mean = counts.iter().sum::<u32>() / counts.len() as u32;
    let min = *counts.iter().min().unwrap();
    let max = *counts.iter().max().unwrap();
    assert!(mean > 20, "too few acquisitions to judge: {counts:?}");
    assert!(
        f64::from(min) >= 0.67 * f64::from(max),
        "uneven shares: {counts:?}"
    );
    // Five others ahead at most, each holding ~2 ms (tokio's timer rounds
    // up): far below this, unless someone was passed over.
    let longest = results.iter().map(|r| r.1).max().unwrap();
    assert!(
        longest < Duration::from_millis(500),
        "a task waited {longest:?}"
    );
}

/// The child half of `killed_waiter_process_delays_the_queue_by_at_most_the_bound`:
/// run only as a child process of that test (which sets the variable), it
/// queues for the lock and waits until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of killed_waiter_process_delays_the_queue_by_at_most_the_bound"]
async fn child_waiter() {
    let Ok(url) = std::env::var("LOCKGUARD_QUEUE_CHILD") else {
        eprintln!("child_waiter runs only as the child of the killed-waiter test");
        return;
    };
    let lg = Lockguard::builder()
        .waiter_timeout(Duration::from_millis(500))
        .connect(&url)
        .await
        .expect("child connects");
    let g = lg
        .lock("victim")
        .wait(Duration::from_secs(60))
        .acquire()
        .await;
    // Killed before this: the parent holds the lock until then.
    panic!("the child was not killed while queued: {g:?}");
}

/// A waiter process killed with SIGKILL while first in the queue delays the
/// next waiter by at most the waiter timeout, never the holder's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_waiter_process_delays_the_queue_by_at_most_the_bound() {
    let server = RedisServer::start();
    let timeout = Duration::from_millis(500);
    let holder = client(&server, timeout).await;
    let guard = holder
        .lock("victim")
        .lease(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_waiter", "--ignored", "--nocapture"])
        .env("LOCKGUARD_QUEUE_CHILD", server.url())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn the child waiter");
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let reaped = eventually(Duration::from_secs(20), || async {
        queued(&server, "lock", "victim").await == 1
    })
    .await;
    if !reaped {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the child process never queued");
    }
    let mut child = Reap(child);
    let second = client(&server, timeout).await;
    let waiter = tokio::spawn(async move {
        let g = second
            .lock("victim")
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .expect("the second waiter acquires");
        let at = Instant::now();
        assert!(g.release().await.unwrap());
        at
    });
    until_queued(&server, "lock", "victim", 2).await;
    child.0.kill().expect("SIGKILL the child");
    child.0.wait().expect("reap the child");
    let released = Instant::now();
    assert!(guard.release().await.unwrap());
    let acquired = waiter.await.unwrap();
    let delay = acquired - released;
    println!("next waiter acquired {delay:?} after the release");
    assert!(
        delay < timeout + Duration::from_secs(1),
        "the dead waiter held up the queue for {delay:?}"
    );
}

/// A waiter whose acquire future is dropped leaves the queue at once: the
/// waiter behind it is served on the release, not after a timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_acquire_leaves_the_queue() {
    let server = RedisServer::start();
    let holder = client(&server, Duration::from_secs(1)).await;
    let guard = holder.lock("gone").acquire().await.unwrap();
    let first = client(&server, Duration::from_secs(30)).await;
    let dropped = tokio::spawn(async move {
        let _ = first
            .lock("gone")
            .wait(Duration::from_secs(60))
            .acquire()
            .await;
    });
    until_queued(&server, "lock", "gone", 1).await;
    let second = client(&server, Duration::from_secs(30)).await;
    let waiter = tokio::spawn(async move {
        let g = second
            .lock("gone")
            .wait(Duration::from_secs(60))
            .acquire()
            .await
            .expect("the second waiter acquires");
        let at = Instant::now();
        assert!(g.release().await.unwrap());
        at
    });
    until_queued(&server, "lock", "gone", 2).await;
    dropped.abort();
    assert!(dropped.await.unwrap_err().is_cancelled());
    // Both waiters' places are kept 30 s without a refresh: only leaving
    // takes the dropped one out this soon.
    let left = eventually(Duration::from_secs(2), || async {
        queued(&server, "lock", "gone").await == 1
    })
    .await;
    assert!(left, "the dropped waiter is still queued");
    let released = Instant::now();
    assert!(guard.release().await.unwrap());
    let delay = waiter.await.unwrap() - released;
    assert!(
        delay < Duration::from_secs(2),
        "the second waiter waited {delay:?}"
    );
    assert_eq!(queued(&server, "lock", "gone").await, 0);
}

/// Ids of the server's client connections.
async fn client_ids(server: &RedisServer) -> Vec<u64> {
    let mut conn = server.connection().await;
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn)
        .await
        .unwrap();
    list.lines()
        .filter_map(|l| l.strip_prefix("id="))
        .filter_map(|l| l.split(' ').next()?.parse().ok())
        .collect()
}

/// The waiter a lock is handed to loses both its connections at that
/// moment (its notification is lost with them): it reconnects and takes
/// the lock with its next refresh, within its waiter timeout, and no one
/// else gets it meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_target_connection_killed() {
    let server = RedisServer::start();
    let timeout = Duration::from_millis(600);
    let holder = client(&server, timeout).await;
    let guard = holder
        .lock("cut")
        .lease(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap();
    let before = client_ids(&server).await;
    let target = client(&server, timeout).await;
    let waiter = tokio::spawn(async move {
        let g = target
            .lock("cut")
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .expect("the target acquires");
        (Instant::now(), g)
    });
    until_queued(&server, "lock", "cut", 1).await;
    let theirs: Vec<u64> = client_ids(&server)
        .await
        .into_iter()
        .filter(|id| !before.contains(id))
        .collect();
    let mut admin = server.connection().await;
    let mine: u64 = redis::cmd("CLIENT")
        .arg("ID")
        .query_async(&mut admin)
        .await
        .unwrap();
    let mut killed = 0;
    for id in theirs.iter().filter(|id| **id != mine) {
        let n: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(id)
            .query_async(&mut admin)
            .await
            .unwrap();
        killed += n;
    }
    assert!(killed >= 2, "the target's command and pub/sub connections");
    let old_fence = guard.fencing_token();
    let released = Instant::now();
    assert!(guard.release().await.unwrap());
    // Nobody else can take it meanwhile.
    let other = client(&server, timeout).await;
    assert!(other.lock("cut").try_acquire().await.unwrap_err().is_busy());
    let (acquired, g) = waiter.await.unwrap();
    let delay = acquired - released;
    println!("the cut-off target acquired {delay:?} after the release");
    assert!(delay < timeout + Duration::from_secs(1), "took {delay:?}");
    assert!(g.fencing_token() > old_fence);
    assert!(g.release().await.unwrap());
}

/// Redis restarts empty with a holder and five queued waiters: the waiters
/// queue again and each acquires in turn, never two at once, well within
/// their wait; the old holder learns it lost the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_restarted_with_a_full_queue() {
    let mut server = RedisServer::start();
    let holder = client(&server, Duration::from_secs(1)).await;
    let guard = holder
        .lock("reborn")
        .watchdog(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    let inside = Arc::new(AtomicUsize::new(0));
    let mut waiters = Vec::new();
    for i in 0..5u64 {
        let lg = client(&server, Duration::from_secs(1)).await;
        let inside = inside.clone();
        waiters.push(tokio::spawn(async move {
            let asked = Instant::now();
            let g = lg
                .lock("reborn")
                .lease(Duration::from_secs(5))
                .wait(Duration::from_secs(15))
                .acquire()
                .await
                .expect("a waiter acquires after the restart");
            assert_eq!(
                inside.fetch_add(1, Ordering::SeqCst),
                0,
                "two waiters hold it"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
            inside.fetch_sub(1, Ordering::SeqCst);
            assert!(g.release().await.unwrap());
            asked.elapsed()
        }));
        until_queued(&server, "lock", "reborn", i + 1).await;
    }
    let lost = guard.lost();
    server.restart();
    for w in waiters {
        let waited = w.await.unwrap();
        assert!(waited < Duration::from_secs(12), "waited {waited:?}");
    }
    let err = tokio::time::timeout(Duration::from_secs(3), lost)
        .await
        .expect("the old holder learns of the loss within its lease");
    assert!(err.is_lease_lost(), "{err}");
}

/// Six waiters of six clients queue for a full semaphore; each permit given
/// back goes to the next of them in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_permits_in_fifo_order() {
    let server = RedisServer::start();
    let owner = client(&server, Duration::from_secs(1)).await;
    let sem = owner.semaphore("slots", 2);
    let mut held = vec![sem.acquire().await.unwrap(), sem.acquire().await.unwrap()];
    let (tx, mut rx) = mpsc::unbounded_channel();
    for i in 0..6u64 {
        let lg = client(&server, Duration::from_secs(1)).await;
        let tx = tx.clone();
        tokio::spawn(async move {
            let p = lg
                .semaphore("slots", 2)
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .expect("a permit");
            tx.send((i, p)).unwrap();
        });
        until_queued(&server, "sem", "slots", i + 1).await;
    }
    drop(tx);
    // Give back one permit at a time; each goes to the next in line.
    for expected in 0..6 {
        let p = held.remove(0);
        assert!(p.release().await.unwrap());
        let (i, permit) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("the permit was handed on")
            .unwrap();
        assert_eq!(i, expected, "permit handed out of order");
        held.push(permit);
    }
    for p in held {
        assert!(p.release().await.unwrap());
    }
}
