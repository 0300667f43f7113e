use lockguard::distributed_lock;

#[distributed_lock(key = "job")]
fn not_async() -> Result<(), lockguard::Error> {
    Ok(())
}

fn main() {}
