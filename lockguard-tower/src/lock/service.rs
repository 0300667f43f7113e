use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use http_body::Body;
use tower_service::Service;

use super::future::ResponseFuture;
use crate::body::ResponseBody;
use crate::hold::{self, HoldOptions, Kind};
use crate::key::KeyExtractor;

/// A service that runs one request per key at a time; made by
/// [`LockLayer`](super::LockLayer).
pub struct Lock<S, K> {
    inner: S,
    options: Arc<HoldOptions>,
    key: Arc<K>,
}

impl<S, K> Lock<S, K> {
    pub(crate) fn new(inner: S, options: Arc<HoldOptions>, key: Arc<K>) -> Self {
        Self {
            inner,
            options,
            key,
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

impl<S: Clone, K> Clone for Lock<S, K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            options: self.options.clone(),
            key: self.key.clone(),
        }
    }
}

impl<S: fmt::Debug, K: fmt::Debug> fmt::Debug for Lock<S, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("inner", &self.inner)
            .field("options", &self.options)
            .field("key", &self.key)
            .finish()
    }
}

impl<S, K, ReqB, ResB> Service<Request<ReqB>> for Lock<S, K>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone,
    ResB: Body,
    K: KeyExtractor<ReqB>,
{
    type Response = Response<ResponseBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, ReqB>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        ResponseFuture::new(hold::admit(
            &self.options,
            Kind::Lock,
            &*self.key,
            &mut self.inner,
            req,
        ))
    }
}
