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

/// A service that serves at most N requests at once per key; made by
/// [`ConcurrencyLimitLayer`](super::ConcurrencyLimitLayer).
pub struct ConcurrencyLimit<S, K> {
    inner: S,
    options: Arc<HoldOptions>,
    permits: u32,
    key: Arc<K>,
}

impl<S, K> ConcurrencyLimit<S, K> {
    pub(crate) fn new(inner: S, options: Arc<HoldOptions>, permits: u32, key: Arc<K>) -> Self {
        Self {
            inner,
            options,
            permits,
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

impl<S: Clone, K> Clone for ConcurrencyLimit<S, K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
            options: self.options.clone(),
            permits: self.permits,
            key: self.key.clone(),
        }
    }
}

impl<S: fmt::Debug, K: fmt::Debug> fmt::Debug for ConcurrencyLimit<S, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConcurrencyLimit")
            .field("inner", &self.inner)
            .field("options", &self.options)
            .field("permits", &self.permits)
            .field("key", &self.key)
            .finish()
    }
}

impl<S, K, ReqB, ResB> Service<Request<ReqB>> for ConcurrencyLimit<S, K>
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
            Kind::Permits(self.permits),
            &*self.key,
            &mut self.inner,
            req,
        ))
    }
}
