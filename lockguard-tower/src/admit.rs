//! The future every layer returns: wait for admission (a rate-limit
//! decision, a lock, a permit), then call the inner service, or answer with
//! a refusal.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::body::{Guard, ResponseBody};
use crate::rate_limit::headers::RateHeaders;

/// The outcome of an admission check.
pub(crate) enum Admission {
    /// Call the service; hold `guard` until the response body ends and add
    /// the rate-limit headers to the response.
    Proceed {
        guard: Guard,
        headers: Option<RateHeaders>,
    },
    /// Answer with this response instead.
    Respond(Response<Bytes>),
}

impl Admission {
    pub(crate) fn proceed() -> Self {
        Self::Proceed {
            guard: Guard::None,
            headers: None,
        }
    }
}

/// An admission check in flight.
pub(crate) type Admitting = Pin<Box<dyn Future<Output = Admission> + Send>>;

pin_project! {
    #[project = StateProj]
    enum State<F, S, ReqB> {
        Admitting {
            admitting: Admitting,
            service: Option<S>,
            request: Option<Request<ReqB>>,
        },
        Calling {
            #[pin]
            future: F,
            guard: Guard,
            headers: Option<RateHeaders>,
        },
        Responding {
            response: Option<Response<Bytes>>,
        },
    }
}

pin_project! {
    /// Admission, then the inner service.
    pub(crate) struct Admit<S, ReqB>
    where
        S: Service<Request<ReqB>>,
    {
        #[pin]
        state: State<S::Future, S, ReqB>,
    }
}

impl<S, ReqB> Admit<S, ReqB>
where
    S: Service<Request<ReqB>>,
{
    /// Waits for `admitting`, then calls `service` (which is ready).
    pub(crate) fn admitting(admitting: Admitting, service: S, request: Request<ReqB>) -> Self {
        Self {
            state: State::Admitting {
                admitting,
                service: Some(service),
                request: Some(request),
            },
        }
    }

    /// Calls the service at once, unchecked.
    pub(crate) fn pass(mut service: S, request: Request<ReqB>) -> Self {
        Self {
            state: State::Calling {
                future: service.call(request),
                guard: Guard::None,
                headers: None,
            },
        }
    }

    /// Answers at once without calling the service.
    pub(crate) fn respond(response: Response<Bytes>) -> Self {
        Self {
            state: State::Responding {
                response: Some(response),
            },
        }
    }
}

impl<S, ReqB> fmt::Debug for Admit<S, ReqB>
where
    S: Service<Request<ReqB>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Admitting { .. } => "admitting",
            State::Calling { .. } => "calling",
            State::Responding { .. } => "responding",
        };
        f.debug_struct("Admit").field("state", &state).finish()
    }
}

impl<S, ReqB, ResB> Future for Admit<S, ReqB>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
{
    type Output = Result<Response<ResponseBody<ResB>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Admitting {
                    admitting,
                    service,
                    request,
                } => match ready!(admitting.as_mut().poll(cx)) {
                    Admission::Proceed { guard, headers } => {
                        let mut service =
                            service.take().expect("admission polled after completion");
                        let request = request.take().expect("admission polled after completion");
                        let future = service.call(request);
                        this.state.set(State::Calling {
                            future,
                            guard,
                            headers,
                        });
                    }
                    Admission::Respond(response) => {
                        this.state.set(State::Responding { response: None });
                        return Poll::Ready(Ok(response.map(ResponseBody::full)));
                    }
                },
                StateProj::Calling {
                    future,
                    guard,
                    headers,
                } => {
                    let response = ready!(future.poll(cx))?;
                    let guard = std::mem::replace(guard, Guard::None);
                    let mut response = response.map(|body| ResponseBody::inner(body, guard));
                    if let Some(h) = headers.take() {
                        h.apply(response.headers_mut());
                    }
                    return Poll::Ready(Ok(response));
                }
                StateProj::Responding { response } => {
                    let response = response.take().expect("response polled after completion");
                    return Poll::Ready(Ok(response.map(ResponseBody::full)));
                }
            }
        }
    }
}

/// Takes the ready service out of `slot`, leaving a fresh clone behind, so
/// the service `poll_ready` prepared is the one called.
pub(crate) fn take_ready<S: Clone>(slot: &mut S) -> S {
    let clone = slot.clone();
    std::mem::replace(slot, clone)
}
