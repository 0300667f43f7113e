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

/// What a lock's lease rests on, and so what the next holder does when a
/// holder's database session ends before its lease (an operator's
/// `pg_terminate_backend`, a connection the network cut, a database
/// restart or failover). Either way the lock is the server's own session
/// advisory lock, which the session's end frees; the holder learns of the
/// end at its next renewal (a third of its lease with the watchdog) or at
/// its lease's end, whichever comes first, and every hold's fencing token
/// is greater than every earlier one of its key, whichever mode drew it.
///
/// Set with [`PostgresBuilder::lock_leases`](crate::PostgresBuilder::lock_leases),
/// or a URL's `lock_leases` parameter (`postgres://app@db/app?lock_leases=session`,
/// [`url::from_url`](crate::url::from_url)).
/// Clients that share a lock may use different modes; each hold keeps its
/// own mode's promise.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockLeases {
    /// The default. Each hold records its lease in a row of the key, and a
    /// release ends it there: after a session's end, the next holder waits
    /// out the lease its holder last renewed, and after a crash or a
    /// failover (which lose those rows) nobody takes a lock anew until the
    /// longest lease any lock took has passed. So no two holders ever
    /// overlap while their leases are respected, at the cost of a write to
    /// the key's row at each take and each release (see BENCHMARKS.md).
    #[default]
    Recorded,
    /// The lease is the session's: nothing is written per hold, and a
    /// session's end hands the lock to the next waiter at once, as the
    /// server's advisory lock alone does. A holder whose session ended
    /// unbeknownst to it (a cut connection, an operator's termination, a
    /// restart or failover) may still believe it holds until its next
    /// renewal or its lease's end, while its successor already does: its
    /// writes fenced with its token are then refused, since the
    /// successor's token is greater. A holder that is paused or cut off
    /// itself loses the lock when its session has been idle for its
    /// lease and a slack (`idle_session_timeout`), after its own lease
    /// ended. A lock kept past its release (`at_least`) stays kept. Takes
    /// and handoffs cost the server about what the bare advisory lock
    /// does (BENCHMARKS.md). Choose it where the resource a lock guards
    /// checks fencing tokens, or where an overlap after a session's end
    /// is acceptable.
    Session,
}
