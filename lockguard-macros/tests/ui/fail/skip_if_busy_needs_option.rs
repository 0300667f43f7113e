use lockguard::distributed_lock;

#[distributed_lock(key = "job", skip_if_busy)]
async fn no_option() -> Result<u32, lockguard::Error> {
    Ok(1)
}

fn main() {}
