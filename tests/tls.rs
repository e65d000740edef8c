//! HTTPS to a loopback provider with its own certificate: ALPN picks HTTP/2, a private CA is trusted through
//! `HttpTransport::with_tls`, and the default (public roots) refuses the unknown certificate.

use std::sync::Arc;

use tower::ServiceExt;
use tower_chat::openai::OpenAiChat;
use tower_chat::test_server::{Reply, ScriptedProvider};
use tower_chat::transport::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tower_chat::transport::{rustls, HttpTransport, Timeouts};
use tower_chat::{ChatRequest, ChatStreamExt, ErrorKind, Message};

fn provider_tls() -> (Arc<rustls::ServerConfig>, CertificateDer<'static>) {
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let cert = CertificateDer::from(certified.cert.der().to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.clone()], key)
    .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    (Arc::new(config), cert)
}

#[tokio::test]
async fn https_with_a_private_ca_negotiates_http2() {
    let (server_tls, cert) = provider_tls();
    let provider =
        ScriptedProvider::start_tls(|_, _| Reply::openai_text("over TLS"), server_tls).await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let client_tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let transport = HttpTransport::with_tls(Timeouts::default(), false, client_tls).unwrap();
    let leaf = OpenAiChat::builder()
        .base_url(provider.base_url())
        .model("m")
        .transport(transport)
        .build()
        .unwrap();
    assert!(provider.base_url().starts_with("https://"));

    let response = leaf
        .oneshot(ChatRequest::new(vec![Message::user("hi")]))
        .await
        .unwrap()
        .collect_response()
        .await
        .unwrap();
    assert_eq!(response.text(), "over TLS");
    assert_eq!(
        provider.requests()[0].version,
        http::Version::HTTP_2,
        "ALPN chose h2"
    );
}

#[tokio::test]
async fn the_default_transport_refuses_an_unknown_certificate() {
    let (server_tls, _) = provider_tls();
    let provider =
        ScriptedProvider::start_tls(|_, _| Reply::openai_text("never"), server_tls).await;
    let leaf = OpenAiChat::builder()
        .base_url(provider.base_url())
        .model("m")
        .build()
        .unwrap();
    let err = leaf
        .oneshot(ChatRequest::new(vec![Message::user("hi")]))
        .await
        .err()
        .unwrap();
    assert_eq!(err.kind(), &ErrorKind::Connection);
    assert!(
        provider.requests().is_empty(),
        "no request reached the server"
    );
}
