use lockguard::{concurrency_limit, distributed_lock};

#[distributed_lock(key = "a", ttl = "30")]
async fn no_unit() -> Result<(), lockguard::Error> {
    Ok(())
}

#[distributed_lock(key = "a", wait = "5 seconds")]
async fn words() -> Result<(), lockguard::Error> {
    Ok(())
}

#[distributed_lock(key = "a", ttl = 30)]
async fn not_a_string() -> Result<(), lockguard::Error> {
    Ok(())
}

#[distributed_lock(key = "a", ttl = "1.5s")]
async fn fraction() -> Result<(), lockguard::Error> {
    Ok(())
}

#[concurrency_limit(key = "a", permits = 2, ttl = "2d")]
async fn lease_too_long() -> Result<(), lockguard::Error> {
    Ok(())
}

#[distributed_lock(key = "a", watchdog = "50ms")]
async fn watchdog_too_short() -> Result<(), lockguard::Error> {
    Ok(())
}

#[distributed_lock(key = "a", ttl = "0s")]
async fn zero_lease() -> Result<(), lockguard::Error> {
    Ok(())
}

fn main() {}
