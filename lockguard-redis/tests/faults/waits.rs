//! Waits and outages: a wait rides out a store that is down for less than
//! the wait, retrying with backoff, and a wait that ends during an outage
//! says that the store could not be reached (design: "waits ride out
//! blips").

use std::time::{Duration, Instant};

use lockguard_core::{Client, ErrorKind};
use lockguard_redis::BuilderExt as _;
use lockguard_testing::conformance::eventually;
use lockguard_testing::faults::{
    a_wait_rides_out_a_pause_longer_than_its_lease, a_wait_rides_out_an_outage,
};
use lockguard_testing::{RedisServer, Relay, ServerProcess};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_rides_out_a_redis_restart() {
    let mut server = RedisServer::start();
    let lg = crate::connect(&server, Duration::from_millis(500)).await;
    a_wait_rides_out_an_outage(&mut server, &lg).await;
}

/// A grant answered after a pause longer than its lease is given back and
/// the wait queues again (it used to end with `Timeout` after 1.3 s of a
/// 10 s wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_rides_out_a_redis_pause_longer_than_its_lease() {
    let mut server = RedisServer::start();
    let holder = crate::connect(&server, Duration::from_secs(5)).await;
    let waiter = crate::connect(&server, Duration::from_secs(5)).await;
    a_wait_rides_out_a_pause_longer_than_its_lease(&mut server, &holder, &waiter).await;
}

/// Redlock: two of three nodes down is no quorum, the same outage to a
/// wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_rides_out_a_lost_redlock_quorum() {
    struct Two(Vec<RedisServer>);
    impl ServerProcess for Two {
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
        fn name(&self) -> String {
            "two redlock nodes".to_owned()
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

/// A lease shorter than the store takes to answer (a Redis 30 ms away, a
/// 10 ms lease): every grant of a free lock comes too late to use. A wait
/// in the queue gives up after five in a row with an error that says so,
/// long before its deadline, rather than take and give back the lock until
/// then (for good, on a wait with no deadline), and leaves the lock free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_too_late_for_their_lease_end_the_wait_with_a_clear_error() {
    let server = RedisServer::start();
    let relay = Relay::start(server.port());
    let holder = crate::connect(&server, Duration::from_secs(5)).await;
    let far = Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .response_timeout(Duration::from_secs(5))
        .connect_redis(&format!("redis://127.0.0.1:{}", relay.port()))
        .await
        .expect("connect through the relay");
    relay.lag(Duration::from_millis(30));
    // The far client's first wait: a lock found busy, so that it listens
    // and its later waits queue at once (a client's first try of a free
    // lock that comes back too late is an error of its own, at once).
    let held = holder.lock("busy").acquire().await.unwrap();
    let first = tokio::spawn({
        let far = far.clone();
        async move {
            far.lock("busy")
                .wait(Duration::from_secs(60))
                .acquire()
                .await
        }
    });
    let queued = eventually(Duration::from_secs(10), || async {
        let locks = holder.locks("busy").await.unwrap();
        locks.first().is_some_and(|l| !l.waiters.is_empty())
    })
    .await;
    assert!(queued, "the far client never queued");
    assert!(held.release().await.unwrap());
    drop(first.await.unwrap().unwrap());
    let started = Instant::now();
    let e = far
        .lock("far")
        .lease(Duration::from_millis(10))
        .wait(Duration::from_secs(60))
        .acquire()
        .await
        .expect_err("a lock granted too late was used");
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(e.to_string().contains("5 times in a row"), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the wait went on for {:?}",
        started.elapsed()
    );
    // Every lapsed grant was given back (or ends with its 10 ms lease).
    let again = holder
        .lock("far")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .unwrap();
    assert!(again.release().await.unwrap());
}
