//! `mode = "read" | "write"`: a read-write lock, with the lock's other
//! options.

use lockguard::{distributed_lock, Client};

#[distributed_lock(key = "doc:{id}", mode = "read", client = lg)]
async fn read(lg: &Client, id: u32) -> Result<u32, lockguard::Error> {
    Ok(id)
}

#[distributed_lock(key = "doc:{id}", mode = "write", wait = "1s", ttl = "30s", client = lg)]
async fn write(lg: &Client, id: u32) -> Result<u32, lockguard::Error> {
    Ok(id + 1)
}

#[distributed_lock(
    key = "doc",
    mode = "read",
    watchdog = "10s",
    skip_if_busy,
    keep_going_on_lost,
    client = lg,
)]
async fn read_if_free(lg: &Client) -> Result<Option<()>, lockguard::Error> {
    Ok(Some(()))
}

#[distributed_lock(key = "doc", mode = "write", skip_if_busy, keep_going_on_lost, client = lg)]
async fn write_if_free(lg: &Client) -> Result<Option<()>, lockguard::Error> {
    Ok(Some(()))
}

struct Store {
    lg: Client,
}

impl Store {
    #[distributed_lock(key = "store:{name}", mode = "write", client = self.lg)]
    async fn put(&self, name: &str) -> Result<usize, lockguard::Error> {
        Ok(name.len())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let lg = Client::memory();
    assert_eq!(read(&lg, 1).await.unwrap(), 1);
    assert_eq!(write(&lg, 1).await.unwrap(), 2);
    assert_eq!(read_if_free(&lg).await.unwrap(), Some(()));
    assert_eq!(write_if_free(&lg).await.unwrap(), Some(()));
    let held = lg.rw_lock("doc").read().acquire().await.unwrap();
    assert_eq!(read_if_free(&lg).await.unwrap(), Some(()));
    assert_eq!(write_if_free(&lg).await.unwrap(), None);
    held.release().await.unwrap();
    let store = Store { lg };
    assert_eq!(store.put("abc").await.unwrap(), 3);
}
