//! The checks on a merged history. Each is exact where the history allows
//! it: an operation whose outcome is unknown (an error that may or may not
//! have applied, a worker killed mid-call) is accounted for as either, never
//! assumed away.

mod counters;
mod jobs;
mod leader;
mod limiter;
mod liveness;
mod locks;

pub(crate) use liveness::handoff_pairs;
pub(crate) use locks::holds;

use crate::history::{Call, Op, Outcome};

/// A failed check.
#[derive(Debug)]
pub(crate) struct Violation {
    /// Which check (`mutual-exclusion`, `fences`, ...).
    pub(crate) check: &'static str,
    /// What went wrong.
    pub(crate) what: String,
    /// The operations involved, described.
    pub(crate) ops: Vec<String>,
}

/// What the checks measured besides their verdicts.
#[derive(Debug, Default)]
pub(crate) struct Measures {
    /// Handoffs measured after the last fault healed (and settled).
    pub(crate) handoffs: usize,
    /// Their median latency, in ms.
    pub(crate) handoff_median_ms: Option<f64>,
    /// Non-empty holds in the history.
    pub(crate) holds: usize,
    /// Operations in the history.
    pub(crate) ops: usize,
    /// Operations whose outcome is unknown (an error, or never completed).
    pub(crate) unknown: usize,
    /// Why wake-ups were not measured, when they were not.
    pub(crate) wakeups_unmeasured: Option<String>,
    /// Overlapping holds after a server fault ended the first holder's
    /// session, on a store whose locks such a fault frees at once (their
    /// fences and fenced writes are checked all the same).
    pub(crate) session_overlaps: usize,
}

/// A time span of the run during which a fault was in effect, with what it
/// was done to (a worker id for a worker fault).
#[derive(Debug, Clone)]
pub(crate) struct FaultSpan {
    pub(crate) what: String,
    pub(crate) target: String,
    pub(crate) from: u64,
    pub(crate) to: u64,
}

impl FaultSpan {
    /// The worker a worker fault was done to.
    pub(crate) fn worker(&self) -> Option<u32> {
        self.target.strip_prefix("worker ")?.parse().ok()
    }
}

/// The settings the checks need.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// What an acquisition may take beyond its wait.
    pub(crate) wait_slack_ns: u64,
    /// How long after the last fault heals wake-ups must be back.
    pub(crate) settle_ns: u64,
    /// Median handoff latency allowed after the last fault (ns).
    pub(crate) handoff_median_ns: u64,
    /// Fewest handoffs to measure.
    pub(crate) min_handoffs: usize,
    /// The shortest stretch after the last fault (and the settle time) in
    /// which handoffs are measured.
    pub(crate) min_window_ns: u64,
}

/// A hold of a lock or a lead of an election, as the session-fault rule
/// ([`session_ended`]) sees it: when its acquisition was asked for, when it
/// began (the acquisition's return) and ended, and its fencing token (a
/// lead's term), which orders the grants.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tenure {
    pub(crate) asked: u64,
    pub(crate) from: u64,
    pub(crate) to: u64,
    pub(crate) token: u64,
}

/// Whether the overlap of two holds (or leads) `a` and `b` follows from one
/// of `session_faults` (faults that ended the clients' sessions): one that
/// hit the hold granted first (the smaller token) while it was being
/// acquired or held, and began before the other hold began. That hold's
/// session ended after its grant (while it waited for a multi-lock's other
/// keys, say) or during its hold, which freed the lock for the other, and
/// its holder is told at its next renewal.
pub(crate) fn session_ended(session_faults: &[&FaultSpan], a: Tenure, b: Tenure) -> bool {
    let (first, other) = if a.token <= b.token { (a, b) } else { (b, a) };
    session_faults
        .iter()
        .any(|f| f.from <= other.from && f.to >= first.asked && f.from <= first.to)
}

/// The checks a failover of asynchronous replication (Redis Sentinel) may
/// fail by design: acknowledged counter, limiter and fenced writes (and
/// elections' announcements) the
/// promoted replica had not received are lost (the safety page says so).
/// Locks are checked across it: the run's Sentinel clients wait for the
/// replica to confirm every acquisition and renewal.
pub const NOT_ACROSS_ASYNC_FAILOVER: &[&str] = &[
    "counters-exact",
    "versions",
    "rate-limit",
    "fenced-writes",
    "leader-reads",
];

/// Runs every check on `ops`; `session_ends` for a store whose locks a
/// session-ending server fault frees at once (see
/// [`Store::session_end_frees_locks`](crate::Store::session_end_frees_locks)).
pub(crate) fn check(
    ops: &[Op],
    bounds: Bounds,
    end: u64,
    session_ends: bool,
) -> (Vec<Violation>, Measures) {
    let faults = fault_spans(ops);
    let t0 = ops.iter().map(|o| o.invoke).min().unwrap_or(0);
    let mut v = Vec::new();
    let holds = locks::holds(ops, &faults);
    let mut m = Measures {
        holds: holds.len(),
        ops: ops.len(),
        unknown: ops
            .iter()
            .filter(|o| !matches!(o.call, Call::Fault { .. }))
            .filter(|o| match o.outcome() {
                None => true,
                Some(Outcome::Error { .. }) => true,
                Some(_) => false,
            })
            .count(),
        ..Measures::default()
    };
    let session_faults: Vec<&FaultSpan> = faults
        .iter()
        .filter(|f| session_ends && (f.what == "restart-server" || f.what == "kill-connections"))
        .collect();
    m.session_overlaps = locks::mutual_exclusion(&holds, &session_faults, t0, &mut v);
    locks::permits(&holds, t0, &mut v);
    locks::fences(ops, t0, &mut v);
    locks::fenced_writes(ops, t0, &mut v);
    locks::lease_kept_in_calm(ops, &faults, t0, &mut v);
    jobs::at_least(ops, t0, &mut v);
    jobs::once_per_period(ops, t0, &mut v);
    counters::exact(ops, t0, &mut v);
    counters::versions(ops, t0, &mut v);
    limiter::within_quota(ops, t0, &mut v);
    m.session_overlaps += leader::leaders(ops, &session_faults, t0, &mut v);
    leader::reads(ops, t0, &mut v);
    leader::observed(ops, t0, &mut v);
    liveness::waits_bounded(ops, &faults, bounds, t0, &mut v);
    liveness::handoffs(ops, &faults, bounds, end, t0, &mut v, &mut m);
    (v, m)
}

/// The faults of the history, from their start to their heal.
pub(crate) fn fault_spans(ops: &[Op]) -> Vec<FaultSpan> {
    ops.iter()
        .filter_map(|o| match &o.call {
            Call::Fault { what, target } => Some(FaultSpan {
                what: what.clone(),
                target: target.clone(),
                from: o.invoke,
                to: o.end(),
            }),
            _ => None,
        })
        .collect()
}

/// The operations with the given indexes, described.
fn describe(ops: &[&Op], t0: u64) -> Vec<String> {
    ops.iter().map(|o| o.describe(t0)).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    //! The checks on small hand-made histories: each catches what it is
    //! for and passes what is allowed.

    use super::*;

    const MS: u64 = 1_000_000;

    pub(crate) fn op(w: u32, call: Call, invoke_ms: u64, done: Option<(u64, Outcome)>) -> Op {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Op {
            w,
            op: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            call,
            invoke: invoke_ms * MS,
            done: done.map(|(t, o)| (t * MS, o)),
        }
    }

    /// A hold by worker `w` of lock "a" with `fence`: acquired at `from`,
    /// `is_held()` true at `to`, released after.
    pub(crate) fn hold(w: u32, fence: u64, from: u64, to: u64) -> Vec<Op> {
        vec![
            op(
                w,
                Call::Acquire {
                    key: "a".into(),
                    wait_ms: 1000,
                    lease_ms: 1000,
                    watchdog: false,
                    read: false,
                    permits: None,
                    multi: false,
                    at_least_ms: None,
                },
                from - 1,
                Some((from, Outcome::Acquired { fence })),
            ),
            op(
                w,
                Call::IsHeld {
                    key: "a".into(),
                    fence,
                },
                to,
                Some((to, Outcome::Held { yes: true })),
            ),
            op(
                w,
                Call::Release {
                    key: "a".into(),
                    fence,
                },
                to + 1,
                Some((to + 2, Outcome::Released { was_held: true })),
            ),
        ]
    }

    /// The bounds of the checks on these histories.
    fn bounds() -> Bounds {
        Bounds {
            wait_slack_ns: 100 * MS,
            settle_ns: 0,
            handoff_median_ns: 50 * MS,
            min_handoffs: 0,
            min_window_ns: 0,
        }
    }

    fn run(mut ops: Vec<Op>) -> Vec<&'static str> {
        ops.sort_by_key(|o| o.invoke);
        let (v, _) = check(&ops, bounds(), u64::MAX, false);
        v.into_iter().map(|v| v.check).collect()
    }

    /// [`hold`] of a read-write lock: a read hold when `read`, else a write.
    fn rw_hold(w: u32, fence: u64, from: u64, to: u64, read: bool) -> Vec<Op> {
        let mut ops = hold(w, fence, from, to);
        if let Call::Acquire { read: r, .. } = &mut ops[0].call {
            *r = read;
        }
        ops
    }

    /// [`hold`] of a permit of a semaphore of `permits`.
    fn permit_hold(w: u32, fence: u64, from: u64, to: u64, permits: u32) -> Vec<Op> {
        let mut ops = hold(w, fence, from, to);
        if let Call::Acquire { permits: p, .. } = &mut ops[0].call {
            *p = Some(permits);
        }
        ops
    }

    #[test]
    fn permits_bound_the_holds_at_once() {
        // Two of two permits held at once, a third after one ended.
        let mut ops = permit_hold(1, 1, 10, 20, 2);
        ops.extend(permit_hold(2, 2, 12, 30, 2));
        ops.extend(permit_hold(3, 3, 22, 40, 2));
        assert_eq!(run(ops), Vec::<&str>::new());
        // A third inside both.
        let mut ops = permit_hold(1, 1, 10, 20, 2);
        ops.extend(permit_hold(2, 2, 12, 30, 2));
        ops.extend(permit_hold(3, 3, 15, 40, 2));
        assert_eq!(run(ops), vec!["permits"]);
    }

    #[test]
    fn readers_share_and_a_writer_overlaps_nobody() {
        // Two readers at once, then a writer after both: allowed.
        let mut ops = rw_hold(1, 1, 10, 20, true);
        ops.extend(rw_hold(2, 2, 12, 22, true));
        ops.extend(rw_hold(3, 3, 25, 30, false));
        assert_eq!(run(ops), Vec::<&str>::new());
        // A writer inside a reader's hold, and a reader inside a writer's.
        for (first, second) in [(true, false), (false, true)] {
            let mut ops = rw_hold(1, 1, 10, 20, first);
            ops.extend(rw_hold(2, 2, 15, 25, second));
            assert_eq!(run(ops), vec!["mutual-exclusion"]);
        }
    }

    #[test]
    fn holds_one_after_another_pass() {
        let mut ops = hold(1, 1, 10, 20);
        ops.extend(hold(2, 2, 25, 30));
        assert_eq!(run(ops), Vec::<&str>::new());
    }

    #[test]
    fn overlapping_holds_are_caught() {
        let mut ops = hold(1, 1, 10, 20);
        ops.extend(hold(2, 2, 19, 30));
        assert!(run(ops).contains(&"mutual-exclusion"));
    }

    /// A server fault `what` from `from` to `to` (ms).
    fn fault(what: &str, from: u64, to: u64) -> Op {
        op(
            0,
            Call::Fault {
                what: what.into(),
                target: "postgres:1".into(),
            },
            from,
            Some((to, Outcome::Healed)),
        )
    }

    #[test]
    fn an_overlap_after_a_session_ending_fault_is_counted_only_where_sessions_hold_locks() {
        let checked = |ops: &[Op], session_ends: bool| {
            let mut ops = ops.to_vec();
            ops.sort_by_key(|o| o.invoke);
            let (v, m) = check(&ops, bounds(), u64::MAX, session_ends);
            let found: Vec<&str> = v.into_iter().map(|v| v.check).collect();
            (found, m.session_overlaps)
        };
        // The second holder takes the lock after closed connections ended
        // the first's session, which still believes it holds.
        let mut ops = hold(1, 1, 10, 40);
        ops.extend(hold(2, 2, 25, 50));
        ops.push(fault("kill-connections", 20, 22));
        assert_eq!(checked(&ops, true), (vec![], 1));
        assert_eq!(checked(&ops, false), (vec!["mutual-exclusion"], 0));
        // A restart counts as well; a pause of the server does not.
        let mut restarted = hold(1, 1, 10, 40);
        restarted.extend(hold(2, 2, 25, 50));
        restarted.push(fault("restart-server", 20, 24));
        assert_eq!(checked(&restarted, true), (vec![], 1));
        let mut paused = hold(1, 1, 10, 40);
        paused.extend(hold(2, 2, 25, 50));
        paused.push(fault("pause-server", 20, 24));
        assert_eq!(checked(&paused, true), (vec!["mutual-exclusion"], 0));
        // The later hold's session ended while it was still being
        // acquired (a multi-lock's first key, granted before the fault),
        // and the other took the lock after the fault, with a greater
        // token: counted. With the tokens the other way round, the later
        // hold was granted after the other, which the fault did not hit:
        // caught.
        for (tokens, found) in [
            ((2, 1), (vec![], 1)),
            ((1, 2), (vec!["mutual-exclusion"], 0)),
        ] {
            let mut asked = hold(1, tokens.0, 25, 40);
            let mut second = hold(2, tokens.1, 30, 50);
            second[0].invoke = 5 * MS;
            asked.append(&mut second);
            asked.push(fault("kill-connections", 12, 14));
            assert_eq!(checked(&asked, true), found, "{tokens:?}");
        }
        // The earlier hold's session ended while it was being acquired
        // (an election's campaign granted before the fault, returned
        // after it), and the other took over after the fault: counted.
        let mut campaign = hold(1, 1, 25, 40);
        campaign[0].invoke = 5 * MS;
        campaign.extend(hold(2, 2, 30, 50));
        campaign.push(fault("kill-connections", 12, 14));
        assert_eq!(checked(&campaign, true), (vec![], 1));
        // A fault after the second hold began, or before the first, ends
        // no session the overlap is about.
        for (from, to) in [(30, 32), (2, 5)] {
            let mut late = hold(1, 1, 10, 40);
            late.extend(hold(2, 2, 25, 50));
            late.push(fault("kill-connections", from, to));
            assert_eq!(
                checked(&late, true),
                (vec!["mutual-exclusion"], 0),
                "{from}"
            );
        }
    }

    #[test]
    fn a_hold_whose_is_held_said_false_claims_nothing() {
        let mut ops = hold(1, 1, 10, 20);
        let last = ops.len() - 2;
        ops[last].done = Some((20 * MS, Outcome::Held { yes: false }));
        ops.extend(hold(2, 2, 15, 30));
        assert!(!run(ops).contains(&"mutual-exclusion"));
    }

    #[test]
    fn fences_going_back_are_caught() {
        let mut ops = hold(1, 5, 10, 20);
        ops.extend(hold(2, 4, 25, 30));
        assert!(run(ops).contains(&"fences"));
    }

    #[test]
    fn a_stale_write_accepted_is_caught() {
        let w = |fence, at, out| {
            op(
                1,
                Call::FencedWrite {
                    key: "r".into(),
                    fence,
                },
                at,
                Some((at + 1, out)),
            )
        };
        assert_eq!(
            run(vec![w(5, 10, Outcome::Written), w(4, 20, Outcome::Stale)]),
            Vec::<&str>::new()
        );
        assert!(
            run(vec![w(5, 10, Outcome::Written), w(4, 20, Outcome::Written)])
                .contains(&"fenced-writes")
        );
        // Refused with no newer writer anywhere.
        assert!(run(vec![w(4, 20, Outcome::Stale)]).contains(&"fenced-writes"));
    }

    fn counter_history(final_value: i64, unknown: bool) -> Vec<Op> {
        let set = op(
            0,
            Call::Set {
                key: "c".into(),
                n: 10,
            },
            0,
            Some((
                1,
                Outcome::Value {
                    v: 10,
                    version: None,
                },
            )),
        );
        let incr = op(
            1,
            Call::Incr {
                key: "c".into(),
                n: 3,
            },
            5,
            Some((
                6,
                Outcome::Value {
                    v: 13,
                    version: None,
                },
            )),
        );
        let maybe = op(
            2,
            Call::Take {
                key: "c".into(),
                n: 2,
            },
            7,
            unknown.then_some((
                8,
                Outcome::Error {
                    kind: "store unavailable".into(),
                    msg: "connection lost".into(),
                },
            )),
        );
        let last = op(
            0,
            Call::Get { key: "c".into() },
            100,
            Some((
                101,
                Outcome::Value {
                    v: final_value,
                    version: Some(9),
                },
            )),
        );
        vec![set, incr, maybe, last]
    }

    #[test]
    fn counters_count_unknown_outcomes_either_way() {
        // The take may or may not have applied: 13 and 11 both fit.
        assert!(!run(counter_history(13, true)).contains(&"counters-exact"));
        assert!(!run(counter_history(11, true)).contains(&"counters-exact"));
        assert!(run(counter_history(12, true)).contains(&"counters-exact"));
        assert!(run(counter_history(14, true)).contains(&"counters-exact"));
    }

    /// A lead by worker `w` of term `term`: elected at `from`, leading at
    /// `to`, resigned after; and a read of who leads at `read`.
    fn lead(w: u32, term: u64, from: u64, to: u64) -> Vec<Op> {
        let key = || "leader".to_owned();
        vec![
            op(
                w,
                Call::Campaign {
                    key: key(),
                    wait_ms: 1000,
                    lease_ms: 1000,
                },
                from - 1,
                Some((from, Outcome::Elected { term })),
            ),
            op(
                w,
                Call::Leads { key: key(), term },
                to,
                Some((to, Outcome::Held { yes: true })),
            ),
            op(
                w,
                Call::Resign { key: key(), term },
                to + 1,
                Some((to + 2, Outcome::Released { was_held: true })),
            ),
        ]
    }

    fn who_leads(at: u64, term: Option<u64>) -> Op {
        op(
            9,
            Call::WhoLeads {
                key: "leader".into(),
                observer: false,
            },
            at,
            Some((at + 1, Outcome::Leader { term })),
        )
    }

    #[test]
    fn leaders_one_after_another_pass() {
        let mut ops = lead(1, 3, 10, 20);
        ops.extend(lead(2, 7, 25, 30));
        ops.push(who_leads(15, Some(3)));
        ops.push(who_leads(27, Some(7)));
        ops.push(who_leads(40, None));
        assert_eq!(run(ops), Vec::<&str>::new());
    }

    #[test]
    fn two_leads_after_a_session_ending_fault_are_counted_only_where_sessions_hold_locks() {
        let mut ops = lead(1, 3, 10, 40);
        ops.extend(lead(2, 4, 25, 50));
        ops.push(fault("restart-server", 20, 23));
        ops.sort_by_key(|o| o.invoke);
        for (session_ends, found, counted) in [(true, vec![], 1), (false, vec!["one-leader"], 0)] {
            let (v, m) = check(&ops, bounds(), u64::MAX, session_ends);
            let checks: Vec<&str> = v.into_iter().map(|v| v.check).collect();
            assert_eq!((checks, m.session_overlaps), (found, counted));
        }
        // Terms must still grow across it.
        let mut ops = lead(1, 5, 10, 40);
        ops.extend(lead(2, 4, 45, 50));
        ops.push(fault("restart-server", 20, 23));
        ops.sort_by_key(|o| o.invoke);
        let (v, _) = check(&ops, bounds(), u64::MAX, true);
        assert!(v.iter().any(|v| v.check == "leader-terms"));
    }

    #[test]
    fn two_leaders_at_once_or_of_one_term_are_caught() {
        let mut ops = lead(1, 3, 10, 20);
        ops.extend(lead(2, 4, 19, 30));
        assert!(run(ops).contains(&"one-leader"));
        let mut ops = lead(1, 3, 10, 20);
        ops.extend(lead(2, 3, 25, 30));
        assert!(run(ops).contains(&"leader-terms"));
        let mut ops = lead(1, 5, 10, 20);
        ops.extend(lead(2, 4, 25, 30));
        assert!(run(ops).contains(&"leader-terms"));
    }

    #[test]
    fn reads_of_old_or_unknown_terms_are_caught() {
        let mut ops = lead(1, 3, 10, 20);
        ops.extend(lead(2, 7, 25, 30));
        ops.push(who_leads(27, Some(3)));
        assert!(run(ops).contains(&"leader-reads"));
        let mut ops = lead(1, 3, 10, 20);
        ops.push(who_leads(15, Some(4)));
        assert!(run(ops).contains(&"leader-reads"));
    }

    #[test]
    fn a_scheduled_period_run_twice_is_caught() {
        let ran = |w: u32, period: u64, at: u64| {
            op(
                w,
                Call::ScheduledRun {
                    key: "sched".into(),
                    period,
                },
                at,
                Some((at + 1, Outcome::Acquired { fence: at })),
            )
        };
        let ops = vec![ran(1, 7, 10), ran(2, 8, 20), ran(3, 9, 30)];
        assert_eq!(run(ops.clone()), Vec::<&str>::new());
        let mut twice = ops;
        // A run whose process died before it ended counts too.
        let mut killed = ran(3, 8, 22);
        killed.done = None;
        twice.push(killed);
        assert!(run(twice).contains(&"schedule-once"));
    }

    fn observed(at: u64, term: Option<u64>) -> Op {
        let mut o = who_leads(at, term);
        o.call = Call::WhoLeads {
            key: "leader".into(),
            observer: true,
        };
        o
    }

    #[test]
    fn an_observer_that_goes_back_a_term_is_caught() {
        let mut ops = lead(1, 3, 10, 20);
        ops.extend(lead(2, 7, 25, 30));
        ops.extend([
            observed(15, Some(3)),
            observed(21, None),
            observed(27, Some(7)),
        ]);
        assert_eq!(run(ops.clone()), Vec::<&str>::new());
        ops.push(observed(28, Some(3)));
        assert!(run(ops).contains(&"observe-order"));
    }

    /// [`hold`]'s acquisition as one key of a multi-lock that returned at
    /// `from`, and whose `is_held()` after said `held`.
    fn multi_hold(w: u32, fence: u64, from: u64, held: bool) -> Vec<Op> {
        let mut ops = hold(w, fence, from, from + 1);
        if let Call::Acquire { multi, .. } = &mut ops[0].call {
            *multi = true;
        }
        ops[1].done = Some(((from + 1) * MS, Outcome::Held { yes: held }));
        ops
    }

    #[test]
    fn a_multi_lock_holds_every_key_from_its_return() {
        // Returned while another held the key: caught, even though its own
        // is_held() said false at once.
        let mut ops = hold(1, 2, 10, 30);
        ops.extend(multi_hold(2, 3, 20, false));
        assert_eq!(run(ops), vec!["multi-lock"]);
        // Returned after the other hold ended, is_held() false: nothing.
        let mut ops = hold(1, 2, 10, 30);
        ops.extend(multi_hold(2, 3, 35, false));
        assert_eq!(run(ops), Vec::<&str>::new());
        // A multi-lock's hold confirmed by is_held(), overlapped by a
        // single lock's.
        let mut ops = multi_hold(2, 1, 10, true);
        ops.extend(hold(1, 2, 10, 30));
        assert_eq!(run(ops), vec!["multi-lock"]);
    }

    #[test]
    fn a_paused_multi_lock_claims_nothing_at_its_return() {
        let mut ops = hold(1, 2, 10, 30);
        ops.extend(multi_hold(2, 3, 20, false));
        ops.push(op(
            0,
            Call::Fault {
                what: "pause-worker".into(),
                target: "worker 2".into(),
            },
            5,
            Some((25, Outcome::Healed)),
        ));
        assert_eq!(run(ops), Vec::<&str>::new());
    }

    /// A run of a job with `at_least` ms, invoked at `at`, returned at
    /// `ret`, released (`was_held`) right after.
    fn job_run(w: u32, fence: u64, at: u64, ret: u64, at_least: u64, was_held: bool) -> Vec<Op> {
        let key = || "job".to_owned();
        vec![
            op(
                w,
                Call::Acquire {
                    key: key(),
                    wait_ms: 5000,
                    lease_ms: 1500,
                    watchdog: false,
                    read: false,
                    permits: None,
                    multi: false,
                    at_least_ms: Some(at_least),
                },
                at,
                Some((ret, Outcome::Acquired { fence })),
            ),
            op(
                w,
                Call::Release { key: key(), fence },
                ret + 1,
                Some((ret + 2, Outcome::Released { was_held })),
            ),
        ]
    }

    #[test]
    fn a_job_run_inside_the_window_of_the_last_is_caught() {
        // The second run returned 1000 ms after the first was invoked: the
        // window was kept.
        let mut ops = job_run(1, 1, 10, 12, 1000, true);
        ops.extend(job_run(2, 2, 11, 1010, 1000, true));
        assert_eq!(run(ops), Vec::<&str>::new());
        // 200 ms after: caught.
        let mut ops = job_run(1, 1, 10, 12, 1000, true);
        ops.extend(job_run(2, 2, 11, 210, 1000, true));
        assert_eq!(run(ops), vec!["at-least"]);
        // The window counts from the invocation: a store may have taken
        // the lock as early as that, so a run 995 ms after the first
        // returned (1000 ms after its invocation) is allowed.
        let mut ops = job_run(1, 1, 10, 15, 1000, true);
        ops.extend(job_run(2, 2, 11, 1010, 1000, true));
        assert_eq!(run(ops), Vec::<&str>::new());
        // A run whose release found the lock gone kept nothing.
        let mut ops = job_run(1, 1, 10, 12, 1000, false);
        ops.extend(job_run(2, 2, 11, 210, 1000, true));
        assert_eq!(run(ops), Vec::<&str>::new());
    }

    #[test]
    fn waits_past_their_bound_are_caught() {
        let acquire = |took: u64| {
            op(
                1,
                Call::Acquire {
                    key: "a".into(),
                    wait_ms: 1000,
                    lease_ms: 1000,
                    watchdog: false,
                    read: false,
                    permits: None,
                    multi: false,
                    at_least_ms: None,
                },
                10,
                Some((
                    10 + took,
                    Outcome::Error {
                        kind: "busy".into(),
                        msg: String::new(),
                    },
                )),
            )
        };
        assert!(!run(vec![acquire(1050)]).contains(&"no-starvation"));
        assert!(run(vec![acquire(1200)]).contains(&"no-starvation"));
    }
}
