//! The stores that still live in lockguard-core, each behind the public
//! boundary in [`crate::store`]: the in-memory store (the reference
//! implementation), Redis (standalone, Sentinel, Cluster), Redlock,
//! PostgreSQL and ZooKeeper.

pub(crate) mod memory;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
pub(crate) mod redis;
pub(crate) mod redlock;
#[cfg(feature = "zookeeper")]
pub(crate) mod zookeeper;
