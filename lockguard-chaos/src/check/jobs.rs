//! Scheduled jobs: a job's lock taken with `at_least(d)` is kept until `d`
//! after the store took it, released or not, so no second run of the job
//! starts inside that window.

use std::collections::BTreeMap;

use super::{Violation, describe};
use crate::clock::ms;
use crate::history::{Call, Op, Outcome};

/// What a window may fall short by without a finding: the store's clock
/// against the runner's (a Redis expiry counts on the wall clock, in whole
/// milliseconds), as the client's lease safety margin allows for drift:
/// 1% of the window plus 2 ms.
fn drift(at_least_ns: u64) -> u64 {
    at_least_ns / 100 + 2_000_000
}

/// No acquisition of a job's lock returns inside the `at_least` window of
/// the run before it.
///
/// Each window is measured from the *invocation* of the acquisition that
/// opened it: the store took the lock at some moment between that
/// acquisition's invocation and its return, and kept it `at_least` from
/// then, so the window certainly lasts until the invocation plus
/// `at_least`; measured from the return (as the client counts it), it
/// would reach up to a whole acquisition further than the store promised,
/// and a store that counts from its own grant would be reported for a run
/// it rightly let start. Likewise the later run certainly took the lock
/// no later than its acquisition returned. So two runs are reported only
/// when neither order leaves `at_least` between them: the later one's
/// return falls before the earlier one's invocation plus its `at_least`
/// (less [`drift`]), whichever of the two is taken as the earlier.
///
/// A run whose release found the lock already gone (`was_held: false`)
/// opens no window: its lease was lost before the release (a fault), and
/// nothing was left to keep; losing a lease is the lock checks' concern.
pub(crate) fn at_least(ops: &[Op], t0: u64, v: &mut Vec<Violation>) {
    // (worker, fence) of the runs whose release found the lock gone.
    let lost: Vec<(u32, &str, u64)> = ops
        .iter()
        .filter_map(|o| match (&o.call, o.outcome()) {
            (Call::Release { key, fence }, Some(Outcome::Released { was_held: false })) => {
                Some((o.w, key.as_str(), *fence))
            }
            _ => None,
        })
        .collect();
    let mut runs: BTreeMap<&str, Vec<(&Op, u64, u64)>> = BTreeMap::new();
    for o in ops {
        if let (
            Call::Acquire {
                key,
                at_least_ms: Some(d),
                ..
            },
            Some(Outcome::Acquired { fence }),
        ) = (&o.call, o.outcome())
        {
            runs.entry(key)
                .or_default()
                .push((o, *fence, d * 1_000_000));
        }
    }
    for (key, mut rs) in runs {
        // In the order the runs returned: each against those that returned
        // before it, one finding per run.
        rs.sort_by_key(|(o, _, _)| o.end());
        // Whether `p`'s window (from its invocation) certainly contains the
        // return of `n`.
        let inside = |p: &(&Op, u64, u64), n: &(&Op, u64, u64)| {
            !lost.contains(&(p.0.w, key, p.1)) && n.0.end() + drift(p.2) < p.0.invoke + p.2
        };
        for (i, n) in rs.iter().enumerate() {
            let Some(p) = rs[..i].iter().find(|p| inside(p, n) && inside(n, p)) else {
                continue;
            };
            v.push(Violation {
                check: "at-least",
                what: format!(
                    "job lock {key:?}: a run (fence {}) returned {:.1} ms after the invocation of a run that returned before it (fence {}), inside that run's at_least of {:.0} ms",
                    n.1,
                    ms(n.0.end().saturating_sub(p.0.invoke)),
                    p.1,
                    ms(p.2),
                ),
                ops: describe(&[p.0, n.0], t0),
            });
        }
    }
}

/// No period of a scheduled job runs twice (`schedule-once`): every run
/// recorded, finished or not (a run whose process was killed had claimed
/// its period), counts.
pub(crate) fn once_per_period(ops: &[Op], t0: u64, v: &mut Vec<Violation>) {
    let mut runs: BTreeMap<(&str, u64), Vec<&Op>> = BTreeMap::new();
    for o in ops {
        if let Call::ScheduledRun { key, period } = &o.call {
            if matches!(o.outcome(), Some(Outcome::Error { .. })) {
                continue;
            }
            runs.entry((key.as_str(), *period)).or_default().push(o);
        }
    }
    for ((key, period), ran) in runs {
        if ran.len() > 1 {
            let workers: Vec<String> = ran.iter().map(|o| o.w.to_string()).collect();
            v.push(Violation {
                check: "schedule-once",
                what: format!(
                    "job {key:?}: period {period} ran {} times (workers {})",
                    ran.len(),
                    workers.join(", ")
                ),
                ops: describe(&ran, t0),
            });
        }
    }
}
