//! The key `GET /metrics` requires (`--metrics-key-env`), kept as a digest and compared in constant time.

/// The key `/metrics` requires (`--metrics-key-env`): only its digest is kept.
#[derive(Clone)]
pub struct MetricsKey {
    digest: [u8; 32],
}

impl std::fmt::Debug for MetricsKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MetricsKey(..)")
    }
}

impl MetricsKey {
    /// The key held by the environment variable `var`. Unset, empty, or not a printable header value: an error
    /// naming the variable, so a gateway meant to protect its metrics never starts with them open.
    pub fn from_env(var: &str) -> Result<Self, String> {
        let key = std::env::var(var).unwrap_or_default();
        let key = key.trim();
        if key.is_empty() {
            return Err(format!(
                "--metrics-key-env {var}: the variable is unset or empty; set it to the key Prometheus sends"
            ));
        }
        if !key.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "--metrics-key-env {var}: the key must be visible ASCII without spaces"
            ));
        }
        Ok(MetricsKey::new(key))
    }

    /// A key given directly.
    pub fn new(key: &str) -> Self {
        MetricsKey {
            digest: crate::edge::auth::digest(key),
        }
    }

    pub(crate) fn admits(&self, headers: &http::HeaderMap) -> bool {
        use subtle::ConstantTimeEq;
        let token = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            });
        token.is_some_and(|token| {
            bool::from(crate::edge::auth::digest(token.trim()).ct_eq(&self.digest))
        })
    }
}
