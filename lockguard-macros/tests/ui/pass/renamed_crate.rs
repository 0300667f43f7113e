//! `crate = "..."` for a renamed or re-exported lockguard, and two
//! attributes stacked on one function.

pub use ::lockguard as locking;

use locking::Client;

#[locking::distributed_lock(key = "k:{n}", crate = "crate::locking", client = lg)]
#[locking::rate_limit(key = "k:{n}", rate = "10/s", crate = "crate::locking", client = lg)]
async fn stacked(lg: &Client, n: u32) -> Result<u32, locking::Error> {
    Ok(n)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let lg = Client::memory();
    assert_eq!(stacked(&lg, 1).await.unwrap(), 1);
}
