//! Where an upstream's credential comes from, as the configuration says it. Every credential is read from an
//! environment variable or a file the configuration names, never from the configuration itself, and never
//! logged: the start-up summary names the variable or file ([`Credential::describe`]). Reading and checking
//! them is the runtime's part (`stack::upstream_key`, `stack::upstreams::leaf`).

use std::path::{Path, PathBuf};

/// Where a static key comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeySource<'a> {
    /// The key is read from this environment variable.
    Env(&'a str),
    /// The key is read from this file.
    File(&'a Path),
    /// The upstream takes no key (configured explicitly).
    None,
}

/// Where a target's credential comes from: exactly one of the fields its kind takes, checked where the
/// configuration is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credential {
    /// `key_env`: a static key in this environment variable (sent in the kind's key header).
    KeyEnv(String),
    /// `key_file`: a static key in this file (its final line break dropped).
    KeyFile(PathBuf),
    /// `no_key = true`: the upstream takes none (a local server); no key header is sent.
    NoKey,
    /// `token_env`: a bearer token in this environment variable, sent as it is.
    TokenEnv(String),
    /// `credentials_file`: a service-account key file; its tokens are fetched and renewed before they expire.
    ServiceAccountFile(PathBuf),
    /// `credentials_env`: a service-account key file named by this environment variable (Application Default
    /// Credentials read `GOOGLE_APPLICATION_CREDENTIALS`).
    ServiceAccountEnv(String),
    /// `aws_env = true`: AWS credentials in the standard environment variables, read when the leaf is built.
    AwsEnv,
    /// `aws_profile`: AWS credentials of this profile of the shared AWS files.
    AwsProfile(String),
}

impl Credential {
    /// The static key's source, when the credential is a key (or none).
    pub fn key_source(&self) -> Option<KeySource<'_>> {
        match self {
            Credential::KeyEnv(variable) => Some(KeySource::Env(variable)),
            Credential::KeyFile(path) => Some(KeySource::File(path)),
            Credential::NoKey => Some(KeySource::None),
            _ => None,
        }
    }

    /// How the start-up summary names the credential: where it is read from, never what it is.
    pub fn describe(&self) -> String {
        match self {
            Credential::KeyEnv(variable) => format!("key from {variable}"),
            Credential::KeyFile(path) => format!("key from file {}", path.display()),
            Credential::NoKey => "no key".to_owned(),
            Credential::TokenEnv(variable) => format!("bearer token from {variable}"),
            Credential::ServiceAccountFile(path) => format!("service account {}", path.display()),
            Credential::ServiceAccountEnv(variable) => format!("service account from {variable}"),
            Credential::AwsEnv => "AWS credentials from AWS_ACCESS_KEY_ID".to_owned(),
            Credential::AwsProfile(profile) => format!("AWS profile {profile}"),
        }
    }
}

/// One of the settings that say where a target's credential comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialField {
    /// `key_env`.
    KeyEnv,
    /// `key_file`.
    KeyFile,
    /// `token_env`.
    TokenEnv,
    /// `credentials_file`.
    CredentialsFile,
    /// `credentials_env`.
    CredentialsEnv,
    /// `aws_env`.
    AwsEnv,
    /// `aws_profile`.
    AwsProfile,
    /// `no_key`.
    NoKey,
}

impl CredentialField {
    /// Every credential setting.
    pub const ALL: [CredentialField; 8] = [
        CredentialField::AwsEnv,
        CredentialField::AwsProfile,
        CredentialField::CredentialsFile,
        CredentialField::CredentialsEnv,
        CredentialField::KeyEnv,
        CredentialField::KeyFile,
        CredentialField::TokenEnv,
        CredentialField::NoKey,
    ];

    /// The setting as the file spells it.
    pub fn name(self) -> &'static str {
        match self {
            CredentialField::KeyEnv => "key_env",
            CredentialField::KeyFile => "key_file",
            CredentialField::TokenEnv => "token_env",
            CredentialField::CredentialsFile => "credentials_file",
            CredentialField::CredentialsEnv => "credentials_env",
            CredentialField::AwsEnv => "aws_env",
            CredentialField::AwsProfile => "aws_profile",
            CredentialField::NoKey => "no_key",
        }
    }

    /// The setting written out, for an error that asks for one.
    pub fn example(self) -> &'static str {
        match self {
            CredentialField::KeyEnv => "`key_env = \"VAR\"`",
            CredentialField::KeyFile => "`key_file = \"PATH\"`",
            CredentialField::TokenEnv => "`token_env = \"VAR\"`",
            CredentialField::CredentialsFile => "`credentials_file = \"service-account.json\"`",
            CredentialField::CredentialsEnv => {
                "`credentials_env = \"GOOGLE_APPLICATION_CREDENTIALS\"`"
            }
            CredentialField::AwsEnv => "`aws_env = true`",
            CredentialField::AwsProfile => "`aws_profile = \"default\"`",
            CredentialField::NoKey => "`no_key = true`",
        }
    }
}

/// The credential settings a target or deployment gave, checked to be exactly one.
#[derive(Debug, Default)]
pub(crate) struct GivenCredentials(Vec<(CredentialField, Credential)>);

impl GivenCredentials {
    /// Note `credential` when the setting was given.
    pub(crate) fn with(
        mut self,
        field: CredentialField,
        credential: Option<Credential>,
    ) -> GivenCredentials {
        if let Some(credential) = credential {
            self.0.push((field, credential));
        }
        self
    }

    /// The one credential; `allowed` lists what to ask for when none was given.
    pub(crate) fn one(
        mut self,
        allowed: impl Iterator<Item = CredentialField>,
    ) -> Result<Credential, String> {
        match self.0.len() {
            1 => Ok(self.0.remove(0).1),
            0 => Err(format!(
                "say where its credential comes from: one of {} (for a server that takes none)",
                allowed.map(|f| f.example()).collect::<Vec<_>>().join(", ")
            )),
            _ => Err(format!(
                "`{}` and `{}` exclude each other: a target has one credential",
                self.0[0].0.name(),
                self.0[1].0.name()
            )),
        }
    }

    /// Whether any was given.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
