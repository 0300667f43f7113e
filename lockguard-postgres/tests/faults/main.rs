//! The PostgreSQL store against a real server under faults: killed and
//! restarted, paused past a lease, its backends terminated, a wait across
//! an outage (the kit's fault scenarios, and PostgreSQL's own); races on
//! one row made deterministic, and a failover to a stale standby; a
//! read-write lock's writer process killed; and a writer, a multi-lock and
//! a leader paused past their lease.
//!
//! The modules carry the store's name, so that `cargo test postgres` picks
//! every test here.

mod postgres;
mod postgres_pauses;
mod postgres_races;
mod postgres_shapes;
