//! The attribute macros and the tower layers on a PostgreSQL client,
//! unchanged, against a real server the harness starts.
#![cfg(all(feature = "macros", feature = "tower", feature = "postgres"))]

mod support;

use lockguard::Client;
use lockguard::prelude::*;
use lockguard_testing::PostgresServer;
use support::{Shop, all_at_once, the_lock_and_limit_layers_refuse_then_serve};

async fn client(server: &PostgresServer) -> Client {
    Client::connect_postgres(&server.url())
        .await
        .expect("connect to postgres")
}

/// Three processes (clients) pay the same order through the macro: never
/// two inside at once; and the macro's limiter refuses the fourth search.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_macros_work_on_a_postgres_client() {
    let server = PostgresServer::shared();
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(client(server).await);
    }
    let shops = all_at_once(Shop::each(clients), |s| async move { s.pay(42).await }).await;
    assert_eq!(shops[0].most_inside(), 1, "two payers were inside at once");
    for _ in 0..3 {
        shops[0].search("ann").await.unwrap();
    }
    let refused = shops[1].search("ann").await.unwrap_err();
    assert!(refused.is_rate_limited(), "{refused}");
}

/// A lock layer and a concurrency limit on PostgreSQL: while a request
/// holds the key (or the only permit), another is refused with 409 (503),
/// and once it is done the next is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tower_layers_work_on_a_postgres_client() {
    let lg = client(PostgresServer::shared()).await;
    the_lock_and_limit_layers_refuse_then_serve(&lg, "pg-http").await;
}
