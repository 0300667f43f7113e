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

/// The admission of a request whose check failed in the store.
pub(crate) fn store_failure(
    what: &str,
    name: &str,
    error: &lockguard_core::Error,
    mode: FailureMode,
    refusals: &Refusals,
) -> crate::admit::Admission {
    use crate::admit::Admission;
    let refusal = |kind, status, detail: String| {
        Admission::Respond(refusals.respond(&Refusal {
            kind,
            status,
            policy: name.to_owned(),
            detail,
            retry_after: None,
            decision: None,
        }))
    };
    if error.is_invalid_input() {
        // Not the store's fault and not the client's: a quota, lease or
        // permit count that cannot work. Loud, whatever the failure mode.
        tracing::error!(what, name, error = %error, "misconfigured; refusing the request");
        return refusal(
            RefusalKind::Misconfigured,
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{what} {name:?} is misconfigured"),
        );
    }
    match mode {
        FailureMode::Closed => {
            tracing::warn!(what, name, error = %error, "store unavailable; refusing the request (fail-closed)");
            refusal(
                RefusalKind::Unavailable,
                StatusCode::SERVICE_UNAVAILABLE,
                format!("{what} {name:?} cannot be checked right now"),
            )
        }
        FailureMode::Open => {
            tracing::warn!(what, name, error = %error, "store unavailable; letting the request through unchecked (fail-open)");
            Admission::proceed()
        }
    }
}
