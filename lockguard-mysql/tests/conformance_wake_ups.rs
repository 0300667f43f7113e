//! The conformance kit's wake-up groups on MySQL (on MariaDB), in a binary
//! of their own: cargo runs test binaries one after another, so these run
//! after the rest of the suite (`conformance`), not beside it. Together
//! they keep both cores busy (16 tasks over 4 clients per test, each
//! handoff a ring and a mailbox read); beside the rest of the suite at 4
//! threads, their load made the 300 ms lease of
//! `watchdog_keeps_a_short_lease_alive` miss a renewal once in 4 runs.

mod support;

use support::MySql;

lockguard_testing::conformance!(
    mysql => MySql::start();
    wake_ups, queue_wake_ups
);

lockguard_testing::conformance!(
    mysql_session => MySql::session();
    wake_ups, queue_wake_ups
);
