//! The ZooKeeper store against real servers under faults: a member killed
//! and restarted, paused past a session, the leader lost, a holder process
//! killed, creations lost in flight, the queue across the sequence
//! counter's end, and a writer, a multi-lock and a leader paused past
//! their session.
//!
//! The module carries the store's name, so that `cargo test zookeeper`
//! picks every test here.

mod zookeeper;
mod zookeeper_pauses;
