//! `lockguard-chaos`: the history checker on lockguard's own stores: Redis,
//! Redlock on three masters, a Redis Cluster, Redis under Sentinel,
//! PostgreSQL, MySQL on MariaDB, ZooKeeper and etcd, each started with
//! lockguard-testing's harnesses (etcd with lockguard-etcd's own). Each store is plugged in through the
//! library's public [`Store`] and [`Deployment`] traits, as a store crate
//! outside lockguard plugs in its own.
//!
//! ```text
//! lockguard-chaos [--profile ci|long] [--store NAME[,NAME...]|all] [--seed N]
//!                 [--self-test] [--no-faults] [--target URL] [--out DIR]
//! ```

#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    lockguard_chaos::main(&lockguard_chaos::stores::ALL)
}
