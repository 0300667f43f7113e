//! The attribute macros and the tower layers on a ZooKeeper client,
//! unchanged, against a real server the harness starts.
#![cfg(all(feature = "macros", feature = "tower", feature = "zookeeper"))]

mod support;

use lockguard::prelude::*;
use lockguard::{Client, ErrorKind};
use lockguard_testing::ZooKeeperServer;
use support::{Shop, all_at_once, the_lock_and_limit_layers_refuse_then_serve};

async fn client(server: &ZooKeeperServer) -> Client {
    Client::connect_zookeeper(&server.hosts())
        .await
        .expect("connect to zookeeper")
}

/// Three processes (clients) pay the same order through the macro: never
/// two inside at once; they export through a concurrency limit of 2: never
/// three inside. A rate limit, which ZooKeeper does not offer, is an error
/// the function returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_macros_work_on_a_zookeeper_client() {
    let server = ZooKeeperServer::start();
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(client(&server).await);
    }
    let shops = all_at_once(Shop::each(clients), |s| async move { s.pay(42).await }).await;
    assert_eq!(shops[0].most_inside(), 1, "two payers were inside at once");
    let shops = all_at_once(shops, |s| async move { s.export().await }).await;
    let most = shops[0].most_inside();
    assert!(most <= 2, "{most} exporters were inside at once");
    let refused = shops[1].search("ann").await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Unsupported, "{refused}");
}

/// A lock layer and a concurrency limit on ZooKeeper: while a request holds
/// the key (or the only permit), another is refused with 409 (503), and
/// once it is done the next is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tower_layers_work_on_a_zookeeper_client() {
    let server = ZooKeeperServer::start();
    the_lock_and_limit_layers_refuse_then_serve(&client(&server).await, "zk-http").await;
}
