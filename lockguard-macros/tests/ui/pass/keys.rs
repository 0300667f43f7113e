//! Key templates: fields, tuple fields, destructured arguments, literal
//! braces for a Redis Cluster hash tag, and no placeholder at all.

use lockguard::{distributed_lock, Client};

struct User {
    id: u64,
    pair: (u8, &'static str),
}

#[distributed_lock(key = "{{users}}:{user.id}:{user.pair.1}:{a}-{b}", client = lg)]
async fn nested(lg: &Client, user: &User, (a, mut b): (u8, u8)) -> Result<String, lockguard::Error> {
    b += a;
    Ok(format!("{}:{b}", user.pair.0))
}

#[distributed_lock(key = "report:daily", client = lg)]
async fn constant(lg: &Client) -> Result<(), lockguard::Error> {
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let lg = Client::memory();
    let user = User { id: 1, pair: (2, "x") };
    assert_eq!(nested(&lg, &user, (3, 4)).await.unwrap(), "2:7");
    constant(&lg).await.unwrap();
    let _ = user.id;
}
