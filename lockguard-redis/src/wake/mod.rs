//! How a release wakes the next waiter: the client's pub/sub connection
//! (see [`Subscriber`]), and on a cluster, one connection on each master
//! beside it (see `masters.rs`).
//!
//! `channels.rs` records what the server has subscribed, `deliver.rs`
//! routes each message to the waiters as a connection reads it; the
//! subscriber and the masters' keeper both use them.

mod channels;
mod deliver;
#[cfg(feature = "cluster")]
mod masters;
mod subscriber;

#[cfg(any(feature = "cluster", feature = "sentinel"))]
pub(crate) use subscriber::SubTarget;
pub(crate) use subscriber::Subscriber;
