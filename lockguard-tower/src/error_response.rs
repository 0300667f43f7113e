//! A lockguard error as an HTTP response, for handlers that use lockguard
//! themselves.

use std::fmt;

use bytes::Bytes;
use http::{Response, StatusCode};
use lockguard_core::{Error, ErrorKind};

use crate::refusal::{Refusal, RefusalKind};

/// A [`lockguard_core::Error`] answered as an HTTP response: the status its
/// kind calls for, `Retry-After` where the error knows when to retry, and
/// an `application/problem+json` body that names the kind of failure but
/// not the keys involved (they are the server's business; the error itself
/// is logged at `debug`, and a mistake in the service's set-up
/// ([`Error::is_misconfigured`]) at `error`, once per kind).
///
/// | kind | status |
/// |---|---|
/// | `Busy`, `LeaseLost`, `StaleFencingToken` | `409 Conflict` |
/// | `RateLimited` | `429 Too Many Requests` |
/// | `Timeout`, `Unavailable` | `503 Service Unavailable` |
/// | anything else | `500 Internal Server Error` |
///
/// With the `axum` feature it implements `IntoResponse`, so a handler can
/// return `Result<_, ErrorResponse>` and use `?` on lockguard calls:
///
/// ```
/// use axum::{Router, extract::{Path, State}, routing::post};
/// use lockguard_core::Client;
/// use lockguard_tower::ErrorResponse;
///
/// async fn restock(
///     State(lg): State<Client>,
///     Path(sku): Path<String>,
/// ) -> Result<String, ErrorResponse> {
///     let left = lg.counter(&format!("stock:{sku}")).incr_by(10).await?;
///     Ok(left.to_string())
/// }
///
/// let app: Router = Router::new()
///     .route("/restock/{sku}", post(restock))
///     .with_state(Client::memory());
/// # let _ = app;
/// ```
pub struct ErrorResponse(pub Error);

impl From<Error> for ErrorResponse {
    fn from(e: Error) -> Self {
        Self(e)
    }
}

impl fmt::Debug for ErrorResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ErrorResponse").field(&self.0).finish()
    }
}

impl fmt::Display for ErrorResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl ErrorResponse {
    /// The status the error is answered with.
    pub fn status(&self) -> StatusCode {
        match self.0.kind() {
            ErrorKind::Busy | ErrorKind::LeaseLost | ErrorKind::StaleFencingToken => {
                StatusCode::CONFLICT
            }
            ErrorKind::RateLimited => StatusCode::TOO_MANY_REQUESTS,
            ErrorKind::Timeout | ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The response: see the type's docs.
    pub fn into_http(self) -> Response<Bytes> {
        let status = self.status();
        if self.0.is_misconfigured() {
            // The service's set-up, not the request: said once, loudly.
            let cause = format!("error response: {}", self.0.kind());
            lockguard_core::report_misconfigured(&cause, &self.0);
        }
        tracing::debug!(error = %self.0, status = status.as_u16(), "lockguard error answered");
        let (kind, detail) = match self.0.kind() {
            ErrorKind::Busy => (RefusalKind::Busy, "the resource is busy; try again later"),
            ErrorKind::LeaseLost => (
                RefusalKind::Busy,
                "the request lost its lock before it finished; it may have been partly applied",
            ),
            ErrorKind::StaleFencingToken => (
                RefusalKind::Busy,
                "a newer request has written this resource",
            ),
            ErrorKind::RateLimited => (RefusalKind::RateLimited, "rate limit exceeded"),
            ErrorKind::Timeout | ErrorKind::Unavailable => (
                RefusalKind::Unavailable,
                "the coordination store is unavailable; try again later",
            ),
            _ => (RefusalKind::Misconfigured, "internal error"),
        };
        let refusal = Refusal {
            kind,
            status,
            policy: String::new(),
            detail: detail.to_owned(),
            retry_after: self.0.retry_after(),
            decision: None,
        };
        crate::refusal::Refusals::default().respond(&refusal)
    }
}

#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl axum::response::IntoResponse for ErrorResponse {
    fn into_response(self) -> axum::response::Response {
        self.into_http().map(axum::body::Body::from)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn kinds_map_to_statuses_with_retry_after_and_no_keys() {
        let cases = [
            (
                Error::new(ErrorKind::Busy, "lock \"secret:key\" is held")
                    .with_retry_after(Duration::from_millis(2500)),
                409,
                Some("3"),
            ),
            (
                Error::new(ErrorKind::RateLimited, "k").with_retry_after(Duration::from_secs(7)),
                429,
                Some("7"),
            ),
            (Error::new(ErrorKind::Unavailable, "k"), 503, None),
            (Error::new(ErrorKind::Timeout, "k"), 503, None),
            (Error::new(ErrorKind::LeaseLost, "k"), 409, None),
            (Error::new(ErrorKind::InvalidInput, "k"), 500, None),
        ];
        for (error, status, retry) in cases {
            let res = ErrorResponse::from(error).into_http();
            assert_eq!(res.status().as_u16(), status);
            assert_eq!(
                res.headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap()),
                retry
            );
            assert_eq!(res.headers()["content-type"], "application/problem+json");
            let body = String::from_utf8_lossy(res.body()).into_owned();
            assert!(!body.contains("secret:key"), "{body}");
        }
    }

    #[cfg(feature = "axum")]
    #[tokio::test]
    async fn a_handler_answers_errors_with_question_mark() {
        use axum::Router;
        use axum::routing::get;
        use tower::ServiceExt;

        let lg = lockguard_core::Client::memory();
        let _held = lg.lock("job").acquire().await.unwrap();
        let app: Router = Router::new().route(
            "/",
            get(move || {
                let lg = lg.clone();
                async move {
                    let guard = lg.lock("job").try_acquire().await?;
                    guard.release().await?;
                    Ok::<_, ErrorResponse>("done")
                }
            }),
        );
        let res = app
            .oneshot(
                http::Request::get("/")
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(res.status(), 409);
        assert!(res.headers().contains_key("retry-after"));
    }
}
