//! Free functions: arguments in the key, `?` and early `return` in the
//! body, a custom error type, all three attributes.

use lockguard::{concurrency_limit, distributed_lock, rate_limit, Client};

#[derive(Debug)]
enum AppError {
    Lock(lockguard::Error),
    Parse(std::num::ParseIntError),
}

impl From<lockguard::Error> for AppError {
    fn from(e: lockguard::Error) -> Self {
        Self::Lock(e)
    }
}

impl From<std::num::ParseIntError> for AppError {
    fn from(e: std::num::ParseIntError) -> Self {
        Self::Parse(e)
    }
}

/// Parses a quantity under the order's lock.
#[distributed_lock(key = "order:{order_id}", ttl = "30s", wait = "5s")]
pub async fn parse_quantity(order_id: u64, text: &str) -> Result<u32, AppError> {
    if text.is_empty() {
        return Ok(0);
    }
    let n: u32 = text.parse()?;
    Ok(n + u32::try_from(order_id % 2).unwrap())
}

#[rate_limit(key = "user:{user}", rate = "10/s", burst = 20, algorithm = "gcra")]
async fn greet(user: String) -> Result<String, AppError> {
    Ok(format!("hello {user}"))
}

#[concurrency_limit(key = "exports:{tenant}", permits = 4, wait = "2s")]
async fn export(tenant: &str) -> Result<usize, lockguard::Error> {
    Ok(tenant.len())
}

#[distributed_lock(key = "global")]
#[allow(clippy::unused_async)]
async fn global() -> Result<(), lockguard::Error> {
    #![allow(unused_variables)]
    let unused = 1;
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    Client::memory().install_default();
    assert_eq!(parse_quantity(3, "41").await.unwrap(), 42);
    assert_eq!(parse_quantity(3, "").await.unwrap(), 0);
    assert!(matches!(parse_quantity(3, "x").await, Err(AppError::Parse(_))));
    assert_eq!(greet("ann".into()).await.unwrap(), "hello ann");
    assert_eq!(export("acme").await.unwrap(), 4);
    global().await.unwrap();
    let _ = AppError::Lock;
}
