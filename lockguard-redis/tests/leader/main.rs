//! Leader election on Redis with a real leader process: one killed with
//! SIGKILL is replaced by the candidate waiting within its lease. (One
//! leader at a time, arrival order, who leads and lapsed leases are the
//! conformance kit's `leader` group, which every store runs.)

use std::time::Duration;

use lockguard_core::Client;
use lockguard_redis::ClientExt as _;
use lockguard_testing::{ChildProcess, RedisServer};
use tokio::time::Instant;

/// Set to the Redis URL, makes `child_leader` campaign for "failover".
const CHILD_ENV: &str = "LOCKGUARD_LEADER_CHILD";

/// The lease of the child's lead, renewed by its watchdog while it lives.
const LEASE: Duration = Duration::from_secs(1);

/// The child half of `a_killed_leader_process_is_replaced_within_its_lease`,
/// run only in the child process that test starts (which sets
/// `LOCKGUARD_LEADER_CHILD`): it is elected, says its term, and leads until
/// it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the child process of a_killed_leader_process_is_replaced_within_its_lease"]
async fn child_leader() {
    let Ok(url) = std::env::var(CHILD_ENV) else {
        return;
    };
    let lg = Client::connect_redis(&url)
        .await
        .expect("the child connects");
    let lead = lg
        .leader("failover")
        .identity("child")
        .watchdog(LEASE)
        .campaign()
        .await
        .expect("the child is elected");
    println!("elected {}", lead.term());
    // Leads (its watchdog renewing the lease) until killed.
    let lost = lead.lost().await;
    panic!("the child leader lost its lead before it was killed: {lost}");
}

/// A leader process killed with SIGKILL (no release, no resignation) is
/// replaced by the candidate queued behind it once its lease ends: within
/// the lease (plus slack for a loaded machine), with a greater term, and
/// readers then see the new leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_leader_process_is_replaced_within_its_lease() {
    let server = RedisServer::start();
    let mut child = ChildProcess::spawn("child_leader", (CHILD_ENV, &server.url()));
    let line = child.expect("elected ");
    let child_term: u64 = line["elected ".len()..].trim().parse().expect("a term");

    let reader = Client::connect_redis(&server.url()).await.unwrap();
    let election = reader.leader("failover");
    let now = election.current().await.unwrap().expect("the child leads");
    assert_eq!(
        (now.identity_str(), now.term.get()),
        (Some("child"), child_term)
    );

    let lg = Client::connect_redis(&server.url()).await.unwrap();
    let candidate = tokio::spawn(async move {
        let lead = lg
            .leader("failover")
            .identity("parent")
            .watchdog(LEASE)
            .wait(Duration::from_secs(30))
            .campaign()
            .await
            .expect("the waiting candidate is elected");
        (Instant::now(), lead)
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while election.inspect().await.unwrap().waiters != 1 {
        assert!(Instant::now() < deadline, "the candidate never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The child has led for a while: its watchdog renewed the lease.
    tokio::time::sleep(LEASE * 2).await;
    assert!(!candidate.is_finished(), "elected while the child led");

    child.kill();
    let killed = Instant::now();
    let (elected, lead) = tokio::time::timeout(Duration::from_secs(30), candidate)
        .await
        .expect("the candidate was never elected")
        .unwrap();
    let failover = elected - killed;
    println!("a killed leader was replaced {failover:?} after the kill (lease {LEASE:?})");
    let bound = LEASE + Duration::from_millis(500);
    assert!(
        failover < bound,
        "failover took {failover:?}, more than the lease (bound {bound:?})"
    );
    assert!(lead.term().get() > child_term, "the term did not increase");
    let now = election.current().await.unwrap().expect("the parent leads");
    assert_eq!(
        (now.identity_str(), now.term),
        (Some("parent"), lead.term())
    );
    assert!(lead.resign().await.unwrap());
    assert!(election.current().await.unwrap().is_none());
}
