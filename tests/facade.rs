//! End-to-end tests of the `lockguard` facade against a real `redis-server`.

use std::time::Duration;

use lockguard::prelude::*;
use lockguard::{Client, ErrorKind};
use lockguard_testing::RedisServer;

/// Two "processes" (separate connections) increment a fenced value under
/// the lock through the facade: no increment is lost, and every write's
/// token is newer than the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_counter_under_the_lock_loses_no_update() {
    let server = RedisServer::start();
    let a = Client::connect_redis(&server.url()).await.unwrap();
    let b = Client::connect_redis(&server.url()).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let lg = if i % 2 == 0 { a.clone() } else { b.clone() };
        tasks.push(tokio::spawn(async move {
            for _ in 0..50 {
                let guard = lg
                    .lock("e2e")
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                    .unwrap();
                let res = lg.fenced("e2e:count");
                let n: u64 = match res.read().await.unwrap() {
                    Some(v) => {
                        assert!(v.token < guard.fencing_token());
                        String::from_utf8(v.value).unwrap().parse().unwrap()
                    }
                    None => 0,
                };
                res.write(guard.fencing_token(), (n + 1).to_string())
                    .await
                    .unwrap();
                assert!(guard.release().await.unwrap());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let v = a.fenced("e2e:count").read().await.unwrap().unwrap();
    assert_eq!(String::from_utf8(v.value).unwrap(), "400");
}

/// Keys of different clients with different prefixes never collide.
#[tokio::test]
async fn prefixes_separate_applications() {
    let server = RedisServer::start();
    let billing = Client::builder()
        .prefix("billing:")
        .connect_redis(&server.url())
        .await
        .unwrap();
    let shipping = Client::builder()
        .prefix("shipping:")
        .connect_redis(&server.url())
        .await
        .unwrap();
    let a = billing.lock("order:1").acquire().await.unwrap();
    let b = shipping.lock("order:1").try_acquire().await.unwrap();
    let mut conn = server.connection().await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        keys.contains(&"billing:lock:{order:1}".to_owned()),
        "{keys:?}"
    );
    assert!(
        keys.contains(&"shipping:lock:{order:1}".to_owned()),
        "{keys:?}"
    );
    assert!(a.release().await.unwrap() && b.release().await.unwrap());
    let busy = billing.lock("order:1").try_acquire().await.unwrap();
    let err = billing
        .peer()
        .lock("order:1")
        .try_acquire()
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Busy);
    busy.release().await.unwrap();
}
