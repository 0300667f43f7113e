//! A [`RateLimitTable`] read from configuration (feature `serde`).

use std::borrow::Cow;
use std::fmt;

use http::{HeaderName, Method, Request, StatusCode};
use lockguard_core::{Algorithm, Client, Error, Quota};
use serde::Deserialize;

use super::policy::Rule;
use super::table::RateLimitTable;
use crate::key::{self, KeyExtractor};
use crate::outcome::{FailureMode, MissingKey};

/// A rate-limit table as configuration: a list of routes, each a rule. Read
/// it with any serde format (a `[[route]]` array in TOML, `"route": [...]`
/// in JSON), then [`build`](TableConfig::build) the table on a client.
/// Unknown fields are errors, so a typo fails at start-up.
///
/// # Examples
///
/// ```
/// use lockguard_core::Client;
/// use lockguard_tower::{RateLimitLayer, rate_limit::TableConfig};
///
/// let config: TableConfig = serde_json::from_str(r#"{
///     "route": [
///         { "method": "POST", "path": "/login", "limiter": "login",
///           "quota": "5/min", "key": "peer_ip" },
///         { "path": "/api/*", "limiter": "api", "quota": "100/s burst 20",
///           "algorithm": "sliding_window",
///           "key": { "header": "x-api-key" }, "on_missing_key": 401 }
///     ]
/// }"#).unwrap();
/// let table = config.build::<axum::body::Body>(&Client::memory())?;
/// let router: axum::Router = axum::Router::new()
///     .route("/login", axum::routing::post(|| async { "welcome" }))
///     .layer(RateLimitLayer::with_policy(table));
/// # let _ = router;
/// # Ok::<(), lockguard_core::Error>(())
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct TableConfig {
    /// The routes, in order: the first that matches a request decides.
    #[serde(default)]
    pub route: Vec<RouteConfig>,
}

/// One route of a [`TableConfig`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RouteConfig {
    /// The method (`"GET"` also matches `HEAD`); none, or `"*"`, for any.
    #[serde(default)]
    pub method: Option<String>,
    /// The path pattern: `/login`, `/users/{id}`, `/api/*`.
    pub path: String,
    /// The limiter's name (its keys in the store start with it).
    pub limiter: String,
    /// The quota: `"5/min"`, `"100/s burst 20"`.
    pub quota: Quota,
    /// The algorithm (default GCRA): `"gcra"`, `"fixed_window"`,
    /// `"sliding_window"`.
    #[serde(default)]
    pub algorithm: Option<Algorithm>,
    /// Whose budget a request spends.
    pub key: KeyConfig,
    /// Units each request spends (default 1).
    #[serde(default)]
    pub cost: Option<u64>,
    /// A request without a key: `"pass"`, or the status to refuse it with
    /// (default 400).
    #[serde(default)]
    pub on_missing_key: Option<MissingKeyConfig>,
    /// When the store is down: `"closed"` (503, the default) or `"open"`.
    #[serde(default)]
    pub failure_mode: Option<FailureModeConfig>,
}

/// Whose budget a request spends: the [`key`](crate::key) extractors by
/// name.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum KeyConfig {
    /// One budget for everyone ([`key::Global`]).
    Global,
    /// The connection's peer address ([`key::PeerIp`]).
    PeerIp,
    /// The request method ([`key::Method`]).
    Method,
    /// A header's value ([`key::Header`]).
    Header(String),
    /// The client's address behind trusted proxies ([`key::ClientIp`]).
    ClientIp {
        /// Where the proxies put it: `"x_forwarded_for"`, `"forwarded"` or
        /// `"x_real_ip"`.
        from: ForwardedFrom,
        /// The proxies' networks: `["10.0.0.0/8", "192.0.2.7"]`.
        trusted: Vec<String>,
    },
    /// The matched route (axum's `MatchedPath`, feature `axum`).
    #[cfg(feature = "axum")]
    Route,
    /// A captured path parameter (axum, feature `axum`).
    #[cfg(feature = "axum")]
    PathParam(String),
}

/// The header a [`KeyConfig::ClientIp`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ForwardedFrom {
    /// `X-Forwarded-For`.
    XForwardedFor,
    /// `Forwarded` (RFC 7239).
    Forwarded,
    /// `X-Real-IP`.
    XRealIp,
}

/// What to do with a request without a key.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
#[non_exhaustive]
pub enum MissingKeyConfig {
    /// Refuse it with this status (400 to 599).
    Status(u16),
    /// `"pass"`: let it through unchecked.
    Pass(PassWord),
}

/// The word `"pass"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PassWord {
    /// Let it through.
    Pass,
}

/// What to do when the store is down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureModeConfig {
    /// Refuse with 503.
    Closed,
    /// Let requests through, logged.
    Open,
}

/// The key extractor a [`KeyConfig`] names, built and checked.
enum ConfiguredKey {
    Global(key::Global),
    PeerIp(key::PeerIp),
    Method(key::Method),
    Header(key::Header),
    ClientIp(key::ClientIp),
    #[cfg(feature = "axum")]
    Route(key::Route),
    #[cfg(feature = "axum")]
    PathParam(key::PathParam),
}

impl fmt::Debug for ConfiguredKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ConfiguredKey")
    }
}

impl ConfiguredKey {
    /// The extractor, as a trait object.
    fn extractor<B>(&self) -> &dyn KeyExtractor<B> {
        match self {
            Self::Global(k) => k,
            Self::PeerIp(k) => k,
            Self::Method(k) => k,
            Self::Header(k) => k,
            Self::ClientIp(k) => k,
            #[cfg(feature = "axum")]
            Self::Route(k) => k,
            #[cfg(feature = "axum")]
            Self::PathParam(k) => k,
        }
    }
}

impl<B> KeyExtractor<B> for ConfiguredKey {
    fn extract(&self, req: &Request<B>) -> Option<String> {
        self.extractor().extract(req)
    }

    fn extract_key(&self, req: &Request<B>) -> Option<Cow<'static, str>> {
        self.extractor().extract_key(req)
    }

    fn misconfiguration(&self, req: &Request<B>) -> Option<String> {
        self.extractor().misconfiguration(req)
    }
}

impl KeyConfig {
    fn build(&self, route: &str) -> Result<ConfiguredKey, Error> {
        Ok(match self {
            Self::Global => ConfiguredKey::Global(key::Global),
            Self::PeerIp => ConfiguredKey::PeerIp(key::PeerIp::new()),
            Self::Method => ConfiguredKey::Method(key::Method),
            Self::Header(name) => {
                let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| {
                    Error::new(
                        lockguard_core::ErrorKind::InvalidInput,
                        format!("route {route:?}: {name:?} is not a header name"),
                    )
                })?;
                ConfiguredKey::Header(key::Header::new(name))
            }
            Self::ClientIp { from, trusted } => {
                let trusted = key::TrustedProxies::parse(trusted).map_err(|e| {
                    Error::new(
                        lockguard_core::ErrorKind::InvalidInput,
                        format!("route {route:?}: {}", e.message()),
                    )
                })?;
                ConfiguredKey::ClientIp(match from {
                    ForwardedFrom::XForwardedFor => key::ClientIp::x_forwarded_for(trusted),
                    ForwardedFrom::Forwarded => key::ClientIp::forwarded(trusted),
                    ForwardedFrom::XRealIp => key::ClientIp::x_real_ip(trusted),
                })
            }
            #[cfg(feature = "axum")]
            Self::Route => ConfiguredKey::Route(key::Route::new()),
            #[cfg(feature = "axum")]
            Self::PathParam(name) => ConfiguredKey::PathParam(key::PathParam::new(name)),
        })
    }
}

impl TableConfig {
    /// Builds the table on `client`, checking every route now: a bad
    /// method, header name, network, status or quota fails here, at
    /// start-up, not on a request.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](lockguard_core::ErrorKind::InvalidInput)
    /// naming the route and what is wrong with it.
    pub fn build<B>(&self, client: &Client) -> Result<RateLimitTable<B>, Error>
    where
        B: 'static,
    {
        let mut table = RateLimitTable::new();
        for r in &self.route {
            let invalid = |what: String| {
                Error::new(
                    lockguard_core::ErrorKind::InvalidInput,
                    format!("route {:?}: {what}", r.path),
                )
            };
            let mut limiter = client.rate_limiter(&r.limiter, r.quota);
            if let Some(a) = r.algorithm {
                limiter = limiter.algorithm(a);
            }
            let mut rule = Rule::new(limiter, r.key.build(&r.path)?);
            if let Some(cost) = r.cost {
                rule = rule.cost(cost);
            }
            if let Some(missing) = &r.on_missing_key {
                rule = rule.on_missing_key(match missing {
                    MissingKeyConfig::Pass(_) => MissingKey::Pass,
                    MissingKeyConfig::Status(code) => {
                        let status = StatusCode::from_u16(*code)
                            .ok()
                            .filter(|s| s.is_client_error() || s.is_server_error())
                            .ok_or_else(|| {
                                invalid(format!("{code} is not an error status (400 to 599)"))
                            })?;
                        MissingKey::Reject(status)
                    }
                });
            }
            if let Some(mode) = r.failure_mode {
                rule = rule.failure_mode(match mode {
                    FailureModeConfig::Closed => FailureMode::Closed,
                    FailureModeConfig::Open => FailureMode::Open,
                });
            }
            rule.validate()
                .map_err(|e| invalid(e.message().to_owned()))?;
            table = match r.method.as_deref().map(str::trim) {
                None | Some("*") => table.any(&r.path, rule),
                Some(m) => {
                    let method = Method::from_bytes(m.to_ascii_uppercase().as_bytes())
                        .map_err(|_| invalid(format!("{m:?} is not a method")))?;
                    table.route(method, &r.path, rule)
                }
            };
        }
        Ok(table)
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use axum::body::Body;
    use tower::ServiceExt;

    use super::*;
    use crate::RateLimitLayer;

    const CONFIG: &str = r#"{
        "route": [
            { "method": "post", "path": "/login", "limiter": "login",
              "quota": "3/min", "key": "peer_ip" },
            { "path": "/api/*", "limiter": "api", "quota": "2/min",
              "algorithm": "fixed_window",
              "key": { "header": "x-api-key" }, "on_missing_key": 401 },
            { "method": "*", "path": "/open", "limiter": "open", "quota": "1/min",
              "key": { "header": "x-user" }, "on_missing_key": "pass",
              "failure_mode": "open" },
            { "path": "/behind", "limiter": "behind", "quota": "1/min",
              "key": { "client_ip": { "from": "x_forwarded_for", "trusted": ["10.0.0.0/8"] } } }
        ]
    }"#;

    fn request(method: &str, path: &str, headers: &[(&str, &str)]) -> Request<Body> {
        let mut b = Request::builder().method(method).uri(path);
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let mut req = b.body(Body::empty()).unwrap();
        req.extensions_mut()
            .insert("10.0.0.2:5000".parse::<SocketAddr>().unwrap());
        req
    }

    /// A table read from JSON limits what it says, by method, route and
    /// key, with its missing-key answers.
    #[tokio::test]
    async fn a_table_from_configuration_limits_as_configured() {
        let config: TableConfig = serde_json::from_str(CONFIG).unwrap();
        let table = config.build::<Body>(&Client::memory()).unwrap();
        let app = axum::Router::new()
            .route("/login", axum::routing::any(|| async { "ok" }))
            .route("/api/{*rest}", axum::routing::get(|| async { "ok" }))
            .route("/open", axum::routing::get(|| async { "ok" }))
            .route("/behind", axum::routing::get(|| async { "ok" }))
            .layer(RateLimitLayer::with_policy(table));
        let status = |req: Request<Body>| {
            let app = app.clone();
            async move { app.oneshot(req).await.unwrap().status().as_u16() }
        };
        for _ in 0..3 {
            assert_eq!(status(request("POST", "/login", &[])).await, 200);
        }
        assert_eq!(status(request("POST", "/login", &[])).await, 429);
        // Another method is not in the table.
        assert_eq!(status(request("GET", "/login", &[])).await, 200);
        assert_eq!(status(request("GET", "/api/x", &[])).await, 401);
        for _ in 0..2 {
            assert_eq!(
                status(request("GET", "/api/x", &[("x-api-key", "k1")])).await,
                200
            );
        }
        assert_eq!(
            status(request("GET", "/api/y", &[("x-api-key", "k1")])).await,
            429
        );
        assert_eq!(
            status(request("GET", "/api/y", &[("x-api-key", "k2")])).await,
            200
        );
        // No key: passed, any number of times.
        for _ in 0..3 {
            assert_eq!(status(request("GET", "/open", &[])).await, 200);
        }
        // Behind a trusted proxy: the client's address is the key.
        let via = |client| [("x-forwarded-for", client)];
        assert_eq!(
            status(request("GET", "/behind", &via("198.51.100.7"))).await,
            200
        );
        assert_eq!(
            status(request("GET", "/behind", &via("198.51.100.7"))).await,
            429
        );
        assert_eq!(
            status(request("GET", "/behind", &via("198.51.100.8"))).await,
            200
        );
    }

    /// A configured `peer_ip` (or `client_ip`) key on a server that
    /// records no peer address is the server's set-up at fault: `500`,
    /// as with the extractor built in code, not a `400` blaming the
    /// request.
    #[tokio::test]
    async fn a_configured_peer_key_without_a_peer_address_is_a_server_error() {
        let config: TableConfig = serde_json::from_str(CONFIG).unwrap();
        let table = config.build::<Body>(&Client::memory()).unwrap();
        let app = axum::Router::new()
            .route("/login", axum::routing::any(|| async { "ok" }))
            .route("/behind", axum::routing::get(|| async { "ok" }))
            .layer(RateLimitLayer::with_policy(table));
        for (path, headers) in [
            ("/login", &[][..]),
            ("/behind", &[("x-forwarded-for", "198.51.100.7")][..]),
        ] {
            let mut req = request("POST", path, headers);
            if path == "/behind" {
                *req.method_mut() = http::Method::GET;
            }
            req.extensions_mut().remove::<SocketAddr>();
            let status = app.clone().oneshot(req).await.unwrap().status();
            assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{path}");
        }
    }

    /// Mistakes fail at start-up, naming the route and the mistake.
    #[test]
    fn bad_configuration_is_refused_at_start_up() {
        let unknown = serde_json::from_str::<TableConfig>(
            r#"{ "route": [ { "path": "/", "limiter": "x", "quota": "1/s", "key": "global", "burts": 3 } ] }"#,
        )
        .unwrap_err();
        assert!(unknown.to_string().contains("burts"), "{unknown}");
        let bad_quota = serde_json::from_str::<TableConfig>(
            r#"{ "route": [ { "path": "/", "limiter": "x", "quota": "lots", "key": "global" } ] }"#,
        )
        .unwrap_err();
        assert!(bad_quota.to_string().contains("lots"), "{bad_quota}");
        let route = |extra: &str, key: &str| {
            format!(
                r#"{{ "route": [ {{ "path": "/p", "limiter": "x", "quota": "5/s", "key": {key} {extra} }} ] }}"#
            )
        };
        for (json, says) in [
            (route(r#", "method": "G E T""#, r#""global""#), "method"),
            (route("", r#"{ "header": "bad header" }"#), "header"),
            (
                route(
                    "",
                    r#"{ "client_ip": { "from": "forwarded", "trusted": ["10.0.0.0/99"] } }"#,
                ),
                "/99",
            ),
            (route(r#", "on_missing_key": 200"#, r#""global""#), "200"),
            (route(r#", "cost": 6"#, r#""global""#), "cost"),
        ] {
            let config: TableConfig = serde_json::from_str(&json).unwrap();
            let err = config.build::<Body>(&Client::memory()).unwrap_err();
            assert!(err.is_invalid_input(), "{json}: {err}");
            let text = err.to_string();
            assert!(text.contains("/p") && text.contains(says), "{json}: {text}");
        }
    }
}
