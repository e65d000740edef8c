//! [`Demand`]: what a call consumes, and what settling it adds to each counter.

use tower_chat::Cost;

use crate::limits::CounterKind;

/// What a call consumes, or is expected to consume.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Demand {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cost; zero when none of the call's scopes has a cost budget (the layer prices a call only for one).
    pub cost: Cost,
}

impl Demand {
    /// What this demand adds to each counter kind, indexed by [`CounterKind::index`].
    pub(crate) fn amounts(&self) -> [u64; 6] {
        let cost = self.cost.as_nanos();
        [1, self.input_tokens, self.output_tokens, cost, cost, 1]
    }

    /// What this demand adds to a counter of `kind` (one request, one call in progress, tokens, nano-dollars).
    pub fn amount(&self, kind: CounterKind) -> u64 {
        match kind {
            CounterKind::Requests | CounterKind::Concurrent => 1,
            CounterKind::InputTokens => self.input_tokens,
            CounterKind::OutputTokens => self.output_tokens,
            CounterKind::CostPerDay | CounterKind::CostPerMonth => self.cost.as_nanos(),
        }
    }

    /// What settling `actual` against this reservation adds to a counter of `kind`: the difference for tokens
    /// and cost, nothing for requests (a call stays counted), minus one for calls in progress.
    /// A difference beyond `i64` saturates at its bound.
    pub fn settle_delta(&self, actual: &Demand, kind: CounterKind) -> i64 {
        match kind {
            CounterKind::Requests => 0,
            CounterKind::Concurrent => -1,
            kind => difference(actual.amount(kind), self.amount(kind)),
        }
    }

    /// [`Demand::settle_delta`] of every kind, indexed by [`CounterKind::index`].
    pub(crate) fn settle_deltas(&self, actual: &Demand) -> [i64; 6] {
        let cost = difference(actual.cost.as_nanos(), self.cost.as_nanos());
        [
            0,
            difference(actual.input_tokens, self.input_tokens),
            difference(actual.output_tokens, self.output_tokens),
            cost,
            cost,
            -1,
        ]
    }
}

/// `actual - reserved`, saturated to `i64`.
fn difference(actual: u64, reserved: u64) -> i64 {
    if actual >= reserved {
        i64::try_from(actual - reserved).unwrap_or(i64::MAX)
    } else {
        i64::try_from(reserved - actual).map_or(i64::MIN, |d| -d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_and_deltas_per_kind_agree_with_the_per_kind_answers() {
        let reserved = Demand {
            input_tokens: 100,
            output_tokens: 4096,
            cost: Cost::from_nanos(u64::MAX),
        };
        let actual = Demand {
            input_tokens: 120,
            output_tokens: 3,
            cost: Cost::ZERO,
        };
        let amounts = reserved.amounts();
        let deltas = reserved.settle_deltas(&actual);
        for kind in CounterKind::ALL {
            assert_eq!(amounts[kind.index()], reserved.amount(kind), "{kind}");
            assert_eq!(
                deltas[kind.index()],
                reserved.settle_delta(&actual, kind),
                "{kind}"
            );
        }
        assert_eq!(deltas[CounterKind::InputTokens.index()], 20);
        assert_eq!(deltas[CounterKind::OutputTokens.index()], -4093);
        // Beyond i64 the difference saturates on its own side.
        assert_eq!(deltas[CounterKind::CostPerDay.index()], i64::MIN);
        assert_eq!(
            actual.settle_delta(&reserved, CounterKind::CostPerMonth),
            i64::MAX
        );
    }
}
