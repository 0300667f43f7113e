use lockguard::distributed_lock;

struct User {
    id: u64,
}

#[distributed_lock(key = "user:{user}")]
async fn not_display(user: User) -> Result<u64, lockguard::Error> {
    Ok(user.id)
}

fn main() {}
