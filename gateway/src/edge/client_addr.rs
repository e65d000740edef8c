//! The client address the failed-login limit (`operator::login_throttle`) counts by: the TCP peer's, or — behind
//! a reverse proxy named with `--trusted-proxies` — the address the proxy reports in `--trusted-proxy-header`.
//!
//! The header is read only when the TCP peer is one of the trusted proxies: a client that connects directly and
//! sends the header itself is counted by its own address. A header of the `X-Forwarded-For` kind (a comma
//! list to which every proxy appends the address it got the request from) is read from the right: entries
//! that are trusted proxies are skipped (a chain of them), and the first one that is not is the client. What a
//! client wrote into the header itself sits further left and is never reached, as long as the proxy appends
//! (nginx's `$proxy_add_x_forwarded_for`, HAProxy's `option forwardfor`, every cloud load balancer) or
//! replaces it. An entry that is not an address stops the walk at the last trusted hop, so a garbled header
//! counts as the proxy's own address, never as one the client chose. `Forwarded` (RFC 7239) is read by its
//! `for=` parameters the same way; a header that holds one address (`X-Real-IP`) is a list of one. A request
//! from a trusted proxy without the header counts as the proxy's.
//!
//! ```
//! use tower_chat_gateway::client_addr::TrustedProxies;
//!
//! let proxies = TrustedProxies::new("x-forwarded-for", "127.0.0.1,10.0.0.0/8")?;
//! let mut headers = http::HeaderMap::new();
//! headers.insert("x-forwarded-for", "192.0.2.66, 203.0.113.7, 10.1.2.3".parse()?);
//! // Through the proxies: the first address from the right that is not a proxy's.
//! assert_eq!(proxies.client("127.0.0.1".parse()?, &headers), "203.0.113.7".parse::<std::net::IpAddr>()?);
//! // Straight from a client: its own address, whatever it wrote.
//! assert_eq!(proxies.client("198.51.100.1".parse()?, &headers), "198.51.100.1".parse::<std::net::IpAddr>()?);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use http::{HeaderMap, HeaderName};

use crate::config::proxies::{canonical, IpRange};
pub use crate::config::proxies::{TrustedProxies, TrustedProxiesError};

impl IpRange {
    pub(crate) fn contains(&self, ip: IpAddr) -> bool {
        let mask = |bits: u32, width: u32| -> u128 {
            if bits == 0 {
                0
            } else {
                (u128::MAX << (width - bits)) & (u128::MAX >> (128 - width))
            }
        };
        match (self.network, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let m = mask(u32::from(self.prefix), 32);
                u128::from(u32::from(net)) & m == u128::from(u32::from(ip)) & m
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let m = mask(u32::from(self.prefix), 128);
                u128::from(net) & m == u128::from(ip) & m
            }
            _ => false,
        }
    }
}

impl TrustedProxies {
    /// The header read.
    pub fn header(&self) -> &HeaderName {
        &self.header
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        self.proxies.iter().any(|range| range.contains(ip))
    }

    /// The client address of a request that came from `peer` with `headers`.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut hop = canonical(peer);
        if !self.trusts(hop) {
            return hop;
        }
        let forwarded = self.header == http::header::FORWARDED;
        // Header lines in order, each a comma list: the last entry was written by the nearest proxy.
        for value in headers.get_all(&self.header).iter().rev() {
            let Ok(value) = value.to_str() else {
                return hop;
            };
            for entry in value.rsplit(',') {
                let address = if forwarded {
                    forwarded_for(entry)
                } else {
                    node(entry.trim())
                };
                match address {
                    Some(ip) if self.trusts(ip) => hop = ip,
                    Some(ip) => return ip,
                    None => return hop,
                }
            }
        }
        hop
    }
}

/// The address of a `Forwarded` element's `for=` (`for=192.0.2.1`, `for="[2001:db8::1]:4711"`); `None` for
/// `unknown`, obfuscated identifiers and elements without one.
fn forwarded_for(element: &str) -> Option<IpAddr> {
    let value = element.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then_some(value.trim())
    })?;
    node(value.trim_matches('"'))
}

/// `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`, `[2001:db8::1]` or `[2001:db8::1]:4711`.
fn node(text: &str) -> Option<IpAddr> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(canonical(ip));
    }
    if let Ok(socket) = text.parse::<SocketAddr>() {
        return Some(canonical(socket.ip()));
    }
    let v6 = text.strip_prefix('[')?.strip_suffix(']')?;
    v6.parse::<Ipv6Addr>()
        .ok()
        .map(|v6| canonical(IpAddr::V6(v6)))
}

/// The address the limit counts a request by: the TCP peer's (`None` when unknown, e.g. a router called
/// in-process), or the one trusted proxies report.
pub(crate) fn client_ip(
    proxies: Option<&TrustedProxies>,
    peer: Option<IpAddr>,
    headers: &HeaderMap,
) -> Option<IpAddr> {
    match (proxies, peer) {
        (Some(proxies), Some(peer)) => Some(proxies.client(peer, headers)),
        (_, peer) => peer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn headers(name: &'static str, values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for value in values {
            map.append(name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn the_header_counts_only_from_a_trusted_peer() {
        let proxies = TrustedProxies::new("X-Forwarded-For", "127.0.0.1, 10.0.0.0/8").unwrap();
        let sent = headers("x-forwarded-for", &["198.51.100.9"]);
        assert_eq!(proxies.client(ip("127.0.0.1"), &sent), ip("198.51.100.9"));
        assert_eq!(proxies.client(ip("10.200.0.1"), &sent), ip("198.51.100.9"));
        assert_eq!(
            proxies.client(ip("::ffff:10.0.0.1"), &sent),
            ip("198.51.100.9"),
            "mapped"
        );
        assert_eq!(
            proxies.client(ip("11.0.0.1"), &sent),
            ip("11.0.0.1"),
            "spoofed"
        );
        assert_eq!(
            proxies.client(ip("127.0.0.2"), &sent),
            ip("127.0.0.2"),
            "a /32"
        );
        assert_eq!(
            proxies.client(ip("127.0.0.1"), &HeaderMap::new()),
            ip("127.0.0.1"),
            "no header"
        );
    }

    #[test]
    fn the_list_is_read_from_the_right_past_every_trusted_hop() {
        let proxies = TrustedProxies::new("x-forwarded-for", "10.0.0.0/8").unwrap();
        let peer = ip("10.0.0.1");
        let client = |values: &[&str]| proxies.client(peer, &headers("x-forwarded-for", values));
        // What the client wrote itself sits left of what the proxies appended.
        assert_eq!(
            client(&["6.6.6.6, 203.0.113.7, 10.0.0.2"]),
            ip("203.0.113.7")
        );
        assert_eq!(
            client(&["6.6.6.6", "203.0.113.7"]),
            ip("203.0.113.7"),
            "two lines"
        );
        assert_eq!(
            client(&["10.0.0.3, 10.0.0.2"]),
            ip("10.0.0.3"),
            "only proxies"
        );
        assert_eq!(
            client(&["203.0.113.7, garbage"]),
            peer,
            "garbage stops at the last trusted hop"
        );
        assert_eq!(client(&["garbage, 203.0.113.7"]), ip("203.0.113.7"));
        assert_eq!(client(&["[2001:db8::7]:443"]), ip("2001:db8::7"));
        assert_eq!(client(&["203.0.113.7:5000"]), ip("203.0.113.7"));
    }

    #[test]
    fn forwarded_is_read_by_its_for_parameters() {
        let proxies = TrustedProxies::new("forwarded", "10.0.0.0/8").unwrap();
        let peer = ip("10.0.0.1");
        let client = |value: &str| proxies.client(peer, &headers("forwarded", &[value]));
        assert_eq!(
            client(
                r#"for=6.6.6.6, for="[2001:db8::7]:4711";proto=https, for=10.0.0.2;by=10.0.0.1"#
            ),
            ip("2001:db8::7")
        );
        assert_eq!(client("proto=https;For=203.0.113.7"), ip("203.0.113.7"));
        assert_eq!(client("for=unknown"), peer);
        assert_eq!(client("for=_hidden"), peer);
    }

    #[test]
    fn bad_settings_are_refused_by_part() {
        assert_eq!(
            TrustedProxies::new("x forwarded", "127.0.0.1")
                .unwrap_err()
                .value,
            "x forwarded"
        );
        for (list, bad) in [
            ("127.0.0.1,", ""),
            ("10.0.0.0/33", "10.0.0.0/33"),
            ("fd00::/129", "fd00::/129"),
            ("10.0.0.0/", "10.0.0.0/"),
            ("proxy.internal", "proxy.internal"),
        ] {
            assert_eq!(
                TrustedProxies::new("x-forwarded-for", list)
                    .unwrap_err()
                    .value,
                bad,
                "{list}"
            );
        }
        let everything = TrustedProxies::new("x-real-ip", "0.0.0.0/0,::/0").unwrap();
        assert!(everything.trusts(ip("8.8.8.8")) && everything.trusts(ip("2001:db8::1")));
        let v6 = TrustedProxies::new("x-real-ip", "fd00::/8").unwrap();
        assert!(
            v6.trusts(ip("fd12::1")) && !v6.trusts(ip("fe80::1")) && !v6.trusts(ip("10.0.0.1"))
        );
    }
}
