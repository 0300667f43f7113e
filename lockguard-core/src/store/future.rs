//! The one erasure of the store boundary: every store operation, whatever
//! its store, reaches the primitives as a [`StoreFuture`].

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// The future of one store operation, as a [`Store`](super::Store) hands it
/// out: a store's own `async fn`, boxed once.
///
/// Like every future it does nothing until it is polled, so dropping it
/// unpolled changes nothing in the store.
pub struct StoreFuture<'a, T>(Pin<Box<dyn Future<Output = T> + Send + 'a>>);

impl<T> fmt::Debug for StoreFuture<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StoreFuture")
    }
}

impl<'a, T> StoreFuture<'a, T> {
    /// `future`, boxed.
    pub fn new(future: impl Future<Output = T> + Send + 'a) -> Self {
        Self(Box::pin(future))
    }

    /// An answer already known.
    pub fn ready(value: T) -> Self
    where
        T: Send + 'a,
    {
        Self::new(std::future::ready(value))
    }

    /// The answer, when one poll gives it (a store that answers in
    /// process: see [`LockStore::answers_at_once`](super::LockStore::answers_at_once));
    /// `None` when it needs more, and then the operation is dropped part
    /// way. Ask this only of a store that answers at once, whose
    /// operations never wait.
    pub fn now(mut self) -> Option<T> {
        match self
            .0
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
        {
            Poll::Ready(value) => Some(value),
            Poll::Pending => None,
        }
    }
}

impl<T> Future for StoreFuture<'_, T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        self.0.as_mut().poll(cx)
    }
}
