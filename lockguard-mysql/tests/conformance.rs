//! The conformance kit on MySQL (on MariaDB): one server for the test
//! binary, a table prefix of each test's own. The wake-up groups run in a
//! binary of their own (`conformance_wake_ups`), after this one.

mod support;

use support::MySql;

lockguard_testing::conformance!(
    mysql => MySql::start();
    locks, semaphores, queue, inspection, counters, counter_expiry, limits, rw_refused, leader
);
