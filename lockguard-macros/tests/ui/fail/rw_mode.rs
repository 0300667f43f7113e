use lockguard::{concurrency_limit, distributed_lock};

#[distributed_lock(key = "doc", mode = "shared")]
async fn unknown_mode() -> Result<(), lockguard::Error> {
    Ok(())
}

#[distributed_lock(key = "doc", mode = read)]
async fn mode_not_a_string() -> Result<(), lockguard::Error> {
    Ok(())
}

#[distributed_lock(key = "doc", mode = "write", ttl = "1m", at_least = "30s")]
async fn at_least_on_a_read_write_lock() -> Result<(), lockguard::Error> {
    Ok(())
}

#[distributed_lock(key = "doc", mode = "read", mode = "write")]
async fn two_modes() -> Result<(), lockguard::Error> {
    Ok(())
}

#[concurrency_limit(key = "doc", permits = 2, mode = "read")]
async fn mode_on_permits() -> Result<(), lockguard::Error> {
    Ok(())
}

fn main() {}
