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

/// The examples in the README and in this module's docs parse, and build (with their keys set).
#[test]
fn the_documented_examples_are_valid() {
    for variable in ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "EU_KEY", "US_KEY"] {
        if std::env::var_os(variable).is_none() {
            std::env::set_var(variable, "sk-documented-example");
        }
    }
    for doc in [include_str!("../../../README.md"), include_str!("mod.rs")] {
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

/// The READMEs' examples of the other kinds parse and build (their credentials set).
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
            include_str!("../../../README.md"),
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

fn refused(text: &str) -> (Option<usize>, String) {
    let err = ConfigFile::parse(text, "g.toml").unwrap_err();
    (err.line(), err.message().to_owned())
}

#[test]
fn invalid_sections_are_refused_with_their_line_and_reason() {
    let (line, message) = refused(
        "[[upstreams.models]]\nname = \"a\"\n\n[[upstreams.models.targets]]\nprovider = \"cohere\"\nmodel = \"x\"\n",
    );
    assert_eq!(line, Some(5), "{message}");
    assert!(message.contains("cohere"), "{message}");

    let (line, message) = refused("[[upstreams.models]]\nname = \"a\"\ntargets = []\n");
    assert_eq!(line, Some(3), "{message}");
    assert!(message.contains("at least one target"), "{message}");

    let (line, message) = refused(
        "[[upstreams.models]]\nname = \"a\"\ntargets = [{ provider = \"openai\", model = \"m\", base_url = \"ftp://x\" }]\n",
    );
    assert_eq!(line, Some(3), "{message}");
    assert!(message.contains("not an http(s) URL"), "{message}");

    let (line, message) = refused("[upstreams.retry]\nmax_attempts = 3\nbackof = 1\n");
    assert_eq!(line, Some(3), "{message}");
    assert!(message.contains("backof"), "{message}");

    let twice = "[[upstreams.models]]\nname = \"a\"\ntargets = [{ provider = \"openai\", model = \"m\", no_key = true }]\n";
    let (line, message) = refused(&format!("{twice}{twice}"));
    assert!(line.is_some(), "{message}");
    assert!(message.contains("configured twice"), "{message}");
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

#[test]
fn a_target_says_where_its_key_comes_from() {
    let model = "[[upstreams.models]]\nname = \"a\"\n\n[[upstreams.models.targets]]\nprovider = \"openai\"\nmodel = \"m\"\n";
    let (line, message) = refused(model);
    assert_eq!(line, Some(4), "{message}");
    assert!(message.contains("target `openai/m`"), "{message}");
    assert!(message.contains("no_key = true"), "{message}");
    let (_, message) = refused(&format!("{model}key_env = \"K\"\nno_key = true\n"));
    assert!(message.contains("exclude each other"), "{message}");
    let (_, message) = refused(&format!(
        "{model}deployments = [{{ base_url = \"http://127.0.0.1:9/v1\", no_key = true }}, \
         {{ base_url = \"http://127.0.0.1:10/v1\" }}]\n"
    ));
    assert!(message.contains("deployment 2"), "{message}");
    let (_, message) = refused(&format!(
        "{model}no_key = true\ndeployments = [{{ base_url = \"http://127.0.0.1:9/v1\", no_key = true }}]\n"
    ));
    assert!(message.contains("go in each deployment"), "{message}");
}

/// One target of `provider` with these fields.
fn target(provider: &str, fields: &str) -> String {
    format!(
        "[[upstreams.models]]\nname = \"a\"\n\n[[upstreams.models.targets]]\nprovider = \"{provider}\"\n\
         model = \"m\"\n{fields}\n"
    )
}

#[test]
fn every_kind_parses_with_its_own_fields_and_credentials() {
    for (provider, fields) in [
        ("azure", "base_url = \"https://r.openai.azure.com\"\nazure_deployment = \"d\"\napi_version = \"2024-10-21\"\nkey_env = \"K\""),
        ("azure", "base_url = \"https://r.openai.azure.com\"\ntoken_env = \"AZURE_TOKEN\""),
        ("gemini", "key_file = \"/run/secrets/gemini\""),
        ("vertex", "project = \"p\"\nlocation = \"global\"\ncredentials_file = \"/sa.json\""),
        ("vertex", "project = \"p\"\nlocation = \"us-central1\"\ncredentials_env = \"GOOGLE_APPLICATION_CREDENTIALS\""),
        ("vertex", "project = \"p\"\nlocation = \"us-central1\"\ntoken_env = \"VERTEX_TOKEN\""),
        ("openai", "key_file = \"key.txt\""),
        ("bedrock", "region = \"us-east-1\"\naws_env = true"),
        ("bedrock", "region = \"eu-central-1\"\naws_profile = \"prod\""),
        ("bedrock", "region = \"us-west-2\"\nkey_env = \"AWS_BEARER_TOKEN_BEDROCK\""),
    ] {
        let text = target(provider, fields);
        ConfigFile::parse(&text, "g.toml").unwrap_or_else(|e| panic!("{e}\n{text}"));
    }
}

#[test]
fn a_kind_missing_its_fields_or_given_anothers_is_refused_with_the_reason() {
    let cases = [
        (
            "vertex",
            "credentials_file = \"/sa.json\"",
            "needs its Google Cloud `project` and `location`",
        ),
        (
            "vertex",
            "project = \"p\"\ncredentials_file = \"/sa.json\"",
            "`project` and `location`",
        ),
        (
            "vertex",
            "project = \"p/x\"\nlocation = \"l\"\nno_key = true",
            "must be letters, digits",
        ),
        (
            "vertex",
            "project = \"p\"\nlocation = \"l\"",
            "credentials_file",
        ),
        (
            "vertex",
            "project = \"p\"\nlocation = \"l\"\nkey_env = \"K\"",
            "`key_env` is not a credential of `vertex`",
        ),
        (
            "azure",
            "key_env = \"K\"",
            "resource's endpoint as `base_url`",
        ),
        ("bedrock", "aws_env = true", "needs the AWS `region`"),
        (
            "bedrock",
            "region = \"us-east-1\"\naws_env = true\naws_profile = \"p\"",
            "`aws_env` and `aws_profile` exclude each other",
        ),
        (
            "bedrock",
            "region = \"us-east-1\"\nno_key = true",
            "`no_key` is not a credential of `bedrock`",
        ),
        (
            "openai",
            "region = \"us-east-1\"\nno_key = true",
            "`region` is for `provider = \"bedrock\"` targets",
        ),
        (
            "gemini",
            "aws_env = true",
            "`aws_env` is not a credential of `gemini`",
        ),
        (
            "gemini",
            "token_env = \"T\"",
            "`token_env` is not a credential of `gemini`",
        ),
        (
            "openai",
            "project = \"p\"\nno_key = true",
            "`project` is for `provider = \"vertex\"` targets",
        ),
        (
            "gemini",
            "api_version = \"v\"\nno_key = true",
            "`api_version` is for `provider = \"azure\"`",
        ),
        (
            "openai",
            "key_env = \"K\"\nkey_file = \"k\"",
            "`key_env` and `key_file` exclude each other",
        ),
        (
            "azure",
            "base_url = \"https://r.openai.azure.com\"\nkey_env = \"K\"\ntoken_env = \"T\"",
            "exclude each other",
        ),
    ];
    for (provider, fields, expected) in cases {
        let (line, message) = refused(&target(provider, fields));
        assert_eq!(line, Some(4), "{provider} {fields}: {message}");
        assert!(message.contains(expected), "{provider} {fields}: {message}");
        assert!(
            message.contains(&format!("target `{provider}/m`")),
            "{message}"
        );
    }
    let (_, message) = refused(&target("bedrock-next", "no_key = true"));
    assert!(message.contains("bedrock-next"), "{message}");
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
