//! The etcd test harness on real servers: a member alone starts, serves,
//! pauses and restarts; a cluster elects a leader, fails over and takes a
//! restarted member back.

use std::io::ErrorKind;
use std::time::{Duration, Instant};

use lockguard_etcd::testing::{EtcdCluster, EtcdServer};
use lockguard_testing::ServerProcess;

/// `POST /v3/kv/put` of `key` = `value`, both base64 in the gateway's JSON.
fn put(server: &EtcdServer, key_b64: &str, value_b64: &str) {
    let body = format!(r#"{{"key":"{key_b64}","value":"{value_b64}"}}"#);
    let response = server
        .request("POST", "/v3/kv/put", Some(&body), Duration::from_secs(5))
        .expect("put answered");
    assert_eq!(response.status, 200, "put: {}", response.body);
}

/// The body of `POST /v3/kv/range` of `key`.
fn range(server: &EtcdServer, key_b64: &str) -> String {
    let body = format!(r#"{{"key":"{key_b64}"}}"#);
    let response = server
        .request("POST", "/v3/kv/range", Some(&body), Duration::from_secs(5))
        .expect("range answered");
    assert_eq!(response.status, 200, "range: {}", response.body);
    response.body
}

#[test]
fn a_member_alone_serves_and_leads() {
    let server = EtcdServer::start();
    assert!(server.is_running());
    let health = server
        .request("GET", "/health", None, Duration::from_secs(2))
        .expect("/health answered");
    assert_eq!(health.status, 200);
    assert!(
        health.body.contains(r#""health":"true""#),
        "{}",
        health.body
    );
    assert!(server.is_leader(), "status: {:?}", server.status());
    assert_eq!(server.endpoint(), format!("127.0.0.1:{}", server.port()));
    assert_eq!(server.url(), format!("etcd://127.0.0.1:{}", server.port()));
    assert_eq!(
        ServerProcess::name(&server),
        format!("etcd:{}", server.port())
    );
}

#[test]
fn the_shared_member_is_one_and_serves() {
    let shared = EtcdServer::shared();
    assert!(std::ptr::eq(shared, EtcdServer::shared()));
    assert!(shared.is_healthy());
}

#[test]
fn a_lease_of_one_second_keeps_its_ttl() {
    // With the harness's election timeout of 500 ms etcd's smallest TTL is
    // 1 s; with its default of 1 s it would raise this one to 2 s.
    let response = EtcdServer::shared()
        .request(
            "POST",
            "/v3/lease/grant",
            Some(r#"{"TTL":1}"#),
            Duration::from_secs(5),
        )
        .expect("lease grant answered");
    assert_eq!(response.status, 200, "{}", response.body);
    assert!(response.body.contains(r#""TTL":"1""#), "{}", response.body);
}

#[test]
fn a_paused_member_does_not_answer_until_resumed() {
    let mut server = EtcdServer::start();
    server.pause();
    assert!(server.is_paused());
    let started = Instant::now();
    let paused = server.request("GET", "/health", None, Duration::from_millis(500));
    let error = paused.expect_err("a paused member answered");
    assert_eq!(error.kind(), ErrorKind::TimedOut, "{error}");
    assert!(started.elapsed() >= Duration::from_millis(450));
    server.resume();
    let health = server
        .request("GET", "/health", None, Duration::from_secs(5))
        .expect("/health answered after resume");
    assert!(
        health.body.contains(r#""health":"true""#),
        "{}",
        health.body
    );
}

#[test]
fn a_restarted_member_keeps_its_data() {
    let mut server = EtcdServer::start();
    let port = server.port();
    // "harness" = "kept".
    put(&server, "aGFybmVzcw==", "a2VwdA==");
    server.kill();
    assert!(!server.is_running());
    assert!(
        server
            .request("GET", "/health", None, Duration::from_secs(1))
            .is_err()
    );
    server.restart();
    assert_eq!(server.port(), port);
    assert!(server.is_healthy());
    assert!(range(&server, "aGFybmVzcw==").contains("a2VwdA=="));
}

#[test]
fn a_cluster_fails_over_and_takes_a_restarted_member_back() {
    let mut cluster = EtcdCluster::start(3);
    assert_eq!(cluster.len(), 3);
    let ports: Vec<String> = (0..3)
        .map(|i| format!("127.0.0.1:{}", cluster.member(i).port()))
        .collect();
    assert_eq!(cluster.endpoints(), ports.join(","));
    assert_eq!(cluster.url(), format!("etcd://{}", ports.join(",")));
    let first = cluster.wait_for_leader(Duration::from_secs(5));
    assert_eq!(cluster.leader(), Some(first));
    // "cluster" = "one", written through a follower.
    put(cluster.member((first + 1) % 3), "Y2x1c3Rlcg==", "b25l");

    cluster.member_mut(first).kill();
    let killed = Instant::now();
    let second = cluster.wait_for_leader(Duration::from_secs(5));
    assert_ne!(second, first);
    eprintln!("a new leader after {:?}", killed.elapsed());

    cluster.member_mut(first).restart();
    let back = cluster.member(first);
    assert!(back.is_healthy());
    let status = back.status().expect("the restarted member's status");
    let leader = cluster
        .member(second)
        .status()
        .expect("the leader's status");
    assert_eq!(status.leader, Some(leader.member_id));
    assert!(range(back, "Y2x1c3Rlcg==").contains("b25l"));
    cluster.wait_until_serving();
}

#[test]
fn a_member_restarted_without_a_quorum_serves_once_another_is_back() {
    let mut cluster = EtcdCluster::start(3);
    for i in 0..3 {
        cluster.member_mut(i).kill();
    }
    // Alone of three: it starts, and cannot serve: it takes connections
    // and answers nothing until it has been in a quorum.
    cluster.member_mut(0).restart();
    assert!(cluster.member(0).is_running());
    let alone = cluster
        .member(0)
        .request("GET", "/health", None, Duration::from_millis(300));
    assert_eq!(
        alone
            .expect_err("a member without a quorum answered")
            .kind(),
        ErrorKind::TimedOut
    );
    assert_eq!(cluster.leader(), None);
    // With a second member back the two make a quorum.
    cluster.member_mut(1).restart();
    assert!(cluster.member(1).is_healthy());
    cluster.wait_for_leader(Duration::from_secs(5));
    cluster.restart_members(&[2]);
    assert!((0..3).all(|i| cluster.member(i).is_healthy()));
}
