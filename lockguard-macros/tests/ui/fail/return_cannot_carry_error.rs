use lockguard::{concurrency_limit, distributed_lock, rate_limit};

#[derive(Debug)]
struct MyError;

#[distributed_lock(key = "job")]
async fn not_a_result() -> u32 {
    1
}

#[rate_limit(key = "job", rate = "1/s")]
async fn error_without_from() -> Result<u32, MyError> {
    Ok(1)
}

#[concurrency_limit(key = "job", permits = 1)]
async fn option() -> Option<u32> {
    Some(1)
}

fn main() {}
