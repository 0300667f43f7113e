//! Rate limiting: admissions within the quota's bound in every window.

use std::time::Duration;

use super::{Violation, describe};
use crate::history::{Call, Op, Outcome};
use crate::worker::QUOTA;

/// In any span of time `T`, GCRA admits at most the burst plus one per
/// emission interval of `T`. A span here is measured on the workers'
/// clock: admissions that began and returned inside it were decided inside
/// it (on the store's clock, which runs at the same rate).
pub(crate) fn within_quota(ops: &[Op], t0: u64, v: &mut Vec<Violation>) {
    let admitted: Vec<&Op> = ops
        .iter()
        .filter(|o| {
            matches!(o.call, Call::Check { .. })
                && o.outcome() == Some(&Outcome::Decided { allowed: true })
        })
        .collect();
    let e = QUOTA.emission_interval().as_nanos() as u64;
    let burst = QUOTA.burst_size();
    for span in [QUOTA.period(), QUOTA.emission_interval() * burst as u32] {
        let span_ns = span.as_nanos() as u64;
        let bound = burst + span_ns.div_ceil(e);
        // Windows start at each admission's invocation (ops are sorted by
        // invocation).
        for (i, first) in admitted.iter().enumerate() {
            let until = first.invoke + span_ns;
            let inside: Vec<&Op> = admitted[i..]
                .iter()
                .take_while(|o| o.invoke <= until)
                .filter(|o| o.end() <= until)
                .copied()
                .collect();
            if inside.len() as u64 > bound {
                v.push(Violation {
                    check: "rate-limit",
                    what: format!(
                        "{} admissions within {:?}, above the bound of {bound} (burst {burst} + one per {:?})",
                        inside.len(),
                        span,
                        Duration::from_nanos(e)
                    ),
                    ops: describe(&[inside[0], inside[inside.len() - 1]], t0),
                });
                // One report per span length is enough to act on.
                break;
            }
        }
    }
}
