//! The usage page's charts: SVG line charts drawn on the server (no charting library, no script), coloured by
//! stylesheet classes (the policy allows no inline style).
//!
//! A chart fills its container's width at any size without scaling its text: the outer SVG has no `viewBox`, so
//! text is drawn at the stylesheet's pixel size; positions along the time axis are percentages of the width,
//! and lines and bands live in an inner SVG stretched over the plot (`preserveAspectRatio="none"`, strokes that
//! do not scale). Time ticks fall on round times; a narrow screen shows a sparser set (CSS classes). The y axis
//! shows every value at its place ([`super::chart_scale`]): logarithmic, and said so, when one outlier would
//! flatten the rest. Each chart carries its numbers as a table too.

use std::time::{Duration, SystemTime};

use maud::{html, Markup};

use super::chart_scale::{Scale, YAxis, LOG_FACTOR};
use super::format::utc;

/// The time axis of a chart: `buckets` buckets of `bucket` from `start`.
#[derive(Clone, Copy, Debug)]
pub(super) struct TimeAxis {
    pub(super) start: SystemTime,
    pub(super) bucket: Duration,
    pub(super) buckets: usize,
}

impl TimeAxis {
    fn span(&self) -> Duration {
        self.bucket * self.buckets as u32
    }

    /// Where `time` falls, in percent of the chart's width (the plot keeps a margin on each side).
    fn x_of_time(&self, time: SystemTime) -> f64 {
        let offset = time
            .duration_since(self.start)
            .unwrap_or_default()
            .as_secs_f64();
        MARGIN + (100.0 - 2.0 * MARGIN) * offset / self.span().as_secs_f64()
    }

    /// The middle of bucket `i`, in percent of the width.
    fn x(&self, i: usize) -> f64 {
        self.x_of_time(self.start + self.bucket * i as u32 + self.bucket / 2)
    }

    fn bucket_start(&self, i: usize) -> SystemTime {
        self.start + self.bucket * i as u32
    }
}

/// A series of a line chart: a name and one value per bucket (`None`: no data, the line breaks).
pub(super) struct Series<'a> {
    pub(super) name: &'a str,
    pub(super) values: Vec<Option<f64>>,
}

/// What a chart's values are, and how they read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Unit {
    /// A count of things (`model calls`, `tokens`).
    Count(&'static str),
    /// Milliseconds, read as `250 ms` or `1.5 s`.
    Millis,
    /// US dollars.
    Dollars,
    /// Percent.
    Percent,
}

impl Unit {
    /// A value as a person reads it, with its unit.
    pub(super) fn format(self, value: f64) -> String {
        match self {
            Unit::Count(noun) => format!("{} {noun}", short_number(value)),
            Unit::Millis if value >= 1000.0 => format!("{} s", short_number(value / 1000.0)),
            Unit::Millis => format!("{} ms", short_number(value)),
            Unit::Dollars => format!("${}", short_number(value)),
            Unit::Percent => format!("{} %", short_number(value)),
        }
    }

    /// A value on the y axis: short, the count's noun left to the caption.
    fn axis_label(self, value: f64) -> String {
        match self {
            Unit::Count(_) => short_number(value),
            other => other.format(value),
        }
    }
}

/// A chart: its id (the figure's), caption, unit, time axis and series. `bands` fills between consecutive
/// series (for percentiles, lowest first); `typical` is the data's typical value (a latency's p90) when a value
/// far above it should turn the y axis logarithmic.
pub(super) struct Chart<'a> {
    pub(super) id: &'static str,
    pub(super) title: String,
    pub(super) unit: Unit,
    pub(super) axis: TimeAxis,
    pub(super) series: Vec<Series<'a>>,
    pub(super) bands: bool,
    pub(super) typical: Option<f64>,
}

/// Chart geometry, in pixels (height) and percent of the width (horizontal margin).
const HEIGHT: f64 = 230.0;
const TOP: f64 = 22.0;
const BOTTOM: f64 = 30.0;
const MARGIN: f64 = 1.5;
const PLOT: f64 = HEIGHT - TOP - BOTTOM;
/// The inner SVG's horizontal units per percent of the width.
const INNER: f64 = 10.0;

/// Tick steps along the time axis, in seconds: each a round time of day.
const TICK_STEPS: [u64; 13] = [
    60,
    5 * 60,
    10 * 60,
    15 * 60,
    30 * 60,
    3600,
    2 * 3600,
    3 * 3600,
    6 * 3600,
    12 * 3600,
    86_400,
    2 * 86_400,
    7 * 86_400,
];
/// The most time ticks on a wide chart, and on a narrow one (a phone: at most 700 px).
pub(super) const WIDE_TICKS: usize = 8;
pub(super) const NARROW_TICKS: usize = 4;

/// `0.0012`, `45`, `1.5k`, `2.3M`: at most three significant digits, no trailing zeros.
pub(super) fn short_number(value: f64) -> String {
    let (scaled, suffix) = if value.abs() >= 1e6 {
        (value / 1e6, "M")
    } else if value.abs() >= 1e4 {
        (value / 1e3, "k")
    } else {
        (value, "")
    };
    if scaled == 0.0 {
        return "0".to_owned();
    }
    let digits = scaled.abs().log10().floor() as i32;
    let decimals = (2 - digits).clamp(0, 9) as usize;
    let text = format!("{scaled:.decimals$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    };
    format!("{text}{suffix}")
}

/// A time tick: where (seconds since the epoch), its label, and on which widths it shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Tick {
    pub(super) at: u64,
    pub(super) label: String,
    pub(super) wide: bool,
    pub(super) narrow: bool,
}

/// The smallest tick step that puts at most `max` ticks on the axis.
fn tick_step(start: u64, end: u64, max: usize) -> u64 {
    TICK_STEPS
        .into_iter()
        .find(|step| (end / step + 1).saturating_sub(start.div_ceil(*step)) as usize <= max)
        .unwrap_or(TICK_STEPS[TICK_STEPS.len() - 1])
}

/// Round tick times for the axis (multiples of a step from [`TICK_STEPS`], UTC): the wide set and the
/// narrow set merged, each tick saying where it shows. Labels read `14:30`; midnight, and every tick of a
/// step of a day or more, reads as the date (`Dec 3`).
pub(super) fn ticks(axis: &TimeAxis) -> Vec<Tick> {
    let start = crate::operator::unix(axis.start);
    let end = start + axis.span().as_secs();
    let wide = tick_step(start, end, WIDE_TICKS);
    let narrow = tick_step(start, end, NARROW_TICKS);
    let mut at: Vec<u64> = [wide, narrow]
        .into_iter()
        .flat_map(|step| (start.div_ceil(step)..=end / step).map(move |n| n * step))
        .collect();
    at.sort_unstable();
    at.dedup();
    at.into_iter()
        .map(|t| {
            let text = utc(SystemTime::UNIX_EPOCH + Duration::from_secs(t));
            let label = if t % 86_400 == 0 {
                day_label(&text)
            } else {
                text[11..16].to_owned()
            };
            Tick {
                at: t,
                label,
                wide: t % wide == 0,
                narrow: t % narrow == 0,
            }
        })
        .collect()
}

/// `Dec 3` from `2026-12-03 …`.
fn day_label(utc_text: &str) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month: usize = utc_text[5..7].parse().unwrap_or(1);
    let day: u32 = utc_text[8..10].parse().unwrap_or(1);
    format!("{} {day}", MONTHS[month.clamp(1, 12) - 1])
}

/// A bucket's time as the summary tables show it: `14:30` within a day, `Dec 3 14:30` across days.
fn bucket_label(axis: &TimeAxis, i: usize) -> String {
    let text = utc(axis.bucket_start(i));
    if axis.span() > Duration::from_secs(86_400) {
        format!("{} {}", day_label(&text), &text[11..16])
    } else {
        text[11..16].to_owned()
    }
}

/// The chart as a figure: caption, SVG, legend, a note on a logarithmic scale, and its numbers as a table.
/// `data-points` counts the points drawn and the figure's `data-scale` names the y axis's scale (what the tests
/// check). Y-axis labels sit just above their grid line, inside the SVG: the top tick's label needs `TOP`. SVG shapes are
/// written with a closing tag: inside HTML, a foreign element's start tag without one would swallow its
/// siblings.
pub(super) fn chart(chart: &Chart<'_>) -> Markup {
    let axis = &chart.axis;
    let values = chart.series.iter().flat_map(|s| s.values.iter().flatten());
    let y_axis = YAxis::fit(values.clone().copied(), chart.typical, PLOT);
    let y = |v: f64| y_axis.y(v);
    let largest = values.fold(0.0f64, |a, b| a.max(*b));
    let points: usize = chart
        .series
        .iter()
        .map(|s| s.values.iter().flatten().count())
        .sum();
    let unit = chart.unit;
    let log = y_axis.scale == Scale::Log;
    let title = if log {
        format!("{} (logarithmic scale)", chart.title)
    } else {
        chart.title.clone()
    };
    html! {
        figure class="chart" id=(chart.id) data-scale=(y_axis.scale.name()) {
            figcaption { (title) }
            svg xmlns="http://www.w3.org/2000/svg" width="100%" height=(HEIGHT) role="img"
                aria-label=(format!("{title} (the table below the chart has the numbers)"))
                data-points=(points) data-series=(chart.series.len()) {
                @for value in &y_axis.ticks {
                    @let at = format!("{:.1}", TOP + y(*value));
                    line class="grid" x1="0" x2="100%" y1=(at) y2=(at) {}
                    text class="axis y-label" x="2" y=(format!("{:.1}", TOP + y(*value) - 3.0)) {
                        (unit.axis_label(*value))
                    }
                }
                @for tick in ticks(axis) {
                    @let x = axis.x_of_time(SystemTime::UNIX_EPOCH + Duration::from_secs(tick.at));
                    @let anchor = if x < 6.0 { "start" } else if x > 94.0 { "end" } else { "middle" };
                    @let shown = match (tick.wide, tick.narrow) {
                        (true, true) => "axis tick",
                        (true, false) => "axis tick wide-only",
                        _ => "axis tick narrow-only",
                    };
                    line class="tick-mark" x1=(pct(x)) x2=(pct(x)) y1=(TOP + PLOT) y2=(TOP + PLOT + 4.0) {}
                    text class=(shown) x=(pct(x)) y=(HEIGHT - 8.0) text-anchor=(anchor) { (tick.label) }
                }
                svg x="0" y=(TOP) width="100%" height=(PLOT) viewBox=(format!("0 0 {} {PLOT}", 100.0 * INNER))
                    preserveAspectRatio="none" {
                    @if chart.bands {
                        @for (n, pair) in chart.series.windows(2).enumerate() {
                            @for band in band_runs(axis, &pair[0].values, &pair[1].values, &y) {
                                polygon class=(format!("band b{n}")) points=(band) {}
                            }
                        }
                    }
                    @for (n, s) in chart.series.iter().enumerate() {
                        @for run in runs(axis, &s.values, &y) {
                            polyline class=(SERIES_CLASSES[n % SERIES_CLASSES.len()].0) points=(run) {}
                        }
                    }
                }
                @for (n, s) in chart.series.iter().enumerate() {
                    @for (i, value) in s.values.iter().enumerate() {
                        @if let Some(v) = value {
                            circle class=(SERIES_CLASSES[n % SERIES_CLASSES.len()].1)
                                cx=(pct(axis.x(i))) cy=(format!("{:.1}", TOP + y(*v))) r="2.5" {
                                title { (s.name) ": " (unit.format(*v)) " at " (utc(axis.bucket_start(i))) " UTC" }
                            }
                        }
                    }
                }
            }
            ul class="legend" {
                @for (n, s) in chart.series.iter().enumerate() {
                    li { span class=(SERIES_CLASSES[n % SERIES_CLASSES.len()].2) {} (s.name) }
                }
            }
            @if log {
                p class="note scale-note" {
                    "Logarithmic scale: the largest value (" (unit.format(largest)) ") is more than " (LOG_FACTOR)
                    " × the typical p90 (" (unit.format(chart.typical.unwrap_or_default())) "). "
                    "Equal steps up the axis multiply the value; a value of zero is drawn on the bottom line."
                }
            }
            (numbers(chart))
        }
    }
}

/// The chart's numbers as a table (its text alternative), buckets without any value left out.
fn numbers(chart: &Chart<'_>) -> Markup {
    let axis = &chart.axis;
    html! {
        details class="numbers" {
            summary { "Numbers: " (chart.title) }
            table {
                thead {
                    tr {
                        th scope="col" { "time (UTC)" }
                        @for s in &chart.series { th scope="col" { (s.name) } }
                    }
                }
                tbody {
                    @for i in 0..axis.buckets {
                        @if chart.series.iter().any(|s| s.values.get(i).copied().flatten().is_some()) {
                            tr {
                                th scope="row" data-label="time (UTC)" { (bucket_label(axis, i)) }
                                @for s in &chart.series {
                                    td class="number" data-label=(s.name) {
                                        (s.values.get(i).copied().flatten().map_or_else(|| "—".to_owned(), |v| chart.unit.format(v)))
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn pct(x: f64) -> String {
    format!("{x:.2}%")
}

/// The `points` of each run of buckets that have a value, in the inner SVG's units.
fn runs(axis: &TimeAxis, values: &[Option<f64>], y: &impl Fn(f64) -> f64) -> Vec<String> {
    let mut runs = Vec::new();
    let mut run = String::new();
    for (i, value) in values.iter().enumerate() {
        match value {
            Some(v) => {
                if !run.is_empty() {
                    run.push(' ');
                }
                run.push_str(&format!("{:.1},{:.1}", axis.x(i) * INNER, y(*v)));
            }
            None if !run.is_empty() => runs.push(std::mem::take(&mut run)),
            None => {}
        }
    }
    if !run.is_empty() {
        runs.push(run);
    }
    runs
}

/// The polygons filling between `lower` and `upper` over each run of buckets where both have a value.
fn band_runs(
    axis: &TimeAxis,
    lower: &[Option<f64>],
    upper: &[Option<f64>],
    y: &impl Fn(f64) -> f64,
) -> Vec<String> {
    let mut bands = Vec::new();
    let mut run: Vec<(usize, f64, f64)> = Vec::new();
    let close = |run: &mut Vec<(usize, f64, f64)>, bands: &mut Vec<String>| {
        if !run.is_empty() {
            let top = run
                .iter()
                .map(|(i, _, hi)| format!("{:.1},{:.1}", axis.x(*i) * INNER, y(*hi)));
            let bottom = run
                .iter()
                .rev()
                .map(|(i, lo, _)| format!("{:.1},{:.1}", axis.x(*i) * INNER, y(*lo)));
            bands.push(top.chain(bottom).collect::<Vec<_>>().join(" "));
            run.clear();
        }
    };
    for (i, pair) in lower.iter().zip(upper).enumerate() {
        match pair {
            (Some(lo), Some(hi)) => run.push((i, *lo, *hi)),
            _ => close(&mut run, &mut bands),
        }
    }
    close(&mut run, &mut bands);
    bands
}

/// Per series: line class, point class, legend swatch class (colours live in console.css).
const SERIES_CLASSES: [(&str, &str, &str); 6] = [
    ("line s0", "point s0", "swatch s0"),
    ("line s1", "point s1", "swatch s1"),
    ("line s2", "point s2", "swatch s2"),
    ("line s3", "point s3", "swatch s3"),
    ("line s4", "point s4", "swatch s4"),
    ("line s5", "point s5", "swatch s5"),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn axis(start: &str, bucket_secs: u64, buckets: usize) -> TimeAxis {
        // `start` as `HH:MM` on 2026-12-03 (a Thursday), UTC.
        let (h, m): (u64, u64) = (start[..2].parse().unwrap(), start[3..].parse().unwrap());
        TimeAxis {
            start: SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_256_000 + h * 3600 + m * 60),
            bucket: Duration::from_secs(bucket_secs),
            buckets,
        }
    }

    fn labels(ticks: &[Tick], narrow: bool) -> Vec<&str> {
        ticks
            .iter()
            .filter(|t| if narrow { t.narrow } else { t.wide })
            .map(|t| t.label.as_str())
            .collect()
    }

    #[test]
    fn ticks_fall_on_round_times_chosen_for_the_range() {
        assert_eq!(utc(axis("00:00", 60, 1).start), "2026-12-03 00:00:00");
        // An hour from 03:55: every 10 minutes wide, every 15 on a phone; never 03:55 or 04:09.
        let hour = ticks(&axis("03:55", 60, 60));
        assert_eq!(
            labels(&hour, false),
            ["04:00", "04:10", "04:20", "04:30", "04:40", "04:50"]
        );
        assert_eq!(labels(&hour, true), ["04:00", "04:15", "04:30", "04:45"]);
        // A day of half hours from 04:30: every 3 hours, every 6 on a phone; midnight reads as the date.
        let day = ticks(&axis("04:30", 1800, 48));
        assert_eq!(
            labels(&day, false),
            ["06:00", "09:00", "12:00", "15:00", "18:00", "21:00", "Dec 4", "03:00"]
        );
        assert_eq!(labels(&day, true), ["06:00", "12:00", "18:00", "Dec 4"]);
        // A week of 3-hour buckets: one tick a day, every other day on a phone.
        let week = ticks(&axis("03:00", 3 * 3600, 56));
        assert_eq!(
            labels(&week, false),
            ["Dec 4", "Dec 5", "Dec 6", "Dec 7", "Dec 8", "Dec 9", "Dec 10"]
        );
        // (Two-day steps count from the epoch, so they land on the odd dates of this week.)
        assert_eq!(labels(&week, true), ["Dec 5", "Dec 7", "Dec 9"]);
        for set in [&hour, &day, &week] {
            assert!(set.iter().all(|t| t.at % 60 == 0 && (t.wide || t.narrow)));
            assert!(set.iter().filter(|t| t.wide).count() <= WIDE_TICKS);
            assert!(set.iter().filter(|t| t.narrow).count() <= NARROW_TICKS);
        }
    }

    fn latency_chart(values: Vec<Option<f64>>, typical: f64) -> String {
        chart(&Chart {
            id: "latency",
            title: "Latency".into(),
            unit: Unit::Millis,
            axis: axis("12:00", 60, values.len()),
            series: vec![Series {
                name: "p99",
                values,
            }],
            bands: false,
            typical: Some(typical),
        })
        .into_string()
    }

    /// Every `cy="…"` (the points' heights) and the y-axis labels of a chart's markup.
    fn heights_and_labels(svg: &str) -> (Vec<f64>, Vec<&str>) {
        let heights = svg
            .split("cy=\"")
            .skip(1)
            .map(|rest| rest[..rest.find('"').unwrap()].parse().unwrap())
            .collect();
        let labels = svg
            .split("class=\"axis y-label\"")
            .skip(1)
            .map(|rest| {
                let text = &rest[rest.find('>').unwrap() + 1..];
                &text[..text.find('<').unwrap()]
            })
            .collect();
        (heights, labels)
    }

    #[test]
    fn an_outlier_turns_the_axis_logarithmic_and_every_point_stays_in_the_plot() {
        // 200 ms calls and one of 30 s, typical p90 270 ms: decades from 100 ms to 100 s, nothing clipped.
        let svg = latency_chart(vec![Some(200.0), None, Some(30_000.0), Some(250.0)], 270.0);
        assert!(svg.contains("data-scale=\"log\""), "{svg}");
        assert!(svg.contains("data-points=\"3\""), "{svg}");
        assert!(
            svg.contains("Latency (logarithmic scale)</figcaption>"),
            "{svg}"
        );
        assert!(
            svg.contains("Logarithmic scale: the largest value (30 s)"),
            "{svg}"
        );
        assert!(!svg.contains("clip"), "{svg}");
        let (heights, labels) = heights_and_labels(&svg);
        assert_eq!(labels, ["100 ms", "1 s", "10 s", "100 s"]);
        assert_eq!(heights.len(), 3);
        assert!(
            heights.iter().all(|y| (TOP..=TOP + PLOT).contains(y)),
            "{heights:?}"
        );
        // The 30 s point is at its place: between the 10 s and 100 s lines, not on the top one.
        let decade = PLOT / 3.0;
        let expected = TOP + PLOT - decade * (30_000f64.log10() - 2.0);
        assert!((heights[1] - expected).abs() < 0.06, "{heights:?}");
        assert!(heights[1] > TOP && heights[1] < TOP + decade);
        assert_eq!(
            svg.matches("<polyline").count(),
            2,
            "the gap breaks the line"
        );

        // Without the outlier the axis is linear from zero to a round top, every point inside it.
        let svg = latency_chart(vec![Some(200.0), Some(700.0), Some(0.0)], 270.0);
        assert!(svg.contains("data-scale=\"linear\""), "{svg}");
        assert!(!svg.contains("logarithmic"), "{svg}");
        let (heights, labels) = heights_and_labels(&svg);
        assert_eq!(labels, ["0 ms", "250 ms", "500 ms", "750 ms", "1 s"]);
        let expected = [TOP + PLOT * 0.8, TOP + PLOT * 0.3, TOP + PLOT];
        assert_eq!(heights.len(), 3);
        assert!(
            heights
                .iter()
                .zip(expected)
                .all(|(y, e)| (y - e).abs() < 0.06),
            "{heights:?}"
        );

        // A zero on a log axis is drawn on the bottom line (the axis floor).
        let svg = latency_chart(vec![Some(0.0), Some(150.0), Some(60_000.0)], 150.0);
        let (heights, _) = heights_and_labels(&svg);
        assert_eq!(heights[0], TOP + PLOT);
        assert!(heights.iter().all(|y| (TOP..=TOP + PLOT).contains(y)));
    }

    #[test]
    fn numbers_read_short_with_their_unit() {
        assert_eq!(short_number(0.000_123_4), "0.000123");
        assert_eq!(short_number(45.0), "45");
        assert_eq!(short_number(2.5), "2.5");
        assert_eq!(short_number(12_345.0), "12.3k");
        assert_eq!(short_number(2_300_000.0), "2.3M");
        assert_eq!(Unit::Millis.format(1500.0), "1.5 s");
        assert_eq!(Unit::Millis.format(250.0), "250 ms");
        assert_eq!(Unit::Dollars.format(0.0012), "$0.0012");
        assert_eq!(Unit::Count("model calls").format(3.0), "3 model calls");
        assert_eq!(Unit::Percent.format(12.5), "12.5 %");
    }
}
