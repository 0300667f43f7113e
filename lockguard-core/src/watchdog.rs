//! Lease renewal in the background while a guard lives.
//!
//! One timer per client and runtime keeps every watched lease's next
//! renewal; a renewal that falls due runs as a task of its own and then
//! books the next one. A guard released before its first renewal (an HTTP
//! request's lock, most short critical sections) costs an entry in that
//! timer's map, not a task and a timer of its own.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::runtime::{Handle, Id};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::acquisition::Acquisition;
use crate::lease::safety_margin;

/// How long a timer with nothing booked sleeps between looks: bookings due
/// after that wake nobody (a lease's first renewal is a third of it away).
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// How many looks in a row a timer makes with nothing booked before its
/// task ends; the next booking starts another.
const IDLE_LOOKS: u32 = 30;

/// The renewal timers of one client: one per runtime its guards were
/// taken on, each driven by a task on that runtime (so renewals follow
/// that runtime's clock, paused time included).
#[derive(Default)]
pub(crate) struct Renewals {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    timers: Vec<Timer>,
    /// Tells apart bookings due at the same instant, and timers' tasks.
    numbered: u64,
}

struct Timer {
    runtime: Id,
    /// The number of the task that drives it: a timer whose task ended is
    /// replaced, never revived.
    task: u64,
    due: BTreeMap<(Instant, u64), Weak<Acquisition>>,
    /// When its task looks next: a booking due before that wakes it.
    looks_at: Instant,
    notify: Arc<Notify>,
}

/// Where an acquisition's next renewal is booked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Booking {
    runtime: Id,
    at: Instant,
    n: u64,
}

/// What a timer's task does after a look.
enum Look {
    /// Start these renewals, and look again at `next` (or when told to).
    Renew(Vec<Arc<Acquisition>>, Instant),
    /// End: the timer was idle too long, or is gone.
    Done,
}

impl fmt::Debug for Renewals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.lock();
        let booked: usize = state.timers.iter().map(|t| t.due.len()).sum();
        f.debug_struct("Renewals")
            .field("timers", &state.timers.len())
            .field("booked", &booked)
            .finish()
    }
}

impl Renewals {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts renewing `shared`'s lease on `runtime`: the first renewal is
    /// due a third of the lease after the request that set it was sent,
    /// not after the guard was made, so a grant that arrived late is
    /// renewed at once rather than after it ran out.
    pub(crate) fn start(self: &Arc<Self>, shared: &Arc<Acquisition>, runtime: &Handle) {
        let lease = shared.lease;
        let valid_until = shared.lease_state().valid_until;
        let at = (valid_until + lease / 3 + safety_margin(lease))
            .checked_sub(lease)
            .unwrap_or_else(Instant::now);
        self.book(shared, at, runtime);
    }

    /// Books `shared`'s next renewal at `at`, unless it was released.
    fn book(self: &Arc<Self>, shared: &Arc<Acquisition>, at: Instant, runtime: &Handle) {
        let mut state = self.lock();
        // Checked under the lock that `cancel` takes after setting it: a
        // release either sees this booking or prevents it.
        if shared.released.load(Ordering::Acquire) {
            return;
        }
        state.numbered += 1;
        let n = state.numbered;
        let id = runtime.id();
        let mut start = None;
        let timer = match state.timers.iter().position(|t| t.runtime == id) {
            Some(i) => &mut state.timers[i],
            None => {
                let notify = Arc::new(Notify::new());
                start = Some((n, notify.clone()));
                state.timers.push(Timer {
                    runtime: id,
                    task: n,
                    due: BTreeMap::new(),
                    looks_at: at,
                    notify,
                });
                state.timers.last_mut().expect("just pushed")
            }
        };
        timer.due.insert((at, n), Arc::downgrade(shared));
        if at < timer.looks_at {
            timer.looks_at = at;
            timer.notify.notify_one();
        }
        *shared.booking.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(Booking { runtime: id, at, n });
        drop(state);
        // Outside the lock: a runtime shutting down drops the task at
        // once, and its drop forgets the timer.
        if let Some((task, notify)) = start {
            runtime.spawn(tick(Arc::downgrade(self), id, task, notify));
        }
    }

    /// Forgets `shared`'s booked renewal, if any (it was released; its
    /// `released` flag is already set).
    pub(crate) fn cancel(&self, shared: &Acquisition) {
        let unbooked = || {
            shared
                .booking
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_none()
        };
        if unbooked() {
            return;
        }
        let mut state = self.lock();
        let Some(b) = shared
            .booking
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return;
        };
        if let Some(t) = state.timers.iter_mut().find(|t| t.runtime == b.runtime) {
            t.due.remove(&(b.at, b.n));
        }
    }

    /// Takes the renewals of task `task`'s timer due by `now`, and says
    /// when to look next; `idle` counts the looks in a row that found
    /// nothing booked.
    fn look(&self, runtime: Id, task: u64, now: Instant, idle: &mut u32) -> Look {
        let mut state = self.lock();
        let Some(i) = state
            .timers
            .iter()
            .position(|t| t.runtime == runtime && t.task == task)
        else {
            return Look::Done;
        };
        let timer = &mut state.timers[i];
        let mut due = Vec::new();
        while let Some(entry) = timer.due.first_entry() {
            if entry.key().0 > now {
                break;
            }
            if let Some(shared) = entry.remove().upgrade() {
                *shared.booking.lock().unwrap_or_else(|p| p.into_inner()) = None;
                due.push(shared);
            }
        }
        if due.is_empty() && timer.due.is_empty() {
            *idle += 1;
            if *idle > IDLE_LOOKS {
                // Under the lock: a booking either came before (and the
                // timer was not idle) or will start a new timer.
                state.timers.swap_remove(i);
                return Look::Done;
            }
        } else {
            *idle = 0;
        }
        timer.looks_at = timer
            .due
            .first_key_value()
            .map_or(now + IDLE_LOOK, |((at, _), _)| *at);
        Look::Renew(due, timer.looks_at)
    }

    /// Forgets the timer of task `task`, if it still is that task's: the
    /// task ended with its runtime (whose ids are never reused) or with
    /// the client. Renewals still booked on it could never run.
    fn stopped(&self, runtime: Id, task: u64) {
        self.lock()
            .timers
            .retain(|t| t.runtime != runtime || t.task != task);
    }
}

impl Drop for Renewals {
    fn drop(&mut self) {
        // Their tasks find the client gone and end.
        for t in &self
            .state
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .timers
        {
            t.notify.notify_one();
        }
    }
}

/// Forgets its timer when its task is dropped with its runtime, so a
/// client that outlives many runtimes keeps no timer for each.
struct Running {
    renewals: Weak<Renewals>,
    runtime: Id,
    task: u64,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(r) = self.renewals.upgrade() {
            r.stopped(self.runtime, self.task);
        }
    }
}

/// The task of one timer: starts each renewal when it falls due.
fn tick(
    renewals: Weak<Renewals>,
    runtime: Id,
    task: u64,
    notify: Arc<Notify>,
) -> impl Future<Output = ()> + Send + 'static {
    // Made before the task first runs: a runtime that shuts down before
    // polling it still drops it.
    let running = Running {
        renewals: renewals.clone(),
        runtime,
        task,
    };
    async move {
        let _running = running;
        let mut idle = 0;
        loop {
            let Some(r) = renewals.upgrade() else { return };
            let look = r.look(runtime, task, Instant::now(), &mut idle);
            drop(r);
            let Look::Renew(due, next) = look else { return };
            for shared in due {
                tokio::spawn(renew(shared));
            }
            tokio::select! {
                () = tokio::time::sleep_until(next) => {}
                () = notify.notified() => {}
            }
        }
    }
}

/// Renews the lease once and books the next renewal: a third of the lease
/// later, or sooner after a failure to reach the store. If no renewal
/// succeeds before the lease's end the guard is marked lost.
async fn renew(shared: Arc<Acquisition>) {
    let lease = shared.lease;
    let interval = lease / 3;
    let next = {
        let _turn = shared.renewal.lock().await;
        if shared.released.load(Ordering::Acquire) {
            return;
        }
        let sent_at = Instant::now();
        let result = shared
            .engine
            .store
            .locks
            .extend(&shared.keys, &shared.token, lease)
            .await;
        // A release may have raced the renewal; say nothing then.
        if shared.released.load(Ordering::Acquire) {
            return;
        }
        match result {
            Ok(true) => {
                if !shared.renewed(sent_at, lease) {
                    return;
                }
                tracing::trace!(lock = %shared.name, fence = shared.fence.get(), "lease renewed");
                interval
            }
            Ok(false) => {
                shared.mark_lost("renewal found the lock gone");
                return;
            }
            Err(e) => {
                crate::meter::store_error(shared.primitive(), "renew");
                let valid_until = shared.lease_state().valid_until;
                let left = valid_until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    shared.mark_lost("renewals failed until the lease ran out");
                    return;
                }
                tracing::warn!(lock = %shared.name, fence = shared.fence.get(), error = %e, "lease renewal failed; retrying");
                (left / 3).clamp(Duration::from_millis(10), interval)
            }
        }
    };
    let renewals = shared.engine.renewals.clone();
    renewals.book(&shared, Instant::now() + next, &Handle::current());
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::{Client, LockGuard};

    impl super::Renewals {
        /// How many renewals are booked, on every runtime.
        fn booked(&self) -> usize {
            self.lock().timers.iter().map(|t| t.due.len()).sum()
        }

        fn timers(&self) -> usize {
            self.lock().timers.len()
        }
    }

    fn booked(guard: &LockGuard) -> usize {
        guard.tenancy().engine().renewals.booked()
    }

    /// A guard released before its first renewal leaves nothing behind; a
    /// fixed lease books nothing.
    #[tokio::test(start_paused = true)]
    async fn a_guard_released_early_leaves_no_booking() {
        let lg = Client::memory();
        let a = lg.lock("a").acquire().await.unwrap();
        let b = lg.lock("b").acquire().await.unwrap();
        assert_eq!(booked(&a), 2);
        let fixed = lg
            .lock("c")
            .lease(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap();
        assert_eq!(booked(&a), 2);
        b.release().await.unwrap();
        assert_eq!(booked(&a), 1);
        drop(fixed);
        let renewals = a.tenancy().engine().renewals.clone();
        drop(a);
        assert_eq!(renewals.booked(), 0);
    }

    /// The timer renews every third of the lease, one booking at a time,
    /// on paused time as on real time.
    #[tokio::test(start_paused = true)]
    async fn renewals_keep_a_lease_for_many_lease_lengths() {
        let lg = Client::memory();
        let guard = lg
            .lock("long")
            .watchdog(Duration::from_millis(300))
            .acquire()
            .await
            .unwrap();
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(guard.is_held());
            assert_eq!(booked(&guard), 1);
        }
        // Still the holder in the store: another client is refused.
        assert!(lg.lock("long").try_acquire().await.unwrap_err().is_busy());
        assert!(guard.release().await.unwrap());
    }

    /// A timer with nothing booked for a while ends its task; the next
    /// booking starts another, which renews.
    #[tokio::test(start_paused = true)]
    async fn an_idle_timer_ends_and_the_next_booking_starts_another() {
        let lg = Client::memory();
        let guard = lg.lock("a").acquire().await.unwrap();
        let renewals = guard.tenancy().engine().renewals.clone();
        assert!(guard.release().await.unwrap());
        assert_eq!(renewals.timers(), 1);
        tokio::time::sleep(super::IDLE_LOOK * (super::IDLE_LOOKS + 2)).await;
        assert_eq!(renewals.timers(), 0, "an idle timer kept its task");
        let guard = lg
            .lock("b")
            .watchdog(Duration::from_millis(300))
            .acquire()
            .await
            .unwrap();
        assert_eq!(renewals.timers(), 1);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(guard.is_held(), "no renewal after the idle timer ended");
        assert!(guard.release().await.unwrap());
    }

    /// A client outlives the runtime its first guards were taken on: the
    /// timer's task died with that runtime, and the next runtime gets one
    /// of its own.
    #[test]
    fn a_new_runtime_gets_a_timer_of_its_own() {
        let lg = Client::memory();
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap()
        };
        let first = runtime();
        let guard = first.block_on(
            lg.lock("one")
                .watchdog(Duration::from_millis(300))
                .acquire(),
        );
        let guard = guard.unwrap();
        let renewals = guard.tenancy().engine().renewals.clone();
        assert_eq!(renewals.timers(), 1);
        drop(first);
        assert_eq!(renewals.timers(), 0, "the dead runtime's timer was kept");
        drop(guard);
        let second = runtime();
        second.block_on(async {
            let guard = lg
                .lock("two")
                .watchdog(Duration::from_millis(300))
                .acquire()
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_secs(3)).await;
            assert!(guard.is_held(), "no renewal on the second runtime");
            assert!(guard.release().await.unwrap());
        });
    }
}
