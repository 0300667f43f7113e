use lockguard::{concurrency_limit, distributed_lock, rate_limit};

#[distributed_lock(ttl = "30s")]
async fn no_key() -> Result<(), lockguard::Error> {
    Ok(())
}

#[rate_limit(key = "a")]
async fn no_rate() -> Result<(), lockguard::Error> {
    Ok(())
}

#[concurrency_limit(key = "a", permits = 0)]
async fn zero_permits() -> Result<(), lockguard::Error> {
    Ok(())
}

#[concurrency_limit(key = "a")]
async fn no_permits() -> Result<(), lockguard::Error> {
    Ok(())
}

#[distributed_lock(key = "a", ttl = "30s", watchdog = "30s")]
async fn ttl_and_watchdog() -> Result<(), lockguard::Error> {
    Ok(())
}

#[distributed_lock(key = "a", ttl = "30s", at_least = "1m")]
async fn at_least_past_ttl() -> Result<(), lockguard::Error> {
    Ok(())
}

#[distributed_lock(key = "a", at_least = "0s")]
async fn zero_at_least() -> Result<(), lockguard::Error> {
    Ok(())
}

fn main() {}
