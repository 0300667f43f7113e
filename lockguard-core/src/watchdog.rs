//! Lease renewal in the background while a guard lives.
//!
//! One timer per runtime keeps every watched lease's next renewal; a
//! renewal that falls due runs as a task of its own and then books the
//! next one. A guard released before its first renewal (an HTTP request's
//! lock, most short critical sections) costs an entry in that timer's map,
//! not a task and a timer of its own.
//!
//! A timer's task sleeps until its earliest booking, and once a deadline
//! passes with nothing booked it waits to be told, with no timer pending.
//! Neither a release nor (under load) each booking wakes it: a task woken
//! by a booking that is gone by the time it looks sleeps as far ahead as
//! that booking was due (a third of a lease), so bookings due later wake
//! nobody. Under paused tokio time such a deadline is one the clock may
//! advance to, as it was while a guard was held.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::runtime::{Handle, Id};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::hold::{Booking, Hold};
use crate::lease::safety_margin;

/// The renewal timers of the process: one per runtime that guards were
/// taken on, each driven by a task on that runtime (so renewals follow
/// that runtime's clock, paused time included).
pub(crate) struct Renewals {
    state: Mutex<State>,
}

/// The process's renewal timers.
static RENEWALS: Renewals = Renewals {
    state: Mutex::new(State {
        timers: Vec::new(),
        numbered: 0,
    }),
};

/// The process's renewal timers.
pub(crate) fn renewals() -> &'static Renewals {
    &RENEWALS
}

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
    due: BTreeMap<(Instant, u64), Weak<Hold>>,
    /// When its task looks next (`None`: when told to): a booking due
    /// before that wakes it.
    looks_at: Option<Instant>,
    /// How far ahead the latest booking was due.
    ahead: Duration,
    notify: Arc<Notify>,
}

/// What a timer's task does after a look.
enum Look {
    /// Start these renewals, and look again at `next` (or, with `None`,
    /// when told to).
    Renew(Vec<Arc<Hold>>, Option<Instant>),
    /// End: the timer is gone.
    Done,
}

impl Renewals {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts renewing `hold`'s lease on `runtime`: the first renewal is
    /// due a third of the lease (or of a handoff's reservation) after the
    /// request that set it was sent, not after the guard was made, so a
    /// grant that arrived late is renewed at once rather than after it ran
    /// out. A fixed lease is renewed only from a reservation, once.
    pub(crate) fn start(&'static self, hold: &Arc<Hold>, runtime: &Handle) {
        self.book(hold, first_due(hold), runtime);
    }

    /// Books `hold`'s next renewal at `at`, unless it was released.
    fn book(&'static self, hold: &Arc<Hold>, at: Instant, runtime: &Handle) {
        let mut state = self.lock();
        // Checked holding the booking, which `cancel` reads after the flag
        // is set: a release either sees this booking or prevents it.
        let mut booking = hold.booking.lock().unwrap_or_else(|p| p.into_inner());
        if hold.released.load(Ordering::Acquire) {
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
                    looks_at: Some(at),
                    ahead: Duration::ZERO,
                    notify,
                });
                state.timers.last_mut().expect("just pushed")
            }
        };
        timer.due.insert((at, n), Arc::downgrade(hold));
        // A renewal is booked about a third of a lease ahead (no clock
        // read while every booking waits for this lock).
        timer.ahead = hold.lease / 3;
        if timer.looks_at.is_none_or(|t| at < t) {
            timer.looks_at = Some(at);
            timer.notify.notify_one();
        }
        *booking = Some(Booking { runtime: id, at, n });
        drop(booking);
        drop(state);
        // Outside the lock: a runtime shutting down drops the task at
        // once, and its drop forgets the timer.
        if let Some((task, notify)) = start {
            runtime.spawn(tick(self, id, task, notify));
        }
    }

    /// Forgets `hold`'s booked renewal, if any (it was released; its
    /// `released` flag is already set).
    pub(crate) fn cancel(&self, hold: &Hold) {
        let unbooked = || {
            hold.booking
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_none()
        };
        if unbooked() {
            return;
        }
        let mut state = self.lock();
        let Some(b) = hold
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
    /// when to look next.
    fn look(&self, runtime: Id, task: u64, now: Instant) -> Look {
        let mut state = self.lock();
        let Some(i) = state
            .timers
            .iter()
            .position(|t| t.runtime == runtime && t.task == task)
        else {
            return Look::Done;
        };
        let timer = &mut state.timers[i];
        let at_its_time = timer.looks_at.is_some_and(|t| t <= now);
        let mut due = Vec::new();
        while let Some(entry) = timer.due.first_entry() {
            if entry.key().0 > now {
                break;
            }
            if let Some(hold) = entry.remove().upgrade() {
                *hold.booking.lock().unwrap_or_else(|p| p.into_inner()) = None;
                due.push(hold);
            }
        }
        timer.looks_at = match timer.due.first_key_value() {
            Some(((at, _), _)) => Some(*at),
            // Woken by a booking already released (every request, under
            // load): the next is likely as far ahead; not telling this
            // task of each saves a wake-up per booking.
            None if !at_its_time => Some(now + timer.ahead),
            // Idle since the last deadline: wait to be told.
            None => None,
        };
        Look::Renew(due, timer.looks_at)
    }

    /// Forgets the timer of task `task`, if it still is that task's: the
    /// task ended with its runtime. Renewals still booked on it could
    /// never run. (tokio draws runtime ids from a 64-bit counter: a
    /// finished runtime's id is not handed to another.)
    fn stopped(&self, runtime: Id, task: u64) {
        self.lock()
            .timers
            .retain(|t| t.runtime != runtime || t.task != task);
    }
}

/// When the first renewal of `hold`'s lease falls due: a third of what
/// the grant recorded (the lease, or a handoff's shorter reservation)
/// after the request that set it was sent, which is its validity's end
/// less that and plus the safety margin; at once for a reservation as
/// long as the lease or longer.
fn first_due(hold: &Hold) -> Instant {
    let recorded = match hold.reserved {
        // A reservation as long as the lease or longer: the lease is set
        // at once (a fixed lease is not kept past itself).
        Some(r) if r >= hold.lease => return Instant::now(),
        Some(r) => r,
        None => hold.lease,
    };
    let valid_until = hold.lease_state().valid_until;
    (valid_until + recorded / 3 + safety_margin(recorded))
        .checked_sub(recorded)
        .unwrap_or_else(Instant::now)
}

/// Forgets its timer when its task is dropped with its runtime, so a
/// client that outlives many runtimes keeps no timer for each.
struct Running {
    renewals: &'static Renewals,
    runtime: Id,
    task: u64,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.renewals.stopped(self.runtime, self.task);
    }
}

/// The task of one timer: starts each renewal when it falls due.
fn tick(
    renewals: &'static Renewals,
    runtime: Id,
    task: u64,
    notify: Arc<Notify>,
) -> impl Future<Output = ()> + Send + 'static {
    // Made before the task first runs: a runtime that shuts down before
    // polling it still drops it.
    let running = Running {
        renewals,
        runtime,
        task,
    };
    async move {
        let _running = running;
        loop {
            let look = renewals.look(runtime, task, Instant::now());
            let Look::Renew(due, next) = look else { return };
            for hold in due {
                tokio::spawn(renew(hold));
            }
            match next {
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = notify.notified() => {}
                    }
                }
                None => notify.notified().await,
            }
        }
    }
}

/// Renews the lease once and books the next renewal: a third of the lease
/// later (none for a fixed lease, whose one renewal extended a handoff's
/// reservation to it), or sooner after a failure to reach the store. If
/// no renewal succeeds before the lease's end the guard is marked lost.
async fn renew(hold: Arc<Hold>) {
    let lease = hold.lease;
    let interval = lease / 3;
    let next = {
        let _turn = hold.renewal.lock().await;
        // Released, or lost (an extend found it gone): nothing to renew.
        if hold.released.load(Ordering::Acquire) || hold.lease_state().lost {
            return;
        }
        let sent_at = Instant::now();
        hold.renewing(sent_at, lease);
        let result = hold
            .engine
            .store
            .extend(&hold.keys, &hold.token, lease)
            .await;
        // A release may have raced the renewal; say nothing then.
        if hold.released.load(Ordering::Acquire) {
            return;
        }
        match result {
            Ok(true) => {
                if !hold.renewed(sent_at, lease) || !hold.watchdog {
                    return;
                }
                tracing::trace!(lock = %hold.name, fence = hold.fence.get(), "lease renewed");
                interval
            }
            Ok(false) => {
                hold.mark_lost("renewal found the lock gone");
                return;
            }
            Err(e) => {
                crate::meter::store_error(hold.primitive(), "renew");
                let valid_until = hold.lease_state().valid_until;
                let left = valid_until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    hold.mark_lost("renewals failed until the lease ran out");
                    return;
                }
                tracing::warn!(lock = %hold.name, fence = hold.fence.get(), error = %e, "lease renewal failed; retrying");
                (left / 3).clamp(Duration::from_millis(10), interval)
            }
        }
    };
    renewals().book(&hold, Instant::now() + next, &Handle::current());
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::runtime::{Handle, Id};

    use super::renewals;
    use crate::Client;

    // The timers are the process's, and tests run side by side: each
    // counts what its own runtime has booked.
    impl super::Renewals {
        fn booked_on(&self, runtime: Id) -> usize {
            let state = self.lock();
            let timer = state.timers.iter().find(|t| t.runtime == runtime);
            timer.map_or(0, |t| t.due.len())
        }

        fn has_timer(&self, runtime: Id) -> bool {
            self.lock().timers.iter().any(|t| t.runtime == runtime)
        }
    }

    fn booked() -> usize {
        renewals().booked_on(Handle::current().id())
    }

    /// A guard released before its first renewal leaves nothing behind; a
    /// fixed lease books nothing.
    #[tokio::test(start_paused = true)]
    async fn a_guard_released_early_leaves_no_booking() {
        let lg = Client::memory();
        let a = lg.lock("a").acquire().await.unwrap();
        let b = lg.lock("b").acquire().await.unwrap();
        assert_eq!(booked(), 2);
        let fixed = lg
            .lock("c")
            .lease(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap();
        assert_eq!(booked(), 2);
        b.release().await.unwrap();
        assert_eq!(booked(), 1);
        drop(fixed);
        drop(a);
        assert_eq!(booked(), 0);
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
            assert_eq!(booked(), 1);
        }
        // Still the holder in the store: another client is refused.
        assert!(lg.lock("long").try_acquire().await.unwrap_err().is_busy());
        assert!(guard.release().await.unwrap());
    }

    /// A timer with nothing booked waits to be told; a booking after a
    /// long idle spell is renewed.
    #[tokio::test(start_paused = true)]
    async fn a_booking_after_an_idle_spell_is_renewed() {
        let lg = Client::memory();
        let guard = lg.lock("a").acquire().await.unwrap();
        assert!(guard.release().await.unwrap());
        assert_eq!(booked(), 0);
        tokio::time::sleep(Duration::from_secs(120)).await;
        let guard = lg
            .lock("b")
            .watchdog(Duration::from_millis(300))
            .acquire()
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(guard.is_held(), "no renewal after the idle spell");
        assert!(guard.release().await.unwrap());
    }

    /// A lock handed over from the queue is renewed from the lease its
    /// confirmation set, not from the reservation: with a 60 s waiter
    /// timeout and the default 30 s lease, the first renewal used to fall
    /// due 40 s after the handoff, after the lease had ended.
    #[tokio::test(start_paused = true)]
    async fn a_lock_handed_over_is_renewed_from_its_confirmed_lease() {
        let lg = Client::builder()
            .waiter_timeout(Duration::from_secs(60))
            .memory()
            .unwrap();
        let held = lg.lock("handed").acquire().await.unwrap();
        let waiter = lg.peer();
        let waiting = tokio::spawn(async move {
            let lock = waiter.lock("handed").wait(Duration::from_secs(300));
            lock.acquire().await
        });
        while lg.lock("handed").inspect().await.unwrap().waiters == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(held.release().await.unwrap());
        let guard = waiting.await.unwrap().unwrap();
        for _ in 0..12 {
            tokio::time::sleep(Duration::from_secs(10)).await;
            assert!(guard.is_held(), "the lock handed over was lost");
            assert!(lg.lock("handed").try_acquire().await.unwrap_err().is_busy());
        }
        assert_eq!(booked(), 1);
        assert!(guard.release().await.unwrap());
        assert_eq!(booked(), 0);
    }

    /// The lock `handed` (fixed lease `lease`) as a waiter of `lg`'s gets
    /// it: handed over by a release to the waiter queued for it.
    async fn handed_over(lg: &Client, lease: Duration) -> crate::LockGuard {
        let held = lg.lock("handed").lease(lease).acquire().await.unwrap();
        let waiter = lg.peer();
        let waiting = tokio::spawn(async move {
            let lock = waiter
                .lock("handed")
                .lease(lease)
                .wait(Duration::from_secs(300));
            lock.acquire().await
        });
        while lg.lock("handed").inspect().await.unwrap().waiters == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(held.release().await.unwrap());
        waiting.await.unwrap().unwrap()
    }

    /// A lock handed to a waiter whose reservation (its waiter timeout) is
    /// shorter than its fixed lease: a guard released within a third of
    /// the reservation never asks the store to extend it (a short hold
    /// costs no request for its lease); one held longer is extended to its
    /// lease once, a third of the way into the reservation, and kept for
    /// the whole lease.
    #[tokio::test(start_paused = true)]
    async fn a_handoff_is_extended_to_its_lease_only_when_held_past_a_third_of_its_reservation() {
        use crate::store::forwarding::Forwarding;
        let store = Forwarding::new(None);
        let reservation = Duration::from_millis(300);
        let lease = Duration::from_secs(10);
        let lg = Client::builder()
            .waiter_timeout(reservation)
            .build(crate::store::Store::new(store.clone(), Vec::new()))
            .unwrap();
        let extends = || store.extends.load(std::sync::atomic::Ordering::Relaxed);
        let short = handed_over(&lg, lease).await;
        assert!(short.valid_for() <= reservation, "{:?}", short.valid_for());
        tokio::time::sleep(reservation / 6).await;
        assert!(short.release().await.unwrap());
        tokio::time::sleep(lease).await;
        assert_eq!(extends(), 0, "a short hold was extended");
        assert_eq!(booked(), 0);

        let long = handed_over(&lg, lease).await;
        tokio::time::sleep(reservation / 2).await;
        assert_eq!(extends(), 1, "the reservation was not extended once");
        assert!(long.valid_for() > reservation, "{:?}", long.valid_for());
        // Past the reservation, to the lease's last tenth: still held, and
        // the only extension was that one (a fixed lease is not renewed).
        tokio::time::sleep(lease - lease / 10 - reservation / 2).await;
        assert!(long.is_held(), "the lock handed over was lost");
        assert!(lg.lock("handed").try_acquire().await.unwrap_err().is_busy());
        assert_eq!(extends(), 1);
        assert_eq!(booked(), 0);
        assert!(long.release().await.unwrap());
    }

    /// An extension that shortens what the store keeps (a handoff's
    /// reservation longer than the fixed lease; an `extend` to a shorter
    /// lease) counts from its send: until its answer comes, the guard
    /// counts on no more than that, never on the longer validity the store
    /// no longer keeps.
    #[tokio::test(start_paused = true)]
    async fn an_extension_that_shortens_the_lease_counts_from_its_send() {
        use crate::store::forwarding::Forwarding;
        let answer = Duration::from_secs(5);
        let store = Forwarding::with_extend_delay(answer);
        let lease = Duration::from_secs(2);
        let lg = Client::builder()
            .waiter_timeout(Duration::from_secs(60))
            .build(crate::store::Store::new(store.clone(), Vec::new()))
            .unwrap();
        // A handoff reserved for 60 s, to a waiter whose lease is 2 s.
        let handed = handed_over(&lg, lease).await;
        // The extension to 2 s has run in the store, its answer not back.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            handed.valid_for() <= lease,
            "the guard counts on {:?} where the store keeps {lease:?}",
            handed.valid_for()
        );
        assert!(handed.release().await.unwrap());

        let guard = lg
            .lock("shortened")
            .lease(Duration::from_secs(30))
            .acquire()
            .await
            .unwrap();
        let extend = guard.extend(Duration::from_secs(1));
        tokio::pin!(extend);
        assert!(
            tokio::time::timeout(Duration::from_millis(100), &mut extend)
                .await
                .is_err(),
            "the extension answered before its delay"
        );
        assert!(
            guard.valid_for() <= Duration::from_secs(1),
            "the guard counts on {:?} where the store keeps 1 s",
            guard.valid_for()
        );
        // Answered after the 1 s it set: the guard is lost, as the store
        // may have let it go.
        assert!(extend.await.is_err());
        assert!(!guard.is_held());
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
        let first_id = first.handle().id();
        let guard = first.block_on(
            lg.lock("one")
                .watchdog(Duration::from_millis(300))
                .acquire(),
        );
        let guard = guard.unwrap();
        assert!(renewals().has_timer(first_id));
        drop(first);
        assert!(
            !renewals().has_timer(first_id),
            "the dead runtime's timer was kept"
        );
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
