//! What every request to the API routes passes before authentication: its `Host`, where a browser says it comes
//! from, and the type of its body — the defences against web pages that reach a gateway through a browser.
//!
//! A gateway without client keys answers whoever reaches it. A web page in a browser on the same machine (or
//! network) can reach it in two ways: by DNS rebinding (its own host name, `evil.example`, is made to resolve
//! to the gateway's address: the page and the gateway are then one origin to the browser, and the page reads
//! every answer), and by a cross-site "simple" request (a `POST` with a `text/plain` body, which browsers send
//! without asking the server first; the page cannot read the answer, but the gateway acts on it). So, on
//! `POST /v1/chat/completions`, `/v1/messages`, `/v1/responses`, the other `/v1/…` client routes and the
//! operator JSON API (`/v1/approvals…`), in this order:
//!
//! 1. **Host.** The request's `Host` (and the authority of an absolute-form request target) must be an allowed
//!    host, else `403 host_not_allowed`. `--allowed-hosts` lists them ([`AllowedHosts::parse`]); without it a
//!    gateway without client keys allows its listen address and `localhost`, `127.0.0.1` and `[::1]` at its
//!    port, and a gateway with client keys allows any host (a rebound page has no key).
//! 2. **Cross-site.** A browser's cross-site request is refused, `403 cross_site_request`: `Sec-Fetch-Site:
//!    cross-site`, or an `Origin` whose host is not an allowed host (`Origin: null` included). The gateway
//!    has no CORS support, so no page of another origin has a use for its API.
//! 3. **Content type.** A `POST` must say `Content-Type: application/json` (parameters such as `charset` are
//!    fine), else `415 unsupported_media_type`: a browser sends that type cross-site only after a preflight,
//!    which the gateway does not answer.
//!
//! Refusals are in the route's own error shape (Anthropic's on `/v1/messages`). The console (`/console…`)
//! has rules of its own (same-origin checks and CSRF tokens on its forms, see `console::session`); `/healthz`
//! and `/metrics` are not API routes.
//!
//! ```
//! use tower_chat_gateway::api_guard::AllowedHosts;
//!
//! // The default of a gateway without client keys on 127.0.0.1:8080…
//! let default = AllowedHosts::default_for("127.0.0.1:8080".parse()?, false);
//! assert!(default.allows_host("localhost:8080") && !default.allows_host("evil.example:8080"));
//! // …and a gateway reached under its own name (any port), or under any name.
//! let named = AllowedHosts::parse("gw.example.com,localhost:8080")?;
//! assert!(named.allows_host("gw.example.com:443") && !named.allows_host("localhost:9000"));
//! assert!(AllowedHosts::parse("*")?.allows_host("anything"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use http::{header, HeaderMap, Method, Uri};

use crate::error::ApiError;

use crate::config::hosts::Authority;
pub use crate::config::hosts::{AllowedHost, AllowedHosts, AllowedHostsError};

impl AllowedHosts {
    /// Whether a `Host` header's value is allowed. A `Host` without a port matches an entry's port 80 or 443
    /// (the ports browsers leave out, with or without TLS in front of the gateway).
    pub fn allows_host(&self, host: &str) -> bool {
        match self {
            AllowedHosts::Any => true,
            AllowedHosts::List(_) => {
                Authority::parse(host).is_some_and(|a| self.allows(&a, &[80, 443]))
            }
        }
    }

    fn allows(&self, authority: &Authority, default_ports: &[u16]) -> bool {
        let AllowedHosts::List(list) = self else {
            return true;
        };
        list.iter().any(|allowed| {
            allowed.name == authority.name
                && match (allowed.port, authority.port) {
                    (None, _) => true,
                    (Some(want), Some(got)) => want == got,
                    (Some(want), None) => default_ports.contains(&want),
                }
        })
    }

    /// Whether an `Origin` (`scheme://host[:port]`) names an allowed host; `null` and anything unreadable do
    /// not.
    fn allows_origin(&self, origin: &str) -> bool {
        if *self == AllowedHosts::Any {
            return true;
        }
        let (authority, default_port) = if let Some(rest) = origin.strip_prefix("http://") {
            (rest, 80)
        } else if let Some(rest) = origin.strip_prefix("https://") {
            (rest, 443)
        } else {
            return false;
        };
        Authority::parse(authority).is_some_and(|a| self.allows(&a, &[default_port]))
    }

    fn describe(&self) -> String {
        match self {
            AllowedHosts::Any => "any".to_owned(),
            AllowedHosts::List(list) if list.is_empty() => "none".to_owned(),
            AllowedHosts::List(list) => list
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// The checks of the [module docs](self), with the hosts resolved (configured or default).
#[derive(Clone, Debug)]
pub(crate) struct ApiGuard {
    hosts: AllowedHosts,
}

impl ApiGuard {
    pub(crate) fn new(hosts: AllowedHosts) -> Self {
        ApiGuard { hosts }
    }

    /// `Ok` when the request may go on to authentication; otherwise the refusal.
    pub(crate) fn check(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Result<(), ApiError> {
        self.check_host(uri, headers)?;
        check_site(&self.hosts, headers)?;
        if method == Method::POST {
            check_content_type(headers)?;
        }
        Ok(())
    }

    fn check_host(&self, uri: &Uri, headers: &HeaderMap) -> Result<(), ApiError> {
        if self.hosts == AllowedHosts::Any {
            return Ok(());
        }
        let refused = |host: &str| {
            ApiError::forbidden(
                "host_not_allowed",
                format!(
                    "the Host `{host}` is not one this gateway answers to (allowed: {}); a gateway reached \
                     under another name needs it in --allowed-hosts",
                    self.hosts.describe()
                ),
            )
        };
        let host = headers.get(header::HOST).map(|h| h.to_str());
        match host {
            Some(Ok(host)) if self.hosts.allows_host(host) => {}
            Some(Ok(host)) => return Err(refused(host)),
            Some(Err(_)) => return Err(refused("(not text)")),
            None if uri.authority().is_none() => {
                return Err(ApiError::forbidden(
                    "host_not_allowed",
                    "the request has no Host header; this gateway answers only requests naming an allowed host",
                ))
            }
            None => {}
        }
        // An absolute-form target (`POST http://host/v1/…`) names the host that counts.
        match uri.authority() {
            Some(authority) if !self.hosts.allows_host(authority.as_str()) => {
                Err(refused(authority.as_str()))
            }
            _ => Ok(()),
        }
    }
}

/// Refuse what a browser marks as another site's: `Sec-Fetch-Site: cross-site`, or an `Origin` whose host is
/// not allowed.
fn check_site(hosts: &AllowedHosts, headers: &HeaderMap) -> Result<(), ApiError> {
    let refused = |why: String| {
        ApiError::forbidden(
            "cross_site_request",
            format!(
                "cross-site browser requests are refused ({why}): the gateway has no CORS support; call it \
                 from a server, or from a page the gateway's own host serves"
            ),
        )
    };
    if headers
        .get("sec-fetch-site")
        .is_some_and(|site| site.as_bytes().eq_ignore_ascii_case(b"cross-site"))
    {
        return Err(refused("Sec-Fetch-Site: cross-site".to_owned()));
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("(not text)");
        if !hosts.allows_origin(origin) {
            return Err(refused(format!("Origin `{origin}` is not an allowed host")));
        }
    }
    Ok(())
}

/// A `POST` body must be declared JSON.
fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let declared = headers.get(header::CONTENT_TYPE).map(|v| v.to_str());
    let media_type = match declared {
        Some(Ok(value)) => value.split(';').next().unwrap_or("").trim(),
        Some(Err(_)) => "(not text)",
        None => {
            return Err(ApiError::unsupported_media_type(
                "the request has no Content-Type; send the JSON body with `Content-Type: application/json`",
            ))
        }
    };
    if media_type.eq_ignore_ascii_case("application/json") {
        return Ok(());
    }
    Err(ApiError::unsupported_media_type(format!(
        "the Content-Type `{media_type}` is not accepted; send the JSON body with `Content-Type: application/json`"
    )))
}

/// The middleware of the API routes (before authentication).
pub(crate) async fn guard(
    State(guard): State<Arc<ApiGuard>>,
    request: Request,
    next: Next,
) -> Response {
    if let Err(error) = guard.check(request.method(), request.uri(), request.headers()) {
        return crate::error::refusal(request.uri().path(), error);
    }
    next.run(request).await
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

    fn keyless() -> ApiGuard {
        ApiGuard::new(AllowedHosts::default_for(
            "127.0.0.1:8080".parse().unwrap(),
            false,
        ))
    }

    fn refusal(
        guard: &ApiGuard,
        method: Method,
        pairs: &[(&'static str, &str)],
    ) -> Option<(u16, &'static str)> {
        let uri: Uri = "/v1/chat/completions".parse().unwrap();
        guard
            .check(&method, &uri, &headers(pairs))
            .err()
            .map(|e| (e.status.as_u16(), e.code))
    }

    const JSON: (&str, &str) = ("content-type", "application/json");

    #[test]
    fn a_keyless_gateway_answers_its_own_address_and_loopback_names_at_its_port() {
        let guard = keyless();
        for host in [
            "127.0.0.1:8080",
            "localhost:8080",
            "LOCALHOST:8080",
            "localhost.:8080",
            "[::1]:8080",
        ] {
            assert_eq!(
                refusal(&guard, Method::POST, &[("host", host), JSON]),
                None,
                "{host}"
            );
        }
        for host in [
            "evil.example:8080",
            "localhost:9090",
            "127.0.0.1",
            "localhost.evil.example:8080",
            "",
            "a b",
        ] {
            assert_eq!(
                refusal(&guard, Method::POST, &[("host", host), JSON]),
                Some((403, "host_not_allowed")),
                "{host}"
            );
        }
        assert_eq!(
            refusal(&guard, Method::GET, &[]),
            Some((403, "host_not_allowed")),
            "no Host"
        );
        let v6 = AllowedHosts::default_for("[::]:80".parse().unwrap(), false);
        assert!(
            v6.allows_host("[::]:80") && v6.allows_host("localhost") && v6.allows_host("[::1]")
        );
        assert_eq!(
            AllowedHosts::default_for("127.0.0.1:1".parse().unwrap(), true),
            AllowedHosts::Any
        );
    }

    #[test]
    fn an_absolute_target_must_name_an_allowed_host_too() {
        let guard = keyless();
        let uri: Uri = "http://evil.example:8080/v1/chat/completions"
            .parse()
            .unwrap();
        let error = guard
            .check(
                &Method::POST,
                &uri,
                &headers(&[("host", "127.0.0.1:8080"), JSON]),
            )
            .unwrap_err();
        assert_eq!(error.code, "host_not_allowed");
        let ours: Uri = "http://localhost:8080/v1/chat/completions".parse().unwrap();
        assert!(guard.check(&Method::POST, &ours, &headers(&[JSON])).is_ok());
    }

    #[test]
    fn cross_site_browser_requests_are_refused() {
        let guard = keyless();
        let host = ("host", "127.0.0.1:8080");
        for pairs in [
            vec![host, JSON, ("sec-fetch-site", "cross-site")],
            vec![host, JSON, ("origin", "http://evil.example")],
            vec![host, JSON, ("origin", "http://localhost:9090")],
            vec![host, JSON, ("origin", "null")],
            vec![host, JSON, ("origin", "file://")],
        ] {
            assert_eq!(
                refusal(&guard, Method::POST, &pairs),
                Some((403, "cross_site_request")),
                "{pairs:?}"
            );
        }
        for pairs in [
            vec![
                host,
                JSON,
                ("origin", "http://localhost:8080"),
                ("sec-fetch-site", "same-origin"),
            ],
            vec![host, JSON, ("sec-fetch-site", "none")],
        ] {
            assert_eq!(refusal(&guard, Method::POST, &pairs), None, "{pairs:?}");
        }
        // With any host allowed, an Origin is fine, but a cross-site fetch still is not.
        let any = ApiGuard::new(AllowedHosts::Any);
        assert_eq!(
            refusal(
                &any,
                Method::POST,
                &[JSON, ("origin", "https://app.example")]
            ),
            None
        );
        assert_eq!(
            refusal(
                &any,
                Method::POST,
                &[JSON, ("sec-fetch-site", "cross-site")]
            ),
            Some((403, "cross_site_request"))
        );
        // An origin's default port is its scheme's.
        let named = AllowedHosts::parse("gw.example.com:443").unwrap();
        assert!(
            named.allows_origin("https://gw.example.com")
                && !named.allows_origin("http://gw.example.com")
        );
    }

    #[test]
    fn a_post_must_declare_json() {
        let guard = ApiGuard::new(AllowedHosts::Any);
        for ok in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
        ] {
            assert_eq!(
                refusal(&guard, Method::POST, &[("content-type", ok)]),
                None,
                "{ok}"
            );
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
        ] {
            assert_eq!(
                refusal(&guard, Method::POST, &[("content-type", bad)]),
                Some((415, "unsupported_media_type")),
                "{bad}"
            );
        }
        assert_eq!(
            refusal(&guard, Method::POST, &[]),
            Some((415, "unsupported_media_type"))
        );
        assert_eq!(
            refusal(&guard, Method::GET, &[]),
            None,
            "a GET has no body to declare"
        );
    }

    #[test]
    fn allowed_hosts_are_parsed_or_refused_by_entry() {
        let list =
            AllowedHosts::parse(" gw.example.com , [2001:db8::1]:8443,10.0.0.5:8080").unwrap();
        assert!(list.allows_host("gw.example.com:8080") && list.allows_host("GW.example.com"));
        assert!(list.allows_host("[2001:db8::1]:8443") && !list.allows_host("[2001:db8::1]:8080"));
        assert!(list.allows_host("10.0.0.5:8080") && !list.allows_host("10.0.0.5"));
        assert_eq!(
            list.describe(),
            "gw.example.com, [2001:db8::1]:8443, 10.0.0.5:8080"
        );
        assert_eq!(AllowedHosts::parse("gw,*").unwrap(), AllowedHosts::Any);
        for (bad, entry) in [
            ("gw,,x", ""),
            ("http://gw", "http://gw"),
            ("gw/v1", "gw/v1"),
            ("*.example.com", "*.example.com"),
            ("gw:http", "gw:http"),
            ("gw:99999", "gw:99999"),
            ("2001:db8::1", "2001:db8::1"),
            ("[nope]:1", "[nope]:1"),
        ] {
            let error = AllowedHosts::parse(bad).unwrap_err();
            assert_eq!(error.entry, entry, "{bad}: {error}");
        }
    }
}
