//! Keys from the client's IP address.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use http::Request;
use http::header::{FORWARDED, HeaderName};

use super::KeyExtractor;
use super::proxy::{self, TrustedProxies, mask};

/// The address of the connection's peer, as the server recorded it in the
/// request's extensions: axum's `ConnectInfo<SocketAddr>` (with the `axum`
/// feature), or a plain [`SocketAddr`] or [`IpAddr`] extension, which a
/// hyper server can insert itself.
pub(crate) fn peer_ip<B>(req: &Request<B>) -> Option<IpAddr> {
    let ext = req.extensions();
    #[cfg(feature = "axum")]
    if let Some(info) = ext.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return Some(info.0.ip());
    }
    ext.get::<SocketAddr>()
        .map(SocketAddr::ip)
        .or_else(|| ext.get::<IpAddr>().copied())
}

/// What a server that records no peer address must change, for the
/// extractors that need one.
pub(crate) fn no_peer_address<B>(req: &Request<B>) -> Option<String> {
    if peer_ip(req).is_some() {
        return None;
    }
    let fix = if cfg!(feature = "axum") {
        "serve the router with `into_make_service_with_connect_info::<SocketAddr>()`"
    } else {
        "enable lockguard-tower's `axum` feature and serve the router with `into_make_service_with_connect_info::<SocketAddr>()`, or insert the peer's `SocketAddr` as a request extension"
    };
    Some(format!(
        "the server records no peer address in its requests, which key::PeerIp and key::ClientIp need: {fix}"
    ))
}

/// How addresses are grouped into keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Grouping {
    v4: u8,
    v6: u8,
}

impl Default for Grouping {
    fn default() -> Self {
        Self { v4: 32, v6: 64 }
    }
}

impl Grouping {
    /// `ip:203.0.113.9`, or `ip:2001:db8:1:2::/64` for a grouped address.
    fn key(self, ip: IpAddr) -> String {
        match ip.to_canonical() {
            // The common case, a whole IPv4 address, in line and written
            // digit by digit: `format!` through `Display` costs several
            // times as much, on every request.
            IpAddr::V4(v4) if self.v4 >= 32 => v4_key(v4),
            ip => self.grouped_key(ip),
        }
    }

    /// An IPv6 address or a grouped IPv4 one, through `Display`: out of
    /// the line of a whole IPv4 address.
    #[inline(never)]
    fn grouped_key(self, ip: IpAddr) -> String {
        let (prefix, max) = match ip {
            IpAddr::V4(_) => (self.v4, 32),
            IpAddr::V6(_) => (self.v6, 128),
        };
        let masked = mask(ip, prefix);
        let mut out = super::buffer(48);
        // Writing into a `String` cannot fail.
        let _ = if prefix >= max {
            write!(out, "ip:{masked}")
        } else {
            write!(out, "ip:{masked}/{prefix}")
        };
        out
    }
}

/// `ip:203.0.113.9`, as `format!("ip:{v4}")` writes it.
fn v4_key(v4: std::net::Ipv4Addr) -> String {
    // Pushed character by character into a buffer with room for the
    // longest: each push is a compare and a store, where text laid out
    // elsewhere would be checked as UTF-8 to become a `str`.
    let mut out = super::buffer("ip:255.255.255.255".len());
    out.push_str("ip:");
    let digit = |d: u8| char::from(b'0' + d % 10);
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            out.push('.');
        }
        if octet >= 100 {
            out.push(digit(octet / 100));
        }
        if octet >= 10 {
            out.push(digit(octet / 10));
        }
        out.push(digit(octet));
    }
    out
}

/// The IP address of the connection's peer: `ip:203.0.113.9`.
///
/// The right key when clients connect directly. Behind a proxy or load
/// balancer every request comes from the proxy: use [`ClientIp`].
///
/// The peer address comes from axum's `ConnectInfo<SocketAddr>` (serve
/// with `into_make_service_with_connect_info::<SocketAddr>()` and enable
/// this crate's `axum` feature), or from a [`SocketAddr`] or [`IpAddr`]
/// request extension. A server that records none is misconfigured: the
/// layers answer `500` and log the fix once (see
/// [`KeyExtractor::misconfiguration`]).
///
/// IPv6 addresses are grouped by their `/64` network by default, since one
/// subscriber usually holds a whole `/64`; see [`PeerIp::ipv6_prefix`].
#[derive(Debug, Clone, Copy, Default)]
pub struct PeerIp {
    grouping: Grouping,
}

impl PeerIp {
    /// The peer address, IPv4 as is and IPv6 by `/64`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Groups IPv6 addresses by their first `bits` bits (default 64; 128
    /// keys each address alone). Values above 128 count as 128.
    #[must_use]
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.grouping.v6 = bits.min(128);
        self
    }

    /// Groups IPv4 addresses by their first `bits` bits (default 32: each
    /// address alone). Values above 32 count as 32.
    #[must_use]
    pub fn ipv4_prefix(mut self, bits: u8) -> Self {
        self.grouping.v4 = bits.min(32);
        self
    }
}

impl<B> KeyExtractor<B> for PeerIp {
    fn extract(&self, req: &Request<B>) -> Option<String> {
        peer_ip(req).map(|ip| self.grouping.key(ip))
    }

    /// No peer address recorded at all: the server's set-up.
    fn misconfiguration(&self, req: &Request<B>) -> Option<String> {
        no_peer_address(req)
    }
}

/// Which header the trusted proxies write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Forwarded,
    XForwardedFor,
    XRealIp,
}

/// The client's IP address behind trusted proxies: `ip:203.0.113.9`.
///
/// The chain of hops is the forwarding header's entries followed by the
/// connection's peer. Walking it from the right, the client is the first
/// address that is not a [trusted proxy](TrustedProxies); when every hop is
/// trusted (an internal caller), the leftmost. So:
///
/// - a peer that is not a trusted proxy is the client, whatever headers it
///   sends;
/// - entries a client wrote itself (on the left) are never believed: a
///   forged leftmost `X-Forwarded-For` changes nothing;
/// - a hop that must be read but cannot (`unknown`, an obfuscated name,
///   garbage) makes the key missing, as does an unknown peer address.
///
/// Choose the one header your proxies write; entries in the others may come
/// from the client. The peer address is found as for [`PeerIp`].
///
/// # Examples
///
/// ```
/// use std::net::SocketAddr;
/// use http::Request;
/// use lockguard_tower::KeyExtractor;
/// use lockguard_tower::key::{ClientIp, TrustedProxies};
///
/// let client_ip = ClientIp::x_forwarded_for(TrustedProxies::parse(["10.0.0.0/8"])?);
/// let mut req = Request::get("/")
///     .header("x-forwarded-for", "1.2.3.4, 198.51.100.7, 10.0.0.9")
///     .body(())
///     .unwrap();
/// // The connection comes from the load balancer.
/// req.extensions_mut().insert("10.0.0.2:55000".parse::<SocketAddr>().unwrap());
/// // 10.0.0.9 is a trusted proxy; 198.51.100.7 is not: it is the client.
/// // The leftmost entry (1.2.3.4) is whatever the client sent.
/// assert_eq!(client_ip.extract(&req).as_deref(), Some("ip:198.51.100.7"));
/// # Ok::<(), lockguard_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct ClientIp {
    source: Source,
    trusted: TrustedProxies,
    grouping: Grouping,
}

impl ClientIp {
    fn new(source: Source, trusted: TrustedProxies) -> Self {
        Self {
            source,
            trusted,
            grouping: Grouping::default(),
        }
    }

    /// The client from `X-Forwarded-For` (every field, in order).
    pub fn x_forwarded_for(trusted: TrustedProxies) -> Self {
        Self::new(Source::XForwardedFor, trusted)
    }

    /// The client from the standard `Forwarded` header's `for=` parameters
    /// (RFC 7239).
    pub fn forwarded(trusted: TrustedProxies) -> Self {
        Self::new(Source::Forwarded, trusted)
    }

    /// The client from `X-Real-IP`, believed only when the peer is a
    /// trusted proxy (with several fields, the last).
    pub fn x_real_ip(trusted: TrustedProxies) -> Self {
        Self::new(Source::XRealIp, trusted)
    }

    /// Groups IPv6 addresses by their first `bits` bits (default 64).
    #[must_use]
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.grouping.v6 = bits.min(128);
        self
    }

    /// Groups IPv4 addresses by their first `bits` bits (default 32).
    #[must_use]
    pub fn ipv4_prefix(mut self, bits: u8) -> Self {
        self.grouping.v4 = bits.min(32);
        self
    }

    /// The client's address, before grouping.
    pub fn client_ip<B>(&self, req: &Request<B>) -> Option<IpAddr> {
        let peer = peer_ip(req)?;
        if !self.trusted.contains(peer) {
            return Some(peer);
        }
        let headers = req.headers();
        let hops = match self.source {
            Source::Forwarded => {
                proxy::forwarded_hops(headers.get_all(FORWARDED).iter().map(|v| v.as_bytes()))
            }
            Source::XForwardedFor => proxy::list_hops(
                headers
                    .get_all(HeaderName::from_static("x-forwarded-for"))
                    .iter()
                    .map(|v| v.as_bytes()),
            ),
            Source::XRealIp => headers
                .get_all(HeaderName::from_static("x-real-ip"))
                .iter()
                .next_back()
                .map(|v| vec![proxy::parse_node(&String::from_utf8_lossy(v.as_bytes()))])
                .unwrap_or_default(),
        };
        proxy::rightmost_untrusted(&hops, peer, &self.trusted)
    }
}

impl<B> KeyExtractor<B> for ClientIp {
    fn extract(&self, req: &Request<B>) -> Option<String> {
        self.client_ip(req).map(|ip| self.grouping.key(ip))
    }

    /// No peer address recorded at all: the server's set-up (a forwarding
    /// header that cannot be read is the request's doing).
    fn misconfiguration(&self, req: &Request<B>) -> Option<String> {
        no_peer_address(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 key reads as `format!` writes the address, for octets of
    /// one, two and three digits in every place.
    #[test]
    fn an_ipv4_key_is_the_address_as_display_writes_it() {
        let octets = [0u8, 1, 9, 10, 42, 99, 100, 199, 200, 255];
        for a in octets {
            for b in octets {
                for (c, d) in [(a, b), (b, a), (255, a), (b, 0)] {
                    let ip = std::net::Ipv4Addr::new(a, b, c, d);
                    assert_eq!(v4_key(ip), format!("ip:{ip}"));
                }
            }
        }
    }

    fn req(peer: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder();
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let mut r = b.body(()).unwrap();
        if !peer.is_empty() {
            r.extensions_mut()
                .insert(peer.parse::<SocketAddr>().unwrap());
        }
        r
    }

    /// IPv4 keys are written digit by digit, as `Display` would.
    #[test]
    fn ipv4_keys_read_as_display_writes_them() {
        for ip in [
            "0.0.0.0",
            "9.10.99.100",
            "203.0.113.9",
            "255.255.255.255",
            "127.0.0.1",
        ] {
            let v4: std::net::Ipv4Addr = ip.parse().unwrap();
            assert_eq!(v4_key(v4), format!("ip:{v4}"));
        }
        for n in (0..=u32::MAX).step_by(65_521) {
            let v4 = std::net::Ipv4Addr::from(n);
            assert_eq!(v4_key(v4), format!("ip:{v4}"));
        }
        let r = req("192.0.2.77:80", &[]);
        assert_eq!(PeerIp::new().extract(&r).as_deref(), Some("ip:192.0.2.77"));
    }

    #[test]
    fn peer_ip_groups_ipv6_by_prefix() {
        let r = req("[2001:db8:1:2:3:4:5:6]:443", &[]);
        assert_eq!(
            PeerIp::new().extract(&r).as_deref(),
            Some("ip:2001:db8:1:2::/64")
        );
        assert_eq!(
            PeerIp::new().ipv6_prefix(48).extract(&r).as_deref(),
            Some("ip:2001:db8:1::/48")
        );
        assert_eq!(
            PeerIp::new().ipv6_prefix(200).extract(&r).as_deref(),
            Some("ip:2001:db8:1:2:3:4:5:6")
        );
        let r = req("203.0.113.9:1000", &[]);
        assert_eq!(PeerIp::new().extract(&r).as_deref(), Some("ip:203.0.113.9"));
        assert_eq!(
            PeerIp::new().ipv4_prefix(24).extract(&r).as_deref(),
            Some("ip:203.0.113.0/24")
        );
        // A mapped IPv4 address is an IPv4 address.
        let r = req("[::ffff:203.0.113.9]:1000", &[]);
        assert_eq!(PeerIp::new().extract(&r).as_deref(), Some("ip:203.0.113.9"));
    }

    #[test]
    fn no_peer_address_means_no_key() {
        let r = req("", &[("x-forwarded-for", "1.2.3.4")]);
        assert_eq!(PeerIp::new().extract(&r), None);
        let c = ClientIp::x_forwarded_for(TrustedProxies::loopback());
        assert_eq!(c.extract(&r), None);
    }

    #[test]
    fn plain_ip_extension_is_a_peer() {
        let mut r = req("", &[]);
        r.extensions_mut()
            .insert("192.0.2.5".parse::<IpAddr>().unwrap());
        assert_eq!(PeerIp::new().extract(&r).as_deref(), Some("ip:192.0.2.5"));
    }

    #[test]
    fn spoofed_leftmost_x_forwarded_for_is_ignored() {
        let c = ClientIp::x_forwarded_for(TrustedProxies::loopback());
        for forged in ["1.1.1.1", "2.2.2.2, 3.3.3.3", "garbage", "::1"] {
            let xff = format!("{forged}, 198.51.100.7");
            let r = req("127.0.0.1:9", &[("x-forwarded-for", &xff)]);
            assert_eq!(
                c.extract(&r).as_deref(),
                Some("ip:198.51.100.7"),
                "{forged}"
            );
        }
    }

    #[test]
    fn untrusted_peer_is_the_client() {
        let c = ClientIp::x_forwarded_for(TrustedProxies::parse(["10.0.0.0/8"]).unwrap());
        let r = req("127.0.0.1:9", &[("x-forwarded-for", "198.51.100.7")]);
        assert_eq!(c.extract(&r).as_deref(), Some("ip:127.0.0.1"));
    }

    #[test]
    fn forwarded_and_x_real_ip() {
        let trusted = TrustedProxies::loopback();
        let r = req(
            "127.0.0.1:9",
            &[
                (
                    "forwarded",
                    "for=6.6.6.6, for=\"[2001:db8::7]:80\";proto=https",
                ),
                ("x-forwarded-for", "5.5.5.5"),
            ],
        );
        assert_eq!(
            ClientIp::forwarded(trusted.clone())
                .ipv6_prefix(128)
                .extract(&r)
                .as_deref(),
            Some("ip:2001:db8::7")
        );
        let r = req(
            "127.0.0.1:9",
            &[("x-real-ip", "1.1.1.1"), ("x-real-ip", "192.0.2.44")],
        );
        assert_eq!(
            ClientIp::x_real_ip(trusted.clone()).extract(&r).as_deref(),
            Some("ip:192.0.2.44")
        );
        let r = req("127.0.0.1:9", &[("x-real-ip", "unknown")]);
        assert_eq!(ClientIp::x_real_ip(trusted).extract(&r), None);
    }
}
