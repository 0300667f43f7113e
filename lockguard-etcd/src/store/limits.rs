//! Rate limits on etcd: GCRA, fixed and sliding windows, each key's state
//! one etcd key, changed by a compare-and-set on its `mod_revision`.
//!
//! etcd has no clock a transaction can read, so the steps run on the
//! deciding client's clock (microseconds since the Unix epoch) over state
//! that every client shares. Clients whose clocks are at most `S` apart
//! admit at most `S` worth of the rate more than the quota over any
//! period (GCRA: `S / T` requests, `T` the emission interval; a window: a
//! window that starts or ends up to `S` early): NTP keeps `S` to
//! milliseconds. A client's clock stepping backwards only delays it.
//!
//! A key's state is attached to an etcd lease that ends after the state
//! does (a full budget), so idle keys leave the store by themselves. The
//! leases are shared: one granted for a state that ends at `E` serves
//! every later state ending between `E` and its own end, so a busy limiter
//! grants about one lease per lease length, not one per decision.

use std::collections::VecDeque;
use std::sync::Mutex;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use lockguard_core::store::net::{LostRaces, path_segment};
use lockguard_core::store::{LimitKeys, LimitOp, LimitReply};
use lockguard_core::{Error, ErrorKind, Result};

use super::EtcdStore;

/// The leases state that expires is attached to (rate limits, counters and
/// marks with a deadline): each one's ID and when it ends at the earliest
/// (µs since the Unix epoch, this client's clock).
#[derive(Debug, Default)]
pub(super) struct LimitLeases(Mutex<Vec<(i64, i64)>>);

impl LimitLeases {
    /// A lease that ends at or after `end` (and not much later), if one is
    /// at hand; leases that ended are dropped.
    fn find(&self, end: i64, now: i64) -> Option<i64> {
        let mut leases = self.0.lock().unwrap_or_else(|p| p.into_inner());
        leases.retain(|(_, ends)| *ends > now);
        let slack = (end - now).max(1_000_000);
        leases
            .iter()
            .filter(|(_, ends)| *ends >= end && *ends - end <= slack)
            .min_by_key(|(_, ends)| *ends)
            .map(|(id, _)| *id)
    }

    fn add(&self, id: i64, ends: i64) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((id, ends));
    }

    fn forget(&self, id: i64) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(l, _)| *l != id);
    }
}

/// A key's state as this client last read or wrote it, and its
/// `mod_revision`: what a key's turn (`EtcdStore::limit_turns`) keeps, so
/// that one decision of this client at a time runs for the key (the others
/// wait in process, rather than lose compare-and-sets in etcd), each from
/// what the last one saw.
pub(super) type Read = (Option<String>, i64);

/// What one step gave: the reply, and the state to store with the moment
/// it ends (µs), when the step changed it.
struct Step {
    reply: LimitReply,
    store: Option<(String, i64)>,
}

impl EtcdStore {
    /// One step of `op` for `keys` at a cost of `cost`; with `peek`,
    /// nothing is written.
    pub(super) async fn rate_limit_inner(
        &self,
        keys: &LimitKeys<'_>,
        op: LimitOp,
        cost: u64,
        peek: bool,
    ) -> Result<LimitReply> {
        let key = format!("{}limit/{}", self.prefix, path_segment(keys.id()));
        let mut last = self.limit_turns.take(&key).await;
        // The state as this client last saw it: others may only have used
        // more of the budget since (a state that ended did so by the
        // clock), so a refusal by it stands, and a write by it is checked
        // against the key's revision.
        let mut read = match last.take() {
            Some(read) => read,
            None => self.read_limit(&key).await?,
        };
        let mut races = LostRaces::new(self.session.timeout());
        loop {
            let (value, revision) = (read.0.as_deref(), read.1);
            let now = unix_us();
            let step = step(op, value, now, cost)?;
            let Some((state, ends)) = step.store.filter(|_| !peek) else {
                *last = Some(read);
                return Ok(step.reply);
            };
            let lease = self.limit_lease(ends, now).await?;
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.as_str(),
                    CompareOp::Equal,
                    revision,
                )])
                .and_then([TxnOp::put(
                    key.as_str(),
                    state.as_str(),
                    Some(PutOptions::new().with_lease(lease)),
                )])
                .or_else([TxnOp::get(key.as_str(), None)]);
            let answer = match self.txn("deciding a rate limit", txn).await {
                Ok(answer) => answer,
                Err(e) if e.to_string().contains("lease not found") => {
                    // The lease ended sooner than this client counted
                    // (its clock jumped): take another, within the same
                    // bound as a lost race.
                    self.limit_leases.forget(lease);
                    races
                        .lost(|| format!("deciding rate limit {:?}", keys.id()))
                        .await?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            if answer.succeeded() {
                *last = Some((Some(state), super::revision(&answer)));
                return Ok(step.reply);
            }
            let known = match answer.op_responses().pop() {
                Some(TxnOpResponse::Get(get)) => Some(match get.kvs().first() {
                    None => (None, 0),
                    Some(kv) => (
                        Some(String::from_utf8_lossy(kv.value()).into_owned()),
                        kv.mod_revision(),
                    ),
                }),
                _ => None,
            };
            read = match known {
                Some(k) => k,
                None => self.read_limit(&key).await?,
            };
            races
                .lost(|| format!("deciding rate limit {:?}", keys.id()))
                .await?;
        }
    }

    /// A key's state and `mod_revision` (`None` and 0 when missing).
    async fn read_limit(&self, key: &str) -> Result<(Option<String>, i64)> {
        let kvs = self.get("reading a rate limit", key, None).await?;
        Ok(match kvs.first() {
            None => (None, 0),
            Some(kv) => (
                Some(String::from_utf8_lossy(kv.value()).into_owned()),
                kv.mod_revision(),
            ),
        })
    }

    /// A lease that ends after `ends` (µs), from those at hand or granted.
    pub(super) async fn limit_lease(&self, ends: i64, now: i64) -> Result<i64> {
        if let Some(id) = self.limit_leases.find(ends, now) {
            return Ok(id);
        }
        // Whole seconds past the state's end, and as long again (at least
        // a second), so that later states of this key and others share it.
        let left = (ends - now).max(0);
        let secs = (left * 2).max(1_000_000).div_euclid(1_000_000) + 1;
        let sent = unix_us();
        let granted = self
            .rpc("granting a rate limit's lease", |mut c| async move {
                c.lease_grant(secs, None).await
            })
            .await?;
        let ttl = granted.ttl().max(secs);
        self.limit_leases.add(
            granted.id(),
            sent.saturating_add(ttl.saturating_mul(1_000_000)),
        );
        Ok(granted.id())
    }
}

/// One step of `op` at `now` over the stored `value`.
fn step(op: LimitOp, value: Option<&str>, now: i64, cost: u64) -> Result<Step> {
    let icost = i64::try_from(cost).unwrap_or(i64::MAX);
    match op {
        LimitOp::Gcra(p) => {
            let tat = match value.and_then(|v| v.strip_prefix("g:")) {
                Some(t) => Some(number(t)?),
                None => None,
            };
            let tat = tat.unwrap_or(now).max(now);
            let new_tat = tat.saturating_add(p.t.saturating_mul(icost));
            let allow_at = new_tat - p.tau;
            if now < allow_at {
                return Ok(Step {
                    reply: LimitReply::gcra(false, tat - now, allow_at - now),
                    store: None,
                });
            }
            Ok(Step {
                reply: LimitReply::gcra(true, new_tat - now, 0),
                store: Some((format!("g:{new_tat}"), new_tat)),
            })
        }
        LimitOp::Fixed { limit, period_us } => {
            let (mut used, mut ends_at) = (0u64, now + period_us);
            if let Some(rest) = value.and_then(|v| v.strip_prefix("f:")) {
                let (u, e) = rest.split_once(':').ok_or_else(garbled)?;
                let e = number(e)?;
                if now < e {
                    (used, ends_at) = (u.parse().map_err(|_| garbled())?, e);
                }
            }
            let left = ends_at - now;
            if used.saturating_add(cost) > limit {
                return Ok(Step {
                    reply: LimitReply::window(false, used, left, left),
                    store: None,
                });
            }
            let used = used + cost;
            Ok(Step {
                reply: LimitReply::window(true, used, left, 0),
                store: Some((format!("f:{used}:{ends_at}"), ends_at)),
            })
        }
        LimitOp::Sliding { limit, period_us } => {
            let mut log: VecDeque<(i64, u64)> = VecDeque::new();
            if let Some(rest) = value.and_then(|v| v.strip_prefix("s:")) {
                for entry in rest.split(',').filter(|e| !e.is_empty()) {
                    let (t, c) = entry.split_once('/').ok_or_else(garbled)?;
                    log.push_back((number(t)?, c.parse().map_err(|_| garbled())?));
                }
            }
            // An entry counts while now < t + period.
            while log.front().is_some_and(|&(t, _)| t + period_us <= now) {
                log.pop_front();
            }
            let sum: u64 = log.iter().map(|&(_, c)| c).sum();
            if sum.saturating_add(cost) > limit {
                let need = sum + cost - limit;
                let mut freed = 0;
                let mut retry = period_us;
                for &(t, c) in &log {
                    freed += c;
                    if freed >= need {
                        retry = t + period_us - now;
                        break;
                    }
                }
                let reset = log.back().map_or(0, |&(t, _)| t + period_us - now);
                return Ok(Step {
                    reply: LimitReply::window(false, sum, reset, retry),
                    store: None,
                });
            }
            log.push_back((now, cost));
            let mut state = String::from("s:");
            for (i, (t, c)) in log.iter().enumerate() {
                if i > 0 {
                    state.push(',');
                }
                state.push_str(&format!("{t}/{c}"));
            }
            Ok(Step {
                reply: LimitReply::window(true, sum + cost, period_us, 0),
                store: Some((state, now + period_us)),
            })
        }
        _ => Err(Error::new(
            ErrorKind::Unsupported,
            "the etcd store does not offer this rate-limit algorithm",
        )),
    }
}

fn number(text: &str) -> Result<i64> {
    text.parse().map_err(|_| garbled())
}

fn garbled() -> Error {
    Error::new(ErrorKind::Protocol, "etcd holds a garbled rate-limit state")
}

/// Microseconds since the Unix epoch, on this client's clock.
fn unix_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}
