//! [`SentCredentials`]: every credential one request carries, as it goes out, so that an upstream that echoes
//! them in an error (a proxy quoting the request's headers, an API repeating a key it refused) has them
//! redacted, whatever the provider: the API key or bearer token, a SigV4 `Authorization` (its access key id and
//! signature apart too), `x-amz-security-token`, and any other header that names a key, a token or a secret
//! (headers a user configures included).

use http::{HeaderMap, HeaderName, HeaderValue};

use super::secret::Secret;

/// Header names whose values are credentials, beyond the sensitive ones and those [`names_a_credential`] finds.
const CREDENTIAL_HEADERS: [&str; 4] = ["authorization", "proxy-authorization", "cookie", "api-key"];

/// What in a header's name says its value is a credential (`x-api-key`, `x-goog-api-key`, `x-amz-security-token`,
/// a configured `x-auth-secret`, …).
const CREDENTIAL_WORDS: [&str; 7] = [
    "key",
    "token",
    "secret",
    "auth",
    "signature",
    "credential",
    "password",
];

/// The credentials of one request: its credential headers' values, kept as they went out (a clone of a header
/// value shares its bytes), read only when an error needs them redacted.
#[derive(Clone, Debug, Default)]
pub(crate) struct SentCredentials(Vec<HeaderValue>);

impl SentCredentials {
    /// The credential headers of `headers`: the sensitive ones, and those whose name says so.
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        SentCredentials(
            headers
                .iter()
                .filter(|(name, value)| value.is_sensitive() || names_a_credential(name))
                .map(|(_, value)| value.clone())
                .collect(),
        )
    }

    /// What redacts them: each credential header's value whole, and its parts that stand alone (a bearer token
    /// without its scheme; a SigV4 `Credential=` access key id and `Signature=`).
    pub(crate) fn redactor(&self) -> Redactor {
        let mut secrets: Vec<&str> = Vec::new();
        for value in self.0.iter().filter_map(|v| v.to_str().ok()) {
            secrets.push(value);
            if let Some((_scheme, rest)) = value.split_once(' ') {
                secrets.push(rest.trim());
            }
            for part in value.split([' ', ',']) {
                if let Some(id) = part.strip_prefix("Credential=") {
                    secrets.push(id.split('/').next().unwrap_or_default());
                }
                if let Some(signature) = part.strip_prefix("Signature=") {
                    secrets.push(signature);
                }
            }
        }
        // The longest first: a whole header value goes as one, before its parts could cut it up.
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        Redactor(secrets.into_iter().map(Secret::new).collect())
    }
}

/// Every credential of a request, ready to be replaced in text.
#[derive(Debug)]
pub(crate) struct Redactor(Vec<Secret>);

impl Redactor {
    /// `text` with every form of every credential replaced (see [`Secret::redact`]).
    pub(crate) fn redact(&self, text: String) -> String {
        self.0.iter().fold(text, |text, secret| secret.redact(text))
    }

    /// Whether there is nothing to redact.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn names_a_credential(name: &HeaderName) -> bool {
    let name = name.as_str();
    CREDENTIAL_HEADERS.contains(&name) || CREDENTIAL_WORDS.iter().any(|word| name.contains(word))
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
    fn every_credential_header_and_its_parts_are_redacted() {
        let sent = SentCredentials::of(&headers(&[
            (
                "authorization",
                "AWS4-HMAC-SHA256 Credential=ASIAEXAMPLEKEYID/20261207/us-east-1/bedrock/aws4_request, \
                 SignedHeaders=host;x-amz-date, Signature=0123456789abcdef0123456789abcdef",
            ),
            ("x-amz-security-token", "IQoJb3JpZ2luX2Vj+token/=="),
            ("x-goog-api-key", "AIzaSyExampleKey"),
            ("x-custom-secret", "configured-secret"),
            ("content-type", "application/json"),
            ("x-amz-date", "20261207T035525Z"),
        ]))
        .redactor();
        let text = "you sent ASIAEXAMPLEKEYID with Signature=0123456789abcdef0123456789abcdef and \
                    IQoJb3JpZ2luX2Vj+token/== and AIzaSyExampleKey and configured-secret at 20261207T035525Z \
                    as application/json"
            .to_owned();
        let redacted = sent.redact(text);
        for secret in [
            "ASIAEXAMPLEKEYID",
            "0123456789abcdef",
            "IQoJb3JpZ2luX2Vj",
            "AIzaSyExampleKey",
            "configured-secret",
        ] {
            assert!(!redacted.contains(secret), "{secret}: {redacted}");
        }
        assert!(redacted.contains("20261207T035525Z"), "{redacted}");
        assert!(redacted.contains("application/json"), "{redacted}");
    }

    #[test]
    fn a_bearer_token_is_redacted_with_and_without_its_scheme() {
        let sent = SentCredentials::of(&headers(&[("authorization", "Bearer sk-bearer-12345")]))
            .redactor();
        assert_eq!(
            sent.redact("Bearer sk-bearer-12345, then sk-bearer-12345".into()),
            "[redacted], then [redacted]"
        );
        assert!(
            SentCredentials::of(&headers(&[("accept", "text/event-stream")]))
                .redactor()
                .is_empty()
        );
    }
}
