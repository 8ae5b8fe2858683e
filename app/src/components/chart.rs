//! Charts as SVG, drawn on the server and hydrated like any view: no chart
//! library, readable without JavaScript, and each with its figures in
//! words for screen readers. Coordinates are integers on a fixed view box
//! (floats would bring float formatting into the browser bundle).

use leptos::prelude::*;

use crate::format::num;

/// The large charts' view box.
const W: i64 = 600;
const H: i64 = 160;
/// The sparklines'.
const SW: i64 = 240;
const SH: i64 = 48;

/// An SVG path through the values (`None`: a gap) scaled to `w`×`h` with
/// `max` at the top.
pub fn path(values: &[Option<f32>], max: f32, w: i64, h: i64) -> String {
    let n = values.len().max(2) as i64 - 1;
    let max = if max > 0.0 { max } else { 1.0 };
    let mut d = String::new();
    let mut pen_down = false;
    for (i, v) in values.iter().enumerate() {
        let Some(v) = v else {
            pen_down = false;
            continue;
        };
        let x = i as i64 * w / n;
        let y = h - ((v.clamp(0.0, max) / max) * h as f32).round() as i64;
        let verb = if pen_down { 'L' } else { 'M' };
        if !d.is_empty() {
            d.push(' ');
        }
        d.push_str(&format!("{verb}{x} {y}"));
        pen_down = true;
    }
    d
}

/// `now 23%, average 20%, peak 35%` (empty when there are no values).
pub fn summary(values: &[Option<f32>], unit: Unit) -> String {
    let known: Vec<f32> = values.iter().flatten().copied().collect();
    let (Some(last), false) = (known.last(), known.is_empty()) else {
        return "no data".to_string();
    };
    let mean = known.iter().sum::<f32>() / known.len() as f32;
    let peak = known.iter().copied().fold(f32::MIN, f32::max);
    format!(
        "now {}, average {}, peak {}",
        unit.show(*last),
        unit.show(mean),
        unit.show(peak)
    )
}

/// What a chart's values are.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Unit {
    Percent,
    Gib,
    BytesPerSec,
}

impl Unit {
    pub fn show(self, v: f32) -> String {
        let v = f64::from(v);
        match self {
            Unit::Percent => format!("{}%", num(v)),
            Unit::Gib => format!("{} GiB", num(v)),
            Unit::BytesPerSec if v >= 1_048_576.0 => format!("{} MiB/s", num(v / 1_048_576.0)),
            Unit::BytesPerSec => format!("{} KiB/s", num(v / 1024.0)),
        }
    }
}

/// A node card's line: the last hour of a share (0–100 %).
#[component]
pub fn Sparkline(label: &'static str, values: Vec<f32>) -> impl IntoView {
    let values: Vec<Option<f32>> = values.into_iter().map(Some).collect();
    let words = format!("{label}, last hour: {}", summary(&values, Unit::Percent));
    // Scaled to its own peak (the words carry the figures): a node at 10 %
    // still shows its shape.
    let peak = values.iter().flatten().copied().fold(0.0f32, f32::max);
    let top = (peak * 1.25).clamp(5.0, 100.0);
    view! {
        <div class="spark" data-spark=label.to_lowercase()>
            <span class="spark-label" aria-hidden="true">{label}</span>
            <svg
                class="spark-svg"
                viewBox=format!("0 0 {SW} {SH}")
                preserveAspectRatio="none"
                role="img"
                aria-label=words.clone()
            >
                <path class="spark-line" d=path(&values, top, SW, SH)></path>
            </svg>
            <span class="sr-only">{words}</span>
        </div>
    }
}

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: &'static str,
    /// Its colour, by CSS class (`line-a`, `line-b`); the legend names it
    /// too, so colour is never the only carrier.
    pub class: &'static str,
    pub values: Vec<Option<f32>>,
}

/// `70 min`, `35 h`, `9 d`: how far back a chart reaches.
pub fn span(seconds: i64) -> String {
    match seconds {
        s if s < 2 * 3600 => format!("{} min", s / 60),
        s if s < 2 * 86_400 => format!("{} h", s / 3600),
        s => format!("{} d", s / 86_400),
    }
}

/// A chart of one or more lines over the same times, with its scale, its
/// legend and its figures as text.
#[component]
pub fn Chart(
    title: &'static str,
    unit: Unit,
    /// The top of the scale (100 for %, the node's RAM for memory).
    max: f32,
    /// Seconds from the first value to the last.
    reach: i64,
    series: Vec<Series>,
) -> impl IntoView {
    let id = format!("chart-{}", title.to_lowercase().replace(' ', "-"));
    let lines = series
        .iter()
        .map(|s| {
            view! { <path class=format!("chart-line {}", s.class) d=path(&s.values, max, W, H)></path> }
        })
        .collect_view();
    let words = series
        .iter()
        .map(|s| {
            view! {
                <li>
                    <span class=format!("swatch {}", s.class) aria-hidden="true"></span>
                    <strong>{s.name}</strong>
                    ": "
                    {summary(&s.values, unit)}
                </li>
            }
        })
        .collect_view();
    let grid: Vec<i64> = vec![0, H / 4, H / 2, 3 * H / 4, H];
    view! {
        <figure class="chart" id=id.clone() data-chart=title.to_lowercase()>
            <figcaption id=format!("{id}-title")>{title}</figcaption>
            <div class="chart-body">
                <span class="chart-max">{unit.show(max)}</span>
                <svg
                    class="chart-svg"
                    viewBox=format!("0 0 {W} {H}")
                    preserveAspectRatio="none"
                    role="img"
                    aria-labelledby=format!("{id}-title {id}-words")
                >
                    {grid
                        .into_iter()
                        .map(|y| view! { <line class="chart-grid" x1="0" x2=W y1=y y2=y></line> })
                        .collect_view()}
                    {lines}
                </svg>
                <span class="chart-min">{unit.show(0.0)}</span>
            </div>
            <div class="chart-axis" aria-hidden="true">
                <span>{format!("{} ago", span(reach))}</span>
                <span>"now"</span>
            </div>
            <ul class="chart-words" id=format!("{id}-words")>{words}</ul>
        </figure>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_breaks_at_gaps_and_scales_to_the_box() {
        let d = path(
            &[Some(0.0), Some(50.0), None, Some(100.0), Some(200.0)],
            100.0,
            100,
            10,
        );
        assert_eq!(d, "M0 10 L25 5 M75 0 L100 0");
        assert_eq!(path(&[None, None], 100.0, 100, 10), "");
    }

    #[test]
    fn summaries_say_now_average_and_peak() {
        let v = [Some(10.0), None, Some(30.0)];
        assert_eq!(summary(&v, Unit::Percent), "now 30%, average 20%, peak 30%");
        assert_eq!(summary(&[None], Unit::Percent), "no data");
        assert_eq!(Unit::BytesPerSec.show(2_097_152.0), "2 MiB/s");
        assert_eq!(span(70 * 60), "70 min");
        assert_eq!(span(35 * 3600), "35 h");
    }
}
