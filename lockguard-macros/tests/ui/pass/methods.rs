//! Inherent methods: `&self`, `&mut self`, `self`, the client and the key
//! taken from `self`, visibility, docs and other attributes kept.

use lockguard::{concurrency_limit, distributed_lock, rate_limit, Client};

struct Orders {
    locks: Client,
    tenant: String,
    placed: u32,
}

impl Orders {
    /// Places an order under the tenant's lock.
    #[must_use = "the result says whether the order was placed"]
    #[distributed_lock(key = "orders:{self.tenant}:{order_id}", client = self.locks, wait = "1s")]
    pub(crate) async fn place(&mut self, order_id: u64) -> Result<u32, lockguard::Error> {
        self.placed += 1;
        if order_id == 0 {
            return Ok(0);
        }
        Ok(self.placed)
    }

    #[rate_limit(key = "{self.tenant}", rate = "100/m", client = self.locks)]
    async fn count(&self) -> Result<u32, lockguard::Error> {
        Ok(self.placed)
    }

    #[concurrency_limit(key = "close:{self.tenant}", permits = 2, client = self.locks)]
    async fn close(self) -> Result<String, lockguard::Error> {
        Ok(self.tenant)
    }

    #[distributed_lock(key = "orders:{self.tenant}", client = Self::shared())]
    #[allow(clippy::unused_async)]
    async fn with_associated_client(&self) -> Result<(), lockguard::Error> {
        Ok(())
    }

    fn shared() -> Client {
        Client::memory()
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut orders = Orders {
        locks: Client::memory(),
        tenant: "acme".into(),
        placed: 0,
    };
    assert_eq!(orders.place(7).await.unwrap(), 1);
    assert_eq!(orders.place(0).await.unwrap(), 0);
    assert_eq!(orders.count().await.unwrap(), 2);
    orders.with_associated_client().await.unwrap();
    assert_eq!(orders.close().await.unwrap(), "acme");
}
