use lockguard::distributed_lock;

#[distributed_lock(key = "job")]
async fn returns_nothing() {}

fn main() {}
