//! Shared test support: a real Redis to run against. (The conformance
//! suite, the fault scenarios every store shares and child processes are
//! lockguard-testing's.)
#![allow(dead_code, unreachable_pub)]

use lockguard_core::Client;
use lockguard_redis::BuilderExt as _;
use lockguard_testing::RedisServer;
pub use lockguard_testing::conformance::eventually;

/// A real `redis-server` started for a test and killed when it ends, and
/// clients of it as separate processes would have.
pub struct Env {
    pub server: Option<RedisServer>,
}

impl Env {
    pub fn redis() -> Self {
        Self {
            server: Some(RedisServer::start()),
        }
    }

    fn url(&self) -> String {
        self.server.as_ref().expect("a redis server").url()
    }

    /// A client with the given settings, with connections of its own.
    pub async fn client_with(&self, b: lockguard_core::Builder) -> Client {
        b.connect_redis(&self.url()).await.expect("connect")
    }

    pub async fn client(&self) -> Client {
        self.client_with(Client::builder()).await
    }
}
