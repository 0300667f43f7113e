//! The PostgreSQL store of lockguard: locks, semaphores, counters, rate
//! limiters and fenced values in a schema of their own, leases on the
//! database's clock, a FIFO queue whose handoffs are announced with
//! `NOTIFY`; and fenced writes to the application's own tables.
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
mod fenced_table;
mod flights;
mod pool;
mod schema;
mod store;
mod tls;

pub use connect::{BuilderExt, ClientExt, DEFAULT_SCHEMA, PostgresBuilder};
pub use fenced_table::{FencedTable, migration_sql};

pub use deadpool_postgres;
#[cfg(feature = "sqlx")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlx")))]
pub use sqlx;
pub use tokio_postgres;
