//! What the lock and concurrency-limit layers share: options, and taking a
//! lock or permit that the response then holds.

use std::sync::Arc;
use std::time::Duration;

use http::{Request, StatusCode};
use lockguard_core::{Client, Error, Lock, ReadLock, RwMode, Semaphore, WriteLock};
use tokio::time::Instant;
use tower_service::Service;

use crate::admit::{Admission, Admit, HasBody, admission_span, in_scope, in_span};
use crate::body::Guard;
use crate::key::{self, KeyExtractor};
use crate::outcome::{self, FailureMode, MissingKey};
use crate::refusal::{Refusal, RefusalKind, Refusals};

/// The options of a lock or concurrency-limit layer.
#[derive(Debug, Clone)]
pub(crate) struct HoldOptions {
    pub(crate) client: Client,
    pub(crate) name: Arc<str>,
    pub(crate) wait: Option<Duration>,
    pub(crate) lease: Option<Duration>,
    pub(crate) busy_status: StatusCode,
    pub(crate) on_missing_key: MissingKey,
    pub(crate) failure: FailureMode,
    pub(crate) refusals: Refusals,
    /// A lock layer's read-write mode: a read lock for safe methods, a
    /// write lock for the others.
    pub(crate) read_write: bool,
}

impl HoldOptions {
    pub(crate) fn new(client: Client, name: &str, busy_status: StatusCode) -> Self {
        Self {
            client,
            name: name.into(),
            wait: None,
            lease: None,
            busy_status,
            on_missing_key: MissingKey::default(),
            failure: FailureMode::default(),
            refusals: Refusals::default(),
            read_write: false,
        }
    }

    /// The store key of `key`: `name:key`.
    pub(crate) fn store_name(&self, key: &str) -> String {
        let mut out = String::with_capacity(self.name.len() + 1 + key.len());
        out.push_str(&self.name);
        out.push(':');
        out.push_str(key);
        out
    }

    /// Checks now what every request would otherwise be refused for: the
    /// name (it must leave room for a key), the lease, and the permit
    /// count of a concurrency limit.
    pub(crate) fn validate(&self, kind: Kind) -> Result<(), Error> {
        // A one-byte key stands for every key: the name and options are
        // what can be wrong.
        let probe = self.store_name("k");
        match kind {
            Kind::Lock if self.read_write => self.read_lock(&probe).validate(),
            Kind::Lock => self.lock(&probe).validate(),
            Kind::Permits(permits) => self.semaphore(&probe, permits).validate(),
        }
    }

    /// The lock or semaphore of `key`, under its store name `name:key`
    /// (written in a buffer the thread keeps: the lock copies it).
    fn held(&self, kind: Kind, mode: Option<RwMode>, key: &str) -> Held {
        thread_local! {
            static NAME: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
        }
        NAME.with_borrow_mut(|name| {
            name.clear();
            name.push_str(&self.name);
            name.push(':');
            name.push_str(key);
            let held = match (kind, mode) {
                (Kind::Lock, Some(RwMode::Read)) => Held::Read(self.read_lock(name)),
                (Kind::Lock, Some(RwMode::Write)) => Held::Write(self.write_lock(name)),
                (Kind::Lock, None) => Held::Lock(self.lock(name)),
                (Kind::Permits(permits), _) => Held::Permits(self.semaphore(name, permits)),
            };
            // A key of unusual length leaves no large buffer behind.
            if name.capacity() > 4096 {
                *name = String::new();
            }
            held
        })
    }

    /// The lock on `store_name`, with the layer's lease and wait (none:
    /// one attempt), its metrics named for the layer (one series for every
    /// key, not a series per key).
    fn lock(&self, store_name: &str) -> Lock {
        let lock = self
            .client
            .lock(store_name)
            .metric_name(&self.name)
            .wait(self.wait());
        match self.lease {
            Some(lease) => lock.lease(lease),
            None => lock,
        }
    }

    /// The read lock on `store_name`, with the layer's lease and wait,
    /// named for the layer in its metrics.
    fn read_lock(&self, store_name: &str) -> ReadLock {
        let lock = self
            .client
            .rw_lock(store_name)
            .read()
            .metric_name(&self.name)
            .wait(self.wait());
        match self.lease {
            Some(lease) => lock.lease(lease),
            None => lock,
        }
    }

    /// The write lock on `store_name`, with the layer's lease and wait,
    /// named for the layer in its metrics.
    fn write_lock(&self, store_name: &str) -> WriteLock {
        let lock = self
            .client
            .rw_lock(store_name)
            .write()
            .metric_name(&self.name)
            .wait(self.wait());
        match self.lease {
            Some(lease) => lock.lease(lease),
            None => lock,
        }
    }

    /// The semaphore `store_name`, with the layer's lease and wait, named
    /// for the layer in its metrics.
    fn semaphore(&self, store_name: &str, permits: u32) -> Semaphore {
        let semaphore = self
            .client
            .semaphore(store_name, permits)
            .metric_name(&self.name)
            .wait(self.wait());
        match self.lease {
            Some(lease) => semaphore.lease(lease),
            None => semaphore,
        }
    }

    fn wait(&self) -> Duration {
        self.wait.unwrap_or(Duration::ZERO)
    }

    /// How many bytes of a key the name takes.
    pub(crate) fn reserve(&self) -> usize {
        self.name.len() + 1
    }
}

/// What is being held.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Lock,
    Permits(u32),
}

impl Kind {
    fn what(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::Permits(_) => "concurrency limit",
        }
    }
}

/// The hold a request of `method` takes in read-write mode: a read for
/// the safe methods (`GET`, `HEAD`, `OPTIONS`, `TRACE`), a write for the
/// others.
fn rw_mode(method: &http::Method) -> RwMode {
    use http::Method;
    if [Method::GET, Method::HEAD, Method::OPTIONS, Method::TRACE].contains(method) {
        RwMode::Read
    } else {
        RwMode::Write
    }
}

/// Admits `request` to `service` once it holds the lock or a permit for
/// the key `key` extracts, or refuses it.
pub(crate) fn admit<S, K, ReqB>(
    options: &Arc<HoldOptions>,
    kind: Kind,
    key: &K,
    service: &mut S,
    request: Request<ReqB>,
) -> Admit<S, ReqB>
where
    S: Service<Request<ReqB>> + Clone,
    S::Response: HasBody,
    K: KeyExtractor<ReqB> + ?Sized,
{
    let key = match key::extract_checked(key, &request, options.reserve()) {
        Ok(key) => key,
        Err(unkeyed) => {
            let (what, name) = (kind.what(), &options.name);
            let (outcome, refusals) = (options.on_missing_key, &options.refusals);
            return Admit::unkeyed(what, name, unkeyed, outcome, refusals, service, request);
        }
    };
    let mode =
        (matches!(kind, Kind::Lock) && options.read_write).then(|| rw_mode(request.method()));
    let span = admission_span(|| match (kind, mode) {
        (Kind::Lock, Some(mode)) => {
            tracing::debug_span!("lock", lock = %options.name, %key, mode = mode.as_str())
        }
        (Kind::Lock, None) => tracing::debug_span!("lock", lock = %options.name, %key),
        (Kind::Permits(permits), _) => {
            tracing::debug_span!("concurrency_limit", limit = %options.name, %key, permits)
        }
    });
    // Each request is its own owner: requests are not run in a lock's
    // scope, so two served by one task (one connection) exclude each other.
    let held = options.held(kind, mode, &key);
    key::give_back(key);
    // Taken at once where the store needs no round trip (the in-memory
    // store): nothing to box or wait for. Busy with a wait configured, it
    // waits below, in the queue, like any other waiter.
    let waits = options.wait.is_some_and(|w| !w.is_zero());
    if let Some(taken) = in_scope(span.as_ref(), || held.try_now())
        && !(waits && taken.as_ref().is_err_and(Error::is_busy))
    {
        let admission = in_scope(span.as_ref(), || settled(options, kind, mode, taken, 0));
        return Admit::admitted(admission, service, request);
    }
    let acquire = acquire(options.clone(), kind, mode, held);
    Admit::admitting(in_span(acquire, span), service, request)
}

/// The lock or semaphore a request takes.
enum Held {
    Lock(Lock),
    Read(ReadLock),
    Write(WriteLock),
    Permits(Semaphore),
}

impl Held {
    /// One attempt without awaiting, where the store answers at once.
    fn try_now(&self) -> Option<Result<Guard, Error>> {
        Some(match self {
            Self::Lock(lock) => lock.try_acquire_now()?.map(Guard::Lock),
            Self::Read(lock) => lock.try_acquire_now()?.map(Guard::Read),
            Self::Write(lock) => lock.try_acquire_now()?.map(Guard::Write),
            Self::Permits(semaphore) => semaphore.try_acquire_now()?.map(Guard::Permit),
        })
    }

    /// Takes it, waiting as configured.
    async fn acquire(&self) -> Result<Guard, Error> {
        match self {
            Self::Lock(lock) => lock.acquire().await.map(Guard::Lock),
            Self::Read(lock) => lock.acquire().await.map(Guard::Read),
            Self::Write(lock) => lock.acquire().await.map(Guard::Write),
            Self::Permits(semaphore) => semaphore.acquire().await.map(Guard::Permit),
        }
    }
}

/// Takes the lock or a permit, waiting as configured.
async fn acquire(
    options: Arc<HoldOptions>,
    kind: Kind,
    mode: Option<RwMode>,
    held: Held,
) -> Admission {
    // Only read the clock for a log line somebody reads.
    let started = tracing::enabled!(tracing::Level::DEBUG).then(Instant::now);
    let result = held.acquire().await;
    let waited_ms = started.map_or(0, |s| {
        u64::try_from(s.elapsed().as_millis()).unwrap_or(u64::MAX)
    });
    settled(&options, kind, mode, result, waited_ms)
}

/// What taking the lock or permit gives the request.
fn settled(
    options: &HoldOptions,
    kind: Kind,
    mode: Option<RwMode>,
    result: Result<Guard, Error>,
    waited_ms: u64,
) -> Admission {
    if !matches!(&result, Err(e) if !e.is_busy()) {
        // Taken, or held by another: the store answered.
        crate::outage::answered(kind.what(), &options.name);
    }
    match result {
        Ok(guard) => {
            tracing::debug!(waited_ms, "{} taken", kind.what());
            Admission::Proceed {
                guard,
                headers: None,
                decision: None,
            }
        }
        Err(e) if e.is_busy() => busy(options, kind, mode, &e, waited_ms),
        Err(e) => Admission::respond_or_proceed(outcome::store_failure(
            kind.what(),
            &options.name,
            options.client.store_address(),
            &e,
            options.failure,
            &options.refusals,
        )),
    }
}

fn busy(
    options: &HoldOptions,
    kind: Kind,
    mode: Option<RwMode>,
    error: &Error,
    waited_ms: u64,
) -> Admission {
    tracing::debug!(waited_ms, error = %error, "{} busy; refusing the request", kind.what());
    let detail = match (kind, mode) {
        (Kind::Lock, Some(RwMode::Read)) => format!(
            "another request is changing this resource under lock {:?}; try again when it is done",
            options.name
        ),
        (Kind::Lock, Some(RwMode::Write)) => format!(
            "other requests are using this resource under lock {:?}; try again when they are done",
            options.name
        ),
        (Kind::Lock, None) => format!(
            "another request holds lock {:?} for this resource; try again when it is done",
            options.name
        ),
        (Kind::Permits(n), _) => format!(
            "all {n} permits of concurrency limit {:?} are taken; try again later",
            options.name
        ),
    };
    // The holder's remaining lease (or the first permit's) bounds the
    // wait, unless it is renewed.
    Admission::Respond(options.refusals.respond(&Refusal {
        kind: RefusalKind::Busy,
        status: options.busy_status,
        policy: options.name.to_string(),
        detail,
        retry_after: error.retry_after(),
        decision: None,
    }))
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use axum::body::Body;
    use http::{Request, Response};
    use lockguard_core::Client;
    use tower::{Layer, Service, ServiceExt, service_fn};

    use crate::{ConcurrencyLimitLayer, LockLayer, MissingKey, key};

    fn ok_service()
    -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone {
        service_fn(|_req: Request<Body>| async {
            Ok::<_, Infallible>(Response::new(Body::from("ok")))
        })
    }

    /// A body still streaming: it holds the request's lock while it lives.
    struct Streaming;

    impl http_body::Body for Streaming {
        type Data = bytes::Bytes;
        type Error = Infallible;

        fn poll_frame(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
            std::task::Poll::Pending
        }
    }

    fn streaming_service()
    -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone {
        service_fn(|_req: Request<Body>| async {
            Ok::<_, Infallible>(Response::new(Body::new(Streaming)))
        })
    }

    fn user(name: Option<&str>) -> Request<Body> {
        let mut b = Request::get("/");
        if let Some(n) = name {
            b = b.header("x-user", n);
        }
        b.body(Body::empty()).unwrap()
    }

    fn user_key() -> key::Header {
        key::Header::new(http::HeaderName::from_static("x-user"))
    }

    /// Two requests served by one task (as on one connection) are two
    /// owners: the second does not re-enter the first one's lock.
    #[tokio::test]
    async fn requests_in_one_task_do_not_share_a_lock() {
        let lg = Client::memory();
        let svc = LockLayer::new(lg, "same-task", user_key()).layer(streaming_service());
        let first = svc.clone().oneshot(user(Some("ada"))).await.unwrap();
        assert_eq!(first.status(), 200);
        let second = svc.clone().oneshot(user(Some("ada"))).await.unwrap();
        assert_eq!(
            second.status(),
            409,
            "the second request re-entered the lock"
        );
        // Another key is free.
        assert_eq!(svc.oneshot(user(Some("bob"))).await.unwrap().status(), 200);
        drop(first);
    }

    #[tokio::test]
    async fn missing_keys_follow_the_setting() {
        let lg = Client::memory();
        let reject = LockLayer::new(lg.clone(), "k", user_key()).layer(ok_service());
        assert_eq!(reject.oneshot(user(None)).await.unwrap().status(), 400);
        let pass = ConcurrencyLimitLayer::new(lg, "k", 1, user_key())
            .on_missing_key(MissingKey::Pass)
            .layer(ok_service());
        // Unkeyed requests are not counted against any permit.
        let a = pass.clone().oneshot(user(None)).await.unwrap();
        let b = pass.oneshot(user(None)).await.unwrap();
        assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    }

    #[tokio::test]
    async fn a_permit_count_that_cannot_work_is_a_server_error_not_a_panic() {
        let lg = Client::memory();
        for permits in [0, lockguard_core::MAX_PERMITS + 1] {
            let svc = ConcurrencyLimitLayer::new(lg.clone(), "bad", permits, key::Global)
                .fail_open()
                .layer(ok_service());
            assert_eq!(svc.oneshot(user(None)).await.unwrap().status(), 500);
        }
    }

    /// The handler behind a lock or concurrency limit gets a watch of the
    /// lease it runs under: the fencing token, and `is_held`.
    #[tokio::test]
    async fn the_handler_sees_its_lease() {
        let lg = Client::memory();
        let handler = service_fn(|req: Request<Body>| async move {
            let watch = req
                .extensions()
                .get::<lockguard_core::LeaseWatch>()
                .cloned()
                .expect("no lease in the request");
            assert!(watch.is_held());
            Ok::<_, Infallible>(Response::new(Body::from(format!(
                "{} {}",
                watch.name(),
                watch.fencing_token()
            ))))
        });
        let locked = LockLayer::new(lg.clone(), "orders", user_key()).layer(handler);
        let res = locked.oneshot(user(Some("ada"))).await.unwrap();
        let body = http_body_util::BodyExt::collect(res.into_body())
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(&body[..], b"orders:header:x-user:ada 1");
        let limited = ConcurrencyLimitLayer::new(lg, "slots", 2, key::Global).layer(handler);
        let res = limited.oneshot(user(None)).await.unwrap();
        let body = http_body_util::BodyExt::collect(res.into_body())
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(&body[..], b"slots:global 2");
    }

    /// A busy lock is refused with `Retry-After` from the holder's
    /// remaining lease, through the refusal hook when one is set.
    #[tokio::test(start_paused = true)]
    async fn busy_refusals_say_when_to_retry_and_can_be_rewritten() {
        let lg = Client::memory();
        let _held = lg
            .lock("jobs:header:x-user:ada")
            .lease(std::time::Duration::from_millis(7500))
            .acquire()
            .await
            .unwrap();
        let plain = LockLayer::new(lg.clone(), "jobs", user_key()).layer(ok_service());
        let res = plain.oneshot(user(Some("ada"))).await.unwrap();
        assert_eq!(res.status(), 409);
        assert_eq!(res.headers()["retry-after"], "8");
        let hooked = LockLayer::new(lg, "jobs", user_key())
            .on_refusal(|r: &crate::Refusal| {
                assert_eq!(r.kind, crate::RefusalKind::Busy);
                let mut res = Response::new(bytes::Bytes::from(format!("busy: {}", r.policy)));
                *res.status_mut() = http::StatusCode::LOCKED;
                res
            })
            .layer(ok_service());
        let res = hooked.oneshot(user(Some("ada"))).await.unwrap();
        assert_eq!(res.status(), 423);
        assert_eq!(res.headers()["retry-after"], "8");
        let body = http_body_util::BodyExt::collect(res.into_body())
            .await
            .unwrap()
            .to_bytes();
        assert_eq!(&body[..], b"busy: jobs");
    }

    /// A route parameter keys the lock, in a nested router too.
    #[tokio::test]
    async fn a_route_parameter_keys_the_lock() {
        use axum::Extension;
        let lg = Client::memory();
        let pay = axum::routing::post(
            |Extension(w): Extension<lockguard_core::LeaseWatch>| async move { w.name().to_owned() },
        );
        let orders = axum::Router::new().route(
            "/orders/{id}/pay",
            pay.route_layer(LockLayer::new(lg, "pay", key::PathParam::new("id"))),
        );
        let app = axum::Router::new()
            .merge(orders.clone())
            .nest("/api", orders);
        for uri in ["/orders/42/pay", "/api/orders/42/pay"] {
            let req = Request::post(uri).body(Body::empty()).unwrap();
            let res = app.clone().oneshot(req).await.unwrap();
            assert_eq!(res.status(), 200, "{uri}");
            let body = http_body_util::BodyExt::collect(res.into_body())
                .await
                .unwrap()
                .to_bytes();
            assert_eq!(&body[..], b"pay:id:42", "{uri}");
        }
    }

    /// HoldOptions that cannot work fail at start-up.
    #[test]
    fn validate_refuses_what_cannot_work() {
        let lg = Client::memory();
        for permits in [0, lockguard_core::MAX_PERMITS + 1] {
            let err = ConcurrencyLimitLayer::new(lg.clone(), "bad", permits, key::Global)
                .validate()
                .unwrap_err();
            assert!(err.is_invalid_input(), "{err}");
        }
        let long = "n".repeat(lockguard_core::MAX_KEY_LEN);
        assert!(
            LockLayer::new(lg.clone(), &long, key::Global)
                .validate()
                .is_err()
        );
        let zero_lease =
            LockLayer::new(lg.clone(), "l", key::Global).lease(std::time::Duration::ZERO);
        assert!(zero_lease.validate().unwrap_err().is_invalid_input());
        assert!(
            LockLayer::new(lg.clone(), "l", key::Global)
                .validate()
                .is_ok()
        );
        assert!(
            ConcurrencyLimitLayer::new(lg, "c", 3, key::Global)
                .validate()
                .is_ok()
        );
    }

    #[tokio::test]
    async fn a_name_too_long_for_the_key_leaves_no_room_and_is_missing() {
        let lg = Client::memory();
        let name = "n".repeat(lockguard_core::MAX_KEY_LEN);
        let svc = LockLayer::new(lg, &name, key::Global).layer(ok_service());
        assert_eq!(svc.oneshot(user(None)).await.unwrap().status(), 400);
    }
}
