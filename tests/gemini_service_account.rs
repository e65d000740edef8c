//! Vertex AI tokens from a service-account key (feature `gcp-adc`): the JWT is signed with the key and the
//! scripted token endpoint verifies the signature with the key's public half before it hands out a token; the
//! Gemini leaf sends the token as a bearer and keeps it until shortly before it expires.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::signature::{KeyPair, RsaKeyPair, UnparsedPublicKey, RSA_PKCS1_2048_8192_SHA256};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivatePkcs8KeyDer;
use serde_json::{json, Value};
use tower::ServiceExt;
use tower_chat::gemini::{GeminiChat, ServiceAccount, CLOUD_PLATFORM_SCOPE};
use tower_chat::test_server::{RecordedRequest, Reply, ScriptedProvider};
use tower_chat::{ChatRequest, ChatStreamExt, ErrorKind, Message};

/// A 2048-bit RSA key generated for these tests only (`openssl genpkey -algorithm RSA`).
const TEST_KEY: &str = include_str!("data/service_account_test_key.pem");

/// Another key, generated the same way, which the token endpoint does not know.
const OTHER_KEY: &str = include_str!("data/service_account_other_key.pem");

const EMAIL: &str = "vertex-caller@test-project.iam.gserviceaccount.com";

fn key_file(token_uri: &str, private_key: &str) -> Vec<u8> {
    json!({
        "type": "service_account",
        "project_id": "test-project",
        "private_key_id": "key-1",
        "private_key": private_key,
        "client_email": EMAIL,
        "client_id": "1234567890",
        "token_uri": token_uri,
    })
    .to_string()
    .into_bytes()
}

/// The public half of the test key, as the token endpoint knows it.
fn public_key() -> Vec<u8> {
    let der = PrivatePkcs8KeyDer::from_pem_slice(TEST_KEY.as_bytes()).unwrap();
    let pair = RsaKeyPair::from_pkcs8(der.secret_pkcs8_der()).unwrap();
    pair.public_key().as_ref().to_vec()
}

/// A form body's field.
fn form_field<'a>(body: &'a str, name: &str) -> Option<&'a str> {
    body.split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

/// Checks a token request as Google's endpoint does: the grant type, the RS256 signature over header and
/// claims, the issuer, audience, scope and lifetime. `Err` holds the OAuth error description.
fn check_assertion(
    request: &RecordedRequest,
    public: &[u8],
    token_uri: &str,
) -> Result<(), String> {
    let body = std::str::from_utf8(&request.raw_body).map_err(|e| e.to_string())?;
    if form_field(body, "grant_type")
        != Some("urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer")
    {
        return Err(format!("grant type in {body}"));
    }
    let assertion = form_field(body, "assertion").ok_or("no assertion")?;
    let (signed, signature) = assertion.rsplit_once('.').ok_or("not a JWT")?;
    let signature = URL_SAFE_NO_PAD
        .decode(signature)
        .map_err(|e| e.to_string())?;
    UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, public)
        .verify(signed.as_bytes(), &signature)
        .map_err(|_| "Invalid JWT Signature.".to_owned())?;
    let (header, claims) = signed.split_once('.').ok_or("not a JWT")?;
    let decode = |part: &str| -> Value {
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).unwrap()).unwrap()
    };
    let (header, claims) = (decode(header), decode(claims));
    assert_eq!(
        header,
        json!({"alg": "RS256", "typ": "JWT", "kid": "key-1"})
    );
    assert_eq!(claims["iss"], EMAIL);
    assert_eq!(claims["aud"], token_uri);
    assert_eq!(claims["scope"], CLOUD_PLATFORM_SCOPE);
    assert_eq!(
        claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(),
        3600
    );
    Ok(())
}

/// A token endpoint handing out `ya29.token-N`, valid for `expires_in` seconds, to assertions signed by the test
/// key.
async fn token_endpoint(expires_in: u64) -> (ScriptedProvider, String) {
    let public = public_key();
    let uri = Arc::new(std::sync::OnceLock::<String>::new());
    let seen = uri.clone();
    let server = ScriptedProvider::start(move |request, index| {
        match check_assertion(request, &public, seen.get().unwrap()) {
            Ok(()) => Reply::json(
                200,
                json!({"access_token": format!("ya29.token-{index}"), "expires_in": expires_in,
                    "token_type": "Bearer"}),
            ),
            Err(reason) => Reply::json(
                400,
                json!({"error": "invalid_grant", "error_description": reason}),
            ),
        }
    })
    .await;
    let token_uri = format!("http://{}/token", server.addr());
    uri.set(token_uri.clone()).unwrap();
    (server, token_uri)
}

fn vertex_leaf(vertex: &ScriptedProvider, account: ServiceAccount) -> GeminiChat {
    GeminiChat::builder()
        .base_url(format!(
            "http://{}/v1/projects/test-project/locations/us-central1/publishers/google",
            vertex.addr()
        ))
        .provider_name("vertex_ai")
        .model("gemini-2.5-flash")
        .token_provider(account)
        .build()
        .unwrap()
}

async fn ask(leaf: &GeminiChat) -> Result<String, tower_chat::ChatError> {
    let reply = leaf
        .clone()
        .oneshot(ChatRequest::new(vec![Message::user("Hi")]))
        .await?
        .collect_response()
        .await?;
    Ok(reply.text().to_owned())
}

#[tokio::test]
async fn a_signed_assertion_is_exchanged_once_and_the_token_sent_as_a_bearer() {
    let (tokens, token_uri) = token_endpoint(3599).await;
    let vertex = ScriptedProvider::start(|_, _| Reply::gemini_text("Hello from Vertex")).await;
    let account = ServiceAccount::from_json(&key_file(&token_uri, TEST_KEY)).unwrap();
    assert_eq!(account.client_email(), EMAIL);
    let leaf = vertex_leaf(&vertex, account);
    for _ in 0..3 {
        assert_eq!(ask(&leaf).await.unwrap(), "Hello from Vertex");
    }
    assert_eq!(tokens.requests().len(), 1, "the token is kept while fresh");
    for sent in vertex.requests() {
        assert_eq!(sent.headers["authorization"], "Bearer ya29.token-0");
        assert_eq!(
            sent.path,
            "/v1/projects/test-project/locations/us-central1/publishers/google/models/gemini-2.5-flash:streamGenerateContent"
        );
    }
}

#[tokio::test]
async fn a_token_about_to_expire_is_fetched_again() {
    // 30 s is inside the leaf's one-minute refresh margin: every call needs a new token.
    let (tokens, token_uri) = token_endpoint(30).await;
    let vertex = ScriptedProvider::start(|_, _| Reply::gemini_text("ok")).await;
    let leaf = vertex_leaf(
        &vertex,
        ServiceAccount::from_json(&key_file(&token_uri, TEST_KEY)).unwrap(),
    );
    ask(&leaf).await.unwrap();
    ask(&leaf).await.unwrap();
    assert_eq!(tokens.requests().len(), 2);
    let bearers: Vec<_> = vertex
        .requests()
        .iter()
        .map(|r| r.headers["authorization"].to_str().unwrap().to_owned())
        .collect();
    assert_eq!(bearers, ["Bearer ya29.token-0", "Bearer ya29.token-1"]);
}

#[tokio::test]
async fn an_assertion_signed_by_another_key_is_an_authentication_error_and_nothing_reaches_vertex()
{
    let (tokens, token_uri) = token_endpoint(3599).await;
    let called = Arc::new(AtomicBool::new(false));
    let flag = called.clone();
    let vertex = ScriptedProvider::start(move |_, _| {
        flag.store(true, Ordering::SeqCst);
        Reply::gemini_text("never")
    })
    .await;
    // A key file naming the same account but holding another key: the endpoint's signature check refuses it.
    let leaf = vertex_leaf(
        &vertex,
        ServiceAccount::from_json(&key_file(&token_uri, OTHER_KEY)).unwrap(),
    );
    for _ in 0..2 {
        let error = ask(&leaf).await.unwrap_err();
        assert_eq!(error.kind(), &ErrorKind::Authentication, "{error}");
        assert!(error.message().contains(EMAIL), "{error}");
        assert!(
            error.message().contains("Invalid JWT Signature."),
            "{error}"
        );
    }
    assert_eq!(tokens.requests().len(), 2, "a refusal is not cached");
    assert!(
        !called.load(Ordering::SeqCst),
        "nothing reaches Vertex without a token"
    );
}

#[tokio::test]
async fn an_unreachable_or_broken_token_endpoint_is_a_typed_error() {
    let vertex = ScriptedProvider::start(|_, _| Reply::gemini_text("never")).await;
    let failing = ScriptedProvider::start(|_, index| match index {
        0 => Reply::json(503, json!({"error": "backendError"})),
        _ => Reply::json(200, json!({"token_type": "Bearer"})),
    })
    .await;
    let leaf = vertex_leaf(
        &vertex,
        ServiceAccount::from_json(&key_file(
            &format!("{}/token", failing.base_url()),
            TEST_KEY,
        ))
        .unwrap(),
    );
    assert_eq!(ask(&leaf).await.unwrap_err().kind(), &ErrorKind::Upstream);
    let error = ask(&leaf).await.unwrap_err();
    assert_eq!(error.kind(), &ErrorKind::Protocol, "{error}");
    assert!(error.message().contains("access_token"), "{error}");
    drop(failing);

    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let leaf = vertex_leaf(
        &vertex,
        ServiceAccount::from_json(&key_file(&format!("http://{closed}/token"), TEST_KEY)).unwrap(),
    );
    assert_eq!(ask(&leaf).await.unwrap_err().kind(), &ErrorKind::Connection);
    assert!(vertex.requests().is_empty());
}

#[test]
fn unusable_key_files_are_refused_with_the_reason_and_never_echo_the_key() {
    let refused = |json: &[u8]| {
        let error = ServiceAccount::from_json(json).unwrap_err();
        assert_eq!(error.kind(), &ErrorKind::Authentication, "{error}");
        assert!(!error.message().contains("BEGIN PRIVATE KEY"), "{error}");
        error.message().to_owned()
    };
    assert!(refused(b"not json").contains("not a service-account key file"));
    let mut user =
        serde_json::from_slice::<Value>(&key_file("https://oauth2.googleapis.com/token", TEST_KEY))
            .unwrap();
    user["type"] = json!("authorized_user");
    assert!(refused(user.to_string().as_bytes()).contains("`authorized_user`"));
    assert!(refused(&key_file(
        "https://oauth2.googleapis.com/token",
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
    ))
    .contains(EMAIL));
    assert!(refused(&key_file("not a url", TEST_KEY)).contains("token_uri"));

    let missing = std::env::temp_dir().join("tower-chat-no-such-service-account.json");
    let error = ServiceAccount::from_file(&missing).unwrap_err();
    assert_eq!(error.kind(), &ErrorKind::Authentication);
    assert!(
        error
            .message()
            .contains("tower-chat-no-such-service-account.json"),
        "{error}"
    );

    let account =
        ServiceAccount::from_json(&key_file("https://oauth2.googleapis.com/token", TEST_KEY))
            .unwrap();
    let debug = format!("{account:?}");
    assert!(debug.contains(EMAIL), "{debug}");
    assert!(
        !debug.contains("PRIVATE") && !debug.contains("MII"),
        "{debug}"
    );
}

#[test]
fn application_default_credentials_read_the_file_the_variable_names() {
    let path = std::env::temp_dir().join(format!("tower-chat-adc-{}.json", std::process::id()));
    std::fs::write(
        &path,
        key_file("https://oauth2.googleapis.com/token", TEST_KEY),
    )
    .unwrap();
    std::env::set_var(tower_chat::gemini::CREDENTIALS_ENV, &path);
    let account = ServiceAccount::from_env().unwrap();
    assert_eq!(account.client_email(), EMAIL);
    std::env::remove_var(tower_chat::gemini::CREDENTIALS_ENV);
    let error = ServiceAccount::from_env().unwrap_err();
    assert!(
        error.message().contains("GOOGLE_APPLICATION_CREDENTIALS"),
        "{error}"
    );
    std::fs::remove_file(path).unwrap();
}
