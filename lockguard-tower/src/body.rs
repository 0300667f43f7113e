//! The response body of every layer: the inner body (holding the request's
//! lock or permit until it ends), or a problem body for a refusal.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use lockguard_core::{LeaseWatch, LockGuard, Permit, ReadGuard, WriteGuard};
use pin_project_lite::pin_project;

/// What a response holds until its body is complete.
pub(crate) enum Guard {
    None,
    Lock(LockGuard),
    Read(ReadGuard),
    Write(WriteGuard),
    Permit(Permit),
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("None"),
            Self::Lock(g) => f.debug_tuple("Lock").field(&g.name()).finish(),
            Self::Read(g) => f.debug_tuple("Read").field(&g.name()).finish(),
            Self::Write(g) => f.debug_tuple("Write").field(&g.name()).finish(),
            Self::Permit(p) => f.debug_tuple("Permit").field(&p.name()).finish(),
        }
    }
}

impl Guard {
    pub(crate) fn is_none(&self) -> bool {
        matches!(self, Self::None)
    }

    /// Puts a [`LeaseWatch`](lockguard_core::LeaseWatch) of the lock or
    /// permit into the request's extensions, for the handler.
    pub(crate) fn annotate(&self, extensions: &mut http::Extensions) {
        match self {
            Self::None => {}
            Self::Lock(g) => {
                extensions.insert(g.watch());
            }
            Self::Read(g) => {
                extensions.insert(g.watch());
            }
            Self::Write(g) => {
                extensions.insert(g.watch());
            }
            Self::Permit(p) => {
                extensions.insert(p.watch());
            }
        }
    }

    /// Releases the guard, reporting the outcome in the log: at once where
    /// the store answers in process, else in the future returned.
    pub(crate) fn release(self) -> Option<Pin<Box<dyn Future<Output = ()> + Send>>> {
        match self {
            Self::None => None,
            Self::Lock(g) => {
                release_held("lock", g.watch(), g.try_release_now(), LockGuard::release)
            }
            Self::Read(g) => release_held(
                "read lock",
                g.watch(),
                g.try_release_now(),
                ReadGuard::release,
            ),
            Self::Write(g) => release_held(
                "write lock",
                g.watch(),
                g.try_release_now(),
                WriteGuard::release,
            ),
            Self::Permit(p) => {
                release_held("permit", p.watch(), p.try_release_now(), Permit::release)
            }
        }
    }
}

/// Reports a release answered at once (`now`), or starts the one the store
/// needs a round trip for (`later` of the guard handed back).
fn release_held<G, F>(
    what: &'static str,
    watch: LeaseWatch,
    now: Result<lockguard_core::Result<bool>, G>,
    later: impl FnOnce(G) -> F,
) -> Option<Pin<Box<dyn Future<Output = ()> + Send>>>
where
    F: Future<Output = lockguard_core::Result<bool>> + Send + 'static,
{
    match now {
        Ok(outcome) => {
            report_release(what, watch.name(), outcome);
            None
        }
        Err(guard) => {
            let release = later(guard);
            Some(Box::pin(async move {
                report_release(what, watch.name(), release.await);
            }))
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

impl Release {
    fn holds(&self) -> bool {
        matches!(self, Self::Held(g) if !g.is_none())
    }

    /// Starts releasing a held guard; true when there is something to wait
    /// for.
    fn start(&mut self) -> bool {
        match std::mem::replace(self, Self::Done) {
            Self::Held(guard) => match guard.release() {
                Some(fut) => {
                    *self = Self::Releasing(fut);
                    true
                }
                None => false,
            },
            other => {
                *self = other;
                matches!(self, Self::Releasing(_))
            }
        }
    }
}

pin_project! {
    /// What a [`ResponseBody`] sends. A response that holds a lock or
    /// permit keeps its inner body and the state of the release in one box:
    /// the layers may read its first frame before the response is handed
    /// over (see [`ResponseBody::poll_settle`]), which needs it pinned where
    /// it stays. One that holds nothing is the inner body in place, with
    /// nothing allocated for it.
    #[project = KindProj]
    enum Kind<B>
    where
        B: Body,
    {
        Plain { #[pin] body: B },
        Held { held: Pin<Box<Held<B>>> },
        Full { data: Option<Bytes> },
    }
}

pin_project! {
    /// An inner body that holds a lock or permit until it ends.
    struct Held<B>
    where
        B: Body,
    {
        #[pin]
        body: B,
        release: Release,
        pending: Option<Frame<B::Data>>,
        // An error of the inner body read by `poll_settle`, reported by the
        // next `poll_frame`.
        failed: Option<B::Error>,
        ended: bool,
        // Whether `poll_settle` has looked at the first frame.
        settled: bool,
        remaining: Option<u64>,
    }
}

pin_project! {
    /// The response body of the lockguard layers.
    ///
    /// Either the inner service's body, passed through frame by frame, or
    /// the `application/problem+json` body of a refusal.
    ///
    /// A body that carries the request's lock or permit releases it before
    /// the client can see the response end: before the response goes out
    /// when the body is already complete then, else before the last frame
    /// when the body or its `Content-Length` says which one is last, else
    /// before reporting the end. So a client that has read the whole
    /// response finds the lock free. An inner body that fails, or is dropped early
    /// (the client went away), releases it in the background.
    pub struct ResponseBody<B>
    where
        B: Body,
    {
        #[pin]
        kind: Kind<B>,
    }
}

impl<B: Body> ResponseBody<B> {
    /// The inner body, passed through as it is.
    pub(crate) fn plain(body: B) -> Self {
        Self {
            kind: Kind::Plain { body },
        }
    }

    /// The inner body, holding `guard` until it ends; `content_length` is
    /// the response's `Content-Length`, if it has one.
    pub(crate) fn inner(body: B, guard: Guard, content_length: Option<u64>) -> Self {
        if guard.is_none() {
            return Self::plain(body);
        }
        Self {
            kind: Kind::Held {
                held: Box::pin(Held {
                    body,
                    release: Release::Held(guard),
                    pending: None,
                    failed: None,
                    ended: false,
                    settled: false,
                    remaining: content_length,
                }),
            },
        }
    }

    /// Before the response goes out: reads the inner body's first frame if
    /// it is ready, and when that frame is the body's last, releases the
    /// lock or permit now, so the head and the whole body leave in one
    /// write once the release is done. (Released only after the head was
    /// written, the body would wait on a socket with Nagle's algorithm for
    /// the client's delayed acknowledgement, tens of milliseconds.) Pending
    /// only while that release runs; a body not ready at once, or longer
    /// than one frame, is left to [`Body::poll_frame`].
    pub(crate) fn poll_settle(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Kind::Held { held } = &mut self.kind else {
            return Poll::Ready(());
        };
        held.as_mut().poll_settle(cx)
    }

    pub(crate) fn full(data: Bytes) -> Self {
        Self {
            kind: Kind::Full {
                data: (!data.is_empty()).then_some(data),
            },
        }
    }
}

/// A frame of `B`, or its error.
type FrameResult<B> = Result<Frame<<B as Body>::Data>, <B as Body>::Error>;

impl<B: Body> Held<B> {
    /// See [`ResponseBody::poll_settle`].
    fn poll_settle(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        loop {
            if let Release::Releasing(fut) = this.release {
                ready!(fut.as_mut().poll(cx));
                *this.release = Release::Done;
                return Poll::Ready(());
            }
            if *this.settled || !this.release.holds() {
                return Poll::Ready(());
            }
            *this.settled = true;
            match this.body.as_mut().poll_frame(cx) {
                // Not ready: the head goes out first, as it would anyway.
                Poll::Pending => return Poll::Ready(()),
                Poll::Ready(None) => {
                    *this.ended = true;
                    this.release.start();
                }
                Poll::Ready(Some(Err(e))) => {
                    *this.failed = Some(e);
                    return Poll::Ready(());
                }
                Poll::Ready(Some(Ok(frame))) => {
                    if let (Some(left), Some(data)) = (this.remaining.as_mut(), frame.data_ref()) {
                        *left = left.saturating_sub(data.remaining() as u64);
                    }
                    let last = this.body.is_end_stream()
                        || this.body.size_hint().exact() == Some(0)
                        || *this.remaining == Some(0);
                    *this.pending = Some(frame);
                    if !last {
                        return Poll::Ready(());
                    }
                    this.release.start();
                }
            }
        }
    }

    /// The next frame, the lock or permit released before the client can
    /// see the end.
    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<FrameResult<B>>> {
        let mut this = self.project();
        loop {
            if let Release::Releasing(fut) = this.release {
                ready!(fut.as_mut().poll(cx));
                *this.release = Release::Done;
            }
            if let Some(e) = this.failed.take() {
                // Dropping the guard releases it in the background.
                *this.ended = true;
                *this.release = Release::Done;
                return Poll::Ready(Some(Err(e)));
            }
            if let Some(frame) = this.pending.take() {
                return Poll::Ready(Some(Ok(frame)));
            }
            if *this.ended {
                if this.release.start() {
                    continue;
                }
                return Poll::Ready(None);
            }
            let frame = ready!(this.body.as_mut().poll_frame(cx));
            let at_end = this.body.is_end_stream() || this.body.size_hint().exact() == Some(0);
            match frame {
                None => *this.ended = true,
                Some(Err(e)) => {
                    // Dropping the guard releases it in the background.
                    *this.ended = true;
                    *this.release = Release::Done;
                    return Poll::Ready(Some(Err(e)));
                }
                Some(Ok(frame)) => {
                    if let (Some(left), Some(data)) = (this.remaining.as_mut(), frame.data_ref()) {
                        *left = left.saturating_sub(data.remaining() as u64);
                    }
                    let last = at_end || *this.remaining == Some(0);
                    if last && this.release.holds() {
                        // The client may see the response end with this
                        // frame: release first, then hand it over.
                        *this.pending = Some(frame);
                        this.release.start();
                        continue;
                    }
                    return Poll::Ready(Some(Ok(frame)));
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        if self.pending.is_some()
            || self.failed.is_some()
            || !matches!(self.release, Release::Done | Release::Held(Guard::None))
        {
            return false;
        }
        self.ended || self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = self.body.size_hint();
        if let Some(frame) = self.pending.as_ref().and_then(Frame::data_ref) {
            let n = frame.remaining() as u64;
            if let Some(upper) = hint.upper() {
                hint.set_upper(upper.saturating_add(n));
            }
            hint.set_lower(hint.lower().saturating_add(n));
        }
        hint
    }
}

impl<B> fmt::Debug for ResponseBody<B>
where
    B: Body + fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ResponseBody");
        match &self.kind {
            Kind::Plain { body } => d.field("inner", body).field("holds", &Guard::None),
            Kind::Held { held } => {
                d.field("inner", &held.body);
                match &held.release {
                    Release::Held(g) => d.field("holds", g),
                    Release::Releasing(_) => d.field("holds", &"releasing"),
                    Release::Done => d.field("holds", &Guard::None),
                }
            }
            Kind::Full { data } => d.field("full", data),
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
        match self.project().kind.project() {
            // Holds nothing: the inner body's frames as they come.
            KindProj::Plain { body } => body.poll_frame(cx),
            KindProj::Held { held } => held.as_mut().poll_frame(cx),
            KindProj::Full { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(d.into())))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Plain { body } => body.is_end_stream(),
            Kind::Held { held } => held.is_end_stream(),
            Kind::Full { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Plain { body } => body.size_hint(),
            Kind::Held { held } => held.size_hint(),
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
        let lg = lockguard_core::Client::memory();
        let guard = lg
            .lock("body")
            .lease(Duration::from_secs(60))
            .try_acquire()
            .await
            .unwrap();
        let mut body = ResponseBody::inner(Two(0), Guard::Lock(guard), None);
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
    async fn the_last_frame_comes_after_the_release() {
        let lg = lockguard_core::Client::memory();
        let other = lg.peer();
        // A body that says it is done after its one frame.
        let guard = lg.lock("last").try_acquire().await.unwrap();
        let full = http_body_util::Full::new(Bytes::from_static(b"all"));
        let mut body = ResponseBody::inner(full, Guard::Lock(guard), None);
        assert_eq!(body.size_hint().exact(), Some(3));
        let frame = next(&mut body).await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), Bytes::from_static(b"all"));
        let _free = other.lock("last").try_acquire().await.unwrap();
        assert!(body.is_end_stream());

        // A body whose Content-Length is reached with its first frame.
        let guard = lg.lock("sized").try_acquire().await.unwrap();
        let mut body = ResponseBody::inner(Two(0), Guard::Lock(guard), Some(1));
        assert!(next(&mut body).await.is_some());
        let _free = other.lock("sized").try_acquire().await.unwrap();
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
