//! What a call costs: [`Cost`] (an exact amount of US dollars), [`ModelPrice`] and the [`PriceTable`] that maps
//! model ids to prices. The limits layer charges budgets with it and the persistence layer records it, so both
//! agree on every call's cost to the nano-dollar.

use std::fmt;
use std::ops::{Add, AddAssign};

use serde::{Deserialize, Serialize};

use crate::event::Usage;

/// An amount of US dollars, counted exactly in nano-dollars (10⁻⁹ USD): sums never drift as floating point
/// sums do, and Redis and SQL counters add them as integers. `u64` holds up to about 18 billion dollars.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Cost(u64);

impl Cost {
    /// Nothing.
    pub const ZERO: Cost = Cost(0);

    /// An amount in nano-dollars.
    pub const fn from_nanos(nanos: u64) -> Self {
        Cost(nanos)
    }

    /// An amount in dollars, rounded to the nearest nano-dollar (negative and NaN amounts become zero).
    pub fn from_usd(usd: f64) -> Self {
        Cost((usd * 1e9).round().max(0.0) as u64)
    }

    /// The amount in nano-dollars.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// The amount in dollars (for display; sums are exact only in nano-dollars).
    pub fn as_usd(self) -> f64 {
        self.0 as f64 / 1e9
    }

    /// `self - other`, or zero.
    pub fn saturating_sub(self, other: Cost) -> Cost {
        Cost(self.0.saturating_sub(other.0))
    }
}

impl Add for Cost {
    type Output = Cost;

    fn add(self, other: Cost) -> Cost {
        Cost(self.0.saturating_add(other.0))
    }
}

impl AddAssign for Cost {
    fn add_assign(&mut self, other: Cost) {
        *self = *self + other;
    }
}

impl fmt::Display for Cost {
    /// `$0.000123456`: dollars with nine decimals.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "${}.{:09}",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

/// The price of one model, per million tokens, in nano-dollars (so `$0.15 / 1M tokens` is `150_000_000`; build
/// it from dollars with [`ModelPrice::per_million_usd`]).
///
/// How a [`Usage`] is priced: cached input tokens (a part of the input tokens) at `cached_input` (the input
/// price when unset), tokens written to the cache (also a part of the input) at `cache_write_input` (the input
/// price when unset), the rest of the input at `input`; reasoning tokens (a part of the output tokens) at
/// `reasoning` (the output price when unset), the rest of the output at `output`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModelPrice {
    /// Input (prompt) tokens.
    pub input: u64,
    /// Output (generated) tokens.
    pub output: u64,
    /// Input tokens served from the provider's prompt cache; `None`: the input price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<u64>,
    /// Input tokens written to the provider's prompt cache (Anthropic: 1.25× the input price for a 5-minute
    /// entry, 2× for an hour); `None`: the input price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_input: Option<u64>,
    /// Reasoning tokens; `None`: the output price.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<u64>,
}

impl ModelPrice {
    /// Input and output prices in dollars per million tokens.
    pub fn per_million_usd(input: f64, output: f64) -> Self {
        ModelPrice {
            input: Cost::from_usd(input).as_nanos(),
            output: Cost::from_usd(output).as_nanos(),
            cached_input: None,
            cache_write_input: None,
            reasoning: None,
        }
    }

    /// Set the cached-input price in dollars per million tokens.
    pub fn cached_input_usd(mut self, per_million: f64) -> Self {
        self.cached_input = Some(Cost::from_usd(per_million).as_nanos());
        self
    }

    /// Set the cache-write price in dollars per million tokens.
    pub fn cache_write_input_usd(mut self, per_million: f64) -> Self {
        self.cache_write_input = Some(Cost::from_usd(per_million).as_nanos());
        self
    }

    /// Set the reasoning price in dollars per million tokens.
    pub fn reasoning_usd(mut self, per_million: f64) -> Self {
        self.reasoning = Some(Cost::from_usd(per_million).as_nanos());
        self
    }

    /// What `usage` costs at this price, rounded up to the next nano-dollar: nothing for usage a response cache
    /// replayed ([`Usage::from_response_cache`]), which no provider was paid for.
    pub fn cost(&self, usage: &Usage) -> Cost {
        if usage.from_response_cache {
            return Cost(0);
        }
        let cached = usage
            .cached_input_tokens
            .unwrap_or(0)
            .min(usage.input_tokens);
        let written = usage
            .cache_write_input_tokens
            .unwrap_or(0)
            .min(usage.input_tokens - cached);
        let reasoning = usage.reasoning_tokens.unwrap_or(0).min(usage.output_tokens);
        // Each product fits a u128 but their sum may not (at absurd prices and token counts): it saturates,
        // and any sum above `u64::MAX` million nano-dollars is `u64::MAX` nano-dollars anyway.
        let per_million: u128 = (u128::from(usage.input_tokens - cached - written)
            * u128::from(self.input))
        .saturating_add(u128::from(cached) * u128::from(self.cached_input.unwrap_or(self.input)))
        .saturating_add(
            u128::from(written) * u128::from(self.cache_write_input.unwrap_or(self.input)),
        )
        .saturating_add(u128::from(usage.output_tokens - reasoning) * u128::from(self.output))
        .saturating_add(u128::from(reasoning) * u128::from(self.reasoning.unwrap_or(self.output)));
        // Divided as a u64 when it fits (the usual case: a 128-bit division is a library call).
        let nanos = match u64::try_from(per_million) {
            Ok(small) => small.div_ceil(1_000_000),
            Err(_) => u64::try_from(per_million.div_ceil(1_000_000)).unwrap_or(u64::MAX),
        };
        Cost(nanos)
    }
}

/// Prices by model id.
///
/// A model id is looked up exactly first, then by the longest listed prefix (so `gpt-4o-mini` also prices
/// `gpt-4o-mini-2024-07-18`, which providers report as the answering model), then the fallback price if one
/// was set.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriceTable {
    /// Model id (or id prefix) → price, kept sorted by id.
    models: Vec<(String, ModelPrice)>,
    /// The price of models not listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fallback: Option<ModelPrice>,
}

impl PriceTable {
    /// An empty table: no model has a price.
    pub fn new() -> Self {
        PriceTable::default()
    }

    /// Set the price of a model id (or id prefix).
    pub fn with(mut self, model: impl Into<String>, price: ModelPrice) -> Self {
        self.insert(model, price);
        self
    }

    /// Set the price of models not listed.
    pub fn with_fallback(mut self, price: ModelPrice) -> Self {
        self.fallback = Some(price);
        self
    }

    /// Set the price of a model id (or id prefix), replacing an earlier one.
    pub fn insert(&mut self, model: impl Into<String>, price: ModelPrice) {
        let model = model.into();
        match self
            .models
            .binary_search_by(|(m, _)| m.as_str().cmp(&model))
        {
            Ok(at) => self.models[at].1 = price,
            Err(at) => self.models.insert(at, (model, price)),
        }
    }

    /// Whether no model has a price.
    pub fn is_empty(&self) -> bool {
        self.models.is_empty() && self.fallback.is_none()
    }

    /// The price of `model`: exact id, else the longest listed prefix, else the fallback.
    pub fn price(&self, model: &str) -> Option<&ModelPrice> {
        if let Ok(at) = self.models.binary_search_by(|(m, _)| m.as_str().cmp(model)) {
            return Some(&self.models[at].1);
        }
        self.models
            .iter()
            .filter(|(m, _)| model.starts_with(m.as_str()))
            .max_by_key(|(m, _)| m.len())
            .map(|(_, p)| p)
            .or(self.fallback.as_ref())
    }

    /// What `usage` of `model` costs, if the model has a price.
    pub fn cost(&self, model: &str, usage: &Usage) -> Option<Cost> {
        self.price(model).map(|p| p.cost(usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(input: u64, output: u64, cached: Option<u64>, reasoning: Option<u64>) -> Usage {
        Usage {
            from_response_cache: false,
            input_tokens: input,
            output_tokens: output,
            cached_input_tokens: cached,
            reasoning_tokens: reasoning,
            cache_write_input_tokens: None,
        }
    }

    #[test]
    fn usage_a_response_cache_replayed_costs_nothing() {
        let price = ModelPrice::per_million_usd(0.15, 0.6);
        let mut replayed = usage(1_000, 1_000, None, None);
        assert!(price.cost(&replayed) > Cost::ZERO);
        replayed.from_response_cache = true;
        assert_eq!(price.cost(&replayed), Cost::ZERO);
    }

    #[test]
    fn absurd_prices_and_token_counts_saturate_instead_of_overflowing() {
        let max = ModelPrice {
            input: u64::MAX,
            output: u64::MAX,
            cached_input: Some(u64::MAX),
            cache_write_input: Some(u64::MAX),
            reasoning: Some(u64::MAX),
        };
        // Four products of nearly u64::MAX × u64::MAX: their sum overflows a u128.
        let all = usage(u64::MAX, u64::MAX, Some(u64::MAX / 2), Some(u64::MAX / 2));
        assert_eq!(max.cost(&all), Cost::from_nanos(u64::MAX));
        // Sums of 2^64 - 1, 2^64 and 2^64 + 1 (either side of the u64 division path) all round up to
        // 18,446,744,073,710 nano-dollars.
        let one = ModelPrice {
            input: 1,
            output: 1,
            cached_input: None,
            cache_write_input: None,
            reasoning: None,
        };
        for (input, output) in [(u64::MAX - 1, 1), (u64::MAX, 1), (u64::MAX, 2)] {
            assert_eq!(
                one.cost(&usage(input, output, None, None)),
                Cost::from_nanos(18_446_744_073_710)
            );
        }
        // And a sum just over a multiple of a million rounds up by one nano-dollar.
        assert_eq!(
            one.cost(&usage(1_000_000, 1, None, None)),
            Cost::from_nanos(2)
        );
    }

    #[test]
    fn prices_each_kind_of_token_exactly() {
        let price = ModelPrice::per_million_usd(2.5, 10.0)
            .cached_input_usd(1.25)
            .reasoning_usd(20.0);
        // 600 plain input × 2.5 + 400 cached × 1.25 + 100 plain output × 10 + 50 reasoning × 20 (per million).
        let cost = price.cost(&usage(1000, 150, Some(400), Some(50)));
        assert_eq!(
            cost,
            Cost::from_nanos(1_500_000 + 500_000 + 1_000_000 + 1_000_000)
        );
        // Without cached/reasoning prices those tokens cost the input/output price.
        let plain = ModelPrice::per_million_usd(2.5, 10.0);
        assert_eq!(
            plain.cost(&usage(1000, 150, Some(400), Some(50))),
            Cost::from_nanos(2_500_000 + 1_500_000)
        );
    }

    #[test]
    fn cache_writes_are_priced_at_the_cache_write_rate() {
        let price = ModelPrice::per_million_usd(3.0, 15.0)
            .cached_input_usd(0.3)
            .cache_write_input_usd(3.75);
        let mut used = usage(1000, 0, Some(200), None);
        used.cache_write_input_tokens = Some(500);
        // 300 plain × 3 + 200 read × 0.3 + 500 written × 3.75 (per million).
        assert_eq!(
            price.cost(&used),
            Cost::from_nanos(900_000 + 60_000 + 1_875_000)
        );
        // Counts beyond the input are capped at what is left of it.
        used.cache_write_input_tokens = Some(5000);
        assert_eq!(price.cost(&used), Cost::from_nanos(60_000 + 800 * 3_750));
    }

    #[test]
    fn rounds_up_to_the_next_nano_dollar() {
        // One input token at $0.15/M is exactly 150 nano-dollars.
        let price = ModelPrice::per_million_usd(0.15, 0.6);
        assert_eq!(price.cost(&usage(1, 0, None, None)), Cost::from_nanos(150));
        // At one nano-dollar per million tokens, a million and one tokens cost 1.000001: charged as 2.
        let tiny = ModelPrice {
            input: 1,
            output: 1,
            cached_input: None,
            cache_write_input: None,
            reasoning: None,
        };
        assert_eq!(
            tiny.cost(&usage(1_000_001, 0, None, None)),
            Cost::from_nanos(2)
        );
        assert_eq!(
            tiny.cost(&usage(1_000_000, 0, None, None)),
            Cost::from_nanos(1)
        );
        assert_eq!(price.cost(&usage(0, 0, None, None)), Cost::ZERO);
    }

    #[test]
    fn looks_models_up_exactly_then_by_longest_prefix_then_fallback() {
        let mini = ModelPrice::per_million_usd(0.15, 0.6);
        let big = ModelPrice::per_million_usd(2.5, 10.0);
        let other = ModelPrice::per_million_usd(1.0, 1.0);
        let table = PriceTable::new()
            .with("gpt-4o", big)
            .with("gpt-4o-mini", mini);
        assert_eq!(table.price("gpt-4o"), Some(&big));
        assert_eq!(table.price("gpt-4o-mini-2024-07-18"), Some(&mini));
        assert_eq!(table.price("gpt-4o-2024-08-06"), Some(&big));
        assert_eq!(table.price("claude-sonnet-4-5"), None);
        let table = table.with_fallback(other);
        assert_eq!(table.price("claude-sonnet-4-5"), Some(&other));
    }

    #[test]
    fn cost_displays_in_dollars() {
        assert_eq!(Cost::from_usd(1.5).to_string(), "$1.500000000");
        assert_eq!(Cost::from_nanos(42).to_string(), "$0.000000042");
        assert_eq!(Cost::from_usd(-3.0), Cost::ZERO);
    }
}
