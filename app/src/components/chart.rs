//! Charts as SVG: the server draws them (`crate::charts`), these views
//! place what it drew. Readable without JavaScript; each chart's figures
//! are in words under it, and each sparkline's are its accessible name.

use leptos::prelude::*;

use pvedeck_domain::types::{ChartView, Spark};

/// The large charts' view box (the paths are drawn to it).
pub const W: i64 = 600;
pub const H: i64 = 160;
/// The sparklines'.
pub const SW: i64 = 240;
pub const SH: i64 = 48;

/// A node card's line: the last hour of a share.
#[component]
pub fn Sparkline(label: &'static str, key: &'static str, spark: Spark) -> impl IntoView {
    view! {
        <div class="spark" data-spark=key>
            <span class="spark-label" aria-hidden="true">{label}</span>
            <svg
                class="spark-svg"
                viewBox=format!("0 0 {SW} {SH}")
                preserveAspectRatio="none"
                role="img"
                aria-label=spark.words.clone()
            >
                <path class="spark-line" d=spark.d></path>
            </svg>
            <span class="sr-only">{spark.words}</span>
        </div>
    }
}

/// A chart of one or more lines over the same times, with its scale, its
/// legend and its figures as text.
#[component]
pub fn Chart(chart: ChartView) -> impl IntoView {
    let id = format!("chart-{}", chart.key);
    let lines = chart
        .lines
        .iter()
        .map(|l| view! { <path class=format!("chart-line {}", l.class) d=l.d.clone()></path> })
        .collect_view();
    let words = chart
        .lines
        .into_iter()
        .map(|l| {
            view! {
                <li>
                    <span class=format!("swatch {}", l.class) aria-hidden="true"></span>
                    <strong>{l.name}</strong>
                    ": "
                    {l.words}
                </li>
            }
        })
        .collect_view();
    let grid = [0, H / 4, H / 2, 3 * H / 4, H]
        .map(|y| view! { <line class="chart-grid" x1="0" x2=W y1=y y2=y></line> });
    view! {
        <figure class="chart" id=id.clone() data-chart=chart.key>
            <figcaption id=format!("{id}-title")>{chart.title}</figcaption>
            <div class="chart-body">
                <span class="chart-max">{chart.top}</span>
                <svg
                    class="chart-svg"
                    viewBox=format!("0 0 {W} {H}")
                    preserveAspectRatio="none"
                    role="img"
                    aria-labelledby=format!("{id}-title {id}-words")
                >
                    {grid}
                    {lines}
                </svg>
                <span class="chart-min">{chart.bottom}</span>
            </div>
            <div class="chart-axis" aria-hidden="true">
                <span>{chart.reach}</span>
                <span>"now"</span>
            </div>
            <ul class="chart-words" id=format!("{id}-words")>{words}</ul>
        </figure>
    }
}
