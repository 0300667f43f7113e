//! The checks on a merged history. Each is exact where the history allows
//! it: an operation whose outcome is unknown (an error that may or may not
//! have applied, a worker killed mid-call) is accounted for as either, never
//! assumed away.

mod counters;
mod limiter;
mod liveness;
mod locks;

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
    /// Handoffs after the last fault healed (and settled): count and median
    /// latency in ms.
    pub(crate) handoffs: usize,
    pub(crate) handoff_median_ms: Option<f64>,
    pub(crate) holds: usize,
    pub(crate) ops: usize,
    pub(crate) unknown: usize,
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
}

/// Runs every check on `ops`.
pub(crate) fn check(ops: &[Op], bounds: Bounds, end: u64) -> (Vec<Violation>, Measures) {
    let faults: Vec<FaultSpan> = ops
        .iter()
        .filter_map(|o| match &o.call {
            Call::Fault { what, target } => Some(FaultSpan {
                what: what.clone(),
                target: target.clone(),
                from: o.invoke,
                to: o.end(),
            }),
            _ => None,
        })
        .collect();
    let t0 = ops.iter().map(|o| o.invoke).min().unwrap_or(0);
    let mut v = Vec::new();
    let holds = locks::holds(ops);
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
    locks::mutual_exclusion(&holds, ops, t0, &mut v);
    locks::fences(ops, t0, &mut v);
    locks::fenced_writes(ops, t0, &mut v);
    locks::lease_kept_in_calm(ops, &faults, t0, &mut v);
    counters::exact(ops, t0, &mut v);
    counters::versions(ops, t0, &mut v);
    limiter::within_quota(ops, t0, &mut v);
    liveness::waits_bounded(ops, &faults, bounds, t0, &mut v);
    liveness::handoffs(ops, &faults, bounds, end, t0, &mut v, &mut m);
    (v, m)
}

/// The operations with the given indexes, described.
fn describe(ops: &[&Op], t0: u64) -> Vec<String> {
    ops.iter().map(|o| o.describe(t0)).collect()
}
