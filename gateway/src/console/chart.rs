//! The usage page's charts: SVG line charts drawn on the server (no charting library, no script), coloured by
//! stylesheet classes (the policy allows no inline style).

use std::time::{Duration, SystemTime};

use maud::{html, Markup};

use super::format::utc;

/// The time axis of a chart: `buckets` buckets of `bucket` from `start`.
#[derive(Clone, Copy, Debug)]
pub(super) struct TimeAxis {
    pub(super) start: SystemTime,
    pub(super) bucket: Duration,
    pub(super) buckets: usize,
}

/// A series of a line chart: a name and one value per bucket (`None`: no data, the line breaks).
pub(super) struct Series<'a> {
    pub(super) name: &'a str,
    pub(super) values: Vec<Option<f64>>,
}

/// Chart geometry.
const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 240.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 22.0;
const BOTTOM: f64 = 28.0;

/// A round upper bound for the y axis (1, 2 or 5 × 10ⁿ).
pub(super) fn nice_max(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|v| *v >= max)
        .unwrap_or(10.0 * magnitude)
}

fn axis_number(value: f64) -> String {
    if value >= 10_000.0 {
        format!("{:.0}k", value / 1000.0)
    } else if value >= 10.0 || value == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

/// An SVG line chart with its legend; points carry a `<title>` with their value. `data-points` counts the
/// points drawn (what the browser test checks). SVG shapes are written with a closing tag: inside HTML, a
/// foreign element's start tag without one would swallow its siblings.
pub(super) fn line_chart(
    id: &'static str,
    title: &str,
    unit: &str,
    axis: &TimeAxis,
    series: &[Series<'_>],
) -> Markup {
    let buckets = axis.buckets;
    let max = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0f64, |a, b| a.max(*b));
    let top = nice_max(max);
    let x = |i: usize| LEFT + (WIDTH - LEFT - RIGHT) * (i as f64 + 0.5) / buckets as f64;
    let y = |v: f64| TOP + (HEIGHT - TOP - BOTTOM) * (1.0 - v / top);
    let points: usize = series
        .iter()
        .map(|s| s.values.iter().flatten().count())
        .sum();
    let time_label = |i: usize| {
        let label = utc(axis.start + axis.bucket * i as u32);
        if axis.bucket >= Duration::from_secs(3600) {
            label[5..16].to_owned()
        } else {
            label[11..16].to_owned()
        }
    };
    html! {
        // Focusable: on a phone the chart scrolls inside its frame, and a keyboard must be able to scroll it.
        figure class="chart" id=(id) tabindex="0" {
            figcaption { (title) }
            svg xmlns="http://www.w3.org/2000/svg" viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) role="img"
                aria-label=(title) data-points=(points) data-series=(series.len()) {
                // Grid and y labels.
                @for step in 0..=4 {
                    @let value = top * f64::from(step) / 4.0;
                    @let at = format!("{:.1}", y(value));
                    line class="grid" x1=(LEFT) x2=(WIDTH - RIGHT) y1=(at) y2=(at) {}
                    text class="axis" x=(LEFT - 6.0) y=(format!("{:.1}", y(value) + 4.0)) text-anchor="end" {
                        (axis_number(value))
                    }
                }
                text class="axis unit" x="4" y="12" { (unit) }
                // Time labels: five, evenly spread.
                @for tick in 0..5 {
                    @let i = tick * (buckets - 1) / 4;
                    text class="axis" x=(format!("{:.1}", x(i))) y=(HEIGHT - 8.0) text-anchor="middle" {
                        (time_label(i))
                    }
                }
                @for (n, s) in series.iter().enumerate() {
                    @let class = SERIES_CLASSES[n % SERIES_CLASSES.len()];
                    // One polyline per run of buckets with data.
                    @for run in runs(&s.values, &x, &y) {
                        polyline class=(class.0) points=(run) {}
                    }
                    @for (i, value) in s.values.iter().enumerate() {
                        @if let Some(v) = value {
                            circle class=(class.1) cx=(format!("{:.1}", x(i))) cy=(format!("{:.1}", y(*v))) r="2.5" {
                                title {
                                    (s.name) ": " (axis_number(*v)) " " (unit) " at "
                                    (utc(axis.start + axis.bucket * i as u32)) " UTC"
                                }
                            }
                        }
                    }
                }
            }
            ul class="legend" {
                @for (n, s) in series.iter().enumerate() {
                    li { span class=(SERIES_CLASSES[n % SERIES_CLASSES.len()].2) {} (s.name) }
                }
            }
        }
    }
}

/// The `points` of each run of buckets that have a value.
fn runs(values: &[Option<f64>], x: &impl Fn(usize) -> f64, y: &impl Fn(f64) -> f64) -> Vec<String> {
    let mut runs = Vec::new();
    let mut run = String::new();
    for (i, value) in values.iter().enumerate() {
        match value {
            Some(v) => {
                if !run.is_empty() {
                    run.push(' ');
                }
                run.push_str(&format!("{:.1},{:.1}", x(i), y(*v)));
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

/// Per series: line class, point class, legend swatch class (colours live in console.css).
const SERIES_CLASSES: [(&str, &str, &str); 6] = [
    ("line s0", "point s0", "swatch s0"),
    ("line s1", "point s1", "swatch s1"),
    ("line s2", "point s2", "swatch s2"),
    ("line s3", "point s3", "swatch s3"),
    ("line s4", "point s4", "swatch s4"),
    ("line s5", "point s5", "swatch s5"),
];
