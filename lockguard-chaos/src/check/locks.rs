//! Locks: no two holds overlap, fences grow in the order of holds, stale
//! fenced writes are refused, and a watchdog keeps its lease while nothing
//! goes wrong.

use std::collections::{BTreeMap, HashMap};

use super::{FaultSpan, Violation, describe};
use crate::history::{Call, Op, Outcome};

/// One hold: from the time `acquire()` had returned (taken after it
/// returned) to the last time `is_held()` said true before the release
/// (taken before that call). Both ends are conservative: the holder
/// certainly held the lock, in its own view, through the whole span.
///
/// A multi-lock's key is held from the return of `acquire()` whatever
/// `is_held()` says after: a multi-lock returns only holding every key
/// (the guarantee the `multi-lock` check holds it to), so its hold of each
/// key is at least that moment, and runs on to the last `is_held()` that
/// said true, if one did.
#[derive(Debug)]
pub(crate) struct Hold<'a> {
    pub(crate) key: &'a str,
    pub(crate) fence: u64,
    /// A read hold of a read-write lock, shared with other readers.
    pub(crate) read: bool,
    /// A semaphore's permit: the semaphore's number of permits.
    pub(crate) permits: Option<u32>,
    /// A key of a multi-lock.
    pub(crate) multi: bool,
    pub(crate) from: u64,
    pub(crate) to: u64,
    pub(crate) acquire: &'a Op,
    /// The last `is_held()` that said true; `None` for a multi-lock's key
    /// held only at the return of `acquire()`.
    pub(crate) last_held: Option<&'a Op>,
}

impl Hold<'_> {
    /// The operations that make the hold: its acquisition and its last
    /// `is_held()` that said true.
    fn ops(&self) -> impl Iterator<Item = &Op> {
        std::iter::once(self.acquire).chain(self.last_held)
    }

    /// The hold as the session-fault rule sees it.
    fn tenure(&self) -> super::Tenure {
        super::Tenure {
            asked: self.acquire.invoke,
            from: self.from,
            to: self.to,
            token: self.fence,
        }
    }
}

/// Every non-empty hold of the history. A multi-lock whose acquisition a
/// pause of its worker (a fault) overlapped claims no hold at its return:
/// the pause may fall between the multi-lock's last look at its keys and
/// the recorded return, when a key may run out with nobody at fault.
/// Without a pause, that look and the recorded return are one stretch of
/// the worker's code with no wait in it, and a key found held there is
/// ours for the lease's safety margin (1% of the lease plus 2 ms) at
/// least: a key could run out in between, and another owner take it and
/// see its acquisition return, only if the scheduler stalled the worker
/// for longer than that margin plus that acquisition, inside a stretch of
/// microseconds.
pub(crate) fn holds<'a>(ops: &'a [Op], faults: &[FaultSpan]) -> Vec<Hold<'a>> {
    // Acquisitions by (worker, key, fence); a worker holds one lock of a
    // key at a time, so its is_held calls name the acquisition.
    let mut acquired: HashMap<(u32, &str, u64), &Op> = HashMap::new();
    for o in ops {
        if let (Call::Acquire { key, .. }, Some(Outcome::Acquired { fence })) =
            (&o.call, o.outcome())
        {
            acquired.insert((o.w, key.as_str(), *fence), o);
        }
    }
    let mut last: HashMap<(u32, &str, u64), &Op> = HashMap::new();
    for o in ops {
        if let (Call::IsHeld { key, fence }, Some(Outcome::Held { yes: true })) =
            (&o.call, o.outcome())
        {
            let k = (o.w, key.as_str(), *fence);
            if last.get(&k).is_none_or(|p| p.invoke < o.invoke) {
                last.insert(k, o);
            }
        }
    }
    let paused = |o: &Op| {
        faults.iter().any(|f| {
            f.what == "pause-worker"
                && f.worker() == Some(o.w)
                && f.from < o.end()
                && f.to > o.invoke
        })
    };
    let mut out: Vec<Hold<'_>> = acquired
        .into_iter()
        .filter_map(|(k, acq)| {
            let (read, permits, multi) = match acq.call {
                Call::Acquire {
                    read,
                    permits,
                    multi,
                    ..
                } => (read, permits, multi),
                _ => (false, None, false),
            };
            let held = last.get(&k).copied().filter(|h| acq.end() <= h.invoke);
            if held.is_none() && (!multi || paused(acq)) {
                return None;
            }
            Some(Hold {
                key: k.1,
                fence: k.2,
                read,
                permits,
                multi,
                from: acq.end(),
                to: held.map_or(acq.end(), |h| h.invoke),
                acquire: acq,
                last_held: held,
            })
        })
        .collect();
    out.sort_by_key(|h| (h.key, h.from));
    out
}

/// No two holds of a key overlap, but read holds of a read-write lock
/// with each other: a writer overlaps nobody. A multi-lock's keys are
/// held to the same rule against every other hold of the key, single or
/// multi; an overlap that involves one is reported as `multi-lock`.
///
/// `session_faults`: the server faults that ended the clients' sessions,
/// for a store whose locks such a fault frees at once (otherwise none). An
/// overlap that such a fault explains is no finding (see
/// [`session_ended`](super::session_ended)): a holder's session ended, and
/// it is told at its next renewal.
/// Answers how many such overlaps there were.
pub(crate) fn mutual_exclusion(
    holds: &[Hold<'_>],
    session_faults: &[&FaultSpan],
    t0: u64,
    v: &mut Vec<Violation>,
) -> usize {
    let mut excused = 0;
    let mut by_key: BTreeMap<&str, Vec<&Hold<'_>>> = BTreeMap::new();
    for h in holds.iter().filter(|h| h.permits.is_none()) {
        by_key.entry(h.key).or_default().push(h);
    }
    for (key, hs) in by_key {
        if hs.iter().any(|h| h.read) {
            shared_exclusion(key, &hs, t0, v);
            continue;
        }
        // Sorted by start: each hold against the one reaching furthest
        // among those before it.
        let mut reach: Option<&Hold<'_>> = None;
        for h in hs {
            let ended = |r: &Hold<'_>| super::session_ended(session_faults, r.tenure(), h.tenure());
            if let Some(r) = reach
                && h.from < r.to
                && ended(r)
            {
                excused += 1;
            } else if let Some(r) = reach
                && h.from < r.to
            {
                let kind = |h: &Hold<'_>| if h.multi { "a multi-lock's " } else { "" };
                let span = r.to.min(h.to) - h.from;
                v.push(Violation {
                    check: exclusion_check(r, h),
                    what: format!(
                        "lock {key:?}: two holders at once {} ({}fence {} held until {:.1} ms, {}fence {} from {:.1} ms)",
                        if span == 0 {
                            "at the return of a multi-lock".to_owned()
                        } else {
                            format!("for {:.1} ms", crate::clock::ms(span))
                        },
                        kind(r),
                        r.fence,
                        crate::clock::ms(r.to - t0),
                        kind(h),
                        h.fence,
                        crate::clock::ms(h.from - t0),
                    ),
                    ops: describe(&r.ops().chain(h.ops()).collect::<Vec<_>>(), t0),
                });
            }
            if reach.is_none_or(|r| h.to > r.to) {
                reach = Some(h);
            }
        }
    }
    excused
}

/// The check an overlap of `r` and `h` fails: `multi-lock` when either is
/// a multi-lock's, `mutual-exclusion` otherwise.
fn exclusion_check(r: &Hold<'_>, h: &Hold<'_>) -> &'static str {
    if r.multi || h.multi {
        "multi-lock"
    } else {
        "mutual-exclusion"
    }
}

/// A semaphore's permits: at no time more holds of its key than it has
/// permits (the fewest any acquisition of the key asked for).
pub(crate) fn permits(holds: &[Hold<'_>], t0: u64, v: &mut Vec<Violation>) {
    let mut by_key: BTreeMap<&str, Vec<&Hold<'_>>> = BTreeMap::new();
    for h in holds.iter().filter(|h| h.permits.is_some()) {
        by_key.entry(h.key).or_default().push(h);
    }
    for (key, hs) in by_key {
        let permits = hs.iter().filter_map(|h| h.permits).min().unwrap_or(0) as usize;
        // Sorted by start: the holds still running when each one starts.
        let mut running: Vec<&Hold<'_>> = Vec::new();
        for h in hs {
            running.retain(|r| r.to > h.from);
            running.push(h);
            if running.len() > permits {
                let mut shown = Vec::new();
                for r in &running {
                    shown.extend(r.ops());
                }
                v.push(Violation {
                    check: "permits",
                    what: format!(
                        "semaphore {key:?} of {permits} permits: {} holders at once from {:.1} ms (fences {})",
                        running.len(),
                        crate::clock::ms(h.from - t0),
                        running
                            .iter()
                            .map(|r| r.fence.to_string())
                            .collect::<Vec<_>>()
                            .join(", "),
                    ),
                    ops: describe(&shown, t0),
                });
            }
        }
    }
}

/// [`mutual_exclusion`] for a read-write lock's holds (sorted by start):
/// each write against every hold that overlaps it.
fn shared_exclusion(key: &str, hs: &[&Hold<'_>], t0: u64, v: &mut Vec<Violation>) {
    for (i, h) in hs.iter().enumerate() {
        for r in &hs[..i] {
            if (h.read && r.read) || h.from >= r.to {
                continue;
            }
            v.push(Violation {
                check: exclusion_check(r, h),
                what: format!(
                    "read-write lock {key:?}: a {} (fence {}) and a {} (fence {}) held it at once for {:.1} ms from {:.1} ms",
                    if r.read { "reader" } else { "writer" },
                    r.fence,
                    if h.read { "reader" } else { "writer" },
                    h.fence,
                    crate::clock::ms(r.to.min(h.to) - h.from),
                    crate::clock::ms(h.from - t0),
                ),
                ops: describe(&r.ops().chain(h.ops()).collect::<Vec<_>>(), t0),
            });
        }
    }
}

/// Fences: unique per key, and an acquisition that began after another
/// returned has a greater fence.
pub(crate) fn fences(ops: &[Op], t0: u64, v: &mut Vec<Violation>) {
    let mut by_key: BTreeMap<&str, Vec<(&Op, u64)>> = BTreeMap::new();
    for o in ops {
        if let (Call::Acquire { key, .. }, Some(Outcome::Acquired { fence })) =
            (&o.call, o.outcome())
        {
            by_key.entry(key).or_default().push((o, *fence));
        }
    }
    for (key, mut acqs) in by_key {
        let mut seen: HashMap<u64, &Op> = HashMap::new();
        for (o, f) in &acqs {
            if let Some(p) = seen.insert(*f, o) {
                v.push(Violation {
                    check: "fences",
                    what: format!("lock {key:?}: fence {f} given twice"),
                    ops: describe(&[p, o], t0),
                });
            }
        }
        // In invocation order, against the greatest fence of those that
        // had returned before this one began.
        acqs.sort_by_key(|(o, _)| o.invoke);
        let mut done: Vec<(&Op, u64)> = acqs.clone();
        done.sort_by_key(|(o, _)| o.end());
        let mut j = 0;
        let mut best: Option<(&Op, u64)> = None;
        for (o, f) in &acqs {
            while j < done.len() && done[j].0.end() < o.invoke {
                if best.is_none_or(|(_, b)| done[j].1 > b) {
                    best = Some(done[j]);
                }
                j += 1;
            }
            if let Some((p, b)) = best
                && *f <= b
            {
                v.push(Violation {
                    check: "fences",
                    what: format!(
                        "lock {key:?}: fence {f} not greater than fence {b} of an acquisition that returned before it began"
                    ),
                    ops: describe(&[p, o], t0),
                });
            }
        }
    }
}

/// A fenced write is accepted only if no write with a greater token was
/// accepted before it began, and refused only if a write with a greater
/// token began before it returned.
pub(crate) fn fenced_writes(ops: &[Op], t0: u64, v: &mut Vec<Violation>) {
    let mut by_key: BTreeMap<&str, Vec<(&Op, u64)>> = BTreeMap::new();
    for o in ops {
        if let Call::FencedWrite { key, fence } = &o.call {
            by_key.entry(key).or_default().push((o, *fence));
        }
    }
    for (key, ws) in by_key {
        let accepted: Vec<(&Op, u64)> = ws
            .iter()
            .filter(|(o, _)| o.outcome() == Some(&Outcome::Written))
            .copied()
            .collect();
        for (o, f) in &ws {
            match o.outcome() {
                Some(Outcome::Written) => {
                    if let Some((p, b)) = accepted
                        .iter()
                        .filter(|(p, b)| p.end() < o.invoke && b > f)
                        .max_by_key(|(_, b)| *b)
                    {
                        v.push(Violation {
                            check: "fenced-writes",
                            what: format!(
                                "resource {key:?}: write with token {f} accepted after token {b} had written"
                            ),
                            ops: describe(&[p, o], t0),
                        });
                    }
                }
                Some(Outcome::Stale) => {
                    let newer = ws.iter().any(|(p, b)| b > f && p.invoke < o.end());
                    if !newer {
                        v.push(Violation {
                            check: "fenced-writes",
                            what: format!(
                                "resource {key:?}: write with token {f} refused as stale, but no greater token had tried to write"
                            ),
                            ops: describe(&[o], t0),
                        });
                    }
                }
                _ => {}
            }
        }
    }
}

/// A watchdog lease is kept through a hold while nothing goes wrong: an
/// `is_held()` that says false with no fault and no failed operation from a
/// few seconds before the acquisition to the check means the lease was lost
/// by the client itself (a renewal booked wrongly, a handoff that lost its
/// lease).
pub(crate) fn lease_kept_in_calm(
    ops: &[Op],
    faults: &[FaultSpan],
    t0: u64,
    v: &mut Vec<Violation>,
) {
    const BEFORE: u64 = 3_000_000_000;
    let mut acquired: HashMap<(u32, &str, u64), &Op> = HashMap::new();
    for o in ops {
        if let (
            Call::Acquire {
                key,
                watchdog: true,
                ..
            },
            Some(Outcome::Acquired { fence }),
        ) = (&o.call, o.outcome())
        {
            acquired.insert((o.w, key.as_str(), *fence), o);
        }
    }
    for o in ops {
        let (Call::IsHeld { key, fence }, Some(Outcome::Held { yes: false })) =
            (&o.call, o.outcome())
        else {
            continue;
        };
        let Some(acq) = acquired.get(&(o.w, key.as_str(), *fence)) else {
            continue;
        };
        let from = acq.invoke.saturating_sub(BEFORE);
        // Calm: no fault, and no operation anywhere failing (a machine so
        // busy that requests time out delays renewals too).
        let calm = faults.iter().all(|f| f.to < from || f.from > o.end())
            && !ops.iter().any(|e| {
                matches!(e.outcome(), Some(Outcome::Error { .. }))
                    && e.end() >= from
                    && e.end() <= o.end()
            });
        if calm {
            // Whether the lock was handed over: another holder's release
            // began while this acquisition waited.
            let handoff = ops.iter().find(|r| {
                matches!(&r.call, Call::Release { key: k, .. } if k == key)
                    && r.w != o.w
                    && r.invoke >= acq.invoke
                    && r.invoke <= acq.end()
            });
            let how = match handoff {
                Some(_) => format!(
                    "handed over after a wait of {:.1} ms",
                    crate::clock::ms(acq.end() - acq.invoke)
                ),
                None => "taken without a handoff".to_owned(),
            };
            let mut shown = vec![acq, o];
            shown.extend(handoff);
            v.push(Violation {
                check: "lease-kept",
                what: format!(
                    "lock {key:?}: the watchdog's guard (fence {fence}, {how}) lost its lease with no fault in effect"
                ),
                ops: describe(&shown, t0),
            });
        }
    }
}
