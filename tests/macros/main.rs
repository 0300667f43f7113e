//! What the attributes do at run time, on the in-memory store and on a
//! real `redis-server` started by each test: exclusion, refusals past a
//! quota, at most N bodies at once, lease loss, reentrancy. (Here in the
//! facade rather than in lockguard-macros, so that the macros' UI tests
//! build against the facade alone, without Redis.)
#![cfg(all(feature = "macros", feature = "redis"))]

mod bounds;
mod concurrency_limit;
mod lock;
mod rate_limit;
mod rw_lock;
mod support;
