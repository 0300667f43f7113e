//! Elections: one leader at a time, at most one leader per term, terms
//! that grow in the order of elections, and reads of who leads that never
//! name a term older than one already elected.

use std::collections::{BTreeMap, HashMap};

use super::{FaultSpan, Violation, describe};
use crate::history::{Call, Op, Outcome};

/// One lead: from the time `campaign()` had returned to the last time
/// `is_held()` said true before the resignation, as a lock's hold.
struct Lead<'a> {
    term: u64,
    from: u64,
    to: u64,
    elected: &'a Op,
    last_held: &'a Op,
}

impl Lead<'_> {
    /// The lead as the session-fault rule sees it: its term is its token.
    fn tenure(&self) -> super::Tenure {
        super::Tenure {
            asked: self.elected.invoke,
            from: self.from,
            to: self.to,
            token: self.term,
        }
    }
}

/// The elections of the history, by election.
fn elections(ops: &[Op]) -> BTreeMap<&str, Vec<(&Op, u64)>> {
    let mut by_key: BTreeMap<&str, Vec<(&Op, u64)>> = BTreeMap::new();
    for o in ops {
        if let (Call::Campaign { key, .. }, Some(Outcome::Elected { term })) =
            (&o.call, o.outcome())
        {
            by_key.entry(key).or_default().push((o, *term));
        }
    }
    by_key
}

/// No two leads of an election overlap (`one-leader`); no term is given
/// twice, and a campaign that began after another was elected has a
/// greater term (`leader-terms`). As with locks, a lead that overlaps an
/// earlier one only after a server fault in `session_faults` ended the
/// earlier leader's session is no finding (an election is a lock); terms
/// must still grow. Answers how many such overlaps there were.
pub(crate) fn leaders(
    ops: &[Op],
    session_faults: &[&FaultSpan],
    t0: u64,
    v: &mut Vec<Violation>,
) -> usize {
    let mut excused = 0;
    let elections = elections(ops);
    let mut last: HashMap<(u32, &str, u64), &Op> = HashMap::new();
    for o in ops {
        if let (Call::Leads { key, term }, Some(Outcome::Held { yes: true })) =
            (&o.call, o.outcome())
        {
            let k = (o.w, key.as_str(), *term);
            if last.get(&k).is_none_or(|p| p.invoke < o.invoke) {
                last.insert(k, o);
            }
        }
    }
    for (key, elected) in elections {
        let mut seen: HashMap<u64, &Op> = HashMap::new();
        for (o, term) in &elected {
            if let Some(p) = seen.insert(*term, o) {
                v.push(Violation {
                    check: "leader-terms",
                    what: format!("election {key:?}: two leaders of term {term}"),
                    ops: describe(&[p, o], t0),
                });
            }
        }
        // In invocation order, against the greatest term of the campaigns
        // that had returned before this one began.
        let mut by_invoke = elected.clone();
        by_invoke.sort_by_key(|(o, _)| o.invoke);
        let mut by_end = elected.clone();
        by_end.sort_by_key(|(o, _)| o.end());
        let (mut j, mut best) = (0, None::<(&Op, u64)>);
        for (o, term) in &by_invoke {
            while j < by_end.len() && by_end[j].0.end() < o.invoke {
                if best.is_none_or(|(_, b)| by_end[j].1 > b) {
                    best = Some(by_end[j]);
                }
                j += 1;
            }
            if let Some((p, b)) = best
                && *term <= b
            {
                v.push(Violation {
                    check: "leader-terms",
                    what: format!(
                        "election {key:?}: term {term} elected after term {b} was (terms must grow)"
                    ),
                    ops: describe(&[p, o], t0),
                });
            }
        }
        let mut leads: Vec<Lead<'_>> = elected
            .iter()
            .filter_map(|(o, term)| {
                let held = last.get(&(o.w, key, *term))?;
                Some(Lead {
                    term: *term,
                    from: o.end(),
                    to: held.invoke,
                    elected: o,
                    last_held: held,
                })
            })
            .filter(|l| l.from <= l.to)
            .collect();
        leads.sort_by_key(|l| l.from);
        let mut reach: Option<&Lead<'_>> = None;
        for l in &leads {
            let ended = |r: &Lead<'_>| super::session_ended(session_faults, r.tenure(), l.tenure());
            if let Some(r) = reach
                && l.from < r.to
                && ended(r)
            {
                excused += 1;
            } else if let Some(r) = reach
                && l.from < r.to
            {
                v.push(Violation {
                    check: "one-leader",
                    what: format!(
                        "election {key:?}: two leaders at once for {:.1} ms (term {} led until {:.1} ms, term {} from {:.1} ms)",
                        crate::clock::ms(r.to.min(l.to) - l.from),
                        r.term,
                        crate::clock::ms(r.to - t0),
                        l.term,
                        crate::clock::ms(l.from - t0),
                    ),
                    ops: describe(&[r.elected, r.last_held, l.elected, l.last_held], t0),
                });
            }
            if reach.is_none_or(|r| l.to > r.to) {
                reach = Some(l);
            }
        }
    }
    excused
}

/// A read of who leads names a term some campaign was elected with (or
/// one whose outcome is unknown may have been), never older than a term
/// whose campaign had returned before the read began: a leader announces
/// before its campaign returns, and the announcement refuses older terms.
pub(crate) fn reads(ops: &[Op], t0: u64, v: &mut Vec<Violation>) {
    let elections = elections(ops);
    for o in ops {
        let (Call::WhoLeads { key, .. }, Some(Outcome::Leader { term: Some(term) })) =
            (&o.call, o.outcome())
        else {
            continue;
        };
        let elected = elections.get(key.as_str()).map_or(&[][..], Vec::as_slice);
        let unknown = ops.iter().any(|c| {
            matches!(&c.call, Call::Campaign { key: k, .. } if k == key)
                && matches!(c.outcome(), None | Some(Outcome::Error { .. }))
        });
        if !unknown && !elected.iter().any(|(_, t)| t == term) {
            v.push(Violation {
                check: "leader-reads",
                what: format!(
                    "election {key:?}: read a leader of term {term}, which no campaign won"
                ),
                ops: describe(&[o], t0),
            });
        }
        let newer = elected
            .iter()
            .filter(|(c, t)| c.end() < o.invoke && t > term)
            .max_by_key(|(_, t)| *t);
        if let Some((c, t)) = newer {
            v.push(Violation {
                check: "leader-reads",
                what: format!(
                    "election {key:?}: read a leader of term {term} after term {t} had been elected and announced"
                ),
                ops: describe(&[c, o], t0),
            });
        }
    }
}

/// What one worker's observer gives never goes back: after a term, never
/// an older one (`observe-order`).
pub(crate) fn observed(ops: &[Op], t0: u64, v: &mut Vec<Violation>) {
    let mut newest: HashMap<(u32, &str), &Op> = HashMap::new();
    let mut given: Vec<&Op> = ops
        .iter()
        .filter(|o| matches!(o.call, Call::WhoLeads { observer: true, .. }))
        .collect();
    given.sort_by_key(|o| o.invoke);
    for o in given {
        let (Call::WhoLeads { key, .. }, Some(Outcome::Leader { term: Some(term) })) =
            (&o.call, o.outcome())
        else {
            continue;
        };
        let k = (o.w, key.as_str());
        if let Some(p) = newest.get(&k) {
            let Some(Outcome::Leader { term: Some(before) }) = p.outcome() else {
                unreachable!("only leaders are kept")
            };
            if term < before {
                v.push(Violation {
                    check: "observe-order",
                    what: format!(
                        "election {key:?}: worker {}'s observer gave term {term} after term {before}",
                        o.w
                    ),
                    ops: describe(&[p, o], t0),
                });
                continue;
            }
        }
        newest.insert(k, o);
    }
}
