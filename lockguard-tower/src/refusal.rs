//! Refusals: why a layer answered instead of calling the service, and the
//! hook that turns one into a response.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, RETRY_AFTER};
use http::{Response, StatusCode};
use lockguard_core::Decision;

use crate::problem;

/// Why a layer refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RefusalKind {
    /// A rate limit was exceeded (`429`).
    RateLimited,
    /// The lock is held by another request, or every permit is taken
    /// (`409` by default).
    Busy,
    /// The store cannot be reached and the layer fails closed (`503`).
    Unavailable,
    /// The request carries no usable key (`400` by default).
    MissingKey,
    /// The layer's configuration cannot work (a quota, lease or permit
    /// count the store refuses): `500`.
    Misconfigured,
}

/// A refused request: what the hook set with `on_refusal` builds its
/// response from.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Refusal {
    /// Why it was refused.
    pub kind: RefusalKind,
    /// The status the default response uses.
    pub status: StatusCode,
    /// The name of the limiter, lock or concurrency limit that refused.
    pub policy: String,
    /// A sentence for people, as in the default body's `detail`.
    pub detail: String,
    /// When trying again may succeed, where known: the limiter's
    /// `retry_after`, the busy lock holder's remaining lease, or 1 s for a
    /// store that cannot be reached (the longest pause between its
    /// reconnect attempts).
    pub retry_after: Option<Duration>,
    /// The limiter's decision, for a rate-limit refusal.
    pub decision: Option<Decision>,
}

impl Refusal {
    /// `retry_after` in whole seconds, rounded up and at least 1, as the
    /// `Retry-After` header says it.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after
            .map(|d| crate::rate_limit::headers::ceil_secs(d).max(1))
    }

    /// The default response: `status` with an RFC 9457
    /// `application/problem+json` body (`type`, `title`, `status`,
    /// `detail`, and `retry_after` in seconds where known). A rate-limit
    /// refusal has the `quota-exceeded` problem type of
    /// draft-ietf-httpapi-ratelimit-headers, with the policy in
    /// `violated-policies`.
    pub fn problem(&self) -> Response<Bytes> {
        let mut extensions: Vec<(&str, String)> = Vec::new();
        if let Some(secs) = self.retry_after_secs() {
            extensions.push(("retry_after", secs.to_string()));
        }
        if self.kind == RefusalKind::RateLimited {
            let mut policies = String::from("[");
            problem::push_json_string(&mut policies, &self.policy);
            policies.push(']');
            extensions.push(("violated-policies", policies));
            return problem::typed(
                self.status,
                problem::QUOTA_EXCEEDED,
                "Quota Exceeded",
                &self.detail,
                &extensions,
            );
        }
        problem::response(self.status, &self.detail, &extensions)
    }
}

/// Builds the response of a refused request; set on a layer with
/// `on_refusal`. Closures `Fn(&Refusal) -> Response<Bytes>` implement it.
///
/// The layer then adds what HTTP clients rely on, unless the response
/// already has it: `Retry-After` where the refusal knows when to retry,
/// and on a rate-limit refusal the `RateLimit` headers.
pub trait OnRefusal: Send + Sync + 'static {
    /// The response for `refusal`.
    fn respond(&self, refusal: &Refusal) -> Response<Bytes>;
}

impl<F> OnRefusal for F
where
    F: Fn(&Refusal) -> Response<Bytes> + Send + Sync + 'static,
{
    fn respond(&self, refusal: &Refusal) -> Response<Bytes> {
        self(refusal)
    }
}

/// The refusal hook a layer holds: the default problem body, or the
/// user's.
#[derive(Clone, Default)]
pub(crate) struct Refusals(Option<Arc<dyn OnRefusal>>);

impl fmt::Debug for Refusals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Refusals(custom)"
        } else {
            "Refusals(problem+json)"
        })
    }
}

impl Refusals {
    pub(crate) fn new(hook: impl OnRefusal) -> Self {
        Self(Some(Arc::new(hook)))
    }

    /// The response for `refusal`, with `Retry-After` added where known
    /// and missing.
    pub(crate) fn respond(&self, refusal: &Refusal) -> Response<Bytes> {
        let mut response = match &self.0 {
            Some(hook) => hook.respond(refusal),
            None => refusal.problem(),
        };
        if let Some(secs) = refusal.retry_after_secs() {
            response
                .headers_mut()
                .entry(RETRY_AFTER)
                .or_insert_with(|| HeaderValue::from(secs));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(retry_after: Option<Duration>) -> Refusal {
        Refusal {
            kind: RefusalKind::Busy,
            status: StatusCode::CONFLICT,
            policy: "orders".into(),
            detail: "busy".into(),
            retry_after,
            decision: None,
        }
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(refusal(None).retry_after_secs(), None);
        assert_eq!(
            refusal(Some(Duration::from_millis(1))).retry_after_secs(),
            Some(1)
        );
        assert_eq!(
            refusal(Some(Duration::from_millis(2001))).retry_after_secs(),
            Some(3)
        );
        assert_eq!(refusal(Some(Duration::ZERO)).retry_after_secs(), Some(1));
    }

    #[test]
    fn a_hook_builds_the_body_and_the_layer_adds_retry_after() {
        let hooks = Refusals::new(|r: &Refusal| {
            let mut res = Response::new(Bytes::from(format!("{{\"error\":\"{}\"}}", r.policy)));
            *res.status_mut() = StatusCode::LOCKED;
            res
        });
        let res = hooks.respond(&refusal(Some(Duration::from_millis(1500))));
        assert_eq!(res.status(), StatusCode::LOCKED);
        assert_eq!(res.body(), &Bytes::from_static(b"{\"error\":\"orders\"}"));
        assert_eq!(res.headers()[RETRY_AFTER], "2");
        // A hook's own Retry-After is kept.
        let hooks = Refusals::new(|_: &Refusal| {
            let mut res = Response::new(Bytes::new());
            res.headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("60"));
            res
        });
        let res = hooks.respond(&refusal(Some(Duration::from_secs(1))));
        assert_eq!(res.headers()[RETRY_AFTER], "60");
        // The default is problem+json with retry_after.
        let res = Refusals::default().respond(&refusal(Some(Duration::from_secs(4))));
        assert_eq!(res.headers()[RETRY_AFTER], "4");
        assert!(
            String::from_utf8_lossy(res.body()).contains("\"retry_after\":4"),
            "{res:?}"
        );
    }
}
