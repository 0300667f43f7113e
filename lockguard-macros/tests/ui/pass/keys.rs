//! Key templates: fields, tuple fields, destructured arguments, literal
//! braces for a Redis Cluster hash tag, and no placeholder at all.

use lockguard::{distributed_lock, Lockguard};

struct User {
    id: u64,
    pair: (u8, &'static str),
}

#[distributed_lock(key = "{{users}}:{user.id}:{user.pair.1}:{a}-{b}", client = lg)]
async fn nested(lg: &Lockguard, user: &User, (a, mut b): (u8, u8)) -> Result<String, lockguard::Error> {
    b += a;
    Ok(format!("{}:{b}", user.pair.0))
}

#[distributed_lock(key = "report:daily", client = lg)]
async fn constant(lg: &Lockguard) -> Result<(), lockguard::Error> {
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let lg = Lockguard::memory();
    let user = User { id: 1, pair: (2, "x") };
    assert_eq!(nested(&lg, &user, (3, 4)).await.unwrap(), "2:7");
    constant(&lg).await.unwrap();
    let _ = user.id;
}
