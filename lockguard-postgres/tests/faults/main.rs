//! The PostgreSQL store against a real server under faults: killed and
//! restarted, paused past a lease, its backends terminated, a wait across
//! an outage (the kit's fault scenarios, and PostgreSQL's own); races on
//! one row made deterministic, and a failover to a stale standby; and a
//! multi-lock's holder, a writer and a leader killed in a process of
//! their own, or paused past their lease.
//!
//! The modules carry the store's name, so that `cargo test postgres` picks
//! every test here.

mod postgres;
mod postgres_pauses;
mod postgres_races;
mod postgres_session;
mod postgres_shapes;
