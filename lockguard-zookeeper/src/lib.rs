//! The ZooKeeper store of lockguard: locks, semaphores and read-write locks
//! as ZooKeeper's own recipes. Each acquisition is an ephemeral sequential
//! node, the lowest holds the lock (the lowest N a semaphore's permits; a
//! read-write lock's readers ahead of its first writer, or that writer, in
//! Curator's node layout), and each waiter watches only the node it waits
//! on, so a release wakes only the waiters it admits. A multi-lock whose
//! keys are all free is taken in one transaction.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use lockguard_core::Client;
//! use lockguard_zookeeper::BuilderExt as _;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lockguard_core::Result<()> {
//! let lg = Client::builder()
//!     .zookeeper_session_timeout(Duration::from_secs(10)) // the lease of a crashed holder
//!     .connect_zookeeper("zk1:2181,zk2:2181,zk3:2181")
//!     .await?;
//! let guard = lg.lock("order:42").acquire().await?; // watchdog, fencing token, lost()
//! let exports = lg.semaphore("exports", 4).acquire().await?;
//! let report = lg.rw_lock("report").read().acquire().await?; // readers share
//! let both = lg.multi_lock(["acct:1", "acct:2"]).acquire().await?; // one transaction when free
//! # Ok(()) }
//! ```
//!
//! The lease is the session: a holder whose process dies frees its locks
//! when the ensemble expires its session; a live holder's watchdog checks
//! that its node still exists, a renewal counts for at most two thirds of
//! the session timeout, and a leaked guard's node is deleted by its own
//! client at the lease end. Fencing tokens are zxids, greater for every
//! later holder across leader changes. Counters (without expiry), marks and
//! fenced values are versioned compare-and-set writes; rate limiters answer
//! `Unsupported`. What it survives is in lockguard-core's
//! [safety notes](lockguard_core::safety).
//!
//! **TLS** is not built in. The client crate, `zookeeper-client`, offers
//! it (its `tls` feature), but that feature brings rustls's aws-lc-rs
//! provider (through `futures-rustls`'s default features) next to the ring
//! provider lockguard's other stores use; with both in one build, rustls
//! has no default provider, and redis-rs's TLS set-up, which relies on the
//! default, fails. An application that accepts that (it installs a process
//! provider with `rustls::crypto::CryptoProvider::install_default`) can make
//! its own TLS client with `zookeeper_client::Client::connector()
//! .with_tls(..).secure_connect(..)` and hand it to
//! [`ZooKeeperBuilder::connect_zookeeper_client`].
//!
//! This crate is built on lockguard-core's public
//! [store boundary](lockguard_core::store) only; the facade crate
//! `lockguard` re-exports it as `lockguard::zookeeper` (feature
//! `zookeeper`), and `use lockguard::prelude::*;` brings its constructors
//! into scope.

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod check;
mod connect;
mod error;
mod options;
mod store;
pub mod url;

pub use connect::{BuilderExt, ClientExt, ZooKeeperBuilder};
pub use options::{DEFAULT_ROOT, DEFAULT_ZOOKEEPER_SESSION_TIMEOUT};

pub use zookeeper_client;
