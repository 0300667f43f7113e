//! One layer, a table of rules by method and route.

use std::fmt;

use http::{Method, Request};

use super::policy::{RateLimitPolicy, Selection};

/// A route pattern: literal segments, `{name}` for any one segment, and a
/// final `*` or `{*name}` for any number of segments (none included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pattern {
    source: String,
    segments: Vec<Segment>,
    tail: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param,
}

impl Pattern {
    /// Parses a pattern. Never fails: a missing leading `/` is implied, and
    /// a `*` that is not last is a literal segment.
    pub(crate) fn parse(source: &str) -> Self {
        let trimmed = source.strip_prefix('/').unwrap_or(source);
        let parts: Vec<&str> = if trimmed.is_empty() {
            Vec::new()
        } else {
            trimmed.split('/').collect()
        };
        let mut segments = Vec::with_capacity(parts.len());
        let mut tail = false;
        for (i, part) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            let is_tail = *part == "*" || (part.starts_with("{*") && part.ends_with('}'));
            if last && is_tail {
                tail = true;
            } else if part.len() >= 2 && part.starts_with('{') && part.ends_with('}') && !is_tail {
                segments.push(Segment::Param);
            } else {
                segments.push(Segment::Literal((*part).to_owned()));
            }
        }
        Self {
            source: source.to_owned(),
            segments,
            tail,
        }
    }

    /// Whether `path` (a URI path) matches.
    pub(crate) fn matches(&self, path: &str) -> bool {
        let trimmed = path.strip_prefix('/').unwrap_or(path);
        // `/` has no segments.
        let mut parts = (!trimmed.is_empty())
            .then(|| trimmed.split('/'))
            .into_iter()
            .flatten();
        for segment in &self.segments {
            let Some(part) = parts.next() else {
                return false;
            };
            match segment {
                Segment::Literal(lit) if lit != part => return false,
                Segment::Param if part.is_empty() => return false,
                _ => {}
            }
        }
        self.tail || parts.next().is_none()
    }
}

struct Entry<B> {
    method: Option<Method>,
    pattern: Pattern,
    policy: Box<dyn RateLimitPolicy<B> + Send + Sync>,
}

/// Rate-limit rules by method and route, in one place; the first entry
/// that matches a request decides its limit.
///
/// Patterns match the request's path: literal segments, `{name}` for any
/// one segment, and a final `*` or `{*name}` for everything below (the
/// prefix itself included): `/login`, `/users/{id}`, `/api/*`. A `GET`
/// entry also matches `HEAD`, which routers answer with the `GET` handler.
/// A request no entry matches is not limited.
///
/// Add the table with [`RateLimitLayer::with_policy`](crate::RateLimitLayer::with_policy)
/// as a layer of the whole router (not nested routers, which see shortened
/// paths).
///
/// # Examples
///
/// ```
/// use http::{HeaderName, Method};
/// use lockguard_core::{Client, Quota};
/// use lockguard_tower::{MissingKey, RateLimitLayer, RateLimitTable, Rule, key};
///
/// let lg = Client::memory();
/// let table = RateLimitTable::new()
///     // 5 login attempts per minute per client address.
///     .route(
///         Method::POST,
///         "/login",
///         Rule::new(lg.rate_limiter("login", Quota::per_minute(5)), key::PeerIp::new()),
///     )
///     // 100 API calls per second per API key; no key, 401.
///     .any(
///         "/api/*",
///         Rule::new(
///             lg.rate_limiter("api", Quota::per_second(100)),
///             key::Header::new(HeaderName::from_static("x-api-key")),
///         )
///         .on_missing_key(MissingKey::Reject(http::StatusCode::UNAUTHORIZED)),
///     );
/// let router: axum::Router = axum::Router::new()
///     .route("/login", axum::routing::post(|| async { "welcome" }))
///     .route("/api/{*rest}", axum::routing::get(|| async { "data" }))
///     .layer(RateLimitLayer::with_policy(table));
/// # let _ = router;
/// ```
pub struct RateLimitTable<B> {
    entries: Vec<Entry<B>>,
}

impl<B> RateLimitTable<B> {
    /// An empty table: nothing is limited.
    pub fn new() -> Self {
        Self {
            entries: Vec::new(),
        }
    }

    /// Limits requests with `method` whose path matches `pattern`.
    #[must_use]
    pub fn route<P>(self, method: Method, pattern: &str, policy: P) -> Self
    where
        P: RateLimitPolicy<B> + Send + Sync + 'static,
    {
        self.push(Some(method), pattern, policy)
    }

    /// Limits requests of any method whose path matches `pattern`.
    #[must_use]
    pub fn any<P>(self, pattern: &str, policy: P) -> Self
    where
        P: RateLimitPolicy<B> + Send + Sync + 'static,
    {
        self.push(None, pattern, policy)
    }

    fn push<P>(mut self, method: Option<Method>, pattern: &str, policy: P) -> Self
    where
        P: RateLimitPolicy<B> + Send + Sync + 'static,
    {
        self.entries.push(Entry {
            method,
            pattern: Pattern::parse(pattern),
            policy: Box::new(policy),
        });
        self
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl<B> Default for RateLimitTable<B> {
    fn default() -> Self {
        Self::new()
    }
}

impl<B> fmt::Debug for RateLimitTable<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|e| {
                format!(
                    "{} {}",
                    e.method.as_ref().map_or("*", Method::as_str),
                    e.pattern.source
                )
            }))
            .finish()
    }
}

fn method_matches(entry: Option<&Method>, method: &Method) -> bool {
    match entry {
        None => true,
        Some(m) => m == method || (*m == Method::GET && *method == Method::HEAD),
    }
}

impl<B> RateLimitPolicy<B> for RateLimitTable<B> {
    fn select(&self, req: &Request<B>) -> Option<Selection<'_>> {
        let path = req.uri().path();
        let entry = self
            .entries
            .iter()
            .find(|e| method_matches(e.method.as_ref(), req.method()) && e.pattern.matches(path))?;
        entry.policy.select(req)
    }

    fn validate(&self) -> Result<(), lockguard_core::Error> {
        self.entries.iter().try_for_each(|e| e.policy.validate())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        let p = Pattern::parse("/login");
        assert!(p.matches("/login"));
        assert!(!p.matches("/login/"));
        assert!(!p.matches("/login/x"));
        assert!(!p.matches("/"));
        let p = Pattern::parse("/api/*");
        assert!(p.matches("/api"));
        assert!(p.matches("/api/"));
        assert!(p.matches("/api/v1/users"));
        assert!(!p.matches("/apix"));
        let p = Pattern::parse("/users/{id}/orders");
        assert!(p.matches("/users/7/orders"));
        assert!(!p.matches("/users//orders"));
        assert!(!p.matches("/users/7"));
        let p = Pattern::parse("/files/{*path}");
        assert!(p.matches("/files/a/b/c"));
        let p = Pattern::parse("*");
        assert!(p.matches("/") && p.matches("/anything/at/all"));
        let p = Pattern::parse("/");
        assert!(p.matches("/") && !p.matches("/x"));
        let p = Pattern::parse("no-slash/*/x");
        assert!(p.matches("/no-slash/*/x"));
        assert!(!p.matches("/no-slash/y/x"));
    }

    #[test]
    fn first_matching_entry_decides() {
        let lg = lockguard_core::Client::memory();
        let q = lockguard_core::Quota::per_second(1);
        let named = |name: &'static str| {
            let limiter = lg.rate_limiter(name, q);
            move |_: &Request<()>| Some(Selection::new(limiter.clone(), Some("k".into())))
        };
        let table = RateLimitTable::new()
            .route(Method::POST, "/login", named("login"))
            .route(Method::GET, "/items/{id}", named("item"))
            .any("/*", named("rest"));
        let pick = |m: Method, p: &str| {
            let req = Request::builder().method(m).uri(p).body(()).unwrap();
            table.select(&req).map(|s| s.limiter().name().to_owned())
        };
        assert_eq!(pick(Method::POST, "/login").as_deref(), Some("login"));
        assert_eq!(pick(Method::GET, "/login").as_deref(), Some("rest"));
        assert_eq!(pick(Method::HEAD, "/items/3").as_deref(), Some("item"));
        assert_eq!(pick(Method::GET, "/items/3?x=1").as_deref(), Some("item"));
        let only_login = RateLimitTable::new().route(Method::POST, "/login", named("login"));
        let req = Request::get("/other").body(()).unwrap();
        assert!(only_login.select(&req).is_none());
        assert_eq!(format!("{only_login:?}"), "[\"POST /login\"]");
    }
}
