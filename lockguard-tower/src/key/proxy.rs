//! Trusted proxies and the forwarding headers they write.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use lockguard_core::{Error, ErrorKind};

/// An IP network: an address and a prefix length (`10.0.0.0/8`,
/// `2001:db8::/32`), or one address (`/32`, `/128`).
///
/// IPv4-mapped IPv6 addresses (`::ffff:10.0.0.1`) are treated as the IPv4
/// address they carry, both in networks and in the addresses checked.
///
/// # Examples
///
/// ```
/// use lockguard_tower::key::Cidr;
/// let net: Cidr = "10.0.0.0/8".parse()?;
/// assert!(net.contains("10.1.2.3".parse().unwrap()));
/// assert!(!net.contains("11.0.0.1".parse().unwrap()));
/// assert!("10.0.0.0/33".parse::<Cidr>().is_err());
/// # Ok::<(), lockguard_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The network of `addr` with a prefix of `prefix` bits (the address is
    /// masked to it).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a prefix longer than the address
    /// (32 bits for IPv4, 128 for IPv6).
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Self, Error> {
        // `::ffff:a.b.c.d/N` is `a.b.c.d/(N - 96)`.
        let (addr, prefix) = match addr {
            IpAddr::V6(v6) if (96..=128).contains(&prefix) => match v6.to_ipv4_mapped() {
                Some(v4) => (IpAddr::V4(v4), prefix - 96),
                None => (addr, prefix),
            },
            other => (other, prefix),
        };
        let max = max_prefix(addr);
        if prefix > max {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("network prefix /{prefix} is longer than the address ({max} bits)"),
            ));
        }
        Ok(Self {
            addr: mask(addr, prefix),
            prefix,
        })
    }

    /// The network's first address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length in bits.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` is in the network.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_)) => {
                mask(ip, self.prefix) == self.addr
            }
            _ => false,
        }
    }
}

impl FromStr for Cidr {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let invalid = || {
            Error::new(
                ErrorKind::InvalidInput,
                format!("{s:?} is not an IP address or network (`10.0.0.0/8`, `::1`)"),
            )
        };
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((addr, prefix)) => {
                let addr: IpAddr = addr.parse().map_err(|_| invalid())?;
                let prefix: u8 = prefix.parse().map_err(|_| invalid())?;
                (addr, prefix)
            }
            None => {
                let addr: IpAddr = s.parse().map_err(|_| invalid())?;
                (addr, max_prefix(addr))
            }
        };
        Self::new(addr, prefix)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

fn max_prefix(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

/// `ip` with every bit after the first `prefix` cleared.
pub(crate) fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let keep = u32::MAX
                .checked_shl(32 - u32::from(prefix.min(32)))
                .unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(bits & keep))
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let keep = u128::MAX
                .checked_shl(128 - u32::from(prefix.min(128)))
                .unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(bits & keep))
        }
    }
}

/// The proxies whose forwarding headers are believed: a list of networks.
///
/// Only the proxies you run belong here (your load balancer's addresses,
/// the ingress network). An address outside the list is a client, however
/// many forwarding headers it sends.
///
/// # Examples
///
/// ```
/// use lockguard_tower::key::TrustedProxies;
/// let proxies = TrustedProxies::parse(["10.0.0.0/8", "fd00::/8"])?;
/// assert!(proxies.contains("10.20.30.40".parse().unwrap()));
/// assert!(!proxies.contains("203.0.113.9".parse().unwrap()));
/// # Ok::<(), lockguard_core::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    networks: Vec<Cidr>,
}

impl TrustedProxies {
    /// No trusted proxy: forwarding headers are never believed.
    pub fn none() -> Self {
        Self::default()
    }

    /// The loopback networks `127.0.0.0/8` and `::1/128`: a proxy on the
    /// same host.
    pub fn loopback() -> Self {
        Self::none()
            .with(Cidr {
                addr: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 0)),
                prefix: 8,
            })
            .with(Cidr {
                addr: IpAddr::V6(Ipv6Addr::LOCALHOST),
                prefix: 128,
            })
    }

    /// The networks in `list` (`"10.0.0.0/8"`, `"192.0.2.7"`, `"fd00::/8"`).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] naming the first entry that is not an
    /// address or network.
    pub fn parse<I>(list: I) -> Result<Self, Error>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let networks = list
            .into_iter()
            .map(|s| s.as_ref().parse())
            .collect::<Result<_, _>>()?;
        Ok(Self { networks })
    }

    /// Adds a network.
    #[must_use]
    pub fn with(mut self, network: Cidr) -> Self {
        self.networks.push(network);
        self
    }

    /// Whether `ip` is a trusted proxy.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.networks.iter().any(|n| n.contains(ip))
    }

    /// The networks.
    pub fn networks(&self) -> &[Cidr] {
        &self.networks
    }
}

impl FromIterator<Cidr> for TrustedProxies {
    fn from_iter<T: IntoIterator<Item = Cidr>>(iter: T) -> Self {
        Self {
            networks: iter.into_iter().collect(),
        }
    }
}

/// One hop of a forwarding chain: an address, or a node that cannot be
/// used as one (`unknown`, an obfuscated `_name`, garbage).
pub(crate) type Hop = Option<IpAddr>;

/// Parses a node as written in `X-Forwarded-For`, `X-Real-IP` or a
/// `Forwarded` `for=` parameter (already unquoted): `192.0.2.1`,
/// `192.0.2.1:8080`, `2001:db8::1`, `[2001:db8::1]:8080`.
pub(crate) fn parse_node(node: &str) -> Hop {
    let node = node.trim().trim_matches('"');
    if let Some(rest) = node.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.starts_with(':')) {
            return None;
        }
        return inside.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    if let Ok(ip) = node.parse::<IpAddr>() {
        return Some(ip);
    }
    // `a.b.c.d:port`: IPv6 without brackets has more than one colon.
    let (host, port) = node.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

/// The hops of every `X-Forwarded-For`-style list in `values`, in order.
pub(crate) fn list_hops<'a>(values: impl Iterator<Item = &'a [u8]>) -> Vec<Hop> {
    let mut hops = Vec::new();
    for value in values {
        let value = String::from_utf8_lossy(value);
        for node in value.split(',') {
            if node.trim().is_empty() {
                continue;
            }
            hops.push(parse_node(node));
        }
    }
    hops
}

/// The `for=` hops of every `Forwarded` header value (RFC 7239), in order.
/// An element without `for=` is a hop that cannot be used.
pub(crate) fn forwarded_hops<'a>(values: impl Iterator<Item = &'a [u8]>) -> Vec<Hop> {
    let mut hops = Vec::new();
    for value in values {
        let value = String::from_utf8_lossy(value);
        for element in split_unquoted(&value, ',') {
            if element.trim().is_empty() {
                continue;
            }
            let mut hop = None;
            for pair in split_unquoted(element, ';') {
                let Some((name, val)) = pair.split_once('=') else {
                    continue;
                };
                if name.trim().eq_ignore_ascii_case("for") {
                    hop = parse_node(&unquote(val.trim()));
                }
            }
            hops.push(hop);
        }
    }
    hops
}

/// Splits on `sep` outside double-quoted strings (which may hold `\"`).
fn split_unquoted(s: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == sep && !quoted {
            parts.push(&s[start..i]);
            start = i + c.len_utf8();
        }
    }
    parts.push(&s[start..]);
    parts
}

/// The content of a quoted string, or the token as is.
fn unquote(s: &str) -> String {
    match s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(inner) => {
            let mut out = String::with_capacity(inner.len());
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                if c == '\\' {
                    if let Some(next) = chars.next() {
                        out.push(next);
                    }
                } else {
                    out.push(c);
                }
            }
            out
        }
        None => s.to_owned(),
    }
}

/// The client in a chain of hops ending with the peer: walking from the
/// right (the peer, then the nearest forwarded entry), the first address
/// that is not a trusted proxy. When every hop is trusted, the leftmost
/// one. `None` when a hop that must be read cannot be used.
pub(crate) fn rightmost_untrusted(
    hops: &[Hop],
    peer: IpAddr,
    trusted: &TrustedProxies,
) -> Option<IpAddr> {
    if !trusted.contains(peer) {
        return Some(peer);
    }
    let mut last = peer;
    for hop in hops.iter().rev() {
        let ip = (*hop)?;
        if !trusted.contains(ip) {
            return Some(ip);
        }
        last = ip;
    }
    Some(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn cidr_parsing_and_matching() {
        let n: Cidr = "192.168.1.77/24".parse().unwrap();
        assert_eq!(n.to_string(), "192.168.1.0/24");
        assert!(n.contains(ip("192.168.1.200")));
        assert!(!n.contains(ip("192.168.2.1")));
        assert!(n.contains(ip("::ffff:192.168.1.9")), "mapped IPv4");
        let v6: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:ffff::1")));
        assert!(!v6.contains(ip("2001:db9::1")));
        assert!(!v6.contains(ip("10.0.0.1")));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("8.8.8.8")));
        let one: Cidr = "::1".parse().unwrap();
        assert_eq!(one.prefix(), 128);
        let mapped: Cidr = "::ffff:10.0.0.0/104".parse().unwrap();
        assert_eq!(mapped.to_string(), "10.0.0.0/8");
        for bad in [
            "",
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "x",
            "10.0.0.0/-1",
            "1.2.3.4/",
        ] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn nodes_in_every_spelling() {
        assert_eq!(parse_node(" 192.0.2.1 "), Some(ip("192.0.2.1")));
        assert_eq!(parse_node("192.0.2.1:8080"), Some(ip("192.0.2.1")));
        assert_eq!(parse_node("2001:db8::1"), Some(ip("2001:db8::1")));
        assert_eq!(parse_node("[2001:db8::1]:443"), Some(ip("2001:db8::1")));
        assert_eq!(parse_node("[2001:db8::1]"), Some(ip("2001:db8::1")));
        assert_eq!(parse_node("\"[2001:db8::1]:443\""), Some(ip("2001:db8::1")));
        for bad in [
            "unknown",
            "_hidden",
            "",
            "[::1",
            "[::1]x",
            "1.2.3.4:99999",
            "[1.2.3.4]",
        ] {
            assert_eq!(parse_node(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn forwarded_header_parsing() {
        let v = b"for=192.0.2.60;proto=http;by=203.0.113.43, For=\"[2001:db8:cafe::17]:4711\"";
        let hops = forwarded_hops([&v[..]].into_iter());
        assert_eq!(
            hops,
            vec![Some(ip("192.0.2.60")), Some(ip("2001:db8:cafe::17"))]
        );
        // Quoted commas and semicolons do not split; elements without
        // `for` are unusable hops.
        let v = b"for=\"1.2.3.4\";by=\"a,b;c\", proto=https, for=unknown";
        let hops = forwarded_hops([&v[..]].into_iter());
        assert_eq!(hops, vec![Some(ip("1.2.3.4")), None, None]);
    }

    #[test]
    fn lists_span_several_fields() {
        let a = b"1.1.1.1, 2.2.2.2";
        let b = b"3.3.3.3";
        let hops = list_hops([&a[..], &b[..]].into_iter());
        assert_eq!(
            hops,
            vec![
                Some(ip("1.1.1.1")),
                Some(ip("2.2.2.2")),
                Some(ip("3.3.3.3"))
            ]
        );
        let junk = b"\xff\xfe, ,4.4.4.4";
        assert_eq!(
            list_hops([&junk[..]].into_iter()),
            vec![None, Some(ip("4.4.4.4"))]
        );
    }

    #[test]
    fn the_client_is_the_rightmost_untrusted_hop() {
        let trusted = TrustedProxies::parse(["10.0.0.0/8"]).unwrap();
        let hops = |s: &str| list_hops([s.as_bytes()].into_iter());
        // A forged leftmost entry changes nothing.
        let chain = hops("6.6.6.6, 9.9.9.9, 10.0.0.2");
        assert_eq!(
            rightmost_untrusted(&chain, ip("10.0.0.1"), &trusted),
            Some(ip("9.9.9.9"))
        );
        // An untrusted peer is the client, whatever it forwards.
        assert_eq!(
            rightmost_untrusted(&chain, ip("8.8.8.8"), &trusted),
            Some(ip("8.8.8.8"))
        );
        // Every hop trusted: the leftmost.
        let chain = hops("10.1.1.1, 10.0.0.2");
        assert_eq!(
            rightmost_untrusted(&chain, ip("10.0.0.1"), &trusted),
            Some(ip("10.1.1.1"))
        );
        // No header from a trusted peer: the peer.
        assert_eq!(
            rightmost_untrusted(&[], ip("10.0.0.1"), &trusted),
            Some(ip("10.0.0.1"))
        );
        // Garbage a trusted proxy passed on cannot be read past.
        let chain = hops("9.9.9.9, garbage, 10.0.0.2");
        assert_eq!(rightmost_untrusted(&chain, ip("10.0.0.1"), &trusted), None);
        // Garbage left of the client is never read.
        let chain = hops("garbage, 9.9.9.9");
        assert_eq!(
            rightmost_untrusted(&chain, ip("10.0.0.1"), &trusted),
            Some(ip("9.9.9.9"))
        );
    }
}
