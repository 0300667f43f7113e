//! `lockguard check etcd://...` against real members: one member is
//! warned about, three pass; a member that is down is told by name; the
//! lease TTL the cluster grants is reported, and whether it compacted.

use lockguard_core::check::{Report, Verdict};
use lockguard_etcd::testing::{EtcdCluster, EtcdServer};

fn verdict(report: &Report, subject: &str) -> Verdict {
    report
        .about(subject)
        .next()
        .unwrap_or_else(|| panic!("no finding about {subject}:\n{report}"))
        .verdict
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_check_warns_of_a_single_member() {
    let server = EtcdServer::start();
    let report = lockguard_etcd::url::check_url(&server.url()).await.unwrap();
    println!("{report}");
    assert_eq!(report.store, "etcd");
    assert_eq!(verdict(&report, "members"), Verdict::Warn, "{report}");
    assert_eq!(verdict(&report, "quorum"), Verdict::Ok, "{report}");
    assert_eq!(verdict(&report, "version"), Verdict::Ok, "{report}");
    assert!(report.to_string().contains("etcd 3."), "{report}");
    assert_eq!(verdict(&report, "lease TTL"), Verdict::Ok, "{report}");
    // A fresh member has not compacted: said, and not yet a warning.
    assert_eq!(verdict(&report, "compaction"), Verdict::Ok, "{report}");
    let finding = report.about("compaction").next().unwrap();
    assert!(finding.detail.contains("no compaction yet"), "{report}");
    // Once it compacts, the check says so.
    let mut raw = lockguard_etcd::etcd_client::Client::connect([server.endpoint()], None)
        .await
        .unwrap();
    let put = raw.put("k", "v", None).await.unwrap();
    let revision = put.header().unwrap().revision();
    raw.compact(revision, None).await.unwrap();
    let report = lockguard_etcd::url::check_url(&server.url()).await.unwrap();
    println!("{report}");
    let finding = report.about("compaction").next().unwrap();
    assert_eq!(finding.verdict, Verdict::Ok, "{report}");
    assert!(finding.detail.contains("has compacted"), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_check_passes_three_members_and_names_one_that_is_down() {
    let mut cluster = EtcdCluster::start(3);
    let report = lockguard_etcd::url::check_url(&cluster.url())
        .await
        .unwrap();
    println!("{report}");
    assert_eq!(report.verdict(), Verdict::Ok, "{report}");
    assert!(report.to_string().contains("3 voting members"), "{report}");

    // A follower: the cluster keeps its leader, and the check is of a
    // cluster that serves.
    let leader = cluster.wait_for_leader(std::time::Duration::from_secs(30));
    let follower = (leader + 1) % cluster.len();
    let down = cluster.member(follower).endpoint();
    lockguard_testing::ServerProcess::kill(cluster.member_mut(follower));
    let report = lockguard_etcd::url::check_url(&cluster.url())
        .await
        .unwrap();
    println!("{report}");
    assert_eq!(verdict(&report, "quorum"), Verdict::Warn, "{report}");
    let quorum = report.about("quorum").next().unwrap();
    assert!(quorum.detail.contains(&down), "{report}");
}

#[tokio::test]
async fn etcd_check_of_bad_urls_is_an_error() {
    let e = lockguard_etcd::url::check_url("etcd://127.0.0.1")
        .await
        .unwrap_err();
    assert!(e.is_invalid_input(), "{e}");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = lockguard_etcd::url::check_url(&format!("etcd://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    assert!(e.is_unavailable(), "{e}");
}
