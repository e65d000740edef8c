//! Where a target is called: one endpoint with its credential, or deployments that carry their own URL and key.

use serde::Deserialize;

use crate::config::credential::{Credential, CredentialField, GivenCredentials};

/// Where a target is called.
#[derive(Clone, Debug, PartialEq)]
pub enum Endpoint {
    /// One endpoint.
    Single {
        /// The base URL (`None`: the kind's default, see [`TargetSection::url`](super::TargetSection::url)).
        base_url: Option<String>,
        /// Where its credential comes from.
        credential: Credential,
    },
    /// Balanced over these deployments, each with its own URL and key.
    Balanced(Vec<DeploymentSection>),
}

/// One deployment of a balanced target.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentSection {
    /// The name in metrics (default: the target's name and the position).
    pub name: Option<String>,
    /// The base URL.
    pub base_url: String,
    /// The environment variable holding this deployment's key. Not with `no_key`.
    pub key_env: Option<String>,
    /// The deployment takes no key. Not with `key_env`.
    #[serde(default)]
    pub no_key: bool,
    /// Relative capacity (default 1, at least 1).
    #[serde(default = "one")]
    pub weight: u32,
}

impl DeploymentSection {
    /// Where its key comes from (checked to be exactly one of `key_env` and `no_key` where the file is read).
    pub fn credential(&self) -> Credential {
        match &self.key_env {
            Some(variable) if !self.no_key => Credential::KeyEnv(variable.clone()),
            _ => Credential::NoKey,
        }
    }
}

fn one() -> u32 {
    1
}

/// A single endpoint with exactly one credential, or deployments that carry the URL and the key themselves.
pub(super) fn endpoint(
    base_url: Option<String>,
    deployments: Vec<DeploymentSection>,
    given: GivenCredentials,
    settings: &[&str],
) -> Result<Endpoint, String> {
    if deployments.is_empty() {
        if let Some(url) = &base_url {
            check_url(url)?;
        }
        let allowed = CredentialField::ALL
            .into_iter()
            .filter(|field| settings.contains(&field.name()));
        return Ok(Endpoint::Single {
            base_url,
            credential: given.one(allowed)?,
        });
    }
    if base_url.is_some() || !given.is_empty() {
        return Err(
            "`base_url` and the credential (`key_env`, `key_file`, `no_key`, …) go in each deployment when \
             `deployments` is given"
                .into(),
        );
    }
    for (i, deployment) in deployments.iter().enumerate() {
        check_url(&deployment.base_url)
            .and_then(|()| check_key(deployment.key_env.as_deref(), deployment.no_key))
            .map_err(|e| format!("deployment {}: {e}", i + 1))?;
    }
    Ok(Endpoint::Balanced(deployments))
}

/// A deployment says where its key comes from: exactly one of `key_env` and `no_key = true`.
fn check_key(key_env: Option<&str>, no_key: bool) -> Result<(), String> {
    match (key_env, no_key) {
        (Some(_), false) | (None, true) => Ok(()),
        (Some(_), true) => Err("`key_env` and `no_key = true` exclude each other".into()),
        (None, false) => Err(
            "name the environment variable holding its key (`key_env = \"VAR\"`), or say that it takes none \
             (`no_key = true`)"
                .into(),
        ),
    }
}

fn check_url(url: &str) -> Result<(), String> {
    match url.parse::<http::Uri>() {
        Ok(uri) if matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some() => {
            Ok(())
        }
        _ => Err(format!("`{url}` is not an http(s) URL")),
    }
}
