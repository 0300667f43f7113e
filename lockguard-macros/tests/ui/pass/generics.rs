//! Generic functions, lifetimes, `impl Trait` arguments, where clauses,
//! and a type alias for the result.

use std::fmt::Display;

use lockguard::{distributed_lock, rate_limit, Client};

type Result<T, E = lockguard::Error> = std::result::Result<T, E>;

#[distributed_lock(key = "item:{id}", client = lg)]
async fn describe<T: Display + Send>(lg: &Client, id: T) -> Result<String> {
    Ok(format!("item {id}"))
}

#[distributed_lock(key = "pair:{left}:{right}", client = lg)]
async fn join<'a, L, R>(lg: &Client, left: &'a L, right: R) -> Result<&'a L>
where
    L: Display + Sync + ?Sized,
    R: Display + Send,
{
    Ok(left)
}

#[rate_limit(key = "{who}", rate = "5/250ms", client = lg)]
async fn shout(lg: &Client, who: impl Display + Send) -> Result<String> {
    Ok(who.to_string().to_uppercase())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let lg = Client::memory();
    assert_eq!(describe(&lg, 7u8).await.unwrap(), "item 7");
    assert_eq!(join(&lg, "a", 'b').await.unwrap(), "a");
    assert_eq!(shout(&lg, "hey").await.unwrap(), "HEY");
}
