//! Trait impl methods: native `async fn` in traits, and a trait whose
//! method promises a `Send` future (so the body can be spawned).

use std::future::Future;

use lockguard::{concurrency_limit, distributed_lock, Client};

trait Job {
    async fn run(&self, n: u32) -> Result<u32, lockguard::Error>;
}

trait SendJob {
    fn run(&self, n: u32) -> impl Future<Output = Result<u32, lockguard::Error>> + Send;
}

struct Double {
    lg: Client,
    name: &'static str,
}

impl Job for Double {
    #[distributed_lock(key = "job:{self.name}:{n}", client = self.lg)]
    async fn run(&self, n: u32) -> Result<u32, lockguard::Error> {
        Ok(n * 2)
    }
}

impl SendJob for Double {
    #[concurrency_limit(key = "send-job:{self.name}", permits = 1, wait = "5s", client = self.lg)]
    async fn run(&self, n: u32) -> Result<u32, lockguard::Error> {
        tokio::task::yield_now().await;
        Ok(n * 2)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let job = Double {
        lg: Client::memory(),
        name: "double",
    };
    assert_eq!(Job::run(&job, 2).await.unwrap(), 4);
    let job = std::sync::Arc::new(job);
    let spawned = tokio::spawn({
        let job = job.clone();
        async move { SendJob::run(&*job, 3).await }
    });
    assert_eq!(spawned.await.unwrap().unwrap(), 6);
}
