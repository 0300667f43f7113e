//! The conformance kit: the behaviour every lockguard store must show, as
//! tests any store crate runs against its own store.
//!
//! A store crate describes how to reach its store with a [`Harness`] (a
//! client per simulated process, and the few ways stores may differ), then
//! runs the groups of tests that apply to what it offers with
//! [`conformance!`](crate::conformance!). Adding a store is: implement
//! `LockStore` and `DataStore`, write its harness, run the kit, pass.
//!
//! | group | what it checks | needs |
//! |---|---|---|
//! | `locks` | mutual exclusion, leases, handoff, wake-ups, watchdog, reentrancy, fencing, bad input, bounded waits; multi-key locks (module `multi_locks`); scheduled jobs (module `schedule`) | locks (and fenced values for the record of runs) |
//! | `semaphores` | at most N inside, crashed holders, extend and expiry, wake-ups | locks |
//! | `queue` | FIFO order across clients, no barging, permits in order, waiters that give up | a queue (`Waiting::Queue`) |
//! | `wake_ups` | no lock's wake-up lost under contention (each acquisition within 8 s of the lock's release, where only a wake-up is that quick) | locks |
//! | `queue_wake_ups` | no permit's wake-up lost under contention (a bound on every wait that only a queue gives) | a queue (`Waiting::Queue`) |
//! | `inspection` | `inspect()` of locks and semaphores | `inspect` |
//! | `rw_locks` | read-write locks: readers share, writers alone, one FIFO queue, handoff to the run of readers, fences, leases, dropped acquisitions, bad input, `inspect()`; upgradeable read-write locks (module `upgradeable`): one upgrader beside the readers, no writer between a read and its upgrade | read-write locks (`rw_*`) |
//! | `rw_refused` | a store without read-write locks refuses them as `Unsupported`, naming itself | no read-write locks |
//! | `counters` | bounded decrement, once-per-user marks, compare-and-set, overflow | counters |
//! | `counter_expiry` | counters that expire, versions that never repeat | counters with expiry |
//! | `limits` | fixed and sliding windows, GCRA, retry-after, peek | rate limits |
//! | `survey` | locks listed from any client with their holders and waiters in order; forced releases that hand on and are noticed | `survey` (and read-write locks) |
//! | `leader` | one leader at a time, increasing terms, candidates in arrival order, who leads, lapsed leaders replaced, observers and proclaimed values | locks (and fenced values, or a data client) |
//!
//! Every test starts its own store through the harness's constructor,
//! runs on a two-thread runtime (the `queue` group on virtual time, with
//! time paused, when the store does), and ends it on drop.
//!
//! # Example
//!
//! The in-memory store's harness is [`Memory`]. A store crate's test file
//! holds a harness for its store (here one reaching a server the harness
//! started, through the crate's own `connect`) and one line naming the
//! groups it passes:
//!
//! ```no_run
//! use lockguard_core::Builder;
//! use lockguard_testing::conformance::{ClientFuture, Harness};
//! # mod my_store {
//! #     pub async fn connect(_url: &str) -> lockguard_core::Result<lockguard_core::store::Store> {
//! #         Ok(lockguard_core::store::Store::memory())
//! #     }
//! #     pub struct Server;
//! #     impl Server {
//! #         pub fn start() -> Self { Server }
//! #         pub fn url(&self) -> String { String::new() }
//! #     }
//! # }
//!
//! /// A server of the test's own, stopped when the harness is dropped.
//! struct MyStore(my_store::Server);
//!
//! impl Harness for MyStore {
//!     fn client_with(&self, builder: Builder) -> ClientFuture<'_> {
//!         Box::pin(async move {
//!             let store = my_store::connect(&self.0.url()).await.expect("connect");
//!             builder.build(store).expect("valid settings")
//!         })
//!     }
//! }
//!
//! lockguard_testing::conformance!(
//!     mine => MyStore(my_store::Server::start());
//!     locks, semaphores, queue, counters
//! );
//! # fn main() {}
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use lockguard_core::{Builder, Client, ManualClock};

pub mod counters;
pub mod inspection;
pub mod leader;
pub mod limits;
pub mod locks;
pub mod multi_locks;
pub mod queue;
pub mod rw_locks;
pub mod schedule;
pub mod semaphores;
pub mod survey;
pub mod upgradeable;
mod waits;

/// The lease the watchdog tests keep alive. Renewed every third of it,
/// it outlives a renewal that a loaded machine holds up for over half a
/// second (a database server stalling on its disk, the renewing task
/// waiting for a core); at 300 ms, a stall of 200 ms lost it. Short
/// enough that a test watching a few lease lengths takes seconds.
pub(crate) const WATCHED: Duration = Duration::from_secs(1);

/// The future of a client a harness makes.
pub type ClientFuture<'a> = Pin<Box<dyn Future<Output = Client> + Send + 'a>>;

/// How the kit reaches a store under test, and how that store may differ
/// from the others where the contract leaves room.
///
/// The harness owns the store's servers (started in its constructor, which
/// runs once per test) and stops them when dropped.
pub trait Harness: Send + Sync + 'static {
    /// A client of the store with `builder`'s settings, as if in another
    /// process: with connections of its own. Panics when the store cannot
    /// be reached (a test failure, with the store's message).
    fn client_with(&self, builder: Builder) -> ClientFuture<'_>;

    /// A client whose holders, when their process dies, free their locks
    /// within `lease`: the default client for stores that keep leases; a
    /// client whose session lasts `lease` on ZooKeeper.
    fn client_for_lease(&self, lease: Duration) -> ClientFuture<'_> {
        let _ = lease;
        self.client_with(Client::builder())
    }

    /// A client for the tests' own data (counters, fenced values): the
    /// store under test, unless it offers none (Redlock).
    fn data_client(&self) -> ClientFuture<'_> {
        self.client_with(Client::builder())
    }

    /// The clock of a store whose time the tests move (the memory store's
    /// [`ManualClock`]); `None` for a store that keeps its own time, where
    /// the tests wait in real time.
    fn clock(&self) -> Option<&ManualClock> {
        None
    }

    /// Whether the store keeps each holder's lease, and so can say how long
    /// it has left: all but ZooKeeper, where the holder's client keeps it
    /// and the store knows only that the holder's session lives.
    fn keeps_leases(&self) -> bool {
        true
    }

    /// Whether the store keeps each lock holder's lease (of a plain lock,
    /// a leader's, a scheduled job's), where it keeps the leases of the
    /// other primitives' holders: not with session leases (MySQL's
    /// `LockLeases::Session`), whose holder's client alone keeps it.
    fn keeps_lock_leases(&self) -> bool {
        self.keeps_leases()
    }

    /// Whether the store pushes an election's changes to its observers
    /// ([`DataStore::follow`](lockguard_core::store::DataStore::follow):
    /// etcd, ZooKeeper); the others' observers poll.
    fn pushes_changes(&self) -> bool {
        false
    }

    /// How many rounds each of the 32 tasks of the mutual-exclusion test
    /// takes the lock: 200, fewer for a store whose handoffs cost several
    /// round trips on every node (Redlock), or statements and a wake-up of
    /// their own (PostgreSQL, MySQL, ZooKeeper).
    fn contention_rounds(&self) -> usize {
        200
    }
}

/// The store under test, as a test sees it: its harness, and a value the
/// tests race on.
#[derive(Clone)]
pub struct Env {
    harness: Arc<dyn Harness>,
    shared: Arc<AtomicU64>,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env")
            .field("real_time", &self.real_time())
            .finish_non_exhaustive()
    }
}

impl Env {
    /// The store `harness` reaches.
    pub fn new(harness: impl Harness) -> Self {
        Self {
            harness: Arc::new(harness),
            shared: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A client with default settings, as if in another process.
    pub async fn client(&self) -> Client {
        self.harness.client_with(Client::builder()).await
    }

    /// A client with `builder`'s settings, as if in another process.
    pub async fn client_with(&self, builder: Builder) -> Client {
        self.harness.client_with(builder).await
    }

    /// The 4 client handles a concurrent test spreads its tasks over, each
    /// with `builder`'s settings.
    pub(crate) async fn handles(&self, builder: Builder) -> Vec<Client> {
        let mut clients = Vec::new();
        for _ in 0..4 {
            clients.push(self.client_with(builder.clone()).await);
        }
        clients
    }

    /// See [`Harness::client_for_lease`].
    pub async fn client_for_lease(&self, lease: Duration) -> Client {
        self.harness.client_for_lease(lease).await
    }

    /// See [`Harness::data_client`].
    pub async fn data_client(&self) -> Client {
        self.harness.data_client().await
    }

    /// Whether the store keeps its own time, so tests wait in real time
    /// instead of moving its clock.
    pub fn real_time(&self) -> bool {
        self.harness.clock().is_none()
    }

    /// The clock the tests move.
    ///
    /// # Panics
    ///
    /// On a store that keeps its own time (see [`Env::real_time`]).
    pub fn clock(&self) -> &ManualClock {
        self.harness
            .clock()
            .expect("the store keeps its own time; check Env::real_time first")
    }

    /// See [`Harness::pushes_changes`].
    pub fn store_pushes_changes(&self) -> bool {
        self.harness.pushes_changes()
    }

    /// See [`Harness::keeps_leases`].
    pub fn store_keeps_leases(&self) -> bool {
        self.harness.keeps_leases()
    }

    /// See [`Harness::keeps_lock_leases`].
    pub fn store_keeps_lock_leases(&self) -> bool {
        self.harness.keeps_lock_leases()
    }

    /// See [`Harness::contention_rounds`].
    pub fn contention_rounds(&self) -> usize {
        self.harness.contention_rounds()
    }

    /// A value read and written in two separate steps, with the other tasks
    /// let run between them: two holders inside at once lose an update.
    pub fn shared_value(&self) -> SharedValue {
        SharedValue(self.shared.clone())
    }
}

/// A counter updated without atomicity: see [`Env::shared_value`].
#[derive(Debug, Clone)]
pub struct SharedValue(Arc<AtomicU64>);

impl SharedValue {
    /// A non-atomic increment: read, let other tasks run, write back.
    pub async fn racy_increment(&mut self) {
        let read = self.0.load(Ordering::SeqCst);
        tokio::task::yield_now().await;
        self.0.store(read + 1, Ordering::SeqCst);
    }

    /// The value now.
    pub async fn get(&mut self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The in-memory store, the reference every other store is held to, on a
/// [`ManualClock`] the tests move. Every client is a peer of one handle,
/// whose settings apply (a long waiter timeout, so the wake-up tests see
/// the notification and not a refresh); a client's own settings are not.
#[derive(Debug)]
pub struct Memory {
    clock: ManualClock,
    store: OnceLock<Client>,
}

impl Memory {
    /// A memory store of its own (made at the first client, on the test's
    /// runtime).
    pub fn new() -> Self {
        Self {
            clock: ManualClock::new(),
            store: OnceLock::new(),
        }
    }
}

impl Default for Memory {
    fn default() -> Self {
        Self::new()
    }
}

impl Harness for Memory {
    fn client_with(&self, builder: Builder) -> ClientFuture<'_> {
        let _ = builder;
        let store = self.store.get_or_init(|| {
            Client::builder()
                .clock(self.clock.clone())
                .waiter_timeout(Duration::from_secs(30))
                .memory()
                .expect("valid settings")
        });
        let peer = store.peer();
        Box::pin(async move { peer })
    }

    fn clock(&self) -> Option<&ManualClock> {
        Some(&self.clock)
    }
}

/// On what time a test runs.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Time {
    /// Real time on a two-thread runtime.
    Real,
    /// Paused tokio time on one thread when the store's clock is virtual
    /// (the queue tests on memory, whose arrivals are then ordered
    /// exactly); real time otherwise.
    PausedWhenVirtual,
}

/// Runs one test of the kit: makes its store with `harness`, then runs
/// `test` on it (see [`Time`]). Used by [`conformance!`](crate::conformance!).
#[doc(hidden)]
pub fn run<H, F, Fut>(harness: impl FnOnce() -> H, time: Time, test: F)
where
    H: Harness,
    F: FnOnce(Env) -> Fut,
    Fut: Future<Output = ()>,
{
    let env = Env::new(harness());
    let rt = if time == Time::PausedWhenVirtual && !env.real_time() {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
    }
    .expect("a tokio runtime");
    rt.block_on(test(env));
}

/// Asks for the lock `name` on `lg` with `try_acquire` every 20 ms until it
/// is free: its guard.
///
/// # Panics
///
/// When an attempt fails with anything but `Busy`, or the lock is still
/// taken at `until` (`why` says why it should be free by then).
pub async fn first_free(
    lg: &Client,
    name: &str,
    until: std::time::Instant,
    why: &str,
) -> lockguard_core::LockGuard {
    loop {
        match lg.lock(name).try_acquire().await {
            Ok(g) => return g,
            Err(e) => assert!(e.is_busy(), "{name}: {e}"),
        }
        assert!(
            std::time::Instant::now() < until,
            "{name}: still taken: {why}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `f` every 5 ms until it returns true or `within` passes; whether
/// it did.
pub async fn eventually<F, Fut>(within: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if f().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Runs the named groups of the kit against the store that `harness` (an
/// expression, evaluated once per test) reaches, as tests in a module
/// named `store` with one module per group (so `cargo test store` picks
/// them, and `cargo test store::locks` one group).
///
/// The groups: `locks`, `wake_ups`, `semaphores`, `queue`,
/// `queue_wake_ups`, `inspection`, `rw_locks`, `rw_refused`, `counters`,
/// `counter_expiry`, `limits`, `leader` (see the
/// [module](mod@crate::conformance)).
///
/// ```ignore
/// lockguard_testing::conformance!(postgres => Postgres::start(); locks, semaphores, queue);
/// ```
#[macro_export]
macro_rules! conformance {
    ($store:ident => $harness:expr; $($group:ident),+ $(,)?) => {
        mod $store {
            #[allow(unused_imports)]
            use super::*;
            $( $crate::conformance!(@group $group, $harness); )+
        }
    };
    (@group locks, $h:expr) => {
        $crate::conformance!(@tests locks, locks, Real, $h;
            mutual_exclusion_under_contention,
            distinct_keys_never_interfere,
            lease_expiry_hands_over_and_fences_the_old_holder,
            non_holder_cannot_release_and_expired_lock_cannot_extend,
            watchdog_keeps_a_short_lease_alive,
            a_lock_handed_to_a_waiter_keeps_its_lease,
            waiter_is_woken_by_release_not_by_its_retry_interval,
            dropped_acquire_futures_never_keep_the_lock,
            dropped_guard_releases_in_the_background,
            nested_acquisition_in_a_scope_is_reentrant_and_excludes_others,
            fencing_tokens_strictly_increase,
            fenced_writes_compare_tokens_exactly,
            fenced_remove_keeps_the_token,
            braced_keys_are_locks_of_their_own,
            bad_input_is_a_clear_error,
            acquire_wait_is_bounded,
            now_methods_answer_at_once_or_send_nothing,
            at_least_keeps_an_early_released_lock_until_it_has_passed,
            at_least_outlives_the_client_that_took_it,
            at_least_holds_against_a_queued_waiter,
        );
        $crate::conformance!(@tests multi_locks, multi_locks, Real, $h;
            multi_lock_takes_every_key_or_none,
            a_multi_lock_holds_every_key_when_it_returns,
            overlapping_multi_locks_never_deadlock_nor_overlap,
            a_multi_lock_that_runs_out_of_wait_leaves_no_key_held,
            a_waiting_multi_lock_gets_every_key_when_the_last_is_freed,
            a_dropped_multi_lock_acquire_leaves_no_key_held,
            multi_lock_run_is_reentrant_and_stops_on_a_lost_lease,
            multi_lock_bad_input,
        );
        $crate::conformance!(@tests schedules, schedule, Real, $h;
            a_schedule_runs_once_per_period_across_replicas,
            a_replica_that_starts_mid_period_does_not_run_it_again,
            a_run_that_outlives_at_most_is_cancelled,
            an_hourly_schedule_runs_on_every_store,
            schedule_bad_input,
        );
    };
    (@group semaphores, $h:expr) => {
        $crate::conformance!(@tests semaphores, semaphores, Real, $h;
            never_more_than_n_inside,
            crashed_holder_frees_its_permit_at_lease_end,
            permits_release_extend_and_expire,
            permit_waiter_is_woken_by_release,
            semaphore_bad_input,
        );
    };
    (@group queue, $h:expr) => {
        $crate::conformance!(@tests queue, queue, PausedWhenVirtual, $h;
            fifo_order_across_8_clients,
            fifo_order_holds_through_a_hold_of_ten_waiter_timeouts,
            try_acquire_neither_queues_nor_barges,
            semaphore_permits_in_fifo_order,
            dropped_acquire_leaves_the_queue,
            ended_wait_leaves_the_queue,
            waiters_ahead_that_give_up_hand_over_nothing,
        );
    };
    (@group wake_ups, $h:expr) => {
        $crate::conformance!(@tests wake_ups, locks, Real, $h;
            no_wake_up_is_lost_under_contention,
        );
    };
    (@group queue_wake_ups, $h:expr) => {
        $crate::conformance!(@tests queue_wake_ups, semaphores, Real, $h;
            no_permit_wake_up_is_lost_under_contention,
        );
    };
    (@group inspection, $h:expr) => {
        $crate::conformance!(@tests inspection, inspection, Real, $h;
            a_lock_is_seen_held_with_its_lease_waiters_and_fence,
            a_semaphore_is_seen_with_its_holders_and_waiters,
        );
    };
    (@group survey, $h:expr) => {
        $crate::conformance!(@tests survey, survey, Real, $h;
            locks_are_listed_with_holders_and_waiters_in_order,
            a_forced_release_hands_on_and_the_holder_learns,
            a_forced_release_ends_every_reader,
            each_holder_is_listed_with_the_fence_it_drew,
            a_kept_lock_is_listed_and_forced_to_its_waiter,
        );
    };
    (@group rw_locks, $h:expr) => {
        $crate::conformance!(@tests rw_locks, rw_locks, Real, $h;
            readers_share_and_a_writer_excludes_everyone,
            many_readers_or_one_writer_under_contention,
            no_rw_wake_up_is_lost_under_contention,
            a_waiting_writer_blocks_later_readers,
            a_release_admits_the_run_of_readers_at_the_head_together,
            fences_order_writes_after_earlier_reads_and_writes,
            lease_expiry_frees_a_dead_holder_and_fences_it,
            watchdog_keeps_read_and_write_holds,
            dropped_rw_acquire_futures_leave_the_queue,
            rw_bad_input,
            rw_inspect_shows_readers_writer_and_waiters,
        );
        $crate::conformance!(@tests upgradeable, upgradeable, Real, $h;
            an_upgradeable_read_shares_with_readers_alone_among_upgraders,
            an_upgrade_lets_no_writer_in_between,
            a_failed_upgrade_reads_again,
        );
    };
    (@group rw_refused, $h:expr) => {
        $crate::conformance!(@tests rw_refused, rw_locks, Real, $h;
            rw_locks_are_unsupported,
        );
    };
    (@group counters, $h:expr) => {
        $crate::conformance!(@tests counters, counters, Real, $h;
            stock_is_never_oversold,
            mark_once_is_first_exactly_once,
            incr_decr_get_set_and_overflow,
            compare_and_set_and_update_lose_no_update,
            counter_bad_input,
        );
    };
    (@group counter_expiry, $h:expr) => {
        $crate::conformance!(@tests counter_expiry, counters, Real, $h;
            expiry_resets_a_counter,
            versions_do_not_repeat_after_expiry,
            versions_grow_past_more_writes_than_microseconds,
        );
    };
    (@group limits, $h:expr) => {
        $crate::conformance!(@tests limits, limits, Real, $h;
            windows_admit_exactly_the_quota_under_concurrency,
            gcra_admits_at_most_burst_plus_rate,
            retry_after_is_honoured,
            until_ready_waits_its_turn_within_its_bound,
            decisions_report_limit_remaining_and_reset,
            keys_and_limiters_are_independent,
            limiter_bad_input,
            peek_tells_the_decision_and_spends_nothing,
            check_now_answers_at_once_or_sends_nothing,
            braced_counter_and_limiter_keys_are_their_own,
        );
    };
    (@group leader, $h:expr) => {
        $crate::conformance!(@tests leader, leader, Real, $h;
            one_leader_at_a_time_with_increasing_terms,
            candidates_are_served_in_arrival_order,
            current_names_the_leader_and_nobody_after_it_resigned,
            a_leader_whose_lease_ran_out_is_replaced_and_told,
            an_old_leaders_resignation_keeps_the_newer_announcement,
            observe_gives_each_change,
            observe_is_pushed_where_the_store_pushes,
            a_proclaimed_value_is_read_with_its_term,
            leader_bad_input,
        );
    };
    (@group $other:ident, $h:expr) => {
        compile_error!(concat!(
            "unknown conformance group `", stringify!($other),
            "`: expected locks, wake_ups, semaphores, queue, queue_wake_ups, inspection, survey, rw_locks, rw_refused, counters, counter_expiry, limits or leader"
        ));
    };
    (@tests $group:ident, $module:ident, $time:ident, $h:expr; $($name:ident),+ $(,)?) => {
        mod $group {
            #[allow(unused_imports)]
            use super::*;
            $(
                #[test]
                fn $name() {
                    $crate::conformance::run(
                        || $h,
                        $crate::conformance::Time::$time,
                        $crate::conformance::$module::$name,
                    );
                }
            )+
        }
    };
}
