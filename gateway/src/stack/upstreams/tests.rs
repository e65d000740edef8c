use crate::config::file::ConfigFile;

const GOOD: &str = r#"
[upstreams.retry]
max_attempts = 2

[[upstreams.models]]
name = "smart"

[[upstreams.models.targets]]
provider = "openai"
model = "gpt-4o"
base_url = "http://127.0.0.1:9/v1"
no_key = true

[[upstreams.models.targets]]
name = "claude"
provider = "anthropic"
model = "claude-sonnet-4-5"
key_env = "ANTHROPIC_API_KEY"

[[upstreams.models]]
name = "fast"
sticky = true

[[upstreams.models.targets]]
provider = "openai"
model = "gpt-4o-mini"
deployments = [
  { base_url = "http://127.0.0.1:9/v1", weight = 2, no_key = true },
  { base_url = "http://127.0.0.1:10/v1", key_env = "K" },
]
"#;

#[test]
fn a_full_section_parses() {
    let file = ConfigFile::parse(GOOD, "g.toml").unwrap();
    let section = &file.upstreams;
    assert_eq!(section.retry.max_attempts, 2);
    assert_eq!(section.breaker.consecutive_failures, 5);
    assert_eq!(section.models.len(), 2);
    assert_eq!(section.models[0].targets[0].display_name(), "openai/gpt-4o");
    assert_eq!(section.models[0].targets[1].display_name(), "claude");
    let super::Endpoint::Balanced(deployments) = section.models[1].targets[0].provider.endpoint()
    else {
        panic!("a balanced target");
    };
    assert_eq!(deployments[0].weight, 2);
    assert_eq!(deployments[1].weight, 1);
}

/// The examples in the guide and in this module's docs parse, and build (with their keys set).
#[test]
fn the_documented_examples_are_valid() {
    for variable in ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "EU_KEY", "US_KEY"] {
        if std::env::var_os(variable).is_none() {
            std::env::set_var(variable, "sk-documented-example");
        }
    }
    for doc in [
        include_str!("../../../../docs/src/gateway/upstreams.md"),
        include_str!("mod.rs"),
    ] {
        let start = doc.find("[upstreams.retry]").unwrap();
        let end = start + doc[start..].find("```").unwrap();
        let text: String = doc[start..end]
            .lines()
            .map(|l| {
                l.strip_prefix("//! ")
                    .or(l.strip_prefix("//!"))
                    .unwrap_or(l)
            })
            .collect::<Vec<_>>()
            .join("\n");
        let file =
            ConfigFile::parse(&text, "example.toml").unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(file.upstreams.models.len(), 3);
        let mut config = crate::Config::new("http://127.0.0.1:9/v1");
        config.file = file;
        let router = super::build(&config, &crate::PrometheusMetrics::new())
            .unwrap()
            .unwrap();
        assert_eq!(router.catalog().len(), 3);
    }
}

/// The guide's and the README's examples of the other kinds parse and build (their credentials set).
#[test]
fn the_documented_kinds_example_is_valid() {
    let dir = std::env::temp_dir().join(format!("tower-chat-kinds-doc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = dir.join("azure-key");
    std::fs::write(&key, "azure-documented-key\n").unwrap();
    let account = dir.join("sa.json");
    std::fs::write(
        &account,
        serde_json::json!({"type": "service_account", "client_email": "doc@p.iam.gserviceaccount.com",
            "private_key": include_str!("../../../../tests/data/service_account_test_key.pem"),
            "token_uri": "https://oauth2.googleapis.com/token"})
        .to_string(),
    )
    .unwrap();
    // The Bedrock target's credentials are read at start.
    for variable in [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GEMINI_API_KEY",
        "AZURE_OPENAI_API_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    ] {
        if std::env::var_os(variable).is_none() {
            std::env::set_var(variable, "documented-example-key");
        }
    }
    std::env::set_var("GOOGLE_APPLICATION_CREDENTIALS", &account);
    use crate::config::Provider::*;
    let examples = [
        // (document, the block's first line, the kinds of its models' targets)
        (
            include_str!("../../../../docs/src/gateway/upstreams.md"),
            "  [[upstreams.models]]\n  name = \"gpt-4o\"",
            vec![
                vec![OpenAi, Azure],
                vec![Gemini, Vertex],
                vec![Anthropic, Bedrock],
            ],
        ),
        (
            include_str!("../../../../README.md"),
            "[[upstreams.models]]\nname = \"gpt-4o\"",
            vec![vec![OpenAi, Azure], vec![Vertex]],
        ),
        (
            include_str!("../../../../docs/src/gateway/upstreams.md"),
            "  [[upstreams.models]]\n  name = \"claude-sonnet-4-5\"",
            vec![vec![AnthropicVertex]],
        ),
    ];
    for (doc, first, expected) in examples {
        let start = doc.find(first).unwrap();
        let end = start + doc[start..].find("```").unwrap();
        let text = doc[start..end]
            .lines()
            .map(|l| l.strip_prefix("  ").unwrap_or(l))
            .collect::<Vec<_>>()
            .join("\n")
            .replace("/run/secrets/azure-openai-key", &key.display().to_string());
        let file =
            ConfigFile::parse(&text, "example.toml").unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut config = crate::Config::new("http://127.0.0.1:9/v1");
        config.file = file;
        let router = super::build(&config, &crate::PrometheusMetrics::new())
            .unwrap_or_else(|e| panic!("{e}\n{text}"))
            .unwrap();
        let kinds: Vec<Vec<crate::config::Provider>> = router
            .catalog()
            .iter()
            .map(|m| m.providers.clone())
            .collect();
        assert_eq!(kinds, expected);
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn the_description_names_every_target_and_key_variable_or_the_single_upstream() {
    let mut config = crate::Config::new("http://127.0.0.1:8000/v1");
    config.upstream_key_env = Some("LOCAL_KEY".into());
    assert_eq!(
        super::describe(&config),
        "openai http://127.0.0.1:8000/v1 (key from LOCAL_KEY)"
    );
    config.upstream_key_env = None;
    config.no_upstream_key = true;
    assert_eq!(
        super::describe(&config),
        "openai http://127.0.0.1:8000/v1 (no key)"
    );
    config.file = ConfigFile::parse(GOOD, "g.toml").unwrap();
    assert_eq!(
        super::describe(&config),
        "smart: openai/gpt-4o http://127.0.0.1:9/v1 (no key) then claude https://api.anthropic.com/v1 \
         (key from ANTHROPIC_API_KEY); fast: openai/gpt-4o-mini [http://127.0.0.1:9/v1 (no key), \
         http://127.0.0.1:10/v1 (key from K)]"
    );
}

fn target(provider: &str, fields: &str) -> String {
    format!(
        "[[upstreams.models]]\nname = \"a\"\n\n[[upstreams.models.targets]]\nprovider = \"{provider}\"\n\
         model = \"m\"\n{fields}\n"
    )
}

#[test]
fn the_summary_names_where_each_credential_is_read_never_the_credential() {
    let mut config = crate::Config::new("http://127.0.0.1:9/v1");
    let text = format!(
        "{}\n{}\n{}",
        target("vertex", "project = \"p\"\nlocation = \"europe-west4\"\ncredentials_file = \"/etc/sa.json\""),
        "[[upstreams.models.targets]]\nprovider = \"azure\"\nmodel = \"gpt-4o\"\nbase_url = \"https://r.openai.azure.com\"\ntoken_env = \"AZURE_TOKEN\"\n",
        "[[upstreams.models.targets]]\nprovider = \"gemini\"\nmodel = \"flash\"\nkey_file = \"/run/gemini.key\"\n",
    );
    config.file = ConfigFile::parse(&text, "g.toml").unwrap();
    assert_eq!(
        super::describe(&config),
        "a: vertex/m https://europe-west4-aiplatform.googleapis.com/v1/projects/p/locations/europe-west4/\
         publishers/google (service account /etc/sa.json) then azure/gpt-4o https://r.openai.azure.com \
         (bearer token from AZURE_TOKEN) then gemini/flash https://generativelanguage.googleapis.com/v1beta \
         (key from file /run/gemini.key)"
    );
}

#[test]
fn the_summary_names_a_vertex_claude_target_at_its_publishers_url() {
    let mut config = crate::Config::new("http://127.0.0.1:9/v1");
    let text = target(
        "anthropic-vertex",
        "project = \"p\"\nlocation = \"us-east5\"\ntoken_env = \"GOOGLE_TOKEN\"",
    );
    config.file = ConfigFile::parse(&text, "g.toml").unwrap();
    assert_eq!(
        super::describe(&config),
        "a: anthropic-vertex/m https://us-east5-aiplatform.googleapis.com/v1/projects/p/locations/us-east5/\
         publishers/anthropic (bearer token from GOOGLE_TOKEN)"
    );
}

#[test]
fn the_summary_names_an_azure_responses_target_at_its_v1_url() {
    let mut config = crate::Config::new("http://127.0.0.1:9/v1");
    let text = target(
        "azure-responses",
        "base_url = \"https://r.openai.azure.com\"\nkey_env = \"AZURE_KEY\"",
    );
    config.file = ConfigFile::parse(&text, "g.toml").unwrap();
    assert_eq!(
        super::describe(&config),
        "a: azure-responses/m https://r.openai.azure.com (key from AZURE_KEY)"
    );
}

#[test]
fn a_bearer_token_from_the_environment_never_shows_in_debug_output() {
    std::env::set_var("TOWER_CHAT_UPSTREAMS_TEST_AZURE_TOKEN", "eyJ-secret-token");
    let mut config = crate::Config::new("http://127.0.0.1:9/v1");
    config.file = ConfigFile::parse(
        &target(
            "azure",
            "base_url = \"http://127.0.0.1:9\"\ntoken_env = \"TOWER_CHAT_UPSTREAMS_TEST_AZURE_TOKEN\"",
        ),
        "g.toml",
    )
    .unwrap();
    let router = super::build(&config, &crate::PrometheusMetrics::new())
        .unwrap()
        .unwrap();
    let table = router.current();
    let debug = format!("{router:?} {:?}", table.models.values().collect::<Vec<_>>());
    assert!(!debug.contains("eyJ-secret-token"), "{debug}");
    assert!(!super::describe(&config).contains("eyJ-secret-token"));
}

#[test]
fn an_unusable_service_account_file_refuses_the_build_naming_the_target() {
    let mut config = crate::Config::new("http://127.0.0.1:9/v1");
    config.file = ConfigFile::parse(
        &target(
            "vertex",
            "project = \"p\"\nlocation = \"l\"\ncredentials_file = \"/nonexistent/sa.json\"",
        ),
        "g.toml",
    )
    .unwrap();
    let error = super::build(&config, &crate::PrometheusMetrics::new()).unwrap_err();
    assert!(error.message().contains("`vertex/m`"), "{error}");
    assert!(error.message().contains("/nonexistent/sa.json"), "{error}");
}

#[test]
fn a_target_whose_key_cannot_be_used_refuses_the_build_naming_target_and_variable() {
    let text = |variable: &str| {
        format!(
            "[[upstreams.models]]\nname = \"a\"\n\n[[upstreams.models.targets]]\nprovider = \"anthropic\"\n\
             model = \"claude\"\nbase_url = \"http://127.0.0.1:9/v1\"\nkey_env = \"{variable}\"\n"
        )
    };
    let build = |variable: &str| {
        let mut config = crate::Config::new("http://127.0.0.1:9/v1");
        config.file = ConfigFile::parse(&text(variable), "g.toml").unwrap();
        super::build(&config, &crate::PrometheusMetrics::new())
    };
    std::env::set_var("TOWER_CHAT_UPSTREAMS_TEST_CRLF_KEY", "sk-a\r\n");
    for variable in [
        "TOWER_CHAT_UPSTREAMS_TEST_UNSET_KEY",
        "TOWER_CHAT_UPSTREAMS_TEST_CRLF_KEY",
        "NOT-A-NAME",
        "",
    ] {
        let error = build(variable).unwrap_err();
        let source = std::error::Error::source(&error)
            .and_then(|s| s.downcast_ref::<crate::stack::upstream_key::UpstreamKeyError>())
            .unwrap_or_else(|| panic!("{variable:?}: {error}"));
        assert_eq!(source.variable(), variable);
        assert_eq!(
            source.upstream(),
            "`anthropic/claude` (http://127.0.0.1:9/v1)"
        );
        assert!(error.message().contains("anthropic/claude"), "{error}");
    }
    std::env::set_var("TOWER_CHAT_UPSTREAMS_TEST_GOOD_KEY", "sk-good");
    assert!(build("TOWER_CHAT_UPSTREAMS_TEST_GOOD_KEY").is_ok());
}
