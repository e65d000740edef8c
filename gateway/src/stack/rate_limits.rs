//! Rate limits and budgets per gateway key: the `[limits]` table of the configuration file, the
//! [`tower_chat_limits::LimitsLayer`] built from it, and `GET /v1/usage`.
//!
//! ```
//! use tower_chat_gateway::config_file::ConfigFile;
//!
//! let file = ConfigFile::parse(r#"
//! [limits]
//! store = "memory"
//!
//! [limits.default]
//! requests_per_minute = 60
//! output_tokens_per_minute = 100000
//! cost_per_day_usd = 5.0
//! concurrent = 4
//!
//! [limits.keys.bob]            # the caller of the `bob:<key>` line of the API keys file
//! cost_per_month_usd = 500.0
//!
//! [limits.models."gpt-4o"]     # each caller's use of gpt-4o, on top of the caller's own limits
//! requests_per_minute = 10
//!
//! [limits.teams.research]      # one budget shared by its members, on top of each member's own limits
//! members = ["alice", "bob"]
//! cost_per_day_usd = 20.0
//!
//! [limits.prices."gpt-4o-mini"] # dollars per million tokens
//! input = 0.15
//! output = 0.6
//! cached_input = 0.075
//! "#, "gateway.toml").unwrap();
//! assert!(file.limits.is_enabled());
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use tower_chat::{Cost, ModelPrice, PriceTable};
use tower_chat_limits::{LimitPolicy, Limits, LimitsLayer, RedisStore, StoreFailure, WindowLimit};

pub use crate::config::limits::{
    LimitsEntry, LimitsSection, OnStoreError, PriceEntry, StoreKind, TeamEntry,
};
use crate::GatewayError;

impl LimitsEntry {
    /// The layer's limits.
    pub fn limits(&self) -> Limits {
        Limits {
            requests: self
                .requests_per_minute
                .map(WindowLimit::per_minute)
                .or_else(|| {
                    self.requests_per_day
                        .map(|n| WindowLimit::new(n, Duration::from_secs(86_400)))
                }),
            input_tokens: self.input_tokens_per_minute.map(WindowLimit::per_minute),
            output_tokens: self.output_tokens_per_minute.map(WindowLimit::per_minute),
            cost_per_day: self.cost_per_day_usd.map(Cost::from_usd),
            cost_per_month: self.cost_per_month_usd.map(Cost::from_usd),
            concurrent: self.concurrent,
        }
    }

    fn is_empty(&self) -> bool {
        self.limits() == Limits::none()
    }
}

impl PriceEntry {
    /// The price.
    pub fn price(&self) -> ModelPrice {
        let mut price = ModelPrice::per_million_usd(self.input, self.output);
        if let Some(cached) = self.cached_input {
            price = price.cached_input_usd(cached);
        }
        if let Some(written) = self.cache_write_input {
            price = price.cache_write_input_usd(written);
        }
        if let Some(reasoning) = self.reasoning {
            price = price.reasoning_usd(reasoning);
        }
        price
    }
}

impl LimitsSection {
    /// Whether any limit is set (otherwise no limits layer runs).
    pub fn is_enabled(&self) -> bool {
        !self.default.is_empty()
            || self.keys.values().any(|e| !e.is_empty())
            || self.models.values().any(|e| !e.is_empty())
            || self.teams.values().any(|t| !t.limits().is_empty())
    }

    /// The price table.
    pub fn price_table(&self) -> PriceTable {
        let mut table = PriceTable::new();
        for (model, price) in &self.prices {
            table.insert(model.clone(), price.price());
        }
        table
    }

    /// The policy this table describes: the default, per key, per model and per team.
    ///
    /// # Errors
    /// A key listed as a member of two teams.
    pub fn policy(&self) -> Result<LimitPolicy, GatewayError> {
        let mut policy = LimitPolicy::new(self.default.limits());
        for (key, entry) in &self.keys {
            policy = policy.caller(key.clone(), entry.limits());
        }
        for (model, entry) in &self.models {
            policy = policy.model(model.clone(), entry.limits());
        }
        let mut team_of: BTreeMap<&str, &str> = BTreeMap::new();
        for (team, entry) in &self.teams {
            policy = policy.team(team.clone(), entry.limits().limits());
            for member in &entry.members {
                if let Some(other) = team_of.insert(member, team) {
                    if other != team {
                        return Err(GatewayError::Config(format!(
                            "[limits] key {member} is a member of teams {other} and {team}; a key belongs \
                             to one team"
                        )));
                    }
                }
                policy = policy.member(member.clone(), team.clone());
            }
        }
        Ok(policy)
    }

    /// The limits layer this table describes, or `None` when no limit is set.
    ///
    /// # Errors
    /// A bad Redis URL, a price or budget that is negative or not a number, or a key in two teams.
    pub fn layer(&self) -> Result<Option<LimitsLayer>, GatewayError> {
        if !self.is_enabled() {
            return Ok(None);
        }
        self.build_layer().map(Some)
    }

    /// The limits layer this table describes, even when it sets no limit (a layer whose policy is replaced
    /// while running, as managed keys do).
    ///
    /// # Errors
    /// As [`LimitsSection::layer`].
    pub fn build_layer(&self) -> Result<LimitsLayer, GatewayError> {
        let bad = |what: String| GatewayError::Config(format!("[limits] {what}"));
        let teams: Vec<(String, LimitsEntry)> = self
            .teams
            .iter()
            .map(|(t, e)| (format!("teams.{t}"), e.limits()))
            .collect();
        let entries = std::iter::once(("default".to_owned(), &self.default))
            .chain(self.keys.iter().map(|(k, e)| (format!("keys.{k}"), e)))
            .chain(self.models.iter().map(|(m, e)| (format!("models.{m}"), e)))
            .chain(teams.iter().map(|(t, e)| (t.clone(), e)));
        for (name, entry) in entries {
            for usd in [entry.cost_per_day_usd, entry.cost_per_month_usd]
                .into_iter()
                .flatten()
            {
                if !usd.is_finite() || usd < 0.0 {
                    return Err(bad(format!("{name}: a budget must be a dollar amount ≥ 0")));
                }
            }
        }
        for (model, price) in &self.prices {
            let values = [
                Some(price.input),
                Some(price.output),
                price.cached_input,
                price.reasoning,
            ];
            if values
                .into_iter()
                .flatten()
                .any(|v| !v.is_finite() || v < 0.0)
            {
                return Err(bad(format!(
                    "prices.{model}: prices must be dollar amounts ≥ 0"
                )));
            }
        }
        let policy = self.policy()?;
        let mut layer = LimitsLayer::new(policy)
            .prices(self.price_table())
            .on_store_error(match self.on_store_error {
                OnStoreError::FailClosed => StoreFailure::FailClosed,
                OnStoreError::FailOpen => StoreFailure::FailOpen,
            });
        if let Some(tokens) = self.default_max_output_tokens {
            layer = layer.default_max_output_tokens(tokens);
        }
        if self.store == StoreKind::Redis {
            let url = self
                .redis_url
                .clone()
                .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned());
            let mut store = RedisStore::builder(url).timeout(Duration::from_secs(1));
            if let Some(prefix) = &self.redis_prefix {
                store = store.prefix(prefix.clone());
            }
            layer = layer.store(store.build().map_err(|e| bad(e.to_string()))?);
        }
        Ok(layer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::file::ConfigFile;

    #[test]
    fn an_empty_table_runs_no_layer_and_unknown_keys_are_refused() {
        let file = ConfigFile::parse("[limits]\nstore = \"memory\"\n", "g.toml").unwrap();
        assert!(!file.limits.is_enabled());
        assert!(file.limits.layer().unwrap().is_none());
        let err =
            ConfigFile::parse("[limits.default]\nrequests_per_hour = 1\n", "g.toml").unwrap_err();
        assert_eq!(err.line(), Some(2), "{err}");
        let err = ConfigFile::parse("[limits]\nstore = \"etcd\"\n", "g.toml").unwrap_err();
        assert!(
            err.message().contains("etcd") || err.message().contains("variant"),
            "{err}"
        );
    }

    #[test]
    fn entries_become_limits_and_prices() {
        let file = ConfigFile::parse(
            "[limits.default]\nrequests_per_minute = 2\ncost_per_day_usd = 1.5\n\
             [limits.prices.\"m\"]\ninput = 1.0\noutput = 2.0\nreasoning = 4.0\n",
            "g.toml",
        )
        .unwrap();
        let limits = file.limits.default.limits();
        assert_eq!(limits.requests, Some(WindowLimit::per_minute(2)));
        assert_eq!(limits.cost_per_day, Some(Cost::from_usd(1.5)));
        let price = *file.limits.price_table().price("m").unwrap();
        assert_eq!(
            price,
            ModelPrice::per_million_usd(1.0, 2.0).reasoning_usd(4.0)
        );
        let bad =
            ConfigFile::parse("[limits.default]\ncost_per_day_usd = -1.0\n", "g.toml").unwrap();
        assert!(bad.limits.layer().is_err());
    }

    /// The guide's example parses, and its team's members share one budget.
    #[test]
    fn the_documented_example_has_a_team() {
        let page = include_str!("../../../docs/src/gateway/limits.md");
        let start = page.find("[limits]\nstore").unwrap();
        let end = start + page[start..].find("```").unwrap();
        let file = ConfigFile::parse(&page[start..end], "limits.md").unwrap();
        let policy = file.limits.policy().unwrap();
        assert_eq!(policy.team_of("alice"), Some("research"));
        let scopes = policy.scopes("alice", None);
        let team = scopes.last().unwrap();
        assert!(team.key.team, "{scopes:?}");
        assert_eq!(&*team.key.caller, "research");
        assert_eq!(team.limits.cost_per_day, Some(Cost::from_usd(20.0)));
        assert_eq!(policy.team_of("bob"), None);
    }

    #[test]
    fn a_key_in_two_teams_and_an_unknown_team_field_are_refused() {
        let two = ConfigFile::parse(
            "[limits.teams.a]\nmembers = [\"k\"]\ncost_per_day_usd = 1.0\n\
             [limits.teams.b]\nmembers = [\"k\"]\ncost_per_day_usd = 1.0\n",
            "g.toml",
        )
        .unwrap();
        let error = two.limits.layer().unwrap_err().to_string();
        assert!(
            error.contains("key k is a member of teams a and b"),
            "{error}"
        );
        let error = ConfigFile::parse(
            "[limits.teams.a]\nmembers = [\"k\"]\ncost_per_dya_usd = 1.0\n",
            "g.toml",
        )
        .unwrap_err();
        assert!(error.message().contains("cost_per_dya_usd"), "{error}");
        let negative = ConfigFile::parse(
            "[limits.teams.a]\nmembers = [\"k\"]\ncost_per_day_usd = -1.0\n",
            "g.toml",
        )
        .unwrap();
        let error = negative.limits.layer().unwrap_err().to_string();
        assert!(error.contains("teams.a"), "{error}");
    }
}
