//! Read-write locks on PostgreSQL with a real holder process: a writer
//! killed with SIGKILL (no release) frees the lock within its lease, to
//! the readers queued behind it, together, with greater fencing tokens.
//! (Their semantics are the conformance kit's `rw_locks` group.)

use std::time::Duration;

use lockguard_core::Client;
use lockguard_postgres::ClientExt as _;
use lockguard_testing::{ChildProcess, PostgresServer};
use tokio::time::Instant;

/// Set to the server's URL, makes the child test hold its lock until
/// killed.
const CHILD_ENV: &str = "LOCKGUARD_PG_SHAPES_CHILD";

/// The lease of the child's hold, renewed by its watchdog while it lives.
const LEASE: Duration = Duration::from_secs(1);

/// The child of `a_killed_writer_frees_the_read_write_lock_within_its_lease`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of a_killed_writer_frees_the_read_write_lock_within_its_lease"]
async fn child_writer() {
    let Ok(url) = std::env::var(CHILD_ENV) else {
        return;
    };
    let lg = Client::connect_postgres(&url).await.expect("connect");
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

/// A writer process is killed: the two readers waiting behind it get the
/// lock together within the lease, with tokens greater than the writer's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_writer_frees_the_read_write_lock_within_its_lease() {
    let server = PostgresServer::start();
    let mut child =
        ChildProcess::spawn("postgres_shapes::child_writer", (CHILD_ENV, &server.url()));
    let line = child.expect("held ");
    let writer: u64 = line["held ".len()..].trim().parse().expect("a token");
    let mut readers = Vec::new();
    for _ in 0..2 {
        let lg = Client::connect_postgres(&server.url()).await.unwrap();
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
    // The child's watchdog keeps the lock past several leases.
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
        let took = got - killed;
        println!("a reader got in {took:?} after the kill (lease {LEASE:?})");
        let bound = LEASE + Duration::from_millis(500);
        assert!(
            took < bound,
            "took {took:?}, more than the lease ({bound:?})"
        );
        assert!(g.fencing_token().get() > writer);
        guards.push(g);
    }
    // Both read at once.
    assert!(guards.iter().all(|g| g.is_held()));
    let seen = Client::connect_postgres(&server.url())
        .await
        .unwrap()
        .rw_lock("doc")
        .inspect()
        .await
        .unwrap();
    assert_eq!((seen.readers, seen.writer), (2, false), "{seen:?}");
    for g in guards {
        assert!(g.release().await.unwrap());
    }
}
