//! Waits and outages: a wait rides out a store that is down for less than
//! the wait, retrying with backoff, and a wait that ends during an outage
//! says that the store could not be reached (design: "waits ride out
//! blips").

use std::time::{Duration, Instant};

use lockguard_core::Client;
#[cfg(feature = "postgres")]
use lockguard_postgres::BuilderExt as _;
use lockguard_redis::BuilderExt as _;
use lockguard_testing::RedisServer;

use crate::Pausable;

/// The check every store with a server shares: while `server` is down for
/// about a second, a wait of 700 ms ends with the store's error, saying it
/// was retried, and a wait of 30 s started before it takes the lock once
/// the server is back.
pub(crate) async fn a_wait_rides_out_an_outage(server: &mut dyn Pausable, lg: &Client) {
    server.kill();
    let long = tokio::spawn({
        let lg = lg.clone();
        async move {
            let started = Instant::now();
            let result = lg
                .lock("blip")
                .wait(Duration::from_secs(30))
                .acquire()
                .await;
            (started.elapsed(), result)
        }
    });
    let short = Duration::from_millis(700);
    let started = Instant::now();
    let err = lg
        .lock("blip-short")
        .wait(short)
        .acquire()
        .await
        .unwrap_err();
    let took = started.elapsed();
    println!("a {short:?} wait during the outage: {err} after {took:?}");
    assert!(err.is_unavailable(), "{err}");
    assert!(err.to_string().contains("retried"), "{err}");
    assert!(
        took >= short,
        "gave up after {took:?}, before the wait ended"
    );
    server.restart();
    let (took, result) = long.await.unwrap();
    let guard = match result {
        Ok(guard) => guard,
        Err(e) => panic!("the 30 s wait did not ride out the outage: {e} after {took:?}"),
    };
    println!("a 30 s wait across the outage took the lock after {took:?}");
    assert!(
        took >= short,
        "took the lock after {took:?}, during the outage"
    );
    assert!(guard.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_rides_out_a_redis_restart() {
    let mut server = RedisServer::start();
    let lg = crate::connect(&server, Duration::from_millis(500)).await;
    a_wait_rides_out_an_outage(&mut server, &lg).await;
}

/// Redlock: two of three nodes down is no quorum, the same outage to a
/// wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_rides_out_a_lost_redlock_quorum() {
    struct Two(Vec<RedisServer>);
    impl Pausable for Two {
        fn pause(&mut self) {
            self.0.iter_mut().for_each(RedisServer::pause);
        }
        fn resume(&mut self) {
            self.0.iter_mut().for_each(RedisServer::resume);
        }
        fn kill(&mut self) {
            self.0.iter_mut().for_each(RedisServer::kill);
        }
        fn restart(&mut self) {
            self.0.iter_mut().for_each(RedisServer::restart);
        }
    }
    let third = RedisServer::start();
    let mut two = Two(vec![RedisServer::start(), RedisServer::start()]);
    let urls = [&two.0[0], &two.0[1], &third].map(RedisServer::url);
    let lg = Client::builder()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .node_timeout(Duration::from_millis(250))
        .redlock(urls)
        .await
        .expect("connect to redlock nodes");
    a_wait_rides_out_an_outage(&mut two, &lg).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_rides_out_a_postgres_restart() {
    let mut server = lockguard_testing::PostgresServer::start();
    let lg = Client::builder()
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .connect_postgres(&server.url())
        .await
        .expect("connect to postgres");
    a_wait_rides_out_an_outage(&mut server, &lg).await;
}
