//! Multi-key and read-write locks on Redis with a real holder process:
//! one killed with SIGKILL (no release) frees what it held within its
//! lease, to the waiter queued behind it, with greater fencing tokens.
//! (Their semantics are the conformance kit's `multi_locks` and `rw_locks`
//! groups.)

use std::time::Duration;

use lockguard_core::Client;
use lockguard_redis::ClientExt as _;
use lockguard_testing::{ChildProcess, RedisServer};
use tokio::time::Instant;

/// Set to the Redis URL, makes a child test hold its lock until killed.
const CHILD_ENV: &str = "LOCKGUARD_SHAPES_CHILD";

/// The lease of the child's hold, renewed by its watchdog while it lives.
const LEASE: Duration = Duration::from_secs(1);

/// The child of `a_killed_multi_lock_holder_frees_every_key_within_its_lease`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of a_killed_multi_lock_holder_frees_every_key_within_its_lease"]
async fn child_multi_lock() {
    let Ok(url) = std::env::var(CHILD_ENV) else {
        return;
    };
    let lg = Client::connect_redis(&url).await.expect("connect");
    let g = lg
        .multi_lock(["acct:1", "acct:2"])
        .watchdog(LEASE)
        .acquire()
        .await
        .expect("the child takes both keys");
    let tokens: Vec<String> = g
        .fencing_tokens()
        .map(|(_, f)| f.get().to_string())
        .collect();
    println!("held {}", tokens.join(" "));
    let lost = g.lost().await;
    panic!("the child lost its keys before it was killed: {lost}");
}

/// The child of `a_killed_writer_frees_the_read_write_lock_within_its_lease`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of a_killed_writer_frees_the_read_write_lock_within_its_lease"]
async fn child_writer() {
    let Ok(url) = std::env::var(CHILD_ENV) else {
        return;
    };
    let lg = Client::connect_redis(&url).await.expect("connect");
    let g = lg
        .rw_lock("doc")
        .write()
        .watchdog(LEASE)
        .acquire()
        .await
        .expect("the child writes");
    println!("held {}", g.fencing_token().get());
    let lost = g.lost().await;
    panic!("the child lost its write lock before it was killed: {lost}");
}

/// The tokens a child printed as `held T1 T2 ...`.
fn held(child: &mut ChildProcess) -> Vec<u64> {
    let line = child.expect("held ");
    line["held ".len()..]
        .split_whitespace()
        .map(|t| t.parse().expect("a token"))
        .collect()
}

/// Waits until `done` (after `killed`) within the lease plus slack.
fn within_lease(killed: Instant, done: Instant) {
    let took = done - killed;
    println!("freed {took:?} after the kill (lease {LEASE:?})");
    let bound = LEASE + Duration::from_millis(500);
    assert!(
        took < bound,
        "took {took:?}, more than the lease (bound {bound:?})"
    );
}

/// A process holding a multi-lock is killed: a multi-lock waiting on the
/// same keys (named the other way round) gets both within the lease, with
/// greater tokens, and never while the child lived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_multi_lock_holder_frees_every_key_within_its_lease() {
    let server = RedisServer::start();
    let mut child = ChildProcess::spawn("child_multi_lock", (CHILD_ENV, &server.url()));
    let child_tokens = held(&mut child);
    let lg = Client::connect_redis(&server.url()).await.unwrap();
    let waiting = tokio::spawn(async move {
        let g = lg
            .multi_lock(["acct:2", "acct:1"])
            .wait(Duration::from_secs(30))
            .acquire()
            .await
            .expect("the waiter takes both keys");
        (Instant::now(), g)
    });
    // The child's watchdog keeps both keys past several leases.
    tokio::time::sleep(LEASE * 2).await;
    assert!(!waiting.is_finished(), "taken while the child held them");
    child.kill();
    let killed = Instant::now();
    let (got, g) = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("never taken")
        .unwrap();
    within_lease(killed, got);
    let tokens: Vec<u64> = g.fencing_tokens().map(|(_, f)| f.get()).collect();
    assert!(
        tokens.iter().zip(&child_tokens).all(|(a, b)| a > b),
        "{tokens:?} after the child's {child_tokens:?}"
    );
    assert!(g.release().await.unwrap());
}

/// A writer process is killed: readers waiting behind it get the lock
/// together within the lease, with tokens greater than the writer's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_writer_frees_the_read_write_lock_within_its_lease() {
    let server = RedisServer::start();
    let mut child = ChildProcess::spawn("child_writer", (CHILD_ENV, &server.url()));
    let writer_token = held(&mut child)[0];
    let mut readers = Vec::new();
    for _ in 0..2 {
        let lg = Client::connect_redis(&server.url()).await.unwrap();
        readers.push(tokio::spawn(async move {
            let g = lg
                .rw_lock("doc")
                .read()
                .wait(Duration::from_secs(30))
                .acquire()
                .await
                .expect("the reader gets the lock");
            (Instant::now(), g)
        }));
    }
    tokio::time::sleep(LEASE * 2).await;
    assert!(
        readers.iter().all(|r| !r.is_finished()),
        "a reader got in while the writer lived"
    );
    child.kill();
    let killed = Instant::now();
    let mut guards = Vec::new();
    for r in readers {
        let (got, g) = tokio::time::timeout(Duration::from_secs(30), r)
            .await
            .expect("a reader never got in")
            .unwrap();
        within_lease(killed, got);
        assert!(g.fencing_token().get() > writer_token);
        guards.push(g);
    }
    // Both read at once.
    assert!(guards.iter().all(|g| g.is_held()));
    for g in guards {
        assert!(g.release().await.unwrap());
    }
}
