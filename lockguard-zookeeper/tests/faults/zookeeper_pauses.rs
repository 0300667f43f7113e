//! A ZooKeeper server paused (SIGSTOP) past the session of a client that
//! holds a read-write lock, a multi-lock or a lead: the holder signals the
//! loss within its lease (three fifths of its 1 s session), and once the
//! ensemble has expired the session, the next holder's token fences the
//! old one out (the kit's `faults::a_pause_takes_*` scenarios).

use std::time::Duration;

use lockguard_core::Client;
use lockguard_testing::ZooKeeperServer;
use lockguard_testing::faults::{
    PausePlan, a_pause_takes_the_leaders_lease, a_pause_takes_the_multi_locks_lease,
    a_pause_takes_the_writers_lease, a_wait_rides_out_a_pause_longer_than_its_lease,
};

use crate::zookeeper::connect_in_session;

const SESSION: Duration = Duration::from_secs(1);

/// The holder's client, in a 1 s session with a short response timeout,
/// and the next holder's, in a session that outlives the pause.
async fn clients(server: &ZooKeeperServer) -> (Client, Client) {
    let a = connect_in_session(
        &server.hosts(),
        Client::builder().response_timeout(Duration::from_millis(200)),
        SESSION,
    )
    .await;
    let b = connect_in_session(&server.hosts(), Client::builder(), Duration::from_secs(30)).await;
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_paused_past_a_writers_session_takes_its_lease_and_its_fence() {
    let mut server = ZooKeeperServer::start();
    let (a, b) = clients(&server).await;
    a_pause_takes_the_writers_lease(&mut server, PausePlan::session(SESSION), &a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_paused_past_a_multi_locks_session_takes_its_lease_and_its_fences() {
    let mut server = ZooKeeperServer::start();
    let (a, b) = clients(&server).await;
    a_pause_takes_the_multi_locks_lease(&mut server, PausePlan::session(SESSION), &a, &b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_paused_past_a_leaders_session_takes_its_lease_and_its_term() {
    let mut server = ZooKeeperServer::start();
    let (a, b) = clients(&server).await;
    a_pause_takes_the_leaders_lease(&mut server, PausePlan::session(SESSION), &a, &b).await;
}

/// A wait across a 1.2 s pause, longer than the 400 ms lease it asks for,
/// takes the lock within its wait (both clients in sessions that outlive
/// the pause).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_rides_out_a_zookeeper_pause_longer_than_its_lease() {
    let mut server = ZooKeeperServer::start();
    let session = Duration::from_secs(30);
    let holder = connect_in_session(&server.hosts(), Client::builder(), session).await;
    let waiter = connect_in_session(&server.hosts(), Client::builder(), session).await;
    a_wait_rides_out_a_pause_longer_than_its_lease(&mut server, &holder, &waiter).await;
}
