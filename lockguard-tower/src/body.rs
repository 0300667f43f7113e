//! The response body of every layer: the inner body (holding the request's
//! lock or permit until it ends), or a problem body for a refusal.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use lockguard_core::{LockGuard, Permit};
use pin_project_lite::pin_project;

/// What a response holds until its body is complete.
pub(crate) enum Guard {
    None,
    Lock(LockGuard),
    Permit(Permit),
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::Lock(g) => f.debug_tuple("Lock").field(&g.name()).finish(),
            Self::Permit(p) => f.debug_tuple("Permit").field(&p.name()).finish(),
        }
    }
}

impl Guard {
    fn is_none(&self) -> bool {
        matches!(self, Self::None)
    }

    /// Releases the guard, reporting the outcome in the log.
    fn release(self) -> Option<Pin<Box<dyn Future<Output = ()> + Send>>> {
        match self {
            Self::None => None,
            Self::Lock(guard) => Some(Box::pin(async move {
                let name = guard.name().to_owned();
                report_release("lock", &name, guard.release().await);
            })),
            Self::Permit(permit) => Some(Box::pin(async move {
                let name = permit.name().to_owned();
                report_release("permit", &name, permit.release().await);
            })),
        }
    }
}

fn report_release(what: &str, name: &str, outcome: lockguard_core::Result<bool>) {
    match outcome {
        Ok(true) => tracing::debug!(what, name, "released after the response body ended"),
        Ok(false) => tracing::warn!(
            what,
            name,
            "the lease ran out before the response body ended; the request may not have been exclusive"
        ),
        Err(e) => tracing::warn!(what, name, error = %e, "release failed; the lease will free it"),
    }
}

enum Release {
    Held(Guard),
    Releasing(Pin<Box<dyn Future<Output = ()> + Send>>),
    Done,
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Full { data: Option<Bytes> },
    }
}

pin_project! {
    /// The response body of the lockguard layers.
    ///
    /// Either the inner service's body, passed through frame by frame, or
    /// the `application/problem+json` body of a refusal. A body that carries
    /// the request's lock or permit releases it when the inner body ends,
    /// and only then reports its own end, so a client that has read the
    /// whole response finds the lock free; an inner body that fails or is
    /// dropped early (the client went away) releases it in the background.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
        release: Release,
        ended: bool,
    }
}

impl<B> ResponseBody<B> {
    pub(crate) fn inner(body: B, guard: Guard) -> Self {
        Self {
            kind: Kind::Inner { body },
            release: Release::Held(guard),
            ended: false,
        }
    }

    pub(crate) fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
            release: Release::Done,
            ended: false,
        }
    }
}

impl<B: fmt::Debug> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ResponseBody");
        match &self.kind {
            Kind::Inner { body } => d.field("inner", body),
            Kind::Full { data } => d.field("full", data),
        };
        match &self.release {
            Release::Held(g) => d.field("holds", g),
            Release::Releasing(_) => d.field("holds", &"releasing"),
            Release::Done => d.field("holds", &Guard::None),
        };
        d.finish()
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        loop {
            if let Release::Releasing(fut) = this.release {
                ready!(fut.as_mut().poll(cx));
                *this.release = Release::Done;
            }
            if *this.ended {
                return match this.release {
                    Release::Held(guard) => match std::mem::replace(guard, Guard::None).release() {
                        Some(fut) => {
                            *this.release = Release::Releasing(fut);
                            continue;
                        }
                        None => {
                            *this.release = Release::Done;
                            Poll::Ready(None)
                        }
                    },
                    _ => Poll::Ready(None),
                };
            }
            let frame = match this.kind.as_mut().project() {
                KindProj::Inner { body } => ready!(body.poll_frame(cx)),
                KindProj::Full { data } => data.take().map(|d| Ok(Frame::data(d.into()))),
            };
            match frame {
                None => *this.ended = true,
                Some(Err(e)) => {
                    // Dropping the guard releases it in the background.
                    *this.ended = true;
                    *this.release = Release::Done;
                    return Poll::Ready(Some(Err(e)));
                }
                Some(Ok(frame)) => return Poll::Ready(Some(Ok(frame))),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        let released = match &self.release {
            Release::Held(g) => g.is_none(),
            Release::Releasing(_) => false,
            Release::Done => true,
        };
        released
            && (self.ended
                || match &self.kind {
                    Kind::Inner { body } => body.is_end_stream(),
                    Kind::Full { data } => data.is_none(),
                })
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Full { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A body of two chunks.
    struct Two(u8);

    impl Body for Two {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            if self.0 == 2 {
                return Poll::Ready(None);
            }
            self.0 += 1;
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x")))))
        }
    }

    async fn next<B: Body + Unpin>(b: &mut B) -> Option<Result<Frame<B::Data>, B::Error>> {
        std::future::poll_fn(|cx| Pin::new(&mut *b).poll_frame(cx)).await
    }

    #[tokio::test]
    async fn lock_is_held_until_the_body_ends_then_released() {
        let lg = lockguard_core::Lockguard::memory();
        let guard = lg
            .lock("body")
            .lease(Duration::from_secs(60))
            .try_acquire()
            .await
            .unwrap();
        let mut body = ResponseBody::inner(Two(0), Guard::Lock(guard));
        let other = lg.peer();
        assert!(!body.is_end_stream());
        assert!(next(&mut body).await.is_some());
        assert!(next(&mut body).await.is_some());
        assert!(
            other
                .lock("body")
                .try_acquire()
                .await
                .unwrap_err()
                .is_busy()
        );
        // The inner body is done, but the guard keeps the stream open until
        // it is released.
        assert!(!body.is_end_stream());
        assert!(next(&mut body).await.is_none());
        assert!(body.is_end_stream());
        // Released before the end was reported: free at once.
        let _free = other.lock("body").try_acquire().await.unwrap();
        assert!(next(&mut body).await.is_none());
    }

    #[tokio::test]
    async fn full_bodies_have_an_exact_size() {
        let mut body = ResponseBody::<Two>::full(Bytes::from_static(b"{}"));
        assert_eq!(body.size_hint().exact(), Some(2));
        assert!(!body.is_end_stream());
        let frame = next(&mut body).await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), Bytes::from_static(b"{}"));
        assert!(body.is_end_stream());
        assert!(next(&mut body).await.is_none());
        let empty = ResponseBody::<Two>::full(Bytes::new());
        assert!(empty.is_end_stream());
    }
}
