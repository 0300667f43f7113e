//! The store's settings: how to reach PostgreSQL, how long to wait for it,
//! and what a lock's lease rests on. A leaf: every other module may use
//! it, and it uses none of them.

use std::time::Duration;

/// How to reach PostgreSQL and how long to wait for it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PgOptions {
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// How often each client removes expired state.
    pub(crate) sweep_interval: Duration,
    /// What a lock's lease rests on.
    pub(crate) leases: LockLeases,
}

/// What a lock's lease rests on (core's [`LockLeases`]). On PostgreSQL a
/// lock is a session-level advisory lock either way. With
/// [`LockLeases::Session`] the server ends a paused or cut-off holder's
/// session once idle for its lease and a slack (`idle_session_timeout`),
/// and a hold records nothing, not even its session's name: `inspect`
/// and `lockguard locks` know the holder by its session (the token
/// `00000000000000005e55` and its pid in 12 hex digits), without its
/// fence or lease.
pub use lockguard_core::store::LockLeases;
