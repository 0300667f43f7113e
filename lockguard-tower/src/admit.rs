//! The future every layer returns: wait for admission (a rate-limit
//! decision, a lock, a permit), then call the inner service, or answer with
//! a refusal.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::header::CONTENT_LENGTH;
use http::{Method, Request, Response, StatusCode};
use http_body::Body;
use lockguard_core::Decision;
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::body::{Guard, ResponseBody};
use crate::key::Unkeyed;
use crate::outcome::{self, MissingKey};
use crate::rate_limit::headers::RateHeaders;
use crate::refusal::Refusals;

/// The outcome of an admission check.
pub(crate) enum Admission {
    /// Call the service, with `decision` in the request's extensions if
    /// there is one; hold `guard` until the response body ends and add the
    /// rate-limit headers to the response.
    Proceed {
        guard: Guard,
        headers: Option<RateHeaders>,
        decision: Option<Decision>,
    },
    /// Answer with this response instead.
    Respond(Response<Bytes>),
}

impl Admission {
    pub(crate) fn proceed() -> Self {
        Self::Proceed {
            guard: Guard::None,
            headers: None,
            decision: None,
        }
    }

    /// Answer with `response` if there is one, else call the service
    /// unchecked: what [`outcome::store_failure`] decided.
    pub(crate) fn respond_or_proceed(response: Option<Response<Bytes>>) -> Self {
        response.map_or_else(Self::proceed, Self::Respond)
    }
}

/// An admission check in flight.
pub(crate) type Admitting = Pin<Box<dyn Future<Output = Admission> + Send>>;

/// The span of a request's admission: made only when debug logging is
/// on, since even a disabled span costs a handle to make and drop on
/// every request.
pub(crate) fn admission_span(make: impl FnOnce() -> tracing::Span) -> Option<tracing::Span> {
    if tracing::level_enabled!(tracing::Level::DEBUG) {
        Some(make()).filter(|span| !span.is_disabled())
    } else {
        None
    }
}

/// `check` as an admission in flight, run in `span` if there is one (a
/// disabled span would cost a check on every poll).
pub(crate) fn in_span(
    check: impl Future<Output = Admission> + Send + 'static,
    span: Option<tracing::Span>,
) -> Admitting {
    match span {
        None => Box::pin(check),
        Some(span) => Box::pin(tracing::Instrument::instrument(check, span)),
    }
}

/// Runs `f` in `span` if there is one.
pub(crate) fn in_scope<R>(span: Option<&tracing::Span>, f: impl FnOnce() -> R) -> R {
    match span {
        None => f(),
        Some(span) => span.in_scope(f),
    }
}

/// An admission check in flight, with the ready service it is for and
/// the request: what both the layers' futures hold while they wait.
pub(crate) struct Pending<S, ReqB> {
    admitting: Admitting,
    service: Option<S>,
    request: Option<Request<ReqB>>,
}

impl<S: Clone, ReqB> Pending<S, ReqB> {
    /// Waits for `admitting`, then hands back the ready service taken from
    /// `service` (a clone is left in its place) and `request`.
    pub(crate) fn new(admitting: Admitting, service: &mut S, request: Request<ReqB>) -> Self {
        Self {
            admitting,
            service: Some(take_ready(service)),
            request: Some(request),
        }
    }
}

impl<S, ReqB> Pending<S, ReqB> {
    /// The admission, with the service and the request, once it is made.
    ///
    /// # Panics
    ///
    /// When polled again after it answered, as a future would.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<(Admission, S, Request<ReqB>)> {
        let admission = ready!(self.admitting.as_mut().poll(cx));
        let service = self
            .service
            .take()
            .expect("admission polled after completion");
        let request = self
            .request
            .take()
            .expect("admission polled after completion");
        Poll::Ready((admission, service, request))
    }
}

/// The responses the layers wrap: `http::Response<B>` for any body `B`.
///
/// It names the body type in the bounds of the layers' response futures;
/// it is sealed, implemented for `http::Response<B>` only.
pub trait HasBody: sealed::Sealed {
    /// The response's body.
    type Body: Body;
}

impl<B: Body> HasBody for Response<B> {
    type Body = B;
}

mod sealed {
    pub trait Sealed {}
    impl<B> Sealed for http::Response<B> {}
}

pin_project! {
    #[project = StateProj]
    enum State<F, S, ReqB, R>
    where
        R: HasBody,
    {
        Admitting {
            pending: Pending<S, ReqB>,
        },
        Calling {
            #[pin]
            future: F,
            guard: Guard,
            headers: Option<RateHeaders>,
        },
        Finishing {
            release: Pin<Box<dyn Future<Output = ()> + Send>>,
            response: Option<R>,
        },
        // The response holds a lock or permit: its body may be complete,
        // to be released before the head goes out.
        Settling {
            response: Option<Response<ResponseBody<R::Body>>>,
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
        S::Response: HasBody,
    {
        #[pin]
        state: State<S::Future, S, ReqB, S::Response>,
        // No body goes out (a `HEAD` request): release before the head.
        head: bool,
    }
}

impl<S, ReqB> State<S::Future, S, ReqB, S::Response>
where
    S: Service<Request<ReqB>>,
    S::Response: HasBody,
{
    /// What follows `admission`: calling `service` (which is ready), or
    /// answering.
    fn after(admission: Admission, service: &mut S, mut request: Request<ReqB>) -> Self {
        match admission {
            Admission::Proceed {
                guard,
                headers,
                decision,
            } => {
                // What the handler may want of its admission: the lease it
                // runs under, the limiter's decision.
                guard.annotate(request.extensions_mut());
                if let Some(d) = decision {
                    request.extensions_mut().insert(d);
                }
                Self::Calling {
                    future: service.call(request),
                    guard,
                    headers,
                }
            }
            Admission::Respond(response) => Self::Responding {
                response: Some(response),
            },
        }
    }
}

impl<S, ReqB> Admit<S, ReqB>
where
    S: Service<Request<ReqB>>,
    S::Response: HasBody,
{
    /// Waits for `admitting`, then calls `service` (which is ready): it
    /// takes the ready service, leaving a clone in its place.
    pub(crate) fn admitting(admitting: Admitting, service: &mut S, request: Request<ReqB>) -> Self
    where
        S: Clone,
    {
        Self {
            head: request.method() == Method::HEAD,
            state: State::Admitting {
                pending: Pending::new(admitting, service, request),
            },
        }
    }

    /// Calls `service` (which is ready) at once for a request admitted as
    /// `admission` said, or answers as it said. The service is only
    /// borrowed: nothing outlives this call but its future.
    pub(crate) fn admitted(admission: Admission, service: &mut S, request: Request<ReqB>) -> Self {
        Self {
            head: request.method() == Method::HEAD,
            state: State::after(admission, service, request),
        }
    }

    /// Calls the service (which is ready) at once, unchecked.
    pub(crate) fn pass(service: &mut S, request: Request<ReqB>) -> Self {
        Self {
            head: request.method() == Method::HEAD,
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
            head: false,
            state: State::Responding {
                response: Some(response),
            },
        }
    }

    /// A request without a usable key for `what` `name`: refused or passed
    /// unchecked, as `outcome` says, when the request is at fault; a server
    /// error when the server's set-up is.
    pub(crate) fn unkeyed(
        what: &str,
        name: &str,
        why: Unkeyed,
        outcome: MissingKey,
        refusals: &Refusals,
        service: &mut S,
        request: Request<ReqB>,
    ) -> Self {
        match outcome::unkeyed(what, name, why, outcome, refusals) {
            Some(response) => Self::respond(response),
            None => Self::pass(service, request),
        }
    }
}

/// Defines a layer's public `ResponseFuture<S, ReqB>`: a named wrapper of
/// [`Admit`] with the docs given.
macro_rules! response_future {
    ($(#[$doc:meta])*) => {
        pin_project_lite::pin_project! {
            $(#[$doc])*
            pub struct ResponseFuture<S, ReqB>
            where
                S: tower_service::Service<http::Request<ReqB>>,
                S::Response: $crate::admit::HasBody,
            {
                #[pin]
                inner: $crate::admit::Admit<S, ReqB>,
            }
        }

        impl<S, ReqB> ResponseFuture<S, ReqB>
        where
            S: tower_service::Service<http::Request<ReqB>>,
            S::Response: $crate::admit::HasBody,
        {
            pub(crate) fn new(inner: $crate::admit::Admit<S, ReqB>) -> Self {
                Self { inner }
            }
        }

        impl<S, ReqB> std::fmt::Debug for ResponseFuture<S, ReqB>
        where
            S: tower_service::Service<http::Request<ReqB>>,
            S::Response: $crate::admit::HasBody,
        {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_tuple("ResponseFuture").field(&self.inner).finish()
            }
        }

        impl<S, ReqB, ResB> std::future::Future for ResponseFuture<S, ReqB>
        where
            S: tower_service::Service<http::Request<ReqB>, Response = http::Response<ResB>>,
            ResB: http_body::Body,
        {
            type Output = Result<http::Response<$crate::body::ResponseBody<ResB>>, S::Error>;

            fn poll(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<Self::Output> {
                self.project().inner.poll(cx)
            }
        }
    };
}

pub(crate) use response_future;

impl<S, ReqB> fmt::Debug for Admit<S, ReqB>
where
    S: Service<Request<ReqB>>,
    S::Response: HasBody,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Admitting { .. } => "admitting",
            State::Calling { .. } => "calling",
            State::Finishing { .. } => "finishing",
            State::Settling { .. } => "settling",
            State::Responding { .. } => "responding",
        };
        f.debug_struct("Admit").field("state", &state).finish()
    }
}

impl<S, ReqB, ResB> Future for Admit<S, ReqB>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: Body,
{
    type Output = Result<Response<ResponseBody<ResB>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::Admitting { pending } => {
                    let (admission, mut service, request) = ready!(pending.poll(cx));
                    this.state
                        .set(State::after(admission, &mut service, request));
                }
                StateProj::Calling {
                    future,
                    guard,
                    headers,
                } => {
                    let mut response = ready!(future.poll(cx))?;
                    if let Some(h) = headers.take() {
                        h.apply(response.headers_mut());
                    }
                    let guard = std::mem::replace(guard, Guard::None);
                    if guard.is_none() {
                        return Poll::Ready(Ok(response.map(ResponseBody::plain)));
                    }
                    let length = content_length(&response);
                    if !has_body(*this.head, &response, length) {
                        // The client sees the end with the head: release
                        // first.
                        match guard.release() {
                            Some(release) => {
                                this.state.set(State::Finishing {
                                    release,
                                    response: Some(response),
                                });
                                continue;
                            }
                            None => return Poll::Ready(Ok(response.map(ResponseBody::plain))),
                        }
                    }
                    let response = response.map(|body| ResponseBody::inner(body, guard, length));
                    this.state.set(State::Settling {
                        response: Some(response),
                    });
                }
                StateProj::Settling { response } => {
                    let body = response
                        .as_mut()
                        .expect("response polled after completion")
                        .body_mut();
                    ready!(body.poll_settle(cx));
                    let response = response.take().expect("response polled after completion");
                    return Poll::Ready(Ok(response));
                }
                StateProj::Finishing { release, response } => {
                    ready!(release.as_mut().poll(cx));
                    let response = response.take().expect("response polled after completion");
                    return Poll::Ready(Ok(response.map(ResponseBody::plain)));
                }
                StateProj::Responding { response } => {
                    let response = response.take().expect("response polled after completion");
                    return Poll::Ready(Ok(response.map(ResponseBody::full)));
                }
            }
        }
    }
}

/// Whether `response`, whose `Content-Length` is `length`, sends a body
/// the client reads to its end.
fn has_body<B: Body>(head: bool, response: &Response<B>, length: Option<u64>) -> bool {
    let status = response.status();
    !(head
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
        || response.body().is_end_stream()
        || length == Some(0))
}

fn content_length<B>(response: &Response<B>) -> Option<u64> {
    response
        .headers()
        .get(CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Takes the ready service out of `slot`, leaving a fresh clone behind, so
/// the service `poll_ready` prepared is the one called, later. A request
/// admitted at once calls the service in place: no clone.
fn take_ready<S: Clone>(slot: &mut S) -> S {
    let clone = slot.clone();
    std::mem::replace(slot, clone)
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use axum::body::Body as AxumBody;
    use lockguard_core::Client;
    use tower::{Layer, ServiceExt, service_fn};

    use super::*;
    use crate::{LockLayer, key};

    /// A response the client sees whole with its head (no content, or a
    /// `HEAD`) releases the lock before the head is handed over.
    #[tokio::test]
    async fn bodiless_responses_release_before_the_head() {
        let lg = Client::memory();
        let other = lg.peer();
        let svc = LockLayer::new(lg, "nobody", key::Global).layer(service_fn(
            |req: Request<AxumBody>| async move {
                let mut res = Response::new(AxumBody::from("content"));
                if req.uri().path() == "/204" {
                    *res.status_mut() = StatusCode::NO_CONTENT;
                    *res.body_mut() = AxumBody::empty();
                }
                Ok::<_, Infallible>(res)
            },
        ));
        for (method, path) in [("GET", "/204"), ("HEAD", "/")] {
            let req = Request::builder()
                .method(method)
                .uri(path)
                .body(AxumBody::empty());
            let res = svc.clone().oneshot(req.unwrap()).await.unwrap();
            assert_ne!(res.status(), StatusCode::CONFLICT);
            // The body is never polled, and the lock is already free.
            let free = other.lock("nobody:global").try_acquire().await.unwrap();
            assert!(free.release().await.unwrap());
            drop(res);
        }
        // A body complete when the response is ready is released before
        // the response goes out, so its head and body leave together.
        let res = svc.oneshot(Request::new(AxumBody::empty())).await.unwrap();
        let free = other.lock("nobody:global").try_acquire().await.unwrap();
        assert!(free.release().await.unwrap());
        assert_eq!(
            http_body_util::BodyExt::collect(res.into_body())
                .await
                .unwrap()
                .to_bytes(),
            "content"
        );
    }

    /// A body still streaming when the response is ready keeps the lock
    /// until it ends; a body of two frames keeps it until the last.
    #[tokio::test]
    async fn streaming_bodies_keep_the_lock_until_they_end() {
        let lg = Client::memory();
        let other = lg.peer();
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(1);
        let rx = std::sync::Arc::new(tokio::sync::Mutex::new(Some(rx)));
        let svc = LockLayer::new(lg, "stream", key::Global).layer(service_fn(
            move |_req: Request<AxumBody>| {
                let rx = rx.clone();
                async move {
                    let rx = rx.lock().await.take().unwrap();
                    Ok::<_, Infallible>(Response::new(AxumBody::new(Channel(rx))))
                }
            },
        ));
        let res = svc.oneshot(Request::new(AxumBody::empty())).await.unwrap();
        let busy = other.lock("stream:global").try_acquire().await.unwrap_err();
        assert!(busy.is_busy(), "{busy}");
        let reading = tokio::spawn(http_body_util::BodyExt::collect(res.into_body()));
        tx.send(Bytes::from_static(b"one")).await.unwrap();
        drop(tx);
        let body = reading.await.unwrap().unwrap().to_bytes();
        assert_eq!(body, "one");
        let free = other.lock("stream:global").try_acquire().await.unwrap();
        assert!(free.release().await.unwrap());
    }

    /// Frames from a channel, ending when it closes.
    struct Channel(tokio::sync::mpsc::Receiver<Bytes>);

    impl http_body::Body for Channel {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, Infallible>>> {
            self.0
                .poll_recv(cx)
                .map(|b| b.map(|b| Ok(http_body::Frame::data(b))))
        }
    }
}
