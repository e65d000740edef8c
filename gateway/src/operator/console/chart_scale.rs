//! The y axis of a console chart: which scale it uses, where its ticks fall, and where a value is drawn.
//!
//! An axis shows the whole range of its values, nothing clipped: linear from zero to a round bound (1, 2 or
//! 5 × 10ⁿ) as a rule, logarithmic when the largest value is more than [`LOG_FACTOR`] times the typical one, so
//! one slow call neither flattens the rest nor leaves the axis. Ticks fall on round values (1-2-5 steps or
//! decades) and stay at least [`MIN_TICK_GAP`] pixels apart, so their labels never overlap: a tall range keeps
//! every second (third, …) decade. On a log axis a zero has no place: it is drawn on the bottom line, the axis
//! floor (the round value at or below the smallest value above zero).

/// How values map to heights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Scale {
    /// Proportional, from zero.
    Linear,
    /// Proportional to the logarithm, from the axis floor.
    Log,
}

impl Scale {
    /// The name tests and stylesheets read (`data-scale`).
    pub(super) fn name(self) -> &'static str {
        match self {
            Scale::Linear => "linear",
            Scale::Log => "log",
        }
    }
}

/// How many times the typical value the largest must exceed for the axis to turn logarithmic.
pub(super) const LOG_FACTOR: f64 = 10.0;

/// The least distance between two ticks, in pixels: a 12 px label and room to read it apart from its neighbour.
pub(super) const MIN_TICK_GAP: f64 = 20.0;

/// A y axis: its scale, its ticks from the bottom (the first is the axis floor, the last its top), and its
/// height in pixels.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct YAxis {
    pub(super) scale: Scale,
    pub(super) ticks: Vec<f64>,
    pub(super) height: f64,
}

impl YAxis {
    /// The axis for `values` on a plot `height` pixels tall: logarithmic when the largest value is more than
    /// [`LOG_FACTOR`] × `typical` (the typical value of the data, when the chart has one), linear otherwise.
    pub(super) fn fit(
        values: impl IntoIterator<Item = f64>,
        typical: Option<f64>,
        height: f64,
    ) -> Self {
        let values: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
        let largest = values.iter().fold(0.0f64, |a, b| a.max(*b));
        let smallest = values
            .iter()
            .filter(|v| **v > 0.0)
            .fold(f64::INFINITY, |a, b| a.min(*b));
        let spread = typical.is_some_and(|t| t > 0.0 && largest > LOG_FACTOR * t);
        let ticks = if spread {
            log_ticks(smallest, largest, height)
        } else {
            let top = nice_max(largest);
            (0..=4).map(|step| top * f64::from(step) / 4.0).collect()
        };
        YAxis {
            scale: if spread { Scale::Log } else { Scale::Linear },
            ticks,
            height,
        }
    }

    fn floor(&self) -> f64 {
        self.ticks[0]
    }

    fn top(&self) -> f64 {
        self.ticks[self.ticks.len() - 1]
    }

    /// Where `value` is drawn, in pixels from the plot's top: always within `0..=height` (a zero on a log
    /// axis, or anything below its floor, on the bottom line).
    pub(super) fn y(&self, value: f64) -> f64 {
        let (floor, top) = (self.floor(), self.top());
        let share = match self.scale {
            Scale::Linear => (value - floor) / (top - floor),
            Scale::Log => {
                (value.max(floor).log10() - floor.log10()) / (top.log10() - floor.log10())
            }
        };
        let share = if share.is_finite() { share } else { 0.0 };
        self.height * (1.0 - share.clamp(0.0, 1.0))
    }
}

/// A round upper bound for a linear axis (1, 2 or 5 × 10ⁿ).
pub(super) fn nice_max(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|v| *v >= max * (1.0 - 1e-12))
        .unwrap_or(10.0 * magnitude)
}

/// `m` × 10^`e`, read from its decimal form so that `0.1` or `0.02` is the same number as the literal.
fn round_value(m: u32, e: i32) -> f64 {
    format!("{m}e{e}").parse().unwrap_or(f64::NAN)
}

/// The exponent of the decade at or below `v`, robust to `log10` landing a hair under a whole number.
fn decade_below(v: f64) -> i32 {
    (v.log10() + 1e-9).floor() as i32
}

/// The exponent of the decade at or above `v`.
fn decade_above(v: f64) -> i32 {
    (v.log10() - 1e-9).ceil() as i32
}

/// The largest round value (1, 2 or 5 × 10ⁿ) at or below `min`.
fn nice_min(min: f64) -> f64 {
    let e = decade_below(min);
    [5, 2, 1]
        .into_iter()
        .map(|m| round_value(m, e))
        .find(|v| *v <= min * (1.0 + 1e-12))
        .unwrap_or_else(|| round_value(1, e))
}

/// Ticks of a log axis from `smallest` (the least value above zero) to `largest`: every 1-2-5 value over a
/// range of up to two decades when they stand [`MIN_TICK_GAP`] apart (wider, so many labels read as clutter),
/// else decades, thinned to every k-th when even those are too close; the ends
/// are ticks themselves, so the axis floor and top are round values too.
fn log_ticks(smallest: f64, largest: f64, height: f64) -> Vec<f64> {
    let smallest = if smallest.is_finite() {
        smallest
    } else {
        largest
    };
    let (floor, top) = (nice_min(smallest), nice_max(largest));
    let top = if top > floor {
        top
    } else {
        nice_max(floor * 1.5)
    };
    // The narrowest step of 1-2-5 ticks is from 1 to 2 (or 5 to 10): log₁₀ 2 of a decade.
    let decades = (top / floor).log10();
    if decades <= 2.0 && height * 2f64.log10() / decades >= MIN_TICK_GAP {
        return (decade_below(floor)..=decade_above(top))
            .flat_map(|e| [1, 2, 5].map(|m| round_value(m, e)))
            .filter(|v| *v >= floor * (1.0 - 1e-9) && *v <= top * (1.0 + 1e-9))
            .collect();
    }
    let low = decade_below(smallest);
    let high = decade_above(largest).max(low + 1);
    let span = high.abs_diff(low);
    let step = (1..=span)
        .find(|k| height * f64::from(*k) / f64::from(span.div_ceil(*k) * k) >= MIN_TICK_GAP)
        .unwrap_or(span);
    (0..=span.div_ceil(step))
        .map(|n| round_value(1, low + (n * step) as i32))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLOT: f64 = 178.0;

    /// The gaps between consecutive ticks, in pixels, bottom to top.
    fn gaps(axis: &YAxis) -> Vec<f64> {
        axis.ticks
            .windows(2)
            .map(|w| axis.y(w[0]) - axis.y(w[1]))
            .collect()
    }

    fn fit(values: &[f64], typical: Option<f64>) -> YAxis {
        let axis = YAxis::fit(values.iter().copied(), typical, PLOT);
        assert!(
            gaps(&axis).iter().all(|g| *g >= MIN_TICK_GAP - 1e-9),
            "ticks too close: {axis:?} {:?}",
            gaps(&axis)
        );
        assert!(axis.ticks.len() <= (PLOT / MIN_TICK_GAP) as usize + 1);
        for v in values {
            let y = axis.y(*v);
            assert!((0.0..=PLOT).contains(&y), "{v} at {y} on {axis:?}");
        }
        assert_eq!(axis.y(axis.floor()), PLOT);
        assert_eq!(axis.y(axis.top()), 0.0);
        axis
    }

    #[test]
    fn a_small_range_is_linear_from_zero_to_a_round_top() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(3.2), 5.0);
        assert_eq!(nice_max(120.0), 200.0);
        assert_eq!(nice_max(500.0), 500.0);
        // Typical p90 270 ms, slowest 700 ms: not spread enough for a log axis.
        let axis = fit(&[120.0, 250.0, 700.0], Some(270.0));
        assert_eq!(axis.scale, Scale::Linear);
        assert_eq!(axis.ticks, [0.0, 250.0, 500.0, 750.0, 1000.0]);
        assert_eq!(axis.y(500.0), PLOT / 2.0);
        // Without a typical value (counts, cost) an axis stays linear whatever the spread.
        assert_eq!(fit(&[1.0, 30_000.0], None).scale, Scale::Linear);
    }

    #[test]
    fn a_huge_range_turns_logarithmic_with_decade_ticks() {
        // 200 ms calls and one of 30 s: 100 ms to 100 s in decades, each value at its place.
        let axis = fit(&[180.0, 200.0, 230.0, 30_000.0], Some(230.0));
        assert_eq!(axis.scale, Scale::Log);
        assert_eq!(axis.ticks, [100.0, 1000.0, 10_000.0, 100_000.0]);
        assert!((axis.y(1000.0) - PLOT * 2.0 / 3.0).abs() < 1e-9);
        assert!(axis.y(30_000.0) > 0.0 && axis.y(30_000.0) < axis.y(10_000.0));
        // Just above the factor is log; at it, linear.
        assert_eq!(fit(&[100.0, 2001.0], Some(200.0)).scale, Scale::Log);
        assert_eq!(fit(&[100.0, 2000.0], Some(200.0)).scale, Scale::Linear);
        // Nine decades do not fit 20 px apart on 178 px: every second decade, the top rounded up to one.
        let tall = fit(&[0.001, 1e6], Some(0.01));
        assert_eq!(tall.ticks, [0.001, 0.1, 10.0, 1000.0, 100_000.0, 1e7]);
        // A spread of up to two decades keeps the 1-2-5 steps; wider ones show decades.
        let wide = fit(&[200.0, 250.0, 30_000.0], Some(250.0));
        assert_eq!(wide.ticks, [100.0, 1000.0, 10_000.0, 100_000.0]);
        let narrow = fit(&[40.0, 500.0], Some(40.0));
        assert_eq!(narrow.scale, Scale::Log);
        assert_eq!(narrow.ticks, [20.0, 50.0, 100.0, 200.0, 500.0]);
    }

    #[test]
    fn zero_on_a_log_axis_is_drawn_on_the_floor() {
        let axis = fit(&[0.0, 150.0, 20_000.0], Some(150.0));
        assert_eq!(axis.scale, Scale::Log);
        assert_eq!(axis.ticks[0], 100.0);
        assert_eq!(axis.y(0.0), PLOT);
    }

    #[test]
    fn a_single_point_equal_values_and_zeros_get_a_usable_axis() {
        let single = fit(&[340.0], Some(340.0));
        assert_eq!(single.ticks, [0.0, 125.0, 250.0, 375.0, 500.0]);
        let equal = fit(&[250.0, 250.0, 250.0], Some(250.0));
        assert_eq!(equal.scale, Scale::Linear);
        assert_eq!(equal.ticks.last(), Some(&500.0));
        let zeros = fit(&[0.0, 0.0], Some(0.0));
        assert_eq!(zeros.scale, Scale::Linear);
        assert_eq!(zeros.ticks, [0.0, 0.25, 0.5, 0.75, 1.0]);
        assert_eq!(zeros.y(0.0), PLOT);
        let empty = fit(&[], None);
        assert_eq!(empty.ticks.len(), 5);
    }

    #[test]
    fn values_under_a_millisecond_keep_their_own_round_ticks() {
        let linear = fit(&[0.2, 0.45, 0.8], Some(0.5));
        assert_eq!(linear.ticks, [0.0, 0.25, 0.5, 0.75, 1.0]);
        let log = fit(&[0.03, 0.05, 12.0], Some(0.05));
        assert_eq!(log.scale, Scale::Log);
        assert_eq!(log.ticks, [0.01, 0.1, 1.0, 10.0, 100.0]);
    }
}
