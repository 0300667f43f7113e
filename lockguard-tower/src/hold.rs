//! What the lock and concurrency-limit layers share: settings, and taking a
//! lock or permit that the response then holds.

use std::sync::Arc;
use std::time::Duration;

use http::{Request, StatusCode};
use lockguard_core::{Error, Lockguard};
use tokio::time::Instant;
use tower_service::Service;
use tracing::Instrument;

use crate::admit::{Admission, Admit};
use crate::body::Guard;
use crate::key::{self, KeyExtractor};
use crate::outcome::{self, FailureMode, MissingKey};
use crate::problem;

/// The settings of a lock or concurrency-limit layer.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) client: Lockguard,
    pub(crate) name: Arc<str>,
    pub(crate) wait: Option<Duration>,
    pub(crate) lease: Option<Duration>,
    pub(crate) busy_status: StatusCode,
    pub(crate) on_missing_key: MissingKey,
    pub(crate) failure: FailureMode,
}

impl Settings {
    pub(crate) fn new(client: Lockguard, name: &str, busy_status: StatusCode) -> Self {
        Self {
            client,
            name: name.into(),
            wait: None,
            lease: None,
            busy_status,
            on_missing_key: MissingKey::default(),
            failure: FailureMode::default(),
        }
    }

    /// The store key of `key`: `name:key`.
    pub(crate) fn store_name(&self, key: &str) -> String {
        format!("{}:{key}", self.name)
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

/// Admits `request` to `service` once it holds the lock or a permit for
/// the key `key` extracts, or refuses it.
pub(crate) fn admit<S, K, ReqB>(
    settings: &Arc<Settings>,
    kind: Kind,
    key: &K,
    service: S,
    request: Request<ReqB>,
) -> Admit<S, ReqB>
where
    S: Service<Request<ReqB>>,
    K: KeyExtractor<ReqB> + ?Sized,
{
    let Some(key) = key::extract_checked(key, &request, settings.reserve()) else {
        let (what, name) = (kind.what(), &settings.name);
        return Admit::unkeyed(what, name, settings.on_missing_key, service, request);
    };
    let span = match kind {
        Kind::Lock => tracing::debug_span!("lock", lock = %settings.name, %key),
        Kind::Permits(permits) => {
            tracing::debug_span!("concurrency_limit", limit = %settings.name, %key, permits)
        }
    };
    let acquire = acquire(settings.clone(), kind, key).instrument(span);
    Admit::admitting(Box::pin(acquire), service, request)
}

/// Takes the lock or a permit for `key`, waiting as configured.
async fn acquire(settings: Arc<Settings>, kind: Kind, key: String) -> Admission {
    let store_name = settings.store_name(&key);
    let started = Instant::now();
    let result = match kind {
        Kind::Lock => {
            // Not reentrant: two requests served by one task (one
            // connection) must still exclude each other.
            let mut lock = settings.client.lock(&store_name).reentrant(false);
            if let Some(lease) = settings.lease {
                lock = lock.lease(lease);
            }
            match settings.wait {
                Some(wait) => lock.wait(wait).acquire().await,
                None => lock.try_acquire().await,
            }
            .map(Guard::Lock)
        }
        Kind::Permits(permits) => {
            let mut semaphore = settings.client.semaphore(&store_name, permits);
            if let Some(lease) = settings.lease {
                semaphore = semaphore.lease(lease);
            }
            match settings.wait {
                Some(wait) => semaphore.wait(wait).acquire().await,
                None => semaphore.try_acquire().await,
            }
            .map(Guard::Permit)
        }
    };
    let waited_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    match result {
        Ok(guard) => {
            tracing::debug!(waited_ms, "{} taken", kind.what());
            Admission::Proceed {
                guard,
                headers: None,
            }
        }
        Err(e) if e.is_busy() => busy(&settings, kind, &e, waited_ms),
        Err(e) => outcome::store_failure(kind.what(), &settings.name, &e, settings.failure),
    }
}

fn busy(settings: &Settings, kind: Kind, error: &Error, waited_ms: u64) -> Admission {
    tracing::debug!(waited_ms, error = %error, "{} busy; refusing the request", kind.what());
    let detail = match kind {
        Kind::Lock => format!(
            "another request holds lock {:?} for this resource; try again when it is done",
            settings.name
        ),
        Kind::Permits(n) => format!(
            "all {n} permits of concurrency limit {:?} are taken; try again later",
            settings.name
        ),
    };
    Admission::Respond(problem::response(settings.busy_status, &detail, &[]))
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use axum::body::Body;
    use http::{Request, Response};
    use lockguard_core::Lockguard;
    use tower::{Layer, Service, ServiceExt, service_fn};

    use crate::{ConcurrencyLimitLayer, LockLayer, MissingKey, key};

    fn ok_service()
    -> impl Service<Request<Body>, Response = Response<Body>, Error = Infallible> + Clone {
        service_fn(|_req: Request<Body>| async {
            Ok::<_, Infallible>(Response::new(Body::from("ok")))
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
        let lg = Lockguard::memory();
        let svc = LockLayer::new(lg, "same-task", user_key()).layer(ok_service());
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
        let lg = Lockguard::memory();
        let reject = LockLayer::new(lg.clone(), "k", user_key()).layer(ok_service());
        assert_eq!(reject.oneshot(user(None)).await.unwrap().status(), 400);
        let pass = ConcurrencyLimitLayer::new(lg, "k", 1)
            .key(user_key())
            .on_missing_key(MissingKey::Pass)
            .layer(ok_service());
        // Unkeyed requests are not counted against any permit.
        let a = pass.clone().oneshot(user(None)).await.unwrap();
        let b = pass.oneshot(user(None)).await.unwrap();
        assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    }

    #[tokio::test]
    async fn a_permit_count_that_cannot_work_is_a_server_error_not_a_panic() {
        let lg = Lockguard::memory();
        for permits in [0, lockguard_core::MAX_PERMITS + 1] {
            let svc = ConcurrencyLimitLayer::new(lg.clone(), "bad", permits)
                .fail_open()
                .layer(ok_service());
            assert_eq!(svc.oneshot(user(None)).await.unwrap().status(), 500);
        }
    }

    #[tokio::test]
    async fn a_name_too_long_for_the_key_leaves_no_room_and_is_missing() {
        let lg = Lockguard::memory();
        let name = "n".repeat(lockguard_core::MAX_KEY_LEN);
        let svc = LockLayer::new(lg, &name, key::Global).layer(ok_service());
        assert_eq!(svc.oneshot(user(None)).await.unwrap().status(), 400);
    }
}
