//! The lock conformance suite: every test runs against the in-memory store
//! and against a real `redis-server`, so the two cannot drift apart.

#[path = "../support/mod.rs"]
mod support;

mod counters;
mod inspection;
mod limit_scripts;
mod limits;
mod locks;
mod semaphores;
