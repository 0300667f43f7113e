use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Body;
use lockguard_core::{Decision, RateLimiter};
use tower_service::Service;

use super::future::ResponseFuture;
use super::headers::{HeaderOptions, Policy, RateHeaders};
use super::options::RateLimitOptions;
use super::policy::{RateLimitPolicy, Selection};
use crate::admit::{Admission, admission_span, in_scope, in_span};
use crate::body::Guard;
use crate::key::{self, Unkeyed};
use crate::outcome::{self, FailureMode};
use crate::refusal::{Refusal, RefusalKind, Refusals};

/// A service whose requests are rate limited; made by
/// [`RateLimitLayer`](super::RateLimitLayer).
pub struct RateLimit<S, P> {
    inner: S,
    policy: Arc<P>,
    options: RateLimitOptions,
}

impl<S, P> RateLimit<S, P> {
    pub(crate) fn new(inner: S, policy: Arc<P>, options: RateLimitOptions) -> Self {
        Self {
            inner,
            policy,
            options,
        }
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: Clone, P> Clone for RateLimit<S, P> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            policy: self.policy.clone(),
            options: self.options.clone(),
        }
    }
}

impl<S: fmt::Debug, P: fmt::Debug> fmt::Debug for RateLimit<S, P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("policy", &self.policy)
            .field("options", &self.options)
            .finish()
    }
}

impl<S, P, ReqB, ResB> Service<Request<ReqB>> for RateLimit<S, P>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    ResB: Body + From<Bytes>,
    P: RateLimitPolicy<ReqB>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let inner = &mut self.inner;
        let Some(selection) = self.policy.select(&req) else {
            return ResponseFuture::pass(inner, req);
        };
        let Selection {
            limiter,
            key,
            cost,
            on_missing_key,
            failure,
            policy,
            misconfigured,
        } = selection;
        // A key the store would refuse (empty, too long, with control
        // characters) is the client's doing, whichever policy made it: it
        // counts as missing, never as a broken limiter. The limiter checks
        // the key itself, so where it decides at once, only a refusal of
        // the key is looked into (the key is checked once per request).
        let refusals = &self.options.refusals;
        let missing_key = on_missing_key.unwrap_or(self.options.on_missing_key);
        let unkeyed = |why, inner: &mut S, req| {
            let name = limiter.name();
            ResponseFuture::unkeyed(name, why, missing_key, refusals, inner, req)
        };
        let Some(key) = key else {
            let why = match misconfigured {
                Some(fix) => Unkeyed::Misconfigured(fix),
                None => Unkeyed::Request,
            };
            return unkeyed(why, inner, req);
        };
        let handling = Handling {
            failure: failure.unwrap_or(self.options.failure),
            options: self.options.headers,
            expose: self.options.decision_extension,
            shadow: self.options.shadow,
        };
        // Decided at once where the store needs no round trip (the
        // in-memory store, a cached refusal): nothing to box or wait for,
        // and the limiter and its policy only lent.
        if let Some(decided) = limiter.check_now(&key, cost) {
            if decided.is_err() && !key::usable(&key, 0) {
                return unkeyed(Unkeyed::Request, inner, req);
            }
            let ask = Ask {
                limiter: &limiter,
                policy,
                handling,
            };
            let admission = if tracing::level_enabled!(tracing::Level::DEBUG) {
                ask.admission_traced(&key, cost, decided, refusals)
            } else {
                ask.admission(decided, refusals)
            };
            key::give_back(key);
            return ResponseFuture::decided(admission, inner, req);
        }
        let span = admission_span(
            || tracing::debug_span!("rate_limit", limiter = %limiter.name(), %key, cost),
        );
        if !key::usable(&key, 0) {
            return unkeyed(Unkeyed::Request, inner, req);
        }
        // The check outlives this call: it owns what it needs.
        let limiter = limiter.into_owned();
        let policy = policy.cloned();
        let refusals = self.options.refusals.clone();
        let check = async move {
            let decided = limiter.check_cost(&key, cost).await;
            let ask = Ask {
                limiter: &limiter,
                policy: policy.as_ref(),
                handling,
            };
            ask.admission(decided, &refusals)
        };
        ResponseFuture::deciding(in_span(check, span), inner, req)
    }
}

/// What a check needs besides its key: the limiter, and what to do with
/// its answer.
struct Ask<'a> {
    limiter: &'a RateLimiter,
    /// The limiter's policy headers, when made beforehand.
    policy: Option<&'a Policy>,
    handling: Handling,
}

/// What the layer does with a limiter's answer.
#[derive(Clone, Copy)]
struct Handling {
    failure: FailureMode,
    options: HeaderOptions,
    /// Whether an admitted request carries the decision.
    expose: bool,
    /// Shadow mode: a refusal is let through, as
    /// [`Decision::let_through`] makes it (with its headers).
    shadow: bool,
}

impl Ask<'_> {
    /// [`admission`](Self::admission) in the span of the check of `key`,
    /// with debug logging on.
    #[inline(never)]
    fn admission_traced(
        self,
        key: &str,
        cost: u64,
        decided: lockguard_core::Result<Decision>,
        refusals: &Refusals,
    ) -> Admission {
        let span = admission_span(
            || tracing::debug_span!("rate_limit", limiter = %self.limiter.name(), %key, cost),
        );
        in_scope(span.as_ref(), || self.admission(decided, refusals))
    }

    /// Turns the limiter's answer into an admission.
    fn admission(
        self,
        decided: lockguard_core::Result<Decision>,
        refusals: &Refusals,
    ) -> Admission {
        let Self {
            limiter,
            policy,
            handling:
                Handling {
                    failure,
                    options,
                    expose,
                    shadow,
                },
        } = self;
        let decision = match decided {
            Ok(decision) => {
                crate::outage::answered("rate limit", limiter.name());
                decision
            }
            Err(e) => return Self::failed(limiter, &e, failure, refusals),
        };
        // The layer's shadow mode lets a refusal through as the limiter's
        // own does (`RateLimiter::shadow`): one decision, marked shadowed.
        let decision = if shadow && !decision.allowed {
            Self::let_through(decision)
        } else {
            decision
        };
        let headers = RateHeaders::new(policy, limiter, decision, options);
        if !decision.allowed {
            return Self::refuse(limiter, decision, headers, refusals);
        }
        if !decision.shadowed && tracing::level_enabled!(tracing::Level::DEBUG) {
            tracing::debug!(remaining = decision.remaining, "request allowed");
        }
        Admission::Proceed {
            guard: Guard::None,
            headers: Some(headers),
            decision: expose.then_some(decision),
        }
    }

    /// The admission of a request the store could not check.
    #[cold]
    #[inline(never)]
    fn failed(
        limiter: &RateLimiter,
        error: &lockguard_core::Error,
        failure: FailureMode,
        refusals: &Refusals,
    ) -> Admission {
        Admission::respond_or_proceed(outcome::store_failure(
            "rate limit",
            limiter.name(),
            limiter.store_address(),
            error,
            failure,
            refusals,
        ))
    }

    /// The refusal `decision`, let through in shadow mode.
    #[inline(never)]
    fn let_through(decision: Decision) -> Decision {
        tracing::debug!(
            retry_after_ms = u64::try_from(decision.retry_after.as_millis()).unwrap_or(u64::MAX),
            "request over the rate limit let through in shadow mode"
        );
        decision.let_through()
    }

    /// The `429` of a refused request: out of the line of an admitted one.
    #[inline(never)]
    fn refuse(
        limiter: &RateLimiter,
        decision: Decision,
        headers: RateHeaders,
        refusals: &Refusals,
    ) -> Admission {
        let secs = decision.retry_after_secs().max(1);
        tracing::debug!(
            retry_after_ms = u64::try_from(decision.retry_after.as_millis()).unwrap_or(u64::MAX),
            "request rate limited"
        );
        let name = limiter.name();
        let mut response = refusals.respond(&Refusal {
            kind: RefusalKind::RateLimited,
            status: StatusCode::TOO_MANY_REQUESTS,
            policy: name.to_owned(),
            detail: format!("rate limit {name:?} exceeded; retry in {secs} s"),
            retry_after: Some(decision.retry_after),
            decision: Some(decision),
        });
        headers.apply(response.headers_mut());
        Admission::Respond(response)
    }
}
