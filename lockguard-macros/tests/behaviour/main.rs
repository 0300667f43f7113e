//! What the attributes do at run time, on the in-memory store and on a
//! real `redis-server` started by each test: exclusion, refusals past a
//! quota, at most N bodies at once, lease loss, reentrancy.

mod bounds;
mod concurrency_limit;
mod lock;
mod rate_limit;
mod support;
