//! `--allowed-hosts`: the `Host` values the API routes answer, as read from the command line or the `[gateway]`
//! table. The edge's browser guard (`edge::browser_guard`) checks requests against them.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// The `Host` values the API routes answer (`--allowed-hosts`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowedHosts {
    /// `*`: any host.
    Any,
    /// These hosts, each with or without a port.
    List(Vec<AllowedHost>),
}

/// One allowed host: a name (or IP address; IPv6 in brackets), and a port, or none for any port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedHost {
    /// Lowercase, without a trailing dot.
    pub(crate) name: String,
    /// `None`: any port.
    pub(crate) port: Option<u16>,
}

/// Why `--allowed-hosts` could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowedHostsError {
    pub(crate) entry: String,
    reason: &'static str,
}

impl fmt::Display for AllowedHostsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}`: {}", self.entry, self.reason)
    }
}

impl std::error::Error for AllowedHostsError {}

impl fmt::Display for AllowedHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// A `host[:port]` as sent in `Host` or `Origin`: the name lowercased, without a trailing dot.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Authority {
    pub(crate) name: String,
    pub(crate) port: Option<u16>,
}

impl Authority {
    /// `None` when `text` is not `name`, `name:port`, `[v6]` or `[v6]:port` (a name of letters, digits, `-`,
    /// `.` and `_`).
    pub(crate) fn parse(text: &str) -> Option<Authority> {
        let (name, port) = match text.strip_prefix('[') {
            Some(v6) => {
                let (address, rest) = v6.split_once(']')?;
                address.parse::<std::net::Ipv6Addr>().ok()?;
                let port = match rest {
                    "" => None,
                    _ => Some(rest.strip_prefix(':')?),
                };
                (format!("[{address}]"), port)
            }
            None => {
                let (name, port) = match text.split_once(':') {
                    Some((name, port)) => (name, Some(port)),
                    None => (text, None),
                };
                let name = name.strip_suffix('.').unwrap_or(name);
                let valid = !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b));
                if !valid {
                    return None;
                }
                (name.to_owned(), port)
            }
        };
        let port = match port {
            None => None,
            Some(digits) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) => {
                Some(digits.parse().ok()?)
            }
            Some(_) => return None,
        };
        Some(Authority {
            name: name.to_ascii_lowercase(),
            port,
        })
    }
}

impl AllowedHosts {
    /// A comma list of `name`, `name:port`, `[v6]` or `[v6]:port` (a name without a port allows any port), or
    /// `*` for any host. Blanks around entries are ignored; an empty entry, a scheme, a path or a wildcard
    /// inside a name is an error naming the entry.
    pub fn parse(text: &str) -> Result<Self, AllowedHostsError> {
        let mut list = Vec::new();
        let mut any = false;
        for entry in text.split(',').map(str::trim) {
            let error = |reason| AllowedHostsError {
                entry: entry.to_owned(),
                reason,
            };
            if entry == "*" {
                any = true;
                continue;
            }
            if entry.is_empty() {
                return Err(error("an empty entry"));
            }
            if entry.contains("://") || entry.contains('/') {
                return Err(error("a host, not a URL: no scheme and no path"));
            }
            if entry.contains('*') {
                return Err(error(
                    "`*` stands alone (any host); partial wildcards are not supported",
                ));
            }
            let Some(Authority { name, port }) = Authority::parse(entry) else {
                return Err(error(
                    "expected NAME or NAME:PORT (letters, digits, `-`, `.`, `_`; IPv6 in brackets)",
                ));
            };
            list.push(AllowedHost { name, port });
        }
        Ok(if any {
            AllowedHosts::Any
        } else {
            AllowedHosts::List(list)
        })
    }

    /// What a gateway listening on `listen` allows without `--allowed-hosts`: any host when it has client keys
    /// (`keyed`; a rebound page has no key), else its listen address and `localhost`, `127.0.0.1` and `[::1]`
    /// at its port.
    pub fn default_for(listen: SocketAddr, keyed: bool) -> Self {
        if keyed {
            return AllowedHosts::Any;
        }
        let port = Some(listen.port());
        let own = match listen.ip() {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        };
        let mut list: Vec<AllowedHost> = Vec::new();
        for name in [own.as_str(), "localhost", "127.0.0.1", "[::1]"] {
            let host = AllowedHost {
                name: name.to_owned(),
                port,
            };
            if !list.contains(&host) {
                list.push(host);
            }
        }
        AllowedHosts::List(list)
    }
}
