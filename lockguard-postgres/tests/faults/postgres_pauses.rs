//! A paused PostgreSQL (SIGSTOP) against the primitives built on the lock:
//! the holder of a read-write lock, a multi-lock or a lead loses it within
//! its lease, and the next holder's token fences the old one out (the
//! kit's `faults::a_pause_takes_*` scenarios).

use std::time::Duration;

use lockguard_testing::PostgresServer;
use lockguard_testing::faults::{
    PausePlan, a_pause_takes_the_leaders_lease, a_pause_takes_the_multi_locks_lease,
    a_pause_takes_the_writers_lease,
};

use crate::postgres::connect;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_postgres_takes_the_writers_lease_and_its_fence() {
    let mut server = PostgresServer::start();
    let a = connect(&server, Duration::from_millis(150)).await;
    let b = connect(&server, Duration::from_secs(2)).await;
    a_pause_takes_the_writers_lease(&mut server, PausePlan::lease(), &a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_postgres_takes_the_multi_locks_lease_and_its_fences() {
    let mut server = PostgresServer::start();
    let a = connect(&server, Duration::from_millis(150)).await;
    let b = connect(&server, Duration::from_secs(2)).await;
    a_pause_takes_the_multi_locks_lease(&mut server, PausePlan::lease(), &a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_postgres_takes_the_leaders_lease_and_its_term() {
    let mut server = PostgresServer::start();
    let a = connect(&server, Duration::from_millis(150)).await;
    let b = connect(&server, Duration::from_secs(2)).await;
    a_pause_takes_the_leaders_lease(&mut server, PausePlan::lease(), &a, &b).await;
}
