//! The layers over real HTTP: an axum server on a loopback port, a hyper
//! client, and a real `redis-server` per test.

mod concurrency;
mod failures;
mod lock;
mod misconfigured;
mod proxy;
mod rate_limit;
mod read_write;
mod routes;
mod streaming;
mod support;
