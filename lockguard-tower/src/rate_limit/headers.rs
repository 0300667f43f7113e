//! The rate-limit response headers: IETF `RateLimit-Policy` and `RateLimit`
//! (draft-ietf-httpapi-ratelimit-headers, structured-field form), the legacy
//! `X-RateLimit-*` trio, and `Retry-After`.

use std::time::Duration;

use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use lockguard_core::{Decision, Quota};

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

/// What one decision tells the client.
#[derive(Debug, Clone)]
pub(crate) struct RateHeaders {
    pub(crate) policy: String,
    pub(crate) quota: Quota,
    pub(crate) decision: Decision,
    pub(crate) options: HeaderOptions,
}

/// Whole seconds, rounded up.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// `name` as a structured-field string: printable ASCII, with `"` and `\`
/// escaped; anything else becomes `_`.
pub(crate) fn sf_string(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('_'),
        }
    }
    out.push('"');
    out
}

impl RateHeaders {
    /// `"name";q=100;w=60`
    pub(crate) fn policy_value(&self) -> String {
        format!(
            "{};q={};w={}",
            sf_string(&self.policy),
            self.quota.count(),
            ceil_secs(self.quota.period()).max(1)
        )
    }

    /// `"name";r=42;t=30`
    pub(crate) fn limit_value(&self) -> String {
        let remaining = if self.decision.allowed {
            self.decision.remaining
        } else {
            0
        };
        format!(
            "{};r={};t={}",
            sf_string(&self.policy),
            remaining,
            self.decision.reset_after_secs()
        )
    }

    /// Adds the headers to a response. Several layers on one route each
    /// add their item to the `RateLimit` and `RateLimit-Policy` lists; the
    /// legacy headers describe the one with the fewest requests left.
    pub(crate) fn apply(&self, headers: &mut HeaderMap) {
        if self.options.standard {
            append(headers, RATELIMIT_POLICY, self.policy_value());
            append(headers, RATELIMIT, self.limit_value());
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
        if !self.decision.allowed {
            // Never 0: a refusal never invites a retry that fails.
            // A refusal hook's own value is kept.
            let secs = self.decision.retry_after_secs().max(1);
            headers
                .entry(RETRY_AFTER)
                .or_insert_with(|| HeaderValue::from(secs));
        }
    }
}

fn append(headers: &mut HeaderMap, name: HeaderName, value: String) {
    if let Ok(v) = HeaderValue::try_from(value) {
        headers.append(name, v);
    }
}
