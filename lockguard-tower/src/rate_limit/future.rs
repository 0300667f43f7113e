//! The response future of a rate limit: the limiter's decision, then the
//! inner service or a refusal, answered in the inner service's own body
//! type. A rate limit holds nothing until the body ends, so, unlike the
//! lock and concurrency layers' future, this one has no state for a
//! release and no body of its own to wrap the inner one in.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use super::headers::RateHeaders;
use crate::admit::{Admission, Admitting, HasBody, Pending};
use crate::key::Unkeyed;
use crate::outcome::{self, MissingKey};
use crate::refusal::Refusals;

pin_project! {
    #[project = StateProj]
    enum State<F, S, ReqB, B> {
        // Waiting for the store's decision.
        Deciding {
            pending: Pending<S, ReqB>,
        },
        Calling {
            #[pin]
            future: F,
            headers: Option<RateHeaders>,
        },
        Refusing {
            response: Option<Response<B>>,
        },
    }
}

pin_project! {
    /// The response future of [`RateLimit`](super::RateLimit): the limiter's
    /// decision, then the inner service or a `429`.
    pub struct ResponseFuture<S, ReqB>
    where
        S: Service<Request<ReqB>>,
        S::Response: HasBody,
    {
        #[pin]
        state: State<S::Future, S, ReqB, <S::Response as HasBody>::Body>,
    }
}

type Body<S, ReqB> = <<S as Service<Request<ReqB>>>::Response as HasBody>::Body;

impl<S, ReqB> ResponseFuture<S, ReqB>
where
    S: Service<Request<ReqB>>,
    S::Response: HasBody,
    Body<S, ReqB>: From<Bytes>,
{
    /// Waits for `deciding`, then calls `service` (which is ready): it takes
    /// the ready service, leaving a clone in its place.
    pub(crate) fn deciding(deciding: Admitting, service: &mut S, request: Request<ReqB>) -> Self
    where
        S: Clone,
    {
        Self {
            state: State::Deciding {
                pending: Pending::new(deciding, service, request),
            },
        }
    }

    /// Calls `service` (which is ready) at once for a request admitted as
    /// `admission` said, or answers as it said.
    pub(crate) fn decided(admission: Admission, service: &mut S, request: Request<ReqB>) -> Self {
        Self {
            state: State::after(admission, service, request),
        }
    }

    /// Calls the service (which is ready) at once, unchecked.
    pub(crate) fn pass(service: &mut S, request: Request<ReqB>) -> Self {
        Self {
            state: State::Calling {
                future: service.call(request),
                headers: None,
            },
        }
    }

    /// A request without a usable key for the limiter `name`: refused or
    /// passed unchecked, as `outcome` says, when the request is at fault;
    /// a server error when the server's set-up is.
    pub(crate) fn unkeyed(
        name: &str,
        why: Unkeyed,
        outcome: MissingKey,
        refusals: &Refusals,
        service: &mut S,
        request: Request<ReqB>,
    ) -> Self {
        match outcome::unkeyed("rate limit", name, why, outcome, refusals) {
            Some(response) => Self {
                state: State::refusing(response),
            },
            None => Self::pass(service, request),
        }
    }
}

impl<S, ReqB> State<S::Future, S, ReqB, Body<S, ReqB>>
where
    S: Service<Request<ReqB>>,
    S::Response: HasBody,
    Body<S, ReqB>: From<Bytes>,
{
    fn refusing(response: Response<Bytes>) -> Self {
        Self::Refusing {
            response: Some(response.map(Body::<S, ReqB>::from)),
        }
    }

    /// What follows `admission`: calling `service` (which is ready), or
    /// answering. A rate limit's admission holds no guard.
    fn after(admission: Admission, service: &mut S, mut request: Request<ReqB>) -> Self {
        match admission {
            Admission::Proceed {
                guard,
                headers,
                decision,
            } => {
                debug_assert!(guard.is_none(), "a rate limit holds nothing");
                if let Some(d) = decision {
                    request.extensions_mut().insert(d);
                }
                Self::Calling {
                    future: service.call(request),
                    headers,
                }
            }
            Admission::Respond(response) => Self::refusing(response),
        }
    }
}

impl<S, ReqB> fmt::Debug for ResponseFuture<S, ReqB>
where
    S: Service<Request<ReqB>>,
    S::Response: HasBody,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Deciding { .. } => "deciding",
            State::Calling { .. } => "calling",
            State::Refusing { .. } => "refusing",
        };
        f.debug_struct("ResponseFuture")
            .field("state", &state)
            .finish()
    }
}

impl<S, ReqB, ResB> Future for ResponseFuture<S, ReqB>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: http_body::Body + From<Bytes>,
{
    type Output = Result<Response<ResB>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            match state.as_mut().project() {
                StateProj::Deciding { pending } => {
                    let (admission, mut service, request) = ready!(pending.poll(cx));
                    state.set(State::after(admission, &mut service, request));
                }
                StateProj::Calling { future, headers } => {
                    let mut response = ready!(future.poll(cx))?;
                    if let Some(h) = headers.take() {
                        h.apply(response.headers_mut());
                    }
                    return Poll::Ready(Ok(response));
                }
                StateProj::Refusing { response } => {
                    let response = response.take().expect("response polled after completion");
                    return Poll::Ready(Ok(response));
                }
            }
        }
    }
}
