//! Liveness: every wait ends within its bound, and after the last fault
//! heals, a release wakes the next waiter at notification speed.

use std::collections::{BTreeMap, HashMap};

use super::{Bounds, FaultSpan, Measures, Violation, describe};
use crate::clock::ms;
use crate::history::{Call, Op, Outcome};

/// No waiter starves: every acquisition returns (acquired, busy, or an
/// error) within its wait plus a bound for the last attempt's round trip.
/// A worker paused (SIGSTOP) during its acquisition is excused: its own
/// clock stood still.
pub(crate) fn waits_bounded(
    ops: &[Op],
    faults: &[FaultSpan],
    bounds: Bounds,
    t0: u64,
    v: &mut Vec<Violation>,
) {
    for o in ops {
        let Call::Acquire { key, wait_ms, .. } = &o.call else {
            continue;
        };
        let Some((end, _)) = &o.done else { continue };
        let paused = faults.iter().any(|f| {
            f.what == "pause-worker" && f.worker() == Some(o.w) && f.from < *end && f.to > o.invoke
        });
        let took = end - o.invoke;
        let bound = wait_ms * 1_000_000 + bounds.wait_slack_ns;
        if !paused && took > bound {
            v.push(Violation {
                check: "no-starvation",
                what: format!(
                    "lock {key:?}: acquire with a wait of {wait_ms} ms took {:.1} ms (bound {:.1} ms)",
                    ms(took),
                    ms(bound)
                ),
                ops: describe(&[o], t0),
            });
        }
    }
}

/// Wake-ups come back: handoffs (a release while another worker waits,
/// to that worker's acquire returning) that begin after the last fault
/// healed and settled have a median latency within the bound.
pub(crate) fn handoffs(
    ops: &[Op],
    faults: &[FaultSpan],
    bounds: Bounds,
    end: u64,
    t0: u64,
    v: &mut Vec<Violation>,
    m: &mut Measures,
) {
    let healed = faults.iter().map(|f| f.to).max().unwrap_or(t0).max(t0);
    let from = healed.saturating_add(bounds.settle_ns);
    // A fault the run did not schedule (a failover the sentinels started on
    // their own) may leave too little of the run to measure: said, not
    // failed.
    if from.saturating_add(bounds.min_window_ns) > end {
        m.wakeups_unmeasured = Some(format!(
            "the last fault healed at {:.1} ms, too late to measure wake-ups after it",
            ms(healed - t0)
        ));
        return;
    }
    let mut latencies: Vec<u64> = Vec::new();
    let mut slowest: Option<(u64, &Op, &Op)> = None;
    for (rel, b) in handoff_pairs(ops) {
        if rel.invoke < from || b.end() > end {
            continue;
        }
        let lat = b.end() - rel.invoke;
        latencies.push(lat);
        if slowest.is_none_or(|(s, _, _)| lat > s) {
            slowest = Some((lat, rel, b));
        }
    }
    latencies.sort_unstable();
    m.handoffs = latencies.len();
    if latencies.len() < bounds.min_handoffs {
        v.push(Violation {
            check: "wake-ups",
            what: format!(
                "only {} handoffs after the last fault healed at {:.1} ms (+{:.0} ms settle); need {} to measure",
                latencies.len(),
                ms(healed - t0),
                ms(bounds.settle_ns),
                bounds.min_handoffs
            ),
            ops: vec![],
        });
        return;
    }
    let Some(&median) = latencies.get(latencies.len() / 2) else {
        return;
    };
    m.handoff_median_ms = Some(ms(median));
    if median > bounds.handoff_median_ns {
        let (_, rel, b) = slowest.expect("latencies are not empty");
        v.push(Violation {
            check: "wake-ups",
            what: format!(
                "median handoff latency {:.1} ms over {} handoffs after the last fault healed, above {:.0} ms: wake-ups did not come back (slowest shown)",
                ms(median),
                latencies.len(),
                ms(bounds.handoff_median_ns)
            ),
            ops: describe(&[rel, b], t0),
        });
    }
}

/// Every handoff of the history: a release (that found the lock still
/// held) and the acquisition that followed it on the key, by a worker
/// already waiting when the release began (its latency is from the
/// release's invocation to that acquisition's return).
pub(crate) fn handoff_pairs(ops: &[Op]) -> Vec<(&Op, &Op)> {
    let mut releases: HashMap<(u32, &str, u64), &Op> = HashMap::new();
    let mut acquired: BTreeMap<&str, Vec<(&Op, u64)>> = BTreeMap::new();
    for o in ops {
        match (&o.call, o.outcome()) {
            (Call::Release { key, fence }, Some(Outcome::Released { was_held: true })) => {
                releases.insert((o.w, key.as_str(), *fence), o);
            }
            // Readers and a semaphore's holders share: their acquisition
            // follows no one release in particular. A job's lock is kept
            // past its release (`at_least`): no handoff at all.
            (
                Call::Acquire {
                    key,
                    read: false,
                    permits: None,
                    at_least_ms: None,
                    ..
                },
                Some(Outcome::Acquired { fence }),
            ) => {
                acquired.entry(key).or_default().push((o, *fence));
            }
            _ => {}
        }
    }
    let mut pairs = Vec::new();
    for acqs in acquired.values_mut() {
        acqs.sort_by_key(|(o, _)| o.end());
        for pair in acqs.windows(2) {
            let ((a, fa), (b, _)) = (pair[0], pair[1]);
            let Some(rel) = releases.get(&(a.w, a.call.key(), fa)) else {
                continue;
            };
            // The next holder was already waiting when the release began.
            // A multi-lock waits for its other keys too: its latency is
            // not the handoff's.
            if matches!(b.call, Call::Acquire { multi: true, .. })
                || b.invoke >= rel.invoke
                || b.end() <= rel.invoke
            {
                continue;
            }
            pairs.push((*rel, b));
        }
    }
    pairs
}
