//! What a database store's lock lease rests on: a record of the hold, or
//! the session that holds the server's own lock.

/// What a lock's lease rests on, on a database store whose locks are the
/// server's own session locks (PostgreSQL's advisory locks, MySQL's and
/// MariaDB's user locks), and so what the next holder does when a
/// holder's database session ends before its lease (an operator's
/// termination, a connection the network cut, a database restart or
/// failover). Either way the lock is the server's own, which the session's
/// end frees; the holder learns of the end at its next renewal (a third of
/// its lease with the watchdog) or at its lease's end, whichever comes
/// first, and every hold's fencing token is greater than every earlier one
/// of its key, whichever mode drew it.
///
/// Each store's builder sets it (`PostgresBuilder::lock_leases`,
/// `MySqlBuilder::lock_leases`), and so does a URL's `lock_leases`
/// parameter (`postgres://app@db/app?lock_leases=session`,
/// [`url::lock_leases`](crate::store::url::lock_leases)). Clients that
/// share a lock may use different modes: a successor waits out what its
/// own mode waits out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockLeases {
    /// The default. Each hold records its lease in a row of the key, and a
    /// release ends it there: after a session's end, the next holder waits
    /// out the lease its holder last renewed, and after a crash or a
    /// failover (which lose those rows) nobody takes a lock anew until the
    /// longest lease any lock took has passed. So no two holders ever
    /// overlap while their leases are respected, at the cost of writes to
    /// the key's row at each take and each release (see BENCHMARKS.md).
    #[default]
    Recorded,
    /// The lease is the session's: nothing is written per hold, and a
    /// session's end hands the lock to the next waiter at once, as the
    /// server's own lock alone does. A holder whose session ended
    /// unbeknownst to it (a cut connection, an operator's termination, a
    /// restart or failover) may still believe it holds until its next
    /// renewal or its lease's end, while its successor already does: its
    /// writes fenced with its token are then refused, since the
    /// successor's token is greater. A holder that is paused or cut off
    /// itself loses the lock when the server ends its session, idle for
    /// its lease and a slack, after its own lease ended. A lock kept past
    /// its release (`at_least`) stays kept. Others know a hold by its
    /// session alone: inspection and surveys name the holder by its
    /// session, without its fence or lease. Takes and handoffs cost the
    /// server about what its bare lock does (BENCHMARKS.md). Choose it
    /// where the resource a lock guards checks fencing tokens, or where an
    /// overlap after a session's end is acceptable.
    Session,
}

impl LockLeases {
    /// The mode a URL parameter's value names: `recorded` or `session`.
    pub(crate) fn named(value: &str) -> Option<Self> {
        match value {
            "recorded" => Some(Self::Recorded),
            "session" => Some(Self::Session),
            _ => None,
        }
    }
}
