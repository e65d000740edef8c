use super::*;
use crate::config::credential::Credential;
use crate::config::credential::CredentialField::*;
use crate::config::file::ConfigFile;

fn refused(text: &str) -> (Option<usize>, String) {
    let err = ConfigFile::parse(text, "g.toml").unwrap_err();
    (err.line(), err.message().to_owned())
}

fn target(provider: &str, fields: &str) -> String {
    format!(
        "[[upstreams.models]]\nname = \"a\"\n\n[[upstreams.models.targets]]\nprovider = \"{provider}\"\n\
         model = \"m\"\n{fields}\n"
    )
}

#[test]
fn each_kind_takes_the_settings_of_its_variant_and_its_own_credentials() {
    for kind in Provider::ALL {
        let settings = kind.settings();
        assert!(settings.contains(&"base_url"), "{kind}: {settings:?}");
        assert!(kind.credentials().count() > 0, "{kind}");
        for field in kind.credentials() {
            assert!(settings.contains(&field.name()), "{kind}: {field:?}");
        }
    }
    let credentials = |kind: Provider| kind.credentials().collect::<Vec<_>>();
    assert_eq!(credentials(Provider::OpenAi), [KeyEnv, KeyFile, NoKey]);
    assert_eq!(
        credentials(Provider::Azure),
        [KeyEnv, KeyFile, TokenEnv, NoKey]
    );
    assert_eq!(
        credentials(Provider::Vertex),
        [CredentialsFile, CredentialsEnv, TokenEnv, NoKey]
    );
    assert_eq!(
        credentials(Provider::Bedrock),
        [AwsEnv, AwsProfile, KeyEnv, KeyFile]
    );
    assert!(!Provider::Vertex.settings().contains(&"deployments"));
    assert!(!Provider::Bedrock.settings().contains(&"deployments"));
    assert!(Provider::Gemini.settings().contains(&"schema_form"));
}

#[test]
fn a_setting_no_kind_takes_is_refused_naming_what_the_kind_takes() {
    let (line, message) = refused(&target("openai", "no_key = true\ncolour = \"blue\""));
    assert_eq!(line, Some(4), "{message}");
    assert!(message.contains("target `openai/m`"), "{message}");
    assert!(message.contains("unknown setting `colour`"), "{message}");
    assert!(message.contains("`base_url`"), "{message}");
    let (_, message) = refused(&target(
        "vertex",
        "project = \"p\"\nlocation = \"l\"\nno_key = true\ndeployments = []",
    ));
    assert!(
        message.contains("`deployments` is for `provider = \"openai\"`"),
        "{message}"
    );
    assert!(message.contains("not `vertex`"), "{message}");
}

#[test]
fn a_setting_of_the_wrong_type_is_refused_naming_the_target() {
    let (line, message) = refused(&target("gemini", "no_key = \"yes\""));
    assert_eq!(line, Some(4), "{message}");
    assert!(message.contains("target `gemini/m`"), "{message}");
    let (line, message) = refused(&target("gemini", "no_key = true\nschema_form = \"xml\""));
    assert_eq!(line, Some(4), "{message}");
    assert!(
        message.contains("`xml` is not a Gemini schema form"),
        "{message}"
    );
}

#[test]
fn a_balanced_target_keeps_each_deployments_url_and_key() {
    let text = target(
        "azure",
        "deployments = [{ base_url = \"https://a.openai.azure.com\", key_env = \"A\" }, \
         { base_url = \"https://b.openai.azure.com\", no_key = true, weight = 3 }]",
    );
    let file = ConfigFile::parse(&text, "g.toml").unwrap();
    let target = &file.upstreams.models[0].targets[0];
    let ProviderTarget::Azure(azure) = &target.provider else {
        panic!("{target:?}");
    };
    let Endpoint::Balanced(deployments) = &azure.endpoint else {
        panic!("{azure:?}");
    };
    assert_eq!(deployments[0].credential(), Credential::KeyEnv("A".into()));
    assert_eq!(deployments[1].credential(), Credential::NoKey);
    assert_eq!(deployments[1].weight, 3);
}

/// The command line's upstream is the target the same settings in the file describe.
#[test]
fn the_command_line_upstream_is_the_target_the_file_would_describe() {
    let mut config = crate::Config::new("http://127.0.0.1:9/v1beta");
    config.provider = Provider::Gemini;
    config.upstream_key_env = Some("GEMINI_KEY".into());
    let file = ConfigFile::parse(
        &format!(
            "{}key_env = \"GEMINI_KEY\"\n",
            target(
                "gemini",
                "name = \"upstream\"\nbase_url = \"http://127.0.0.1:9/v1beta\""
            )
            .replace("model = \"m\"", "model = \"*\"")
        ),
        "g.toml",
    )
    .unwrap();
    assert_eq!(
        config.upstream_target().unwrap(),
        file.upstreams.models[0].targets[0]
    );
    config.provider = Provider::OpenAi;
    config.upstream_key_env = None;
    let target = config.upstream_target().unwrap();
    assert_eq!(
        target.provider.endpoint(),
        &Endpoint::Single {
            base_url: Some("http://127.0.0.1:9/v1beta".into()),
            credential: Credential::KeyEnv("OPENAI_API_KEY".into()),
        }
    );
    config.provider = Provider::Vertex;
    let error = config.upstream_target().unwrap_err();
    assert!(error.contains("`project` and `location`"), "{error}");
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
            "`project` is for `provider = \"anthropic-vertex\"` and `provider = \"vertex\"` targets",
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
