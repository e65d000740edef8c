//! `[upstreams]`: the models clients may name, each served by ordered fallback targets, with the retry policy,
//! the circuit breakers and the timeouts (built by `stack::upstreams`). Each target is checked where the file is
//! read ([`target`]), so an error names the table's line.

use std::collections::HashSet;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub mod target;

pub use target::{
    AzureTarget, BedrockTarget, DeploymentSection, Endpoint, GeminiTarget, KeyedTarget,
    ProviderTarget, TargetSection, VertexTarget,
};

/// The `[upstreams]` table.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamsSection {
    /// `[[upstreams.models]]`: the models clients may name. None: the single `--upstream`.
    #[serde(default, deserialize_with = "models")]
    pub models: Vec<ModelSection>,
    /// `[upstreams.retry]`.
    #[serde(default, deserialize_with = "checked")]
    pub retry: RetrySection,
    /// `[upstreams.breaker]`: one breaker per target (per deployment when balanced).
    #[serde(default, deserialize_with = "checked")]
    pub breaker: BreakerSection,
    /// `[upstreams.timeouts]`: every leaf's deadlines.
    #[serde(default, deserialize_with = "checked")]
    pub timeouts: TimeoutsSection,
}

/// One model clients may name.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// The name clients send as `model`, or a pattern of them (`claude-*`: `*` is any run of characters).
    pub name: String,
    /// More names and patterns that reach this model (`["sonnet", "claude-sonnet-*"]`). A client's name reaches
    /// the model it names exactly, else the one with the longest matching pattern.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// The targets, in fallback order.
    #[serde(deserialize_with = "targets")]
    pub targets: Vec<TargetSection>,
    /// Keep each conversation on one deployment of a balanced target (default false).
    #[serde(default)]
    pub sticky: bool,
}

/// `[upstreams.retry]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetrySection {
    /// Calls per model call, the first included (1: no retries).
    pub max_attempts: u32,
    /// Backoff ceiling after the first failure, in milliseconds.
    pub base_backoff_ms: u64,
    /// The largest backoff ceiling, in milliseconds.
    pub max_backoff_ms: u64,
    /// The longest `Retry-After` waited for, in seconds.
    pub retry_after_cap_secs: f64,
    /// The whole call's deadline until its first content event, in seconds (none by default).
    pub deadline_secs: Option<f64>,
    /// Retries allowed as a percentage of calls (0–1000), over a 10 s window, shared by every request.
    pub budget_percent: f32,
    /// Retries always allowed per second, whatever the percentage.
    pub budget_min_per_sec: u32,
}

impl Default for RetrySection {
    fn default() -> Self {
        RetrySection {
            max_attempts: 3,
            base_backoff_ms: 500,
            max_backoff_ms: 30_000,
            retry_after_cap_secs: 60.0,
            deadline_secs: None,
            budget_percent: 20.0,
            budget_min_per_sec: 10,
        }
    }
}

/// `[upstreams.breaker]`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerSection {
    /// Failures in a row that open a target's circuit.
    pub consecutive_failures: u32,
    /// How long an open circuit refuses calls before a probe, in seconds.
    pub open_for_secs: f64,
    /// Also open at this share of failed calls (0–1) in the window.
    pub failure_ratio: Option<f64>,
    /// The fewest calls in the window before the ratio counts.
    pub min_calls: u32,
    /// The ratio's sliding window, in seconds.
    pub window_secs: f64,
}

impl Default for BreakerSection {
    fn default() -> Self {
        BreakerSection {
            consecutive_failures: 5,
            open_for_secs: 30.0,
            failure_ratio: None,
            min_calls: 20,
            window_secs: 60.0,
        }
    }
}

/// `[upstreams.timeouts]`, in seconds.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TimeoutsSection {
    /// Connection setup (default 10).
    pub connect_secs: Option<f64>,
    /// Until the response headers (default `--upstream-timeout`).
    pub first_byte_secs: Option<f64>,
    /// Between two chunks (default `--upstream-timeout`).
    pub idle_secs: Option<f64>,
}

/// A table whose values are checked where the file is read (the error names the table and key; the TOML
/// parser adds the table's line), and again by the stack for a section built in code.
pub trait Checked {
    /// `Err` names the table, the key and what it must be.
    fn check(&self) -> Result<(), String>;
}

fn checked<'de, D: Deserializer<'de>, T: Deserialize<'de> + Checked>(
    deserializer: D,
) -> Result<T, D::Error> {
    let section = T::deserialize(deserializer)?;
    section.check().map_err(serde::de::Error::custom)?;
    Ok(section)
}

/// `value` as a positive duration, or the error naming `table` and `key`.
pub fn positive_seconds(value: f64, table: &str, key: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            format!("[upstreams.{table}] `{key}` must be a positive number of seconds, not {value}")
        })
}

impl Checked for RetrySection {
    fn check(&self) -> Result<(), String> {
        if self.max_attempts == 0 {
            return Err("[upstreams.retry] `max_attempts` must be at least 1".into());
        }
        if !(0.0..=1000.0).contains(&self.budget_percent) {
            return Err(format!(
                "[upstreams.retry] `budget_percent` must be between 0 and 1000, not {}",
                self.budget_percent
            ));
        }
        if self.budget_min_per_sec >= i32::MAX as u32 {
            return Err("[upstreams.retry] `budget_min_per_sec` is too large".into());
        }
        if Duration::try_from_secs_f64(self.retry_after_cap_secs).is_err() {
            return Err(format!(
                "[upstreams.retry] `retry_after_cap_secs` must be 0 or more, not {}",
                self.retry_after_cap_secs
            ));
        }
        if let Some(deadline) = self.deadline_secs {
            positive_seconds(deadline, "retry", "deadline_secs")?;
        }
        Ok(())
    }
}

impl Checked for BreakerSection {
    fn check(&self) -> Result<(), String> {
        if self.consecutive_failures == 0 {
            return Err("[upstreams.breaker] `consecutive_failures` must be at least 1".into());
        }
        positive_seconds(self.open_for_secs, "breaker", "open_for_secs")?;
        if let Some(ratio) = self.failure_ratio {
            if !(0.0..=1.0).contains(&ratio) || ratio == 0.0 {
                return Err(format!(
                    "[upstreams.breaker] `failure_ratio` must be in (0, 1], not {ratio}"
                ));
            }
            positive_seconds(self.window_secs, "breaker", "window_secs")?;
        }
        Ok(())
    }
}

impl Checked for TimeoutsSection {
    fn check(&self) -> Result<(), String> {
        for (value, key) in [
            (self.connect_secs, "connect_secs"),
            (self.first_byte_secs, "first_byte_secs"),
            (self.idle_secs, "idle_secs"),
        ] {
            if let Some(value) = value {
                positive_seconds(value, "timeouts", key)?;
            }
        }
        Ok(())
    }
}

/// Validation inside deserialization, so that the TOML parser reports the offending table's line.
fn models<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<ModelSection>, D::Error> {
    let models = Vec::<ModelSection>::deserialize(deserializer)?;
    let mut seen = HashSet::new();
    for model in &models {
        if model.name.trim().is_empty() {
            return Err(serde::de::Error::custom(
                "a model's `name` must not be empty",
            ));
        }
        if !seen.insert(model.name.as_str()) {
            return Err(serde::de::Error::custom(format!(
                "the model `{}` is configured twice",
                model.name
            )));
        }
    }
    // Aliases after every name: an alias may not take another model's name either.
    for model in &models {
        for alias in &model.aliases {
            if alias.trim().is_empty() {
                return Err(serde::de::Error::custom(format!(
                    "model `{}`: an alias must not be empty",
                    model.name
                )));
            }
            if !seen.insert(alias.as_str()) {
                return Err(serde::de::Error::custom(format!(
                    "model `{}`: `{alias}` already reaches a model",
                    model.name
                )));
            }
        }
    }
    Ok(models)
}

fn targets<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<TargetSection>, D::Error> {
    use serde::de::Error;
    let targets = Vec::<TargetSection>::deserialize(deserializer)?;
    if targets.is_empty() {
        return Err(D::Error::custom("a model needs at least one target"));
    }
    let mut seen = HashSet::new();
    for target in &targets {
        let name = target.display_name();
        if !seen.insert(name.clone()) {
            return Err(D::Error::custom(format!(
                "two targets are named `{name}`: give one a `name`"
            )));
        }
    }
    Ok(targets)
}

#[cfg(test)]
mod tests;
