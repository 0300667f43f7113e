//! The etcd store of lockguard: locks, semaphores and read-write locks as
//! etcd's own lock recipe. Each acquisition is a key under the lock's
//! prefix attached to the client's lease; the keys in the order etcd
//! created them are the queue, the first holds (the first N a semaphore's
//! permits; a read-write lock's readers ahead of its first writer, or that
//! writer), and each waiter watches only the key it waits on, so a release
//! wakes only the waiters it admits. Fencing tokens are revisions, which
//! only grow, across leader changes. A multi-lock whose keys are all free
//! is taken in one transaction.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use lockguard_core::Client;
//! use lockguard_etcd::BuilderExt as _;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lockguard_core::Result<()> {
//! let lg = Client::builder()
//!     .etcd_lease_ttl(Duration::from_secs(10)) // the lease of a crashed holder
//!     .connect_etcd("etcd1:2379,etcd2:2379,etcd3:2379")
//!     .await?;
//! let guard = lg.lock("order:42").acquire().await?; // watchdog, fencing token, lost()
//! let exports = lg.semaphore("exports", 4).acquire().await?;
//! let report = lg.rw_lock("report").read().acquire().await?; // readers share
//! let both = lg.multi_lock(["acct:1", "acct:2"]).acquire().await?; // one transaction when free
//! # Ok(()) }
//! ```
//!
//! The lease is the client's etcd lease: a holder whose process dies frees
//! its locks when etcd expires it; a live holder's watchdog checks that its
//! key still exists and that the client's lease lasts the renewal out, a
//! renewal counts for at most two thirds of the lease's TTL, and a leaked
//! guard's key is deleted by its own client at the lease end. Counters,
//! marks and fenced values are transactions comparing what they read; rate
//! limiters (GCRA, fixed and sliding windows) too. Expiry and the limiters'
//! steps run on the deciding client's clock (etcd has none a transaction
//! can read), with the bound that clock skew sets. What it survives is in `docs/etcd.md`.
//!
//! Tested against etcd 3.4 (Debian's `etcd-server`), with the
//! `etcd-client` crate; building it needs `protoc` (Debian's
//! `protobuf-compiler`).
//!
//! This crate is built on lockguard-core's public
//! [store boundary](lockguard_core::store) only; the facade crate
//! `lockguard` re-exports it as `lockguard::etcd` (feature `etcd`), and
//! `use lockguard::prelude::*;` brings its constructors into scope.

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod check;
mod connect;
mod error;
mod options;
mod session;
mod store;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
pub mod url;

pub use connect::{BuilderExt, ClientExt, EtcdBuilder};
pub use options::{DEFAULT_ETCD_LEASE_TTL, DEFAULT_PREFIX};

pub use etcd_client;
