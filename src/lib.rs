//! lockguard: distributed locks with leases, fencing tokens and a watchdog,
//! atomic counters, rate limiters and semaphores on Redis, with an in-memory
//! store of the same semantics for tests and single-process use.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lockguard::Error> {
//! use std::time::Duration;
//! use lockguard::Lockguard;
//!
//! // Redis when REDIS_URL is set, the in-memory store otherwise.
//! let lg = Lockguard::from_env().await?;
//!
//! let guard = lg
//!     .lock("order:42")
//!     .wait(Duration::from_secs(5))
//!     .acquire()
//!     .await?;
//! // ... only one process in the fleet runs this at a time ...
//! lg.fenced("order:42:status").write(guard.fencing_token(), "paid").await?;
//! assert!(guard.release().await?, "the lease ran out while we worked");
//! # Ok(()) }
//! ```
//!
//! # Crates and features
//!
//! | feature | what it adds |
//! |---|---|
//! | (always) | [`lockguard_core`]: locks, fencing, counters, rate limiters, semaphores; the Redis and in-memory stores |
//! | `macros` | `lockguard-macros`: attributes that wrap an `async fn` (in progress) |
//! | `tower` | `lockguard-tower`: HTTP layers for axum and hyper (in progress) |
//! | `full` | all of the above |
//!
//! See [`lockguard_core`] for the guarantees every lock keeps.

#![forbid(unsafe_code)]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]

pub use lockguard_core::*;

/// Attribute macros for `async fn` (in progress).
#[cfg(feature = "macros")]
pub use lockguard_macros as macros;

/// Tower layers for HTTP services.
#[cfg(feature = "tower")]
pub use lockguard_tower as tower;

/// Items the macros' generated code refers to. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use lockguard_core;
}
