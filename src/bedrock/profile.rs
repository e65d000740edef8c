//! Credentials and region from the shared AWS files (feature `bedrock-profile`): `~/.aws/credentials` and
//! `~/.aws/config` (or the files `AWS_SHARED_CREDENTIALS_FILE` and `AWS_CONFIG_FILE` name), in the profile
//! `AWS_PROFILE` names, `default` otherwise.
//!
//! A small reader of our own: `aws-config`, the SDK's loader, resolves to 98 crates with its default features off
//! (the STS client, the smithy runtime, its own HTTP stack) for what here is two INI files. Static keys and
//! session tokens are read; a profile that gets its credentials some other way (`role_arn`, `sso_session`,
//! `credential_process`, `web_identity_token_file`) is refused with an error that names the key, so a caller knows
//! to plug in a [`CredentialsProvider`](super::CredentialsProvider) of their own.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::credentials::{AwsCredentials, CredentialsFuture, CredentialsProvider};
use crate::error::{ChatError, ErrorKind};

/// Profile keys that name a way of getting credentials this reader does not follow.
const UNFOLLOWED: [&str; 5] = [
    "role_arn",
    "sso_session",
    "sso_start_url",
    "credential_process",
    "web_identity_token_file",
];

/// Credentials from a profile of the shared AWS files, read when the leaf first needs them.
///
/// ```
/// # fn main() -> Result<(), tower_chat::ChatError> {
/// use tower_chat::bedrock::ProfileCredentials;
///
/// let dir = std::env::temp_dir().join("tower-chat-profile-doc");
/// std::fs::create_dir_all(&dir).unwrap();
/// let file = dir.join("credentials");
/// std::fs::write(&file, "[work]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = secret\n").unwrap();
/// let profile = ProfileCredentials::named("work").credentials_file(&file);
/// assert_eq!(profile.load()?.access_key_id(), "AKIDEXAMPLE");
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct ProfileCredentials {
    profile: Option<String>,
    credentials_file: Option<PathBuf>,
    config_file: Option<PathBuf>,
}

impl ProfileCredentials {
    /// The profile `AWS_PROFILE` names, or `default`.
    pub fn new() -> Self {
        ProfileCredentials::default()
    }

    /// This profile.
    pub fn named(profile: impl Into<String>) -> Self {
        ProfileCredentials {
            profile: Some(profile.into()),
            ..ProfileCredentials::default()
        }
    }

    /// Read credentials from this file instead of `AWS_SHARED_CREDENTIALS_FILE` or `~/.aws/credentials`.
    pub fn credentials_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.credentials_file = Some(path.into());
        self
    }

    /// Read the config from this file instead of `AWS_CONFIG_FILE` or `~/.aws/config`.
    pub fn config_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config_file = Some(path.into());
        self
    }

    /// The profile's name.
    pub fn profile_name(&self) -> String {
        self.profile
            .clone()
            .or_else(|| std::env::var("AWS_PROFILE").ok().filter(|p| !p.is_empty()))
            .unwrap_or_else(|| "default".to_owned())
    }

    fn paths(&self) -> (Option<PathBuf>, Option<PathBuf>) {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let from = |explicit: &Option<PathBuf>, var: &str, name: &str| {
            explicit
                .clone()
                .or_else(|| std::env::var_os(var).map(PathBuf::from))
                .or_else(|| home.as_ref().map(|h| h.join(".aws").join(name)))
        };
        (
            from(
                &self.credentials_file,
                "AWS_SHARED_CREDENTIALS_FILE",
                "credentials",
            ),
            from(&self.config_file, "AWS_CONFIG_FILE", "config"),
        )
    }

    /// The profile's keys: the credentials file's section over the config file's.
    fn section(&self) -> Result<HashMap<String, String>, ChatError> {
        let name = self.profile_name();
        let (credentials, config) = self.paths();
        let mut keys = HashMap::new();
        let mut found = false;
        if let Some(path) = config.as_deref() {
            // The config file names a profile `[profile NAME]`, except `[default]`.
            if let Some(section) = read_section(path, &name, true)? {
                found = true;
                keys.extend(section);
            }
        }
        if let Some(path) = credentials.as_deref() {
            if let Some(section) = read_section(path, &name, false)? {
                found = true;
                keys.extend(section);
            }
        }
        if !found {
            return Err(ChatError::new(
                ErrorKind::Authentication,
                format!("no AWS profile {name:?} in the shared credentials or config file"),
            ));
        }
        Ok(keys)
    }

    /// The profile's credentials, read now.
    pub fn load(&self) -> Result<AwsCredentials, ChatError> {
        let keys = self.section()?;
        let get = |key: &str| keys.get(key).filter(|v| !v.is_empty()).cloned();
        match (get("aws_access_key_id"), get("aws_secret_access_key")) {
            (Some(id), Some(secret)) => {
                Ok(AwsCredentials::new(id, secret, get("aws_session_token")))
            }
            _ => {
                let name = self.profile_name();
                match UNFOLLOWED.iter().find(|key| keys.contains_key(**key)) {
                    Some(key) => Err(ChatError::new(
                        ErrorKind::Unsupported,
                        format!(
                            "AWS profile {name:?} gets its credentials through `{key}`, which this reader does not \
                             follow: give the leaf a credentials provider"
                        ),
                    )),
                    None => Err(ChatError::new(
                        ErrorKind::Authentication,
                        format!("AWS profile {name:?} has no aws_access_key_id and aws_secret_access_key"),
                    )),
                }
            }
        }
    }

    /// The profile's `region`, if its files set one.
    pub fn region(&self) -> Option<String> {
        self.section()
            .ok()?
            .remove("region")
            .filter(|r| !r.is_empty())
    }
}

impl CredentialsProvider for ProfileCredentials {
    fn credentials(&self) -> CredentialsFuture<'_> {
        Box::pin(async move { self.load() })
    }
}

/// The keys of section `profile` of an INI file; `None` when the file or the section is missing.
fn read_section(
    path: &Path,
    profile: &str,
    config_file: bool,
) -> Result<Option<HashMap<String, String>>, ChatError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(ChatError::new(
                ErrorKind::Authentication,
                format!("could not read {}", path.display()),
            )
            .with_source(error))
        }
    };
    Ok(parse_section(&text, profile, config_file))
}

/// Section `profile` of INI text (`[profile NAME]` in a config file, `[NAME]` otherwise; `[default]` in both).
fn parse_section(text: &str, profile: &str, config_file: bool) -> Option<HashMap<String, String>> {
    let mut keys: Option<HashMap<String, String>> = None;
    let mut inside = false;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let header = header.trim();
            let name = if config_file && header != "default" {
                header.strip_prefix("profile ").map(str::trim)
            } else {
                Some(header)
            };
            inside = name == Some(profile);
            if inside {
                keys.get_or_insert_with(HashMap::new);
            }
            continue;
        }
        if !inside {
            continue;
        }
        if let (Some(keys), Some((key, value))) = (keys.as_mut(), line.split_once('=')) {
            keys.insert(key.trim().to_ascii_lowercase(), value.trim().to_owned());
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(credentials: &str, config: &str) -> (tempfile::TempDir, ProfileCredentials) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("credentials"), credentials).unwrap();
        std::fs::write(dir.path().join("config"), config).unwrap();
        let profile = ProfileCredentials::default()
            .credentials_file(dir.path().join("credentials"))
            .config_file(dir.path().join("config"));
        (dir, profile)
    }

    #[test]
    fn the_named_profile_is_read_from_both_files() {
        let (_dir, profile) = files(
            "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = s0\n\n\
             [work]\n# a comment\naws_access_key_id=AKIDWORK\naws_secret_access_key = s1\naws_session_token = t1\n",
            "[default]\nregion = us-east-1\n[profile work]\nregion = eu-west-3\n",
        );
        let default = profile.clone();
        let work = ProfileCredentials {
            profile: Some("work".into()),
            ..profile
        };
        assert_eq!(work.load().unwrap().access_key_id(), "AKIDWORK");
        assert!(work.load().unwrap().has_session_token());
        assert_eq!(work.region().as_deref(), Some("eu-west-3"));
        let default = ProfileCredentials {
            profile: Some("default".into()),
            ..default
        };
        assert_eq!(default.load().unwrap().access_key_id(), "AKIDDEFAULT");
        assert_eq!(default.region().as_deref(), Some("us-east-1"));
    }

    #[test]
    fn missing_profiles_and_unfollowed_sources_are_typed_errors() {
        let (_dir, profile) = files(
            "",
            "[profile assumed]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = default\n",
        );
        let missing = ProfileCredentials {
            profile: Some("nope".into()),
            ..profile.clone()
        };
        assert_eq!(
            missing.load().unwrap_err().kind(),
            &ErrorKind::Authentication
        );
        let assumed = ProfileCredentials {
            profile: Some("assumed".into()),
            ..profile
        };
        let error = assumed.load().unwrap_err();
        assert_eq!(error.kind(), &ErrorKind::Unsupported);
        assert!(error.message().contains("role_arn"), "{}", error.message());
    }
}
