//! SigV4 signing of each Bedrock request (service `bedrock`), by `aws-sigv4`: the canonical request over the
//! method, the path (encoded twice, as every AWS service but S3 expects: a model id's `:` is `%3A` in the URL and
//! `%253A` in the canonical request), the headers and the body's SHA-256; `x-amz-date`, `authorization` and, for
//! temporary credentials, `x-amz-security-token` are added to the request. Secrets go into the signature and
//! the token header only: never into `Debug` output, logs or error messages.

use std::time::SystemTime;

use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use bytes::Bytes;
use http_body_util::Full;

use super::credentials::{AwsCredentials, CredentialsCache};
use crate::error::{ChatError, ErrorKind};
use crate::leaf::{RequestSigner, SignFuture};

/// The SigV4 service name of the Bedrock runtime.
pub(crate) const SERVICE: &str = "bedrock";

/// Signs requests with the credentials of a cache, for one region.
#[derive(Clone, Debug)]
pub(crate) struct Signer {
    pub(crate) region: Option<String>,
    pub(crate) credentials: CredentialsCache,
}

impl RequestSigner for Signer {
    fn sign<'a>(
        &'a self,
        request: &'a mut http::Request<Full<Bytes>>,
        body: &'a [u8],
    ) -> SignFuture<'a> {
        // A Bedrock API key went in as a bearer token: that request is not signed.
        if request.headers().contains_key(http::header::AUTHORIZATION) {
            return Box::pin(async { Ok(()) });
        }
        Box::pin(async move {
            let credentials = self.credentials.get().await?;
            let region = self.region.as_deref().ok_or_else(|| {
                ChatError::new(ErrorKind::InvalidRequest, "no AWS region to sign for")
            })?;
            sign_request(request, body, &credentials, region, SystemTime::now())
        })
    }
}

fn signing_error(error: impl Into<crate::error::BoxError>) -> ChatError {
    ChatError::new(ErrorKind::InvalidRequest, "the request could not be signed")
        .with_source(error)
        .refused_before_sending()
}

/// Sign `request` (whose body is `body`) for Bedrock as of `time`.
pub(crate) fn sign_request(
    request: &mut http::Request<Full<Bytes>>,
    body: &[u8],
    credentials: &AwsCredentials,
    region: &str,
    time: SystemTime,
) -> Result<(), ChatError> {
    sign_for_service(request, body, credentials, region, SERVICE, time)
}

fn sign_for_service(
    request: &mut http::Request<Full<Bytes>>,
    body: &[u8],
    credentials: &AwsCredentials,
    region: &str,
    service: &str,
    time: SystemTime,
) -> Result<(), ChatError> {
    let identity = Identity::from(credentials.inner.clone());
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(signing_error)?
        .into();
    let uri = request.uri().to_string();
    let headers = request
        .headers()
        .iter()
        .filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?)));
    let signable = SignableRequest::new(
        request.method().as_str(),
        &uri,
        headers,
        SignableBody::Bytes(body),
    )
    .map_err(signing_error)?;
    let (instructions, _signature) = sign(signable, &params).map_err(signing_error)?.into_parts();
    instructions.apply_to_request_http1x(request);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    /// AWS's SigV4 test suite, `post-vanilla`: the documented signature of a bare POST.
    #[test]
    fn the_documented_post_vanilla_signature_is_reproduced() {
        let credentials = AwsCredentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            None,
        );
        let mut request = http::Request::post("https://example.amazonaws.com/")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let time = UNIX_EPOCH + Duration::from_secs(1_440_938_160); // 20150830T123600Z
        sign_for_service(
            &mut request,
            b"",
            &credentials,
            "us-east-1",
            "service",
            time,
        )
        .unwrap();
        assert_eq!(
            request.headers()["authorization"],
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, \
             Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"
        );
    }

    #[test]
    fn the_signature_covers_region_service_path_and_body() {
        let credentials = AwsCredentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            Some("session".into()),
        );
        let time = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let signed = |path: &str, body: &'static [u8]| {
            let mut request = http::Request::post(format!(
                "https://bedrock-runtime.us-east-1.amazonaws.com{path}"
            ))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(body)))
            .unwrap();
            sign_request(&mut request, body, &credentials, "us-east-1", time).unwrap();
            request
        };
        let request = signed(
            "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse",
            b"{}",
        );
        let authorization = request.headers()["authorization"].to_str().unwrap();
        assert!(
            authorization.starts_with(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20231114/us-east-1/bedrock/aws4_request, SignedHeaders="
            ),
            "{authorization}"
        );
        assert!(
            authorization.contains("x-amz-security-token"),
            "{authorization}"
        );
        assert_eq!(request.headers()["x-amz-date"], "20231114T221320Z");
        assert_eq!(request.headers()["x-amz-security-token"], "session");
        assert!(!authorization.contains("wJalrXUtnFEMI"));
        let signature = |request: &http::Request<Full<Bytes>>| {
            let auth = request.headers()["authorization"]
                .to_str()
                .unwrap()
                .to_owned();
            auth.rsplit("Signature=").next().unwrap().to_owned()
        };
        let other_body = signed(
            "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse",
            b"{ }",
        );
        let other_path = signed(
            "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream",
            b"{}",
        );
        assert_ne!(signature(&request), signature(&other_body));
        assert_ne!(signature(&request), signature(&other_path));
        assert_eq!(signature(&request).len(), 64);
    }
}
