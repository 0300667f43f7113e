//! Multi-key locks, read-write locks and leader election on PostgreSQL
//! with a real holder process: one killed with SIGKILL (no release, no
//! resignation) frees what it held within its lease, to the waiters queued
//! behind it, with greater fencing tokens (a greater term). (The fault
//! kit's scenario; their semantics are the conformance kit's
//! `multi_locks`, `rw_locks` and `leader` groups.)

use std::time::Duration;

use lockguard_core::Client;
use lockguard_postgres::ClientExt as _;
use lockguard_testing::PostgresServer;
use lockguard_testing::faults::{
    Holding, Kill, a_killed_holder_is_replaced,
    a_paused_waiter_never_holds_a_grant_it_slept_through,
    a_wait_rides_out_a_pause_longer_than_its_lease, at_least_outlives_the_process_that_took_it,
    hold_until_killed,
};

/// The lease of the child's hold, renewed by its watchdog while it lives.
const LEASE: Duration = Duration::from_secs(1);

/// The child of the tests below, run only in the process they start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of the killed-holder tests"]
async fn child_holder() {
    hold_until_killed(LEASE, async |url| Client::connect_postgres(url).await).await;
}

async fn killed(holding: Holding) {
    let server = PostgresServer::start();
    let lg = Client::connect_postgres(&server.url()).await.unwrap();
    let kill = Kill::new("postgres_shapes::child_holder", &server.url(), LEASE);
    a_killed_holder_is_replaced(holding, kill, &lg).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_multi_lock_holder_frees_every_key_within_its_lease() {
    killed(Holding::MultiLock).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_writer_frees_the_read_write_lock_within_its_lease() {
    killed(Holding::Writer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_process_is_replaced_within_its_lease() {
    killed(Holding::Leader).await;
}

/// A scheduled job's process releases its lock before its `at_least` and
/// exits: the lock stays taken until `at_least` has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_outlives_the_job_process_that_took_it() {
    let server = PostgresServer::start();
    let lg = Client::connect_postgres(&server.url()).await.unwrap();
    let kill = Kill::new("postgres_shapes::child_holder", &server.url(), LEASE);
    at_least_outlives_the_process_that_took_it(kill, &lg).await;
}

/// A waiter process frozen while the server grants it the lock (its wait
/// runs in the server) and past the lease: resumed, it does not count on
/// that grant (its lease runs from the grant, not from when it reads it)
/// while another holds the lock; it gets the lock after, with a greater
/// token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_waiter_never_holds_a_grant_it_slept_through_on_postgres() {
    let server = PostgresServer::start();
    let lg = Client::connect_postgres(&server.url()).await.unwrap();
    let kill = Kill::new("postgres_shapes::child_holder", &server.url(), LEASE);
    a_paused_waiter_never_holds_a_grant_it_slept_through(kill, &lg).await;
}

/// A grant answered after a pause of the server longer than its lease is
/// given back and the wait queues again, taking the lock within its wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_rides_out_a_postgres_pause_longer_than_its_lease() {
    let mut server = PostgresServer::start();
    let holder = Client::connect_postgres(&server.url()).await.unwrap();
    let waiter = Client::connect_postgres(&server.url()).await.unwrap();
    a_wait_rides_out_a_pause_longer_than_its_lease(&mut server, &holder, &waiter).await;
}
