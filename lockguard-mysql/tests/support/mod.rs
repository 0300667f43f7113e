//! The MySQL harness of the conformance binaries: one server for the test
//! binary, a table prefix of each test's own.

use std::sync::atomic::{AtomicU64, Ordering};

use lockguard_core::Builder;
use lockguard_mysql::{LockLeases, MySqlOptions};
use lockguard_testing::MariaDbServer;
use lockguard_testing::conformance::{ClientFuture, Harness};

/// The binary's shared server, with a table prefix of the test's own, so
/// tests running side by side share nothing.
pub(crate) struct MySql {
    server: &'static MariaDbServer,
    prefix: String,
    leases: LockLeases,
}

impl MySql {
    pub(crate) fn start() -> Self {
        Self::with(LockLeases::Recorded)
    }

    /// Clients whose locks are of session leases.
    #[allow(dead_code)] // (not every binary runs them)
    pub(crate) fn session() -> Self {
        Self::with(LockLeases::Session)
    }

    fn with(leases: LockLeases) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Self {
            server: MariaDbServer::shared(),
            prefix: format!(
                "t{}_{}_",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
            leases,
        }
    }
}

impl Harness for MySql {
    fn client_with(&self, builder: Builder) -> ClientFuture<'_> {
        Box::pin(async move {
            // The builder's timeouts are the store's: a test that asks for a
            // patient client gets one.
            let settings = builder.connection_settings();
            let store = MySqlOptions::new()
                .table_prefix(self.prefix.as_str())
                .connect_timeout(settings.connect_timeout)
                .response_timeout(settings.response_timeout)
                .lock_leases(self.leases)
                .connect(&self.server.url())
                .await
                .expect("connect to mysql");
            builder.build(store).expect("valid settings")
        })
    }

    /// Each handoff also rings the waiter's bell and the waiter reads its
    /// mailbox (about 6 ms): 50 rounds race the same 32 tasks without
    /// taking 40 s.
    fn contention_rounds(&self) -> usize {
        50
    }

    /// A session lease's holder keeps its lease in its client alone.
    fn keeps_lock_leases(&self) -> bool {
        self.leases == LockLeases::Recorded
    }
}
