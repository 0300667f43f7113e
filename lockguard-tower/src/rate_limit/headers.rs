//! The rate-limit response headers: IETF `RateLimit-Policy` and `RateLimit`
//! (draft-ietf-httpapi-ratelimit-headers, structured-field form), the legacy
//! `X-RateLimit-*` trio, and `Retry-After`.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use lockguard_core::{Decision, RateLimiter};

/// `RateLimit-Policy`.
pub(crate) const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub(crate) const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// `X-RateLimit-Limit`.
pub(crate) const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`.
pub(crate) const X_RATELIMIT_REMAINING: HeaderName =
    HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`.
pub(crate) const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// Which headers a rate-limit layer writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeaderOptions {
    pub(crate) standard: bool,
    pub(crate) legacy: bool,
}

impl Default for HeaderOptions {
    fn default() -> Self {
        Self {
            standard: true,
            legacy: false,
        }
    }
}

/// What one decision tells the client: the header values, made when the
/// decision is, and the response's own, so that nothing shared between
/// requests (a reference count every core would write) is touched after.
#[derive(Debug, Clone)]
pub(crate) struct RateHeaders {
    /// `RateLimit-Policy` and `RateLimit`, when the standard headers are on.
    standard: Option<(HeaderValue, HeaderValue)>,
    decision: Decision,
    options: HeaderOptions,
    /// Whether the response refuses the request (and says when to retry).
    refuses: bool,
}

/// What every response of one limiter says of its policy, made once (per
/// [`Rule`](super::Rule)) rather than per request.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    /// Names this policy (and its clones) among every policy the process
    /// made: what a thread's copies of its values are found by.
    id: u64,
    /// The `RateLimit-Policy` value.
    value: HeaderValue,
    /// The policy's name as a structured-field string: `"name"`.
    name: Box<[u8]>,
}

/// What a thread keeps of one policy: a copy of its value, and the last
/// `RateLimit` value it made for it.
struct Kept {
    id: u64,
    value: HeaderValue,
    /// `r`, `t` and the value they made.
    last: Option<(u64, u64, HeaderValue)>,
}

impl Policy {
    /// `limiter`'s policy. Its value is `"name";q=100;w=60`, the quota over
    /// a window of whole seconds (the draft allows no other): a period that
    /// is not whole seconds is stated over the next whole second, with `q`
    /// scaled to the same rate (10 per 100 ms is `q=100;w=1`, never
    /// `q=10;w=1`). When the limiter lets a burst through beyond `q` (GCRA
    /// with a burst), the burst is the vendor parameter `lockguard-burst`,
    /// so that a client seeing `r` above `q` knows why.
    pub(crate) fn new(limiter: &RateLimiter) -> Self {
        let mut name = Vec::with_capacity(limiter.name().len() + 2);
        push_sf_string(&mut name, limiter.name());
        let quota = limiter.quota();
        let (q, w) = whole_second_window(quota.count(), quota.period());
        // A decision's `limit`: the burst for GCRA, the count for windows.
        let limit = limiter.limit();
        let value = if limit > q {
            item(&name, &[("q", q), ("w", w), ("lockguard-burst", limit)])
        } else {
            item(&name, &[("q", q), ("w", w)])
        };
        /// The next policy's id; never reused, so a policy made where a
        /// dropped one was is never taken for it.
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            value,
            name: name.into_boxed_slice(),
        }
    }

    /// The `RateLimit-Policy` value and the `RateLimit` value
    /// `"name";r={remaining};t={t}`, for one response.
    ///
    /// A clone of [`value`](Self::value) would write its reference count,
    /// shared by every core serving this policy; so each thread clones a
    /// copy of its own, made the first time it serves the policy (and kept
    /// for the last few policies it served). The thread keeps the last
    /// `RateLimit` value it made for the policy, too, and hands out a
    /// clone of it while `r` and `t` stay the same (a client well inside
    /// its limit, or every client of a limit that refills as fast as it is
    /// spent): a reference count written on this core, instead of an
    /// allocation and the value written again.
    fn values(&self, remaining: u64, t: u64) -> (HeaderValue, HeaderValue) {
        /// Policies a thread keeps values of.
        const KEPT: usize = 8;
        thread_local! {
            static KEPT_VALUES: RefCell<Vec<Kept>> = const { RefCell::new(Vec::new()) };
        }
        KEPT_VALUES.with_borrow_mut(|kept| {
            let at = match kept.iter().position(|k| k.id == self.id) {
                Some(at) => at,
                None => {
                    if kept.len() == KEPT {
                        kept.remove(0);
                    }
                    // A copy of a valid value is valid; were it refused,
                    // the shared value would still do.
                    let copy = HeaderValue::from_bytes(self.value.as_bytes())
                        .unwrap_or_else(|_| self.value.clone());
                    kept.push(Kept {
                        id: self.id,
                        value: copy,
                        last: None,
                    });
                    kept.len() - 1
                }
            };
            let k = &mut kept[at];
            let limit = match &k.last {
                Some((r, at_t, value)) if *r == remaining && *at_t == t => value.clone(),
                _ => {
                    let value = item(&self.name, &[("r", remaining), ("t", t)]);
                    k.last = Some((remaining, t, value.clone()));
                    value
                }
            };
            (k.value.clone(), limit)
        })
    }
}

pub(crate) use lockguard_core::rate_limit::ceil_secs;

/// `count` per `period` as a quota over a window of whole seconds: `(q, w)`
/// with `w` the period rounded up (at least 1 s) and `q` the count scaled
/// to `w` at the same rate, rounded down (never above the true rate).
pub(crate) fn whole_second_window(count: u64, period: Duration) -> (u64, u64) {
    let w = ceil_secs(period).max(1);
    let period_ns = period.as_nanos().max(1);
    let window_ns = u128::from(w) * 1_000_000_000;
    if window_ns == period_ns {
        return (count, w);
    }
    let q = u128::from(count) * window_ns / period_ns;
    (u64::try_from(q).unwrap_or(u64::MAX), w)
}

/// Appends `name` as a structured-field string: printable ASCII, with `"`
/// and `\` escaped; anything else becomes `_`.
fn push_sf_string(out: &mut Vec<u8>, name: &str) {
    out.push(b'"');
    if name
        .bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
    {
        // The common case: nothing to escape or replace.
        out.extend_from_slice(name.as_bytes());
    } else {
        for c in name.chars() {
            match c {
                '"' | '\\' => {
                    out.push(b'\\');
                    out.push(c as u8);
                }
                // Printable ASCII: one byte.
                ' '..='~' => out.push(c as u8),
                _ => out.push(b'_'),
            }
        }
    }
    out.push(b'"');
}

/// A list item: the policy's name as a structured-field string (`name`,
/// quoted already) with integer parameters, `"name";r=42;t=30`. Written
/// straight into the value's own bytes, sized to fit, so that they are the
/// one allocation and nothing is copied.
fn item(name: &[u8], params: &[(&str, u64)]) -> HeaderValue {
    let digits = |n: u64| n.checked_ilog10().map_or(1, |d| d as usize + 1);
    let len = name.len()
        + params
            .iter()
            .map(|(key, n)| key.len() + 2 + digits(*n))
            .sum::<usize>();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(name);
    for (key, n) in params {
        out.push(b';');
        out.extend_from_slice(key.as_bytes());
        out.push(b'=');
        out.extend_from_slice(itoa::Buffer::new().format(*n).as_bytes());
    }
    debug_assert_eq!(out.len(), len);
    // A vector as long as its capacity becomes `Bytes` without copying.
    HeaderValue::from_maybe_shared(Bytes::from(out))
        .expect("a structured-field item is a valid header value")
}

impl RateHeaders {
    /// The headers `decision` of `limiter` gives, with `policy` its
    /// policy when made beforehand (a [`Rule`](super::Rule)'s); without
    /// one (a closure's selection), the policy is made for this response
    /// alone, and its values are not kept.
    pub(crate) fn new(
        policy: Option<&Policy>,
        limiter: &RateLimiter,
        decision: Decision,
        options: HeaderOptions,
    ) -> Self {
        let standard = options.standard.then(|| {
            // `"name";r=42;t=30`. On a refusal `r` is 0 and `t` is the
            // wait before the next request can pass, the same moment
            // `Retry-After` names (the draft: `Retry-After` SHOULD NOT be
            // earlier than the end of `t`); when allowed, `t` is the time
            // until the limiter is back to its full limit. A refusal let
            // through in shadow mode shows as the refusal it would be.
            let (remaining, t) = if decision.allowed && !decision.shadowed {
                (decision.remaining, decision.reset_after_secs())
            } else {
                (0, retry_after_secs(&decision))
            };
            match policy {
                Some(policy) => policy.values(remaining, t),
                None => {
                    let policy = Policy::new(limiter);
                    let limit = item(&policy.name, &[("r", remaining), ("t", t)]);
                    (policy.value, limit)
                }
            }
        });
        Self {
            standard,
            decision,
            options,
            refuses: !decision.allowed,
        }
    }

    /// Adds the headers to a response. Several layers on one route each
    /// add their item to the `RateLimit` and `RateLimit-Policy` lists; the
    /// legacy headers describe the one with the fewest requests left.
    pub(crate) fn apply(self, headers: &mut HeaderMap) {
        if let Some((policy, limit)) = self.standard {
            headers.append(RATELIMIT_POLICY, policy);
            headers.append(RATELIMIT, limit);
        }
        if self.options.legacy {
            let remaining = if self.decision.allowed {
                self.decision.remaining
            } else {
                0
            };
            let existing = headers
                .get(&X_RATELIMIT_REMAINING)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if existing.is_none_or(|e| remaining < e) {
                headers.insert(X_RATELIMIT_LIMIT, HeaderValue::from(self.decision.limit));
                headers.insert(X_RATELIMIT_REMAINING, HeaderValue::from(remaining));
                headers.insert(
                    X_RATELIMIT_RESET,
                    HeaderValue::from(self.decision.reset_after_secs()),
                );
            }
        }
        if self.refuses {
            // Never 0: a refusal never invites a retry that fails.
            // A refusal hook's own value is kept.
            let secs = retry_after_secs(&self.decision);
            headers
                .entry(RETRY_AFTER)
                .or_insert_with(|| HeaderValue::from(secs));
        }
    }
}

/// A refusal's `Retry-After` in seconds: rounded up, never 0.
fn retry_after_secs(decision: &Decision) -> u64 {
    decision.retry_after_secs().max(1)
}
