use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::admit::Admit;
use crate::body::ResponseBody;

pin_project! {
    /// The response future of [`LockService`](super::LockService): the lock, then
    /// the inner service or a refusal.
    pub struct ResponseFuture<S, ReqB>
    where
        S: Service<Request<ReqB>>,
    {
        #[pin]
        inner: Admit<S, ReqB>,
    }
}

impl<S, ReqB> ResponseFuture<S, ReqB>
where
    S: Service<Request<ReqB>>,
{
    pub(crate) fn new(inner: Admit<S, ReqB>) -> Self {
        Self { inner }
    }
}

impl<S, ReqB> fmt::Debug for ResponseFuture<S, ReqB>
where
    S: Service<Request<ReqB>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ResponseFuture").field(&self.inner).finish()
    }
}

impl<S, ReqB, ResB> Future for ResponseFuture<S, ReqB>
where
    S: Service<Request<ReqB>, Response = Response<ResB>>,
    ResB: Body,
{
    type Output = Result<Response<ResponseBody<ResB>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx)
    }
}
