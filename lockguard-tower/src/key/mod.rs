//! Key extractors: what a request is limited or locked by.
//!
//! A [`KeyExtractor`] turns a request into the key whose budget, lock or
//! permits it uses: the client's IP address, an API key header, the matched
//! route, the method, one global key, or anything a closure computes. Keys
//! combine as tuples: `(key::Route::new(), key::ClientIp::x_forwarded_for(proxies))`
//! limits each client on each route separately.
//!
//! An extractor returns `None` when the request carries no usable key (no
//! header, no peer address, a value that is not a valid key); the layer then
//! answers as its [`MissingKey`](crate::MissingKey) setting says.
//!
//! Keys are namespaced by the extractor (`ip:`, `header:x-api-key:`,
//! `route:`, `method:`), so two extractors never collide by accident.

mod ip;
mod proxy;

use std::borrow::Cow;
use std::cell::Cell;

use http::{HeaderName, Request};

pub use ip::{ClientIp, PeerIp};
pub use proxy::{Cidr, TrustedProxies};

/// Turns a request into the key it is limited or locked by.
///
/// Implemented by the extractors of this module, by tuples of extractors
/// (the keys joined with `|`; `None` if any part is missing), and by every
/// closure `Fn(&Request<B>) -> Option<String>`:
///
/// ```
/// use http::Request;
/// use lockguard_tower::KeyExtractor;
///
/// // The tenant in the first path segment: `/acme/reports` -> `tenant:acme`.
/// let tenant = |req: &Request<()>| {
///     let first = req.uri().path().trim_start_matches('/').split('/').next()?;
///     (!first.is_empty()).then(|| format!("tenant:{first}"))
/// };
/// let req = Request::get("/acme/reports").body(()).unwrap();
/// assert_eq!(tenant.extract(&req).as_deref(), Some("tenant:acme"));
/// ```
///
/// A key must be a valid lockguard key: not empty, at most
/// [`MAX_KEY_LEN`](lockguard_core::MAX_KEY_LEN) bytes, no control
/// characters. The layers treat any other value as missing, so a client
/// cannot turn a malformed header into a server error.
pub trait KeyExtractor<B> {
    /// The key of `req`, or `None` when it has none.
    fn extract(&self, req: &Request<B>) -> Option<String>;

    /// The key of `req` as [`extract`](KeyExtractor::extract) gives it,
    /// borrowed where the extractor has it already: what the layers ask
    /// for. An extractor whose key is the same for every request (such as
    /// [`Global`]) answers it without an allocation per request; the
    /// default owns what `extract` made.
    fn extract_key(&self, req: &Request<B>) -> Option<Cow<'static, str>> {
        self.extract(req).map(Cow::Owned)
    }

    /// Why `req` has no key when the server's set-up is at fault rather
    /// than the request: a key source that cannot work with how the server
    /// is served, such as [`PeerIp`] on a server that records no peer
    /// address. Asked only when [`extract`](KeyExtractor::extract) gave
    /// `None`. The layers answer such a request with `500`, whatever their
    /// [`MissingKey`](crate::MissingKey) setting, and log the fix at
    /// `error` level once, instead of blaming the client with a `400`.
    /// The default, `None`, blames the request.
    fn misconfiguration(&self, _req: &Request<B>) -> Option<String> {
        None
    }
}

impl<B, F> KeyExtractor<B> for F
where
    F: Fn(&Request<B>) -> Option<String>,
{
    fn extract(&self, req: &Request<B>) -> Option<String> {
        self(req)
    }
}

macro_rules! tuple_extractor {
    ($($t:ident => $v:ident),+) => {
        impl<B, $($t),+> KeyExtractor<B> for ($($t,)+)
        where
            $($t: KeyExtractor<B>,)+
        {
            fn extract(&self, req: &Request<B>) -> Option<String> {
                let ($($v,)+) = self;
                let parts = [$($v.extract(req)?),+];
                Some(parts.join("|"))
            }

            fn misconfiguration(&self, req: &Request<B>) -> Option<String> {
                let ($($v,)+) = self;
                None$(.or_else(|| $v.misconfiguration(req)))+
            }
        }
    };
}

tuple_extractor!(A => a, C => c);
tuple_extractor!(A => a, C => c, D => d);
tuple_extractor!(A => a, C => c, D => d, E => e);

/// One key for every request: a limit or lock shared by all clients.
///
/// The key is `global`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Global;

impl Global {
    /// The key.
    const KEY: &'static str = "global";
}

impl<B> KeyExtractor<B> for Global {
    fn extract(&self, _req: &Request<B>) -> Option<String> {
        Some(Self::KEY.to_owned())
    }

    fn extract_key(&self, _req: &Request<B>) -> Option<Cow<'static, str>> {
        Some(Cow::Borrowed(Self::KEY))
    }
}

/// The request method: `method:POST`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Method;

impl<B> KeyExtractor<B> for Method {
    fn extract(&self, req: &Request<B>) -> Option<String> {
        Some(joined(&["method:", req.method().as_str()]))
    }
}

/// The value of a request header, such as an API key:
/// `header:x-api-key:VALUE`.
///
/// Missing, empty, or not visible ASCII (after trimming spaces), the key is
/// missing. With several fields of the name, the first counts.
///
/// The value becomes part of the store key as is: when it is a secret you
/// would rather not see in Redis key names, derive the key with a closure
/// that hashes it.
#[derive(Debug, Clone)]
pub struct Header {
    name: HeaderName,
}

impl Header {
    /// The header `name`.
    pub fn new(name: HeaderName) -> Self {
        Self { name }
    }
}

impl<B> KeyExtractor<B> for Header {
    fn extract(&self, req: &Request<B>) -> Option<String> {
        let value = req.headers().get(&self.name)?.to_str().ok()?.trim();
        (!value.is_empty()).then(|| joined(&["header:", self.name.as_str(), ":", value]))
    }
}

/// The route that matched, as the router declared it (`route:/users/{id}`),
/// so every user id shares one key.
///
/// It reads axum's [`MatchedPath`](axum::extract::MatchedPath), which axum
/// sets for layers added with `Router::layer` and `Router::route_layer`.
/// Without it (a request that matched no route, or a service outside axum)
/// the key is missing. Never the raw path: that would give every distinct
/// URL its own key.
#[cfg(feature = "axum")]
#[derive(Debug, Clone, Copy, Default)]
pub struct Route;

#[cfg(feature = "axum")]
impl Route {
    /// The matched-route extractor.
    pub fn new() -> Self {
        Self
    }
}

#[cfg(feature = "axum")]
impl<B> KeyExtractor<B> for Route {
    fn extract(&self, req: &Request<B>) -> Option<String> {
        let path = req.extensions().get::<axum::extract::MatchedPath>()?;
        Some(joined(&["route:", path.as_str()]))
    }
}

/// A value another layer put into the request's extensions, such as the
/// user an authentication middleware found: `NAME:VALUE`, with the value's
/// `Display` form.
///
/// Missing when the request has no `T` (the authentication layer did not
/// run, or found nobody). Put this layer inside the one that inserts `T`.
///
/// ```
/// use std::fmt;
/// use http::Request;
/// use lockguard_tower::{KeyExtractor, key};
///
/// #[derive(Clone)]
/// struct UserId(u64);
/// impl fmt::Display for UserId {
///     fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
///         self.0.fmt(f)
///     }
/// }
///
/// let user = key::Extension::<UserId>::new("user");
/// let mut req = Request::get("/").body(()).unwrap();
/// assert_eq!(user.extract(&req), None);
/// req.extensions_mut().insert(UserId(42));
/// assert_eq!(user.extract(&req).as_deref(), Some("user:42"));
/// ```
pub struct Extension<T> {
    name: String,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T> Extension<T> {
    /// Keys `name:VALUE` from the request's `T`.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            _t: std::marker::PhantomData,
        }
    }
}

impl<T> Clone for Extension<T> {
    fn clone(&self) -> Self {
        Self::new(&self.name)
    }
}

impl<T> std::fmt::Debug for Extension<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extension")
            .field("name", &self.name)
            .field("type", &std::any::type_name::<T>())
            .finish()
    }
}

impl<B, T> KeyExtractor<B> for Extension<T>
where
    T: std::fmt::Display + Send + Sync + 'static,
{
    fn extract(&self, req: &Request<B>) -> Option<String> {
        let value = req.extensions().get::<T>()?;
        Some(format!("{}:{value}", self.name))
    }
}

/// A parameter of the route that matched: with the route
/// `/orders/{id}/pay`, `PathParam::new("id")` keys `/orders/42/pay` as
/// `id:42`. A wildcard parameter (`{*rest}`) takes the rest of the path.
///
/// It reads axum's [`MatchedPath`](axum::extract::MatchedPath) (set for
/// layers added with `Router::layer` and `Router::route_layer`) and the
/// request's path ([`OriginalUri`](axum::extract::OriginalUri) when a
/// nested router stripped a prefix). Missing when no route matched, the
/// route has no such parameter, or the value is empty. The value is taken
/// as it appears in the path, still percent-encoded.
#[cfg(feature = "axum")]
#[derive(Debug, Clone)]
pub struct PathParam {
    name: String,
}

#[cfg(feature = "axum")]
impl PathParam {
    /// The route parameter `name` (as in `{name}` or `{*name}`).
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
        }
    }
}

#[cfg(feature = "axum")]
impl<B> KeyExtractor<B> for PathParam {
    fn extract(&self, req: &Request<B>) -> Option<String> {
        let route = req.extensions().get::<axum::extract::MatchedPath>()?;
        let path = match req.extensions().get::<axum::extract::OriginalUri>() {
            Some(original) => original.0.path().to_owned(),
            None => req.uri().path().to_owned(),
        };
        let value = path_param(route.as_str(), &path, &self.name)?;
        (!value.is_empty()).then(|| joined(&[&self.name, ":", value]))
    }
}

/// The value of parameter `name` of `route` in `path`, matching segment by
/// segment.
#[cfg(feature = "axum")]
fn path_param<'a>(route: &str, path: &'a str, name: &str) -> Option<&'a str> {
    let mut rest = path.trim_start_matches('/');
    for part in route.trim_start_matches('/').split('/') {
        if let Some(param) = part.strip_prefix("{*").and_then(|p| p.strip_suffix('}')) {
            return (param == name).then_some(rest);
        }
        let (segment, after) = rest.split_once('/').unwrap_or((rest, ""));
        if let Some(param) = part.strip_prefix('{').and_then(|p| p.strip_suffix('}')) {
            if param == name {
                return Some(segment);
            }
        } else if part != segment {
            return None;
        }
        rest = after;
    }
    None
}

/// Whether `key` is usable as a lockguard key, by the core's rules, once
/// the layer has put its name (`reserve` bytes) in front.
pub(crate) fn is_valid(key: &str, reserve: usize) -> bool {
    lockguard_core::validate_key("request", key).is_ok()
        && key.len().saturating_add(reserve) <= lockguard_core::MAX_KEY_LEN
}

thread_local! {
    /// The buffer of the last key this thread's layers were done with,
    /// empty, for the next key an extractor writes here: a key is written
    /// per request, and a request decided at once (the in-memory store)
    /// hands its key's buffer back. Only a buffer is kept, never a key:
    /// every key is written anew, so a crowd of clients costs what one does.
    static SPARE: Cell<String> = const { Cell::new(String::new()) };
}

/// The largest buffer kept for the next key; a longer key's is freed.
const SPARE_CAPACITY: usize = 128;

/// An empty `String` with room for `len` bytes: this thread's spare
/// buffer (see [`give_back`]) when it has one.
pub(crate) fn buffer(len: usize) -> String {
    let mut out = SPARE.take();
    out.reserve(len);
    out
}

/// Keeps `key`'s buffer, emptied, for the next key written on this thread
/// (see [`buffer`]), when the layer is done with the key.
pub(crate) fn give_back(key: Cow<'static, str>) {
    if let Cow::Owned(mut spare) = key
        && spare.capacity() <= SPARE_CAPACITY
    {
        spare.clear();
        SPARE.set(spare);
    }
}

/// `parts` end to end, in one buffer of the right size (a key is built
/// per request; `format!` would grow it piecewise).
fn joined(parts: &[&str]) -> String {
    let mut out = buffer(parts.iter().map(|p| p.len()).sum());
    for part in parts {
        out.push_str(part);
    }
    out
}

/// Extracts and checks a key; an invalid one counts as missing.
pub(crate) fn extract_checked<B, K: KeyExtractor<B> + ?Sized>(
    extractor: &K,
    req: &Request<B>,
    reserve: usize,
) -> Result<Cow<'static, str>, Unkeyed> {
    match extractor.extract_key(req) {
        Some(key) => usable(&key, reserve).then_some(key).ok_or(Unkeyed::Request),
        None => Err(match extractor.misconfiguration(req) {
            Some(why) => Unkeyed::Misconfigured(why),
            None => Unkeyed::Request,
        }),
    }
}

/// Why a request has no usable key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unkeyed {
    /// The request carries none (the client's doing).
    Request,
    /// The extractor cannot work with how the server is served: why.
    Misconfigured(String),
}

/// Whether `key` is usable (see [`is_valid`]), saying so in the log when
/// it is not: it then counts as missing.
pub(crate) fn usable(key: &str, reserve: usize) -> bool {
    let valid = is_valid(key, reserve);
    if !valid {
        tracing::debug!(
            len = key.len(),
            "extracted key is not a valid lockguard key; treating it as missing"
        );
    }
    valid
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(f: impl FnOnce(http::request::Builder) -> http::request::Builder) -> Request<()> {
        f(Request::builder()).body(()).unwrap()
    }

    #[test]
    fn simple_extractors() {
        let r = req(|b| b.method("POST").uri("/x").header("x-api-key", " abc "));
        assert_eq!(Global.extract(&r).as_deref(), Some("global"));
        assert_eq!(Method.extract(&r).as_deref(), Some("method:POST"));
        let h = Header::new(HeaderName::from_static("x-api-key"));
        assert_eq!(h.extract(&r).as_deref(), Some("header:x-api-key:abc"));
        let missing = Header::new(HeaderName::from_static("authorization"));
        assert_eq!(missing.extract(&r), None);
    }

    #[test]
    fn header_with_empty_or_opaque_value_is_missing() {
        let h = Header::new(HeaderName::from_static("x-api-key"));
        let r = req(|b| b.header("x-api-key", "   "));
        assert_eq!(h.extract(&r), None);
        let r = req(|b| {
            b.header(
                "x-api-key",
                http::HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
            )
        });
        assert_eq!(h.extract(&r), None);
    }

    #[test]
    fn tuples_join_parts_and_need_all_of_them() {
        let r = req(|b| b.method("GET").header("x-user", "7"));
        let user = Header::new(HeaderName::from_static("x-user"));
        assert_eq!(
            (Method, user.clone()).extract(&r).as_deref(),
            Some("method:GET|header:x-user:7")
        );
        let nobody = Header::new(HeaderName::from_static("x-nobody"));
        assert_eq!((Method, user, nobody).extract(&r), None);
    }

    #[test]
    fn extensions_key_by_their_display_form() {
        let mut r = req(|b| b);
        let ext = Extension::<u64>::new("user");
        assert_eq!(ext.extract(&r), None);
        r.extensions_mut().insert(7u64);
        assert_eq!(ext.extract(&r).as_deref(), Some("user:7"));
    }

    #[cfg(feature = "axum")]
    #[test]
    fn path_params_follow_the_matched_route() {
        assert_eq!(
            path_param("/orders/{id}/pay", "/orders/42/pay", "id"),
            Some("42")
        );
        assert_eq!(path_param("/orders/{id}/pay", "/orders/42/pay", "x"), None);
        assert_eq!(path_param("/a/{x}/b/{y}", "/a/1/b/2", "y"), Some("2"));
        assert_eq!(
            path_param("/files/{*path}", "/files/a/b.txt", "path"),
            Some("a/b.txt")
        );
        assert_eq!(path_param("/orders/{id}", "/other/42", "id"), None);
        assert_eq!(path_param("/orders/{id}", "/orders/", "id"), Some(""));
    }

    #[test]
    fn closures_are_extractors() {
        let f = |r: &Request<()>| Some(format!("path:{}", r.uri().path()));
        assert_eq!(f.extract(&req(|b| b.uri("/a"))).as_deref(), Some("path:/a"));
    }

    #[test]
    fn invalid_keys_count_as_missing() {
        let r = req(|b| b);
        let long = |_: &Request<()>| Some("x".repeat(lockguard_core::MAX_KEY_LEN));
        assert_eq!(extract_checked(&long, &r, 10), Err(Unkeyed::Request));
        let tab = |_: &Request<()>| Some("a\tb".to_owned());
        assert_eq!(extract_checked(&tab, &r, 0), Err(Unkeyed::Request));
        let empty = |_: &Request<()>| Some(String::new());
        assert_eq!(extract_checked(&empty, &r, 0), Err(Unkeyed::Request));
        let fine = |_: &Request<()>| Some("ok".to_owned());
        assert_eq!(extract_checked(&fine, &r, 0).as_deref(), Ok("ok"));
    }

    #[test]
    fn a_peer_address_key_on_a_server_that_records_none_is_its_set_up() {
        let bare = req(|b| b);
        let why = extract_checked(&PeerIp::new(), &bare, 0).unwrap_err();
        let Unkeyed::Misconfigured(fix) = why else {
            panic!("blamed the request: {why:?}");
        };
        assert!(fix.contains("into_make_service_with_connect_info"), "{fix}");
        // In a tuple too; a header the client did not send is its doing.
        let user = Header::new(http::HeaderName::from_static("x-user"));
        let both = (user.clone(), PeerIp::new());
        assert!(matches!(
            extract_checked(&both, &bare, 0),
            Err(Unkeyed::Misconfigured(_))
        ));
        assert_eq!(extract_checked(&user, &bare, 0), Err(Unkeyed::Request));
        let mut served = req(|b| b);
        served
            .extensions_mut()
            .insert("203.0.113.9:443".parse::<std::net::SocketAddr>().unwrap());
        assert_eq!(
            extract_checked(&PeerIp::new(), &served, 0).as_deref(),
            Ok("ip:203.0.113.9")
        );
    }

    #[test]
    fn a_buffer_given_back_is_written_anew_by_the_next_key() {
        let served = |peer: &str| {
            let mut r = req(|b| b);
            r.extensions_mut()
                .insert(peer.parse::<std::net::SocketAddr>().unwrap());
            r
        };
        let v6 = PeerIp::new().ipv6_prefix(48);
        let long = extract_checked(&v6, &served("[2001:db8:aaaa:bbbb::1]:443"), 0).unwrap();
        assert_eq!(long, "ip:2001:db8:aaaa::/48");
        let at = long.as_ptr();
        give_back(long);
        // The next key is written into the same buffer, and nothing of the
        // longer key before it is left.
        let short = extract_checked(&PeerIp::new(), &served("10.0.0.1:80"), 0).unwrap();
        assert_eq!(short, "ip:10.0.0.1");
        assert_eq!(short.as_ptr(), at, "the buffer was not reused");
        give_back(short);
        let header = Header::new(http::HeaderName::from_static("x-user"));
        let r = req(|b| b.header("x-user", "ann"));
        assert_eq!(
            extract_checked(&header, &r, 0).as_deref(),
            Ok("header:x-user:ann")
        );
        // A key of no buffer, or of a large one, leaves the spare as it was.
        give_back(Cow::Borrowed("global"));
        give_back(Cow::Owned("x".repeat(SPARE_CAPACITY + 1)));
        assert!(buffer(0).capacity() <= SPARE_CAPACITY);
    }
}
