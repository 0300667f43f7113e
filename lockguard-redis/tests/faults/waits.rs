//! Waits and outages: a wait rides out a store that is down for less than
//! the wait, retrying with backoff, and a wait that ends during an outage
//! says that the store could not be reached (design: "waits ride out
//! blips").

use std::time::Duration;

use lockguard_core::Client;
use lockguard_redis::BuilderExt as _;
use lockguard_testing::faults::{
    a_wait_rides_out_a_pause_longer_than_its_lease, a_wait_rides_out_an_outage,
};
use lockguard_testing::{RedisServer, ServerProcess};

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
