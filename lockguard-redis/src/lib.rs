//! The Redis stores of lockguard: one server, Redis Sentinel, Redis Cluster
//! and Redlock. Every operation is one Lua script (`EVALSHA`), one round
//! trip; time comes from the server (`TIME`); waiters queue in the store
//! and a release hands the lock to the first live one and tells its client
//! alone over pub/sub.
//!
//! ```no_run
//! use lockguard_core::Client;
//! use lockguard_redis::ClientExt as _;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lockguard_core::Result<()> {
//! let lg = Client::connect_redis("redis://127.0.0.1:6379").await?;
//! let guard = lg.lock("order:42").acquire().await?;
//! assert!(guard.release().await?);
//! # Ok(()) }
//! ```
//!
//! This crate is built on lockguard-core's public
//! [store boundary](lockguard_core::store) only; the facade crate
//! `lockguard` re-exports it as `lockguard::redis` (feature `redis`, on by
//! default), and `use lockguard::prelude::*;` brings its constructors into
//! scope. It owns the Redis key layout: each user key is the hash tag of
//! every key derived from it, so a script's keys share a cluster slot.
//! What each mode guarantees is in lockguard-core's
//! [safety notes](lockguard_core::safety).
//!
//! # Features
//!
//! | feature | what it adds |
//! |---|---|
//! | `cluster` | Redis Cluster ([`ClientExt::connect_cluster`]) |
//! | `sentinel` | Redis Sentinel ([`BuilderExt::connect_sentinel`]): the master, followed across failovers |
//! | `tls-rustls` | `rediss://` through rustls; a private CA and client certificates on the [`RedisBuilder`] |
//! | `tls-native-tls` | `rediss://` through the platform's TLS library (rustls wins when both are on) |

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod check;
mod client;
mod conn;
mod connect;
mod error;
mod layout;
mod options;
mod redlock;
#[cfg(feature = "sentinel")]
mod sentinel;
mod store;
pub mod url;
mod wake;

pub use connect::{BuilderExt, ClientExt, RedisBuilder};
pub use redlock::{DEFAULT_NODE_TIMEOUT, MAX_REDLOCK_PERMITS};

pub use redis;
