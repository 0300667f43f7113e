//! What a layer does when it cannot decide: no key, or no store.

use http::StatusCode;

use crate::refusal::{Refusal, RefusalKind, Refusals};

/// What a layer does with a request whose key cannot be extracted (no
/// header, no peer address, a value that is not a valid key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MissingKey {
    /// Answer with this status and a problem body, without calling the
    /// service. The default is `400 Bad Request`.
    Reject(StatusCode),
    /// Let the request through unchecked (no limit, lock or permit).
    Pass,
}

impl Default for MissingKey {
    fn default() -> Self {
        Self::Reject(StatusCode::BAD_REQUEST)
    }
}

/// What a layer does when the store cannot be used (unreachable, timed
/// out, an unexpected reply).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureMode {
    /// Answer `503 Service Unavailable` with a problem body (the default):
    /// no request goes through a limit or lock that cannot be enforced.
    #[default]
    Closed,
    /// Let the request through unchecked and log a warning: availability
    /// over enforcement while the store is down.
    Open,
}

/// The response for a request whose key is missing, or `None` to let it
/// through.
pub(crate) fn missing_key(
    what: &str,
    name: &str,
    outcome: MissingKey,
    refusals: &Refusals,
) -> Option<http::Response<bytes::Bytes>> {
    match outcome {
        MissingKey::Reject(status) => {
            tracing::debug!(
                what,
                name,
                status = status.as_u16(),
                "no key in the request; refusing it"
            );
            Some(refusals.respond(&Refusal {
                kind: RefusalKind::MissingKey,
                status,
                policy: name.to_owned(),
                detail: format!("the request carries no usable key for {what} {name:?}"),
                retry_after: None,
                decision: None,
            }))
        }
        MissingKey::Pass => {
            tracing::debug!(
                what,
                name,
                "no key in the request; letting it through unchecked"
            );
            None
        }
    }
}

/// The response for a request without a usable key for `what` `name`, or
/// `None` to let it through unchecked: refused or passed as `outcome`
/// says when the request is at fault; a server error when the server's
/// set-up is.
pub(crate) fn unkeyed(
    what: &str,
    name: &str,
    why: crate::key::Unkeyed,
    outcome: MissingKey,
    refusals: &Refusals,
) -> Option<http::Response<bytes::Bytes>> {
    match why {
        crate::key::Unkeyed::Misconfigured(fix) => {
            Some(misconfigured_key(what, name, &fix, refusals))
        }
        crate::key::Unkeyed::Request => missing_key(what, name, outcome, refusals),
    }
}

/// The response for a request whose key the extractor cannot find because
/// of how the server is served (`fix` says what to change): a server
/// error, logged once.
pub(crate) fn misconfigured_key(
    what: &str,
    name: &str,
    fix: &str,
    refusals: &Refusals,
) -> http::Response<bytes::Bytes> {
    let error = lockguard_core::Error::new(
        lockguard_core::ErrorKind::Misconfigured,
        format!("{what} {name:?}: {fix}"),
    );
    lockguard_core::report_misconfigured(error.message(), &error);
    misconfigured(what, name, refusals)
}

/// `500`: `what` `name` cannot work as the service is set up.
fn misconfigured(what: &str, name: &str, refusals: &Refusals) -> http::Response<bytes::Bytes> {
    refusals.respond(&Refusal {
        kind: RefusalKind::Misconfigured,
        status: StatusCode::INTERNAL_SERVER_ERROR,
        policy: name.to_owned(),
        detail: format!("{what} {name:?} is misconfigured"),
        retry_after: None,
        decision: None,
    })
}

/// When a client refused because the store cannot be reached is told to
/// try again (`Retry-After: 1`): the longest pause between the store's own
/// reconnect attempts, so a retry after it meets a store that came back.
pub(crate) const UNAVAILABLE_RETRY_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// The response for a request whose check failed in the store, or `None`
/// to let it through unchecked (fail-open).
pub(crate) fn store_failure(
    what: &'static str,
    name: &str,
    store: Option<&str>,
    error: &lockguard_core::Error,
    mode: FailureMode,
    refusals: &Refusals,
) -> Option<http::Response<bytes::Bytes>> {
    let refusal = |kind, status, detail: String| {
        Some(refusals.respond(&Refusal {
            kind,
            status,
            policy: name.to_owned(),
            detail,
            retry_after: (kind == RefusalKind::Unavailable).then_some(UNAVAILABLE_RETRY_AFTER),
            decision: None,
        }))
    };
    if error.is_invalid_input() || error.is_misconfigured() || error.is_unsupported() {
        // Not a passing outage and not the client's doing: a quota, lease
        // or permit count that cannot work, credentials the store refuses,
        // a read-write lock on a store without them.
        // Loud (once per cause), and refused whatever the failure mode.
        // Once per layer and kind of mistake, not per key.
        let cause = format!("{what} {name:?}: {}", error.kind());
        let error = lockguard_core::Error::new(
            error.kind(),
            format!("{what} {name:?}: {}", error.message()),
        );
        lockguard_core::report_misconfigured(&cause, &error);
        return Some(misconfigured(what, name, refusals));
    }
    match mode {
        FailureMode::Closed => {
            crate::outage::failed(what, name, store, error, true);
            refusal(
                RefusalKind::Unavailable,
                StatusCode::SERVICE_UNAVAILABLE,
                format!("{what} {name:?} cannot be checked right now"),
            )
        }
        FailureMode::Open => {
            crate::outage::failed(what, name, store, error, false);
            None
        }
    }
}
