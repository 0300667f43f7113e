//! The MySQL/MariaDB store of lockguard: locks as the server's own user
//! locks (`GET_LOCK`), whose waiters wait in the server; semaphores,
//! read-write locks, counters, rate limiters and fenced values as rows with
//! leases on the database's clock; built on lockguard's public
//! [store boundary](lockguard_core::store).
//!
//! ```no_run
//! use lockguard_core::Client;
//! use lockguard_mysql::ClientExt as _;
//!
//! # #[tokio::main]
//! # async fn main() -> lockguard_core::Result<()> {
//! let lg = Client::connect_mysql("mysql://app:secret@127.0.0.1:3306/app").await?;
//! let guard = lg.lock("order:42").acquire().await?;
//! println!("fencing token {}", guard.fencing_token().get());
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! Connect with [`ClientExt::connect_mysql`], or with
//! [`BuilderExt::connect_mysql`] and [`MySqlBuilder`] for the client's
//! settings (its prefix, leases, timeouts) and the store's (the table
//! prefix, the pool's size), as every store's crate offers them;
//! [`MySqlOptions::connect`] returns the store alone, for
//! [`Builder::build`](lockguard_core::Builder::build). (The free functions
//! `connect` and `connect_with` are deprecated.)
//!
//! # How it works
//!
//! - **Locks are user locks** (schema version 9): a lock, a leader
//!   election's, a scheduled job's, each key of a multi-lock, is a
//!   `GET_LOCK` user lock held by a database session of the client's own
//!   (one per held or awaited lock, up to 64 kept idle for later holds), on
//!   core's [`SessionLocks`](lockguard_core::store::SessionLocks). A try
//!   and a release are one `CALL` each; a waiter waits in the server's
//!   `GET_LOCK`, which grants the lock to its first waiter as the holder
//!   releases it or its session ends, with no statement of anyone's. The
//!   fencing token (`GREATEST(the key's last, clock in µs) + 1`) and the
//!   lease are kept in a MEMORY table: a lock writes no InnoDB row. The
//!   client ends a hold whose lease ran out unrenewed, and the server ends
//!   a holder's session idle past its lease (`wait_timeout`); a holder
//!   whose session ended unbeknownst to it (a cut connection, a killed
//!   process, an operator's `KILL`) keeps its recorded lease, which its
//!   successor waits out: a release ends its lease before it unlocks, so a
//!   running lease a successor finds was never released (schema version
//!   11). A forced release (which ends the lease; a renewal landing at
//!   that moment puts it back, and it is waited out) frees the lock at
//!   once: its holder is told at its next renewal. A database restart
//!   (which empties the MEMORY table) frees every lock, and nobody takes
//!   one anew until the longest lease any lock took (an InnoDB row,
//!   written when a longer lease than any before is asked for) has passed
//!   since the first lock session after the restart (schema version 12):
//!   the old holder, told at its next renewal or its lease end, is
//!   overlapped by nobody.
//! - **Session leases** ([`LockLeases::Session`], on MariaDB; schema
//!   version 13): a hold records nothing. A try is one statement,
//!   `GET_LOCK` and the next value of a sequence every lock's tokens come
//!   from; a release the bare `RELEASE_LOCK`; a wait one round trip. A
//!   session's end hands the lock on at once, and the old holder, until its
//!   next renewal, is refused by fencing tokens alone (docs/mysql.md,
//!   "Session leases").
//!   The rest of this list is about semaphores and read-write locks.
//! - **Rows and leases.** A holder of a semaphore permit is a row
//!   with its lease end in µs on the database's clock (`SYSDATE(6)`, read
//!   after the key's row lock); no client's clock takes part.
//! - **One transaction, one round trip.** Every operation is one `CALL` of
//!   a procedure lockguard creates on connect, or a database administrator
//!   installs beforehand (tables prefixed `lockguard_`
//!   by default, InnoDB, a schema version row in `lockguard_meta`). Each
//!   starts with an upsert of the key's row in `lockguard_keys`, which
//!   takes its exclusive row lock by primary key (never a scan): the
//!   operations on one key run one after another.
//! - **Fair queue, direct handoff.** Waiters queue first come first served
//!   in `lockguard_waiters`, their place refreshed by each of their
//!   attempts; a release hands the lock to the first live waiter in its own
//!   transaction. A waiter that died is skipped once its place lapses.
//! - **Fencing tokens** are drawn as `GREATEST(previous, clock in µs) + 1`
//!   from the key's row, so they never go back, across the row's removal
//!   and a server restart.
//! - **Wake-ups without polling.** MySQL has no `LISTEN`/`NOTIFY`. Each
//!   client whose semaphores or read-write locks wait keeps a *bell*
//!   (opened at the first such wait): one connection holding a user lock
//!   (`GET_LOCK`) and one waiting for that lock in a query, itself holding
//!   a user lock named for the client. A release that hands a lock to one
//!   of its waiters writes the handoff to a mailbox table and, after
//!   committing, finds the bell's connection by its lock (`IS_USED_LOCK`)
//!   and interrupts it with `KILL QUERY` (in the same procedure call), so
//!   that only that client wakes, and only the waiter concerned takes the
//!   lock.
//!   A lost ring (the bell reconnecting, say) is covered by the waiter's
//!   timed refresh, which claims a lock handed to it as well. Why a user
//!   lock's wait and not `SLEEP()`, and not `GET_LOCK` per waiter: see the
//!   `bell` module's source.
//! - **Counters, limiters, fenced values** are rows too, each operation one
//!   procedure call under the row's lock: counters with a version column
//!   (compare-and-set, `decr_if_at_least` that never goes below zero,
//!   `mark_once`), GCRA, fixed and sliding windows on the database's clock
//!   (the core's `decide` makes the decision from their numbers).
//!
//! What a lock costs beside the server's own `GET_LOCK`, uncontended and
//! under contention, is measured by `cargo run --release -p
//! lockguard-bench -- --only mysql`
//! ([docs/mysql.md](https://github.com/lockguard/lockguard/blob/main/docs/mysql.md#under-contention)).
//!
//! # Privileges
//!
//! A user that creates lockguard's tables and procedures on connect (when
//! they are missing, or older than this version) needs `CREATE`, `ALTER`,
//! `CREATE ROUTINE`, `ALTER ROUTINE` and `INDEX` on the database, besides
//! the grants below. Once they are installed at this version (by a
//! database administrator, with the SQL of [`migration_sql`]), a client
//! reads their version and creates nothing, and its user needs only
//!
//! ```sql
//! GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE ON app.* TO 'app'@'%';
//! ```
//!
//! The bell needs no more: its user locks (`GET_LOCK`, `IS_USED_LOCK`)
//! take no privilege, and the `KILL` with which a new bell ends a stale
//! connection of its own client's is a user's right over its own
//! connections. Ringing a bell (`KILL QUERY`) runs in lockguard's ring
//! procedure, as the procedure's definer (the account that created it): it
//! rings the bells of the definer's own user, and of every user only when
//! the definer has `CONNECTION ADMIN` (MariaDB) / `CONNECTION_ADMIN`
//! (MySQL). So with clients of more than one user, install the schema as
//! an administrator holding that privilege (or give it to the user that
//! creates it); otherwise their waiters wake at their timed refreshes. A
//! client opens its pool (up to 16 connections) and, at its first wait,
//! the bell's two connections.
//!
//! # What is offered
//!
//! Everything a lockguard store offers: locks, semaphores, fencing tokens,
//! waiting with direct handoff, inspection, counters, rate limiters and
//! fenced values. For the application's own tables, [`FencedTable`] writes
//! a row only with a token not older than its last write's, and checks
//! the row-lock pitfalls (autocommit, an unindexed key column) where it
//! can.
//!
//! Tested on MariaDB 10.11; MySQL 8 should work (nothing MariaDB-only is
//! used: no `RETURNING`, no sequences) but is not tested.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod bell;
pub mod check;
mod connect;
mod error;
mod fenced_table;
mod locks;
mod options;
mod schema;
mod store;
mod tls;
pub mod url;

#[allow(deprecated)]
pub use connect::{BuilderExt, ClientExt, MySqlBuilder, connect, connect_with};
pub use fenced_table::FencedTable;
pub use lockguard_core::store::LockLeases;
pub use options::{DEFAULT_TABLE_PREFIX, MySqlOptions};
pub use schema::migration_sql;
