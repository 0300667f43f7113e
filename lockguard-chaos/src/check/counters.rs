//! Counters: the final value is what the updates add up to, the stock
//! never goes below zero, and versions never repeat.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{Violation, describe};
use crate::history::{Call, Op, Outcome};
use crate::worker::STOCK;

/// The most sums the exact subset check tracks before it falls back to
/// the range of possible sums.
const MAX_SUMS: usize = 1 << 18;

/// The final value of every counter equals its starting value plus the
/// updates that applied: every successful one, and any subset of those
/// whose outcome is unknown (each applied or not). The stock never reads
/// below zero.
pub(crate) fn exact(ops: &[Op], t0: u64, v: &mut Vec<Violation>) {
    #[derive(Default)]
    struct Tally<'a> {
        base: Option<i64>,
        last: Option<(&'a Op, i64)>,
        known: i64,
        unknown: Vec<i64>,
        updates: usize,
    }
    let mut by_key: BTreeMap<&str, Tally<'_>> = BTreeMap::new();
    for o in ops {
        let (key, delta): (&str, Option<i64>) = match &o.call {
            // The runner sets the start and reads the end (worker 0).
            Call::Set { key, n } if o.w == 0 => {
                if matches!(o.outcome(), Some(Outcome::Value { .. })) {
                    by_key.entry(key).or_default().base = Some(*n);
                }
                continue;
            }
            Call::Get { key } if o.w == 0 => {
                if let Some(Outcome::Value { v, .. }) = o.outcome() {
                    by_key.entry(key).or_default().last = Some((o, *v));
                }
                continue;
            }
            Call::Incr { key, n } => (key, Some(*n)),
            Call::Take { key, n } => (
                key,
                match o.outcome() {
                    Some(Outcome::Taken { v: None }) => Some(0),
                    _ => Some(-*n),
                },
            ),
            Call::Cas { key, read, new, .. } => (
                key,
                match o.outcome() {
                    Some(Outcome::Swapped { ok: false }) => Some(0),
                    _ => Some(new - read),
                },
            ),
            _ => ("", None),
        };
        let Some(delta) = delta else { continue };
        let t = by_key.entry(key).or_default();
        t.updates += 1;
        match o.outcome() {
            Some(Outcome::Error { .. })
                if o.outcome().is_some_and(Outcome::definitely_not_applied) => {}
            Some(Outcome::Error { .. }) | None => t.unknown.push(delta),
            Some(_) => t.known += delta,
        }
        // The stock as reported by the update itself.
        if key == STOCK {
            let seen = match o.outcome() {
                Some(Outcome::Taken { v: Some(x) }) | Some(Outcome::Value { v: x, .. }) => Some(*x),
                _ => None,
            };
            if let Some(x) = seen
                && x < 0
            {
                v.push(Violation {
                    check: "stock-never-negative",
                    what: format!("counter {key:?} read {x} after a bounded decrement"),
                    ops: describe(&[o], t0),
                });
            }
        }
    }
    for o in ops {
        if let (Call::Get { key }, Some(Outcome::Value { v: x, .. })) = (&o.call, o.outcome())
            && key == STOCK
            && *x < 0
        {
            v.push(Violation {
                check: "stock-never-negative",
                what: format!("counter {key:?} read {x}"),
                ops: describe(&[o], t0),
            });
        }
    }
    for (key, t) in by_key {
        let Some((last_op, last)) = t.last else {
            continue;
        };
        let base = t.base.unwrap_or(0);
        let need = last - base - t.known;
        if !reachable(&t.unknown, need) {
            v.push(Violation {
                check: "counters-exact",
                what: format!(
                    "counter {key:?}: final value {last}, but the start {base} plus the {} successful updates ({:+}) plus any subset of the {} with unknown outcome ({:?}) cannot make it: {need:+} unaccounted for",
                    t.updates - t.unknown.len(),
                    t.known,
                    t.unknown.len(),
                    t.unknown
                ),
                ops: describe(&[last_op], t0),
            });
        }
    }
}

/// Whether some subset of `deltas` sums to `need`.
fn reachable(deltas: &[i64], need: i64) -> bool {
    let mut sums: HashSet<i64> = HashSet::from([0]);
    for d in deltas {
        if sums.len() > MAX_SUMS {
            // Too many to track: the range is the honest fallback.
            let lo: i64 = deltas.iter().filter(|d| **d < 0).sum();
            let hi: i64 = deltas.iter().filter(|d| **d > 0).sum();
            return (lo..=hi).contains(&need);
        }
        let more: Vec<i64> = sums.iter().map(|s| s + d).collect();
        sums.extend(more);
    }
    sums.contains(&need)
}

/// Versions: two reads of one version read one value; a read that began
/// after another returned never sees an older version; no two
/// compare-and-sets succeed from the same version.
pub(crate) fn versions(ops: &[Op], t0: u64, v: &mut Vec<Violation>) {
    let mut reads: BTreeMap<&str, Vec<(&Op, u64, i64)>> = BTreeMap::new();
    for o in ops {
        if let (
            Call::Get { key },
            Some(Outcome::Value {
                v: x,
                version: Some(ver),
            }),
        ) = (&o.call, o.outcome())
        {
            reads.entry(key).or_default().push((o, *ver, *x));
        }
    }
    for (key, rs) in &reads {
        let mut by_version: HashMap<u64, (&Op, i64)> = HashMap::new();
        for (o, ver, x) in rs {
            if let Some((p, y)) = by_version.get(ver)
                && y != x
            {
                v.push(Violation {
                    check: "versions",
                    what: format!("counter {key:?}: version {ver} read with values {y} and {x}"),
                    ops: describe(&[p, o], t0),
                });
            }
            by_version.entry(*ver).or_insert((o, *x));
        }
        // Real-time order: against the newest version returned before.
        let mut done: Vec<&(&Op, u64, i64)> = rs.iter().collect();
        done.sort_by_key(|(o, _, _)| o.end());
        let mut j = 0;
        let mut best: Option<&(&Op, u64, i64)> = None;
        for r in rs {
            while j < done.len() && done[j].0.end() < r.0.invoke {
                if best.is_none_or(|b| done[j].1 > b.1) {
                    best = Some(done[j]);
                }
                j += 1;
            }
            if let Some(b) = best
                && r.1 < b.1
            {
                v.push(Violation {
                    check: "versions",
                    what: format!(
                        "counter {key:?}: version {} read after version {} had been read",
                        r.1, b.1
                    ),
                    ops: describe(&[b.0, r.0], t0),
                });
            }
        }
    }
    let mut swapped: HashMap<(&str, u64), &Op> = HashMap::new();
    for o in ops {
        if let (Call::Cas { key, version, .. }, Some(Outcome::Swapped { ok: true })) =
            (&o.call, o.outcome())
            && let Some(p) = swapped.insert((key.as_str(), *version), o)
        {
            v.push(Violation {
                check: "versions",
                what: format!(
                    "counter {key:?}: two compare-and-sets succeeded from version {version}"
                ),
                ops: describe(&[p, o], t0),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::reachable;

    #[test]
    fn subset_sums() {
        assert!(reachable(&[], 0));
        assert!(!reachable(&[], 1));
        assert!(reachable(&[2, -3, 5], 2));
        assert!(reachable(&[2, -3, 5], -1));
        assert!(!reachable(&[2, -3, 5], 1));
    }
}
