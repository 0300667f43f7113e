use lockguard::{distributed_lock, rate_limit};

#[distributed_lock(key = "a", ttl = "1s", wait = "1s", ttl = "2s")]
async fn twice() -> Result<(), lockguard::Error> {
    Ok(())
}

#[rate_limit(key = "a", rate = "1/s", key = "b")]
async fn two_keys() -> Result<(), lockguard::Error> {
    Ok(())
}

#[distributed_lock(key = "a", skip_if_busy, skip_if_busy)]
async fn flag_twice() -> Result<Option<()>, lockguard::Error> {
    Ok(None)
}

fn main() {}
