//! Console sessions: operator-key login, the session cookie, CSRF tokens and same-origin checks.
//!
//! - A session id and its CSRF token are 256 random bits each (two UUIDv4s' random bits from the operating
//!   system's generator, hex). Only the SHA-256 digest of the session id is kept (in the database, see
//!   [`super::session_store`]), so a dump of the gateway's memory or database holds no usable cookie.
//! - The cookie is `HttpOnly; SameSite=Strict; Path=/`, and `Secure` with the `__Host-` name prefix unless the
//!   request's `Host` is a loopback address (plain `http://127.0.0.1` has no TLS to offer; everywhere else
//!   the console is expected behind TLS, and a browser refuses a `Secure` cookie over plain HTTP).
//! - Every state-changing request (login, logout, decisions) must come from the console's own origin
//!   (`Sec-Fetch-Site: same-origin`, or an `Origin` whose host is the request's `Host`) and, once logged in,
//!   carry the session's CSRF token (a hidden form field, compared in constant time).

use std::time::Duration;

use http::{header, HeaderMap, HeaderValue};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A session lives this long after its last request…
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(60 * 60);
/// …and never longer than this after login.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(12 * 60 * 60);

/// A logged-in operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Session {
    /// The operator key's name (`carol` of `carol:<key>`).
    pub(crate) operator: String,
    /// The fingerprint of the key that logged in: the session ends when the key leaves the keys file.
    pub(crate) key_fingerprint: String,
    /// The token every form of this session carries.
    pub(crate) csrf: String,
    /// How many calls wait for a decision, counted when the page was asked for (what the navigation shows);
    /// `None` where it was not counted.
    pub(crate) waiting: Option<Waiting>,
    /// Whether the gateway manages keys (the navigation then links their pages).
    pub(crate) manages_keys: bool,
}

/// The calls waiting for a decision among the oldest listed page: `count`, and whether more wait behind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Waiting {
    pub(crate) count: usize,
    pub(crate) more: bool,
}

impl std::fmt::Display for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.count, if self.more { "+" } else { "" })
    }
}

impl Session {
    /// A session of `operator` whose CSRF token is `operator` too (templates under test splice both).
    #[cfg(test)]
    pub(crate) fn for_test(operator: &str) -> Self {
        Session {
            operator: operator.to_owned(),
            key_fingerprint: String::new(),
            csrf: operator.to_owned(),
            waiting: None,
            manages_keys: false,
        }
    }
}

/// 256 random bits as 64 hex digits.
pub(crate) fn random_token() -> String {
    let (a, b) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    // A v4 UUID has 122 random bits; two give 244, hashed to spread them over 256.
    let digest = Sha256::new()
        .chain_update(a.as_bytes())
        .chain_update(b.as_bytes())
        .finalize();
    hex(&digest)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What the stores keep of a session id: its SHA-256, in hex.
pub(crate) fn digest(id: &str) -> String {
    hex(&Sha256::digest(id.as_bytes()))
}

/// The cookie's names: with `Secure` the `__Host-` prefix binds it to this host, path `/`, no `Domain`.
const SECURE_NAME: &str = "__Host-tc_console";
const PLAIN_NAME: &str = "tc_console";

/// The session id the request's `Cookie` headers carry (either name).
pub(crate) fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SECURE_NAME || *name == PLAIN_NAME)
        .map(|(_, value)| value)
        .filter(|v| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Whether the request's `Host` is a loopback address or `localhost` (any port).
pub(crate) fn is_loopback_host(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The `Set-Cookie` value that logs a browser in (`Some(id)`) or out (`None`).
pub(crate) fn set_cookie(headers: &HeaderMap, id: Option<&str>) -> HeaderValue {
    let secure = !is_loopback_host(headers);
    let name = if secure { SECURE_NAME } else { PLAIN_NAME };
    let mut value = match id {
        Some(id) => format!("{name}={id}; Max-Age={}", MAX_AGE.as_secs()),
        None => format!("{name}=; Max-Age=0"),
    };
    value.push_str("; Path=/; HttpOnly; SameSite=Strict");
    if secure {
        value.push_str("; Secure");
    }
    HeaderValue::from_str(&value).expect("a token of hex digits makes a valid header")
}

/// Whether a state-changing request comes from the console's own origin: the browser's `Sec-Fetch-Site` says
/// `same-origin`, or (browsers without it) the `Origin` header names the request's own `Host`. A request with
/// neither is refused: every browser that runs the console sends one of them on a POST.
pub(crate) fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return site.as_bytes() == b"same-origin";
    }
    let (Some(origin), Some(host)) = (headers.get(header::ORIGIN), headers.get(header::HOST))
    else {
        return false;
    };
    let origin = origin.to_str().unwrap_or("");
    let authority = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"));
    authority.is_some_and(|a| a.as_bytes().eq_ignore_ascii_case(host.as_bytes()))
}

/// Whether a read (page or JSON) may be answered: anything but another site's script (`Sec-Fetch-Site`
/// `cross-site` or `same-site` on a non-navigation request). Navigations from elsewhere are let through: the
/// cookie is `SameSite=Strict`, so they arrive logged out.
pub(crate) fn readable(headers: &HeaderMap) -> bool {
    let site = headers.get("sec-fetch-site").map(HeaderValue::as_bytes);
    let navigate = headers
        .get("sec-fetch-mode")
        .is_some_and(|m| m.as_bytes() == b"navigate");
    match site {
        None | Some(b"same-origin" | b"none") => true,
        Some(_) => navigate,
    }
}

/// Constant-time comparison of a submitted CSRF token with the session's.
pub(crate) fn csrf_matches(session: &Session, submitted: Option<&str>) -> bool {
    let Some(submitted) = submitted else {
        return false;
    };
    submitted.len() == session.csrf.len()
        && bool::from(submitted.as_bytes().ct_eq(session.csrf.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().unwrap());
        }
        map
    }

    #[test]
    fn cookies_are_http_only_strict_and_secure_off_loopback() {
        let local = set_cookie(&headers(&[("host", "127.0.0.1:8080")]), Some("ab"));
        assert_eq!(
            local,
            "tc_console=ab; Max-Age=43200; Path=/; HttpOnly; SameSite=Strict"
        );
        let remote = set_cookie(&headers(&[("host", "gw.example.com")]), Some("ab"));
        assert_eq!(
            remote,
            "__Host-tc_console=ab; Max-Age=43200; Path=/; HttpOnly; SameSite=Strict; Secure"
        );
        let out = set_cookie(&headers(&[("host", "[::1]:80")]), None);
        assert_eq!(
            out,
            "tc_console=; Max-Age=0; Path=/; HttpOnly; SameSite=Strict"
        );
        assert!(is_loopback_host(&headers(&[("host", "localhost:1")])));
        assert!(!is_loopback_host(&headers(&[(
            "host",
            "127.0.0.1.evil.com"
        )])));
        assert!(!is_loopback_host(&HeaderMap::new()));
    }

    #[test]
    fn only_the_consoles_own_origin_may_change_state() {
        assert!(same_origin(&headers(&[("sec-fetch-site", "same-origin")])));
        for site in ["cross-site", "same-site", "none"] {
            assert!(!same_origin(&headers(&[
                ("sec-fetch-site", site),
                ("origin", "http://h"),
                ("host", "h")
            ])));
        }
        assert!(same_origin(&headers(&[
            ("origin", "http://h:1"),
            ("host", "h:1")
        ])));
        assert!(!same_origin(&headers(&[
            ("origin", "http://evil:1"),
            ("host", "h:1")
        ])));
        assert!(!same_origin(&headers(&[
            ("origin", "null"),
            ("host", "null")
        ])));
        assert!(
            !same_origin(&headers(&[("host", "h:1")])),
            "no origin at all"
        );
        assert!(readable(&HeaderMap::new()));
        assert!(readable(&headers(&[
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-mode", "navigate")
        ])));
        assert!(!readable(&headers(&[
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-mode", "cors")
        ])));
    }

    #[test]
    fn csrf_tokens_must_match_exactly() {
        let session = Session {
            operator: "carol".into(),
            key_fingerprint: String::new(),
            csrf: random_token(),
            waiting: None,
            manages_keys: false,
        };
        assert_eq!(session.csrf.len(), 64);
        assert!(csrf_matches(&session, Some(&session.csrf.clone())));
        assert!(!csrf_matches(&session, None));
        assert!(!csrf_matches(&session, Some("")));
        assert!(!csrf_matches(&session, Some(&session.csrf[1..])));
        let mut wrong = session.csrf.clone().into_bytes();
        wrong[10] = if wrong[10] == b'a' { b'b' } else { b'a' };
        assert!(!csrf_matches(
            &session,
            Some(std::str::from_utf8(&wrong).unwrap())
        ));
    }

    #[test]
    fn the_session_id_is_read_from_either_cookie_name() {
        let id = random_token();
        let plain = format!("other=1; tc_console={id}");
        assert_eq!(cookie(&headers(&[("cookie", &plain)])), Some(id.as_str()));
        let secure = format!("__Host-tc_console={id}; other=1");
        assert_eq!(cookie(&headers(&[("cookie", &secure)])), Some(id.as_str()));
        assert_eq!(cookie(&HeaderMap::new()), None);
        assert_ne!(digest(&id), id, "only the digest is kept");
        assert_eq!(digest(&id).len(), 64);
    }
}
