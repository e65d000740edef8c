//! `--trusted-proxy-header` and `--trusted-proxies`, as read from the command line or the `[gateway]` table:
//! which peers' word on the client address is taken, and where they give it. The edge reads the client address
//! with them (`edge::client_addr`).

use std::fmt;
use std::net::IpAddr;

use http::HeaderName;

/// `--trusted-proxy-header` and `--trusted-proxies`: which peers' word on the client address is taken, and where
/// they give it. The edge reads the client address with them ([`crate::edge::client_addr`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustedProxies {
    pub(crate) header: HeaderName,
    pub(crate) proxies: Vec<IpRange>,
}

/// An address and a prefix length: `10.0.0.0/8`, or one address (`/32`, `/128`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IpRange {
    pub(crate) network: IpAddr,
    pub(crate) prefix: u8,
}

impl IpRange {
    fn parse(text: &str) -> Option<IpRange> {
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let network = canonical(address.parse().ok()?);
        let bits = if network.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(digits) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
                digits.parse().ok().filter(|p| *p <= bits)?
            }
            Some(_) => return None,
        };
        Some(IpRange { network, prefix })
    }
}

/// An IPv4-mapped IPv6 address (`::ffff:10.0.0.1`, what a dual-stack listener reports) as IPv4.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Why `--trusted-proxy-header` or `--trusted-proxies` could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrustedProxiesError {
    /// The part refused.
    pub value: String,
    /// What was expected.
    pub expected: &'static str,
}

impl fmt::Display for TrustedProxiesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`: expected {}", self.value, self.expected)
    }
}

impl std::error::Error for TrustedProxiesError {}

impl TrustedProxies {
    /// Read `header` from requests whose TCP peer is in `proxies`, a comma list of addresses and ranges
    /// (`127.0.0.1,10.0.0.0/8,fd00::/8`).
    pub fn new(header: &str, proxies: &str) -> Result<Self, TrustedProxiesError> {
        let header =
            HeaderName::from_bytes(header.trim().as_bytes()).map_err(|_| TrustedProxiesError {
                value: header.to_owned(),
                expected: "an HTTP header name, e.g. x-forwarded-for",
            })?;
        let proxies = proxies
            .split(',')
            .map(str::trim)
            .map(|entry| {
                IpRange::parse(entry).ok_or_else(|| TrustedProxiesError {
                    value: entry.to_owned(),
                    expected: "an IP address or a range like 10.0.0.0/8",
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TrustedProxies { header, proxies })
    }
}
