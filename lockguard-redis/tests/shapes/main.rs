//! Multi-key locks, read-write locks and leader election on Redis with a
//! real holder process: one killed with SIGKILL (no release, no
//! resignation) frees what it held within its lease, to the waiters queued
//! behind it, with greater fencing tokens (a greater term). (Their
//! semantics are the conformance kit's `multi_locks`, `rw_locks` and
//! `leader` groups; the scenario is the fault kit's.)

use std::time::Duration;

use lockguard_core::Client;
use lockguard_redis::ClientExt as _;
use lockguard_testing::RedisServer;
use lockguard_testing::faults::{
    Holding, Kill, a_killed_holder_is_replaced,
    a_paused_waiter_never_holds_a_grant_it_slept_through,
    at_least_outlives_the_process_that_took_it, hold_until_killed,
};

/// The lease of the child's hold, renewed by its watchdog while it lives.
const LEASE: Duration = Duration::from_secs(1);

/// The child of the tests below, run only in the process they start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of the killed-holder tests"]
async fn child_holder() {
    hold_until_killed(LEASE, async |url| Client::connect_redis(url).await).await;
}

async fn killed(holding: Holding) {
    let server = RedisServer::start();
    let lg = Client::connect_redis(&server.url()).await.unwrap();
    let kill = Kill::new("child_holder", &server.url(), LEASE);
    a_killed_holder_is_replaced(holding, kill, &lg).await;
}

/// A multi-lock waiting on the same keys, named the other way round, gets
/// both within the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_multi_lock_holder_frees_every_key_within_its_lease() {
    killed(Holding::MultiLock).await;
}

/// Both readers waiting behind the writer get in together within the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_writer_frees_the_read_write_lock_within_its_lease() {
    killed(Holding::Writer).await;
}

/// The candidate queued behind the leader is elected within the lease, and
/// readers then see it lead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_process_is_replaced_within_its_lease() {
    killed(Holding::Leader).await;
}

/// A waiter process frozen while the lock is handed to it, past its
/// lease: resumed, it does not hold the lock while another does; it gets
/// it after, with a greater token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_waiter_never_holds_a_grant_it_slept_through_on_redis() {
    let server = RedisServer::start();
    let lg = Client::connect_redis(&server.url()).await.unwrap();
    let kill = Kill::new("child_holder", &server.url(), LEASE);
    a_paused_waiter_never_holds_a_grant_it_slept_through(kill, &lg).await;
}

/// A scheduled job's process releases its lock before its `at_least` and
/// exits: the lock stays taken until `at_least` has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_outlives_the_job_process_that_took_it() {
    let server = RedisServer::start();
    let lg = Client::connect_redis(&server.url()).await.unwrap();
    let kill = Kill::new("child_holder", &server.url(), LEASE);
    at_least_outlives_the_process_that_took_it(kill, &lg).await;
}
