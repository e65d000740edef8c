//! `[upstreams]` credentials that cannot work refuse the start, naming the table, the target, the key and what
//! is wrong, never a credential's value: a Vertex `credentials_env` holding the key's JSON instead of its path;
//! Bedrock's `aws_env` without the variables, an `aws_profile` that is missing or gets its credentials in a way
//! the gateway does not follow.
//!
//! The AWS cases change the process's environment (the standard variables, the shared files' paths): they run
//! one at a time, under [`ENV`].

use serde_json::json;
use tower_chat_gateway::config_file::ConfigFile;
use tower_chat_gateway::{Config, Gateway};

/// Held by every test that changes the AWS variables.
static ENV: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A key generated for tests only (the core's fixture).
const SERVICE_ACCOUNT_KEY: &str = include_str!("../../tests/data/service_account_test_key.pem");

/// The error `Gateway::new` refuses `[upstreams]` (`toml`) with.
async fn refusal(dir: &std::path::Path, toml: &str) -> String {
    let mut config = Config::new("http://127.0.0.1:9/v1");
    config.db = dir.join("gateway.db");
    config.no_upstream_key = true;
    config.file = ConfigFile::parse(toml, "gateway.toml").unwrap_or_else(|e| panic!("{e}"));
    match Gateway::new(&config).await {
        Ok(_) => panic!("started with {toml}"),
        Err(error) => error.to_string(),
    }
}

fn vertex(credentials_env: &str) -> String {
    format!(
        "[[upstreams.models]]\nname = \"pro\"\n\n[[upstreams.models.targets]]\nprovider = \"vertex\"\n\
         model = \"gemini-2.5-pro\"\nproject = \"p\"\nlocation = \"europe-west4\"\n\
         credentials_env = \"{credentials_env}\"\n"
    )
}

/// A variable meant to name the service-account key file holds the file's JSON: the start is refused with the
/// variable named and what is wrong, and not a line of the key.
#[tokio::test]
async fn credentials_env_holding_the_key_json_is_refused_without_printing_it() {
    let dir = tempfile::tempdir().unwrap();
    const VAR: &str = "TOWER_CHAT_CREDENTIALS_TEST_JSON";
    let account = json!({
        "type": "service_account",
        "project_id": "p",
        "private_key_id": "k1",
        "private_key": SERVICE_ACCOUNT_KEY,
        "client_email": "gw@p.iam.gserviceaccount.com",
        "token_uri": "https://oauth2.googleapis.com/token",
    });
    let key_line = SERVICE_ACCOUNT_KEY.lines().nth(1).unwrap();
    for json in [
        account.to_string(),
        serde_json::to_string_pretty(&account).unwrap(),
    ] {
        std::env::set_var(VAR, &json);
        let error = refusal(dir.path(), &vertex(VAR)).await;
        assert!(error.contains(VAR), "{error}");
        assert!(error.contains("holds JSON"), "{error}");
        assert!(error.contains("credentials_env"), "{error}");
        for secret in [key_line, "PRIVATE KEY", "k1", "private_key"] {
            assert!(!error.contains(secret), "{secret} in {error}");
        }
    }
    // A path that leads nowhere: named by its variable, the value not repeated.
    const MISSING: &str = "TOWER_CHAT_CREDENTIALS_TEST_MISSING";
    std::env::set_var(MISSING, "/nonexistent/tower-chat-secret-name.json");
    let error = refusal(dir.path(), &vertex(MISSING)).await;
    assert!(error.contains(MISSING), "{error}");
    assert!(error.contains("cannot be read"), "{error}");
    assert!(!error.contains("tower-chat-secret-name"), "{error}");
}

fn bedrock(credential: &str) -> String {
    format!(
        "[[upstreams.models]]\nname = \"claude\"\n\n[[upstreams.models.targets]]\nname = \"haiku\"\n\
         provider = \"bedrock\"\nmodel = \"anthropic.claude-3-haiku-20240307-v1:0\"\nregion = \"us-east-1\"\n\
         {credential}\n"
    )
}

/// The shared AWS files of a test: `config` and `credentials` in `dir`, named by the standard variables.
fn aws_files(dir: &std::path::Path, config: &str, credentials: &str) {
    std::fs::write(dir.join("aws-config"), config).unwrap();
    std::fs::write(dir.join("aws-credentials"), credentials).unwrap();
    std::env::set_var("AWS_CONFIG_FILE", dir.join("aws-config"));
    std::env::set_var("AWS_SHARED_CREDENTIALS_FILE", dir.join("aws-credentials"));
}

fn assert_names(error: &str, parts: &[&str]) {
    for part in ["[upstreams]", "`haiku`"].iter().chain(parts) {
        assert!(error.contains(part), "`{part}` not in {error}");
    }
}

#[tokio::test]
async fn aws_env_without_the_variables_refuses_the_start() {
    let _env = ENV.lock().await;
    let dir = tempfile::tempdir().unwrap();
    std::env::remove_var("AWS_ACCESS_KEY_ID");
    std::env::remove_var("AWS_SECRET_ACCESS_KEY");
    let error = refusal(dir.path(), &bedrock("aws_env = true")).await;
    assert_names(
        &error,
        &["aws_env", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"],
    );
    std::env::set_var("AWS_ACCESS_KEY_ID", "AKIAHALFSET");
    let error = refusal(dir.path(), &bedrock("aws_env = true")).await;
    assert_names(&error, &["aws_env", "AWS_SECRET_ACCESS_KEY is not"]);
    std::env::remove_var("AWS_ACCESS_KEY_ID");
}

#[tokio::test]
async fn a_missing_aws_profile_refuses_the_start() {
    let _env = ENV.lock().await;
    let dir = tempfile::tempdir().unwrap();
    aws_files(
        dir.path(),
        "[profile other]\nregion = us-east-1\n",
        "[other]\naws_access_key_id = AKIAOTHER\naws_secret_access_key = s\n",
    );
    let error = refusal(dir.path(), &bedrock("aws_profile = \"prod\"")).await;
    assert_names(&error, &["aws_profile", "\"prod\"", "no AWS profile"]);
}

#[tokio::test]
async fn role_arn_and_credential_process_profiles_refuse_the_start() {
    let _env = ENV.lock().await;
    let dir = tempfile::tempdir().unwrap();
    aws_files(
        dir.path(),
        "[profile assumed]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = default\n\n\
         [profile process]\ncredential_process = /usr/bin/fetch-aws-secret --now\n",
        "",
    );
    for (profile, key) in [("assumed", "role_arn"), ("process", "credential_process")] {
        let error = refusal(
            dir.path(),
            &bedrock(&format!("aws_profile = \"{profile}\"")),
        )
        .await;
        assert_names(&error, &["aws_profile", profile, key]);
        assert!(!error.contains("fetch-aws-secret"), "{error}");
    }
}
