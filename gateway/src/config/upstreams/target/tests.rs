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
