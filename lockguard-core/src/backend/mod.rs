//! The stores that still live in lockguard-core, each behind the public
//! boundary in [`crate::store`]: the in-memory store (the reference
//! implementation), Redis (standalone, Sentinel, Cluster) and Redlock.

pub(crate) mod memory;
