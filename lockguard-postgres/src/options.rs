//! The store's settings: how to reach PostgreSQL and how long to wait for
//! it. A leaf: every other module may use it, and it uses none of them.

use std::time::Duration;

/// How to reach PostgreSQL and how long to wait for it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PgOptions {
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    /// How often each client removes expired state.
    pub(crate) sweep_interval: Duration,
}
