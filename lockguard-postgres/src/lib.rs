//! The PostgreSQL store of lockguard: locks as the server's own session
//! advisory locks, whose waiters wait in the server; semaphores, read-write
//! locks, counters, rate limiters and fenced values in a schema of their
//! own, leases on the database's clock, a FIFO queue whose handoffs ring
//! the bell of the waiter's client alone; and fenced writes to the
//! application's own tables.
//!
//! ```no_run
//! use lockguard_core::Client;
//! use lockguard_postgres::ClientExt as _;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> lockguard_core::Result<()> {
//! let lg = Client::connect_postgres("postgres://app:secret@db.internal/app").await?;
//! let guard = lg.lock("order:42").acquire().await?;
//! assert!(guard.release().await?);
//! # Ok(()) }
//! ```
//!
//! This crate is built on lockguard-core's public
//! [store boundary](lockguard_core::store) only; the facade crate
//! `lockguard` re-exports it as `lockguard::postgres` (feature `postgres`),
//! and `use lockguard::prelude::*;` brings its constructors into scope.
//! The driver crates it is built on are re-exported, so an application
//! hands in a pool and settings of the same versions.
//!
//! Connect with [`ClientExt::connect_postgres`], the `connect_postgres*`
//! methods of [`BuilderExt`], or, with the `sqlx` feature, on the
//! application's `sqlx::PgPool` with `BuilderExt::connect_sqlx_pool`. What the store guarantees, and what a single
//! database does and does not survive, is in lockguard-core's
//! [safety notes](lockguard_core::safety).
//!
//! # Locks
//!
//! A lock (also a leader election's, a scheduled job's, and each key of a
//! multi-lock, which takes its keys one by one in one order) is a session
//! advisory lock held by a database session of the client's own, one per
//! held or awaited lock: a try is one statement, a waiter waits in the
//! server's queue, which grants the lock to the first waiter as the holder
//! unlocks. A database restart, a failover or a session cut frees it, and
//! its holder learns it at its next renewal; after a cut the next holder
//! waits out the lease the old one last renewed, and after a crash or a
//! failover (which lose that record, an unlogged table's) nobody takes a
//! lock anew until the longest lease any lock of the schema took has
//! passed. A client of session leases ([`LockLeases::Session`]) records
//! nothing per hold, at about the cost of the bare advisory lock: a
//! session's end hands the lock on at once, and the old holder, until its
//! next renewal, is refused by fencing tokens alone. See the `locks`
//! module's source and the [safety notes](lockguard_core::safety).
//!
//! # How a permit's waiter is woken
//!
//! A release that hands a semaphore's permit or a read-write lock's hold
//! to a waiter writes the handoff to the
//! mail of the waiter's client, in its transaction, and cancels the wait of
//! that client's *bell* (`pg_cancel_backend`): one backend signalled per
//! handoff, however many clients are connected. (`NOTIFY` would signal
//! every backend of the database that listens, each of which then reads
//! the notification queue in a transaction of its own.) The bell is a
//! connection each client opens at its first such wait, with a second one whose
//! open transaction holds the lock on a temporary table that the bell waits
//! for; `LOCK TABLE` waits without a snapshot, so a waiting bell holds back
//! no vacuum. The bell reads its mail and hands each handoff to its waiter.
//! A ring cannot be lost between the bell's statements (see the `bell`
//! module's source), and what still goes wrong (a bell reconnecting, a
//! backend of another role that may not signal the bell) is covered by the
//! waiter's timed attempt, which claims a lock handed to it as well.
//!
//! So every client that waits keeps two connections of its own beside its
//! pool, and signalling its bell needs the releaser to run as the same role
//! (or a member of it, or of `pg_signal_backend`); lockguard's clients
//! normally share one role.
//!
//! # Read-write locks
//!
//! A read-write lock (`lg.rw_lock(name)`) keeps its readers and its writer
//! in the tables of locks, and its readers and writers in one queue, first
//! come first served: a reader that arrives while a writer waits queues
//! behind it, and a release hands the lock to the whole run of readers at
//! the head at once (each rung as a lock's waiter is) or to the one writer
//! there. Every hold's fencing token comes from the key's one sequence, so
//! a write's is greater than every earlier read's and write's.
//!
//! # Schema versions
//!
//! The schema records its version and the oldest client version that may
//! use it (`compatible_since`): a client creates a missing schema, brings
//! an older one up to date, uses a newer one when that one is compatible
//! with it (a newer schema keeps every earlier function's signature and
//! meaning), and refuses one that needs newer clients, saying so. This
//! client writes version 11, compatible since 11 (every lock's fencing
//! token comes from one sequence kept at or above the clock, and a hold of
//! session leases writes no row, so an older client's tokens, drawn from a
//! key's row and the clock alone, could fall below one; docs/postgres.md
//! tells the versions before). Clients of version 3 predate the rule:
//! they refuse any newer schema, so upgrade them before a client of
//! version 4 or newer first connects, or keep them from restarting until
//! they are upgraded (those already connected keep working). A migration
//! never runs over a newer schema (it fails, with SQLSTATE `LG002`, and
//! changes nothing).
//!
//! # Fencing the application's own rows
//!
//! A lock's [`FencingToken`](lockguard_core::FencingToken) is a `bigint` to PostgreSQL. A table that keeps
//! the token of each row's last write beside the row refuses the write of a
//! holder whose lease ran out meanwhile (another holder, with a greater
//! token, has written since), in the same statement as the write:
//!
//! ```sql
//! ALTER TABLE orders ADD COLUMN IF NOT EXISTS fence bigint NOT NULL DEFAULT 0;
//! UPDATE orders SET status = $2, fence = $3 WHERE id = $1 AND fence <= $3;
//! ```
//!
//! [`FencedTable`] writes that statement for a table, runs it in one round
//! trip and tells a stale token from a missing row:
//!
//! ```no_run
//! # async fn run(db: &tokio_postgres::Client, lg: &lockguard_core::Client) -> lockguard_core::Result<()> {
//! use lockguard_postgres::FencedTable;
//!
//! let orders = FencedTable::new("orders", "id")?;
//! let guard = lg.lock("order:42").acquire().await?;
//! let written = orders
//!     .update(db, &42i64, guard.fencing_token(), &[("status", &"paid")])
//!     .await?; // Err(StaleFencingToken) if a newer holder wrote first
//! assert!(written, "no order 42");
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod bell;
pub mod check;
mod connect;
mod error;
mod fenced_table;
mod locks;
mod options;
mod pool;
mod schema;
mod store;
mod tls;
pub mod url;

pub use connect::{BuilderExt, ClientExt, DEFAULT_SCHEMA, PostgresBuilder};
pub use fenced_table::{FencedTable, migration_sql};
#[doc(hidden)]
pub use locks::{lock_statements, lock_statements_of};
pub use options::LockLeases;

pub use deadpool_postgres;
#[cfg(feature = "sqlx")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
pub use sqlx;
pub use tokio_postgres;
