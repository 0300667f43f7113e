//! Every option of every attribute, and the shapes of client they take.

use std::sync::Arc;

use lockguard::{concurrency_limit, distributed_lock, rate_limit, Client};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[distributed_lock(key = "a:{id}", watchdog = "10s", wait = "0s", client = lg)]
async fn watchdog_lease(lg: &Client, id: u32) -> Result<u32, BoxError> {
    Ok(id)
}

#[distributed_lock(key = "b", ttl = "1m30s", skip_if_busy, keep_going_on_lost, client = lg)]
async fn skipping(lg: Arc<Client>) -> Result<Option<u32>, lockguard::Error> {
    Ok(Some(1))
}

#[distributed_lock(key = "job", ttl = "10m", at_least = "30s", skip_if_busy, client = lg)]
async fn scheduled(lg: &Client) -> Result<Option<()>, lockguard::Error> {
    Ok(Some(()))
}

#[concurrency_limit(
    key = "c",
    permits = 1_000_000,
    ttl = "24h",
    skip_if_busy,
    keep_going_on_lost,
    client = make_client(),
)]
async fn all_semaphore_options() -> Result<Option<()>, lockguard::Error> {
    Ok(Some(()))
}

#[concurrency_limit(key = "d", permits = 1, watchdog = "100ms", wait = "1d", client = lg)]
async fn semaphore_watchdog(lg: &Arc<Client>) -> Result<(), lockguard::Error> {
    Ok(())
}

#[rate_limit(key = "e", rate = "1000000000/d", algorithm = "fixed_window", cost = 3, client = lg)]
async fn fixed(lg: &Client) -> Result<(), lockguard::Error> {
    Ok(())
}

#[rate_limit(key = "f", rate = "3/h", algorithm = "sliding_window", name = "sliding", client = lg)]
async fn sliding(lg: &Client) -> Result<(), lockguard::Error> {
    Ok(())
}

#[rate_limit(key = "g", rate = "1/366d", burst = 284, cost = 5, client = lg)]
async fn gcra(lg: &Client) -> Result<(), lockguard::Error> {
    Ok(())
}

fn make_client() -> Client {
    Client::memory()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let lg = Client::memory();
    assert_eq!(watchdog_lease(&lg, 5).await.unwrap(), 5);
    assert_eq!(skipping(Arc::new(lg.clone())).await.unwrap(), Some(1));
    assert_eq!(all_semaphore_options().await.unwrap(), Some(()));
    semaphore_watchdog(&Arc::new(lg.clone())).await.unwrap();
    fixed(&lg).await.unwrap();
    sliding(&lg).await.unwrap();
    gcra(&lg).await.unwrap();
}
