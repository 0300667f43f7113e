//! The conformance kit on PostgreSQL: one server for the test binary, a
//! schema of each test's own.

use std::sync::atomic::{AtomicU64, Ordering};

use lockguard_core::Builder;
use lockguard_postgres::BuilderExt as _;
use lockguard_testing::PostgresServer;
use lockguard_testing::conformance::{ClientFuture, Harness};

/// The binary's shared server, with a schema of the test's own (created by
/// its first client), so tests running side by side share nothing.
struct Postgres {
    server: &'static PostgresServer,
    schema: String,
}

impl Postgres {
    fn start() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Self {
            server: PostgresServer::shared(),
            schema: format!(
                "t{}_{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }
}

impl Harness for Postgres {
    fn client_with(&self, builder: Builder) -> ClientFuture<'_> {
        Box::pin(async move {
            builder
                .postgres_schema(self.schema.as_str())
                .connect_postgres(&self.server.url())
                .await
                .expect("connect to postgres")
        })
    }
}

lockguard_testing::conformance!(
    postgres => Postgres::start();
    locks, semaphores, queue, inspection, counters, counter_expiry, limits, rw_locks, leader
);
