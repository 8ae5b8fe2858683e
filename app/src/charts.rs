//! What the charts show, worked out on the server: SVG paths with integer
//! coordinates on fixed view boxes, the scales, and every line's figures in
//! words. The browser only places these strings, so none of this code is
//! in its bundle (see `components::chart`).

use pvedeck_domain::format::num;
use pvedeck_domain::types::{
    ChartView, LineView, NodeCharts, NodeHistory, NodeSpark, RrdRow, Spark,
};

use crate::components::chart::{H, SH, SW, W};

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

/// `now 23%, average 20%, peak 35%`, or `no data`.
pub fn summary(values: &[Option<f32>], unit: Unit) -> String {
    let known: Vec<f32> = values.iter().flatten().copied().collect();
    let Some(last) = known.last() else {
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

/// `70 min`, `35 h`, `8 d`: how far back a chart reaches.
pub fn span(seconds: i64) -> String {
    match seconds {
        s if s < 2 * 3600 => format!("{} min", s / 60),
        s if s < 2 * 86_400 => format!("{} h", s / 3600),
        s => format!("{} d", s / 86_400),
    }
}

/// A sparkline of a share (%), scaled to its own peak (the words carry the
/// figures): a node at 10 % still shows its shape.
pub fn spark(label: &str, values: &[Option<f32>]) -> Spark {
    let peak = values.iter().flatten().copied().fold(0.0f32, f32::max);
    let top = (peak * 1.25).clamp(5.0, 100.0);
    Spark {
        d: path(values, top, SW, SH),
        words: format!("{label}, last hour: {}", summary(values, Unit::Percent)),
    }
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// One field of every row, as drawn (`None`: Proxmox left it out, a gap).
fn column(rows: &[RrdRow], pick: impl Fn(&RrdRow) -> Option<f64>) -> Vec<Option<f32>> {
    rows.iter().map(|r| pick(r).map(|v| v as f32)).collect()
}

/// Proxmox's shares (0–1) as %.
fn percent(v: Option<f64>) -> Option<f64> {
    v.map(|v| v * 100.0)
}

fn gib(v: Option<f64>) -> Option<f64> {
    v.map(|v| v / GIB)
}

fn memory_share(r: &RrdRow) -> Option<f64> {
    match (r.memused, r.memtotal) {
        (Some(used), Some(total)) if total > 0.0 => Some(used / total * 100.0),
        _ => None,
    }
}

/// A node card's sparklines from its last hour.
pub fn sparks(hour: &NodeHistory) -> NodeSpark {
    NodeSpark {
        node: hour.node.clone(),
        cpu: spark("CPU", &column(&hour.rows, |r| percent(r.cpu))),
        memory: spark("RAM", &column(&hour.rows, memory_share)),
    }
}

/// One line's drawing.
fn line(name: &str, class: &str, values: &[Option<f32>], max: f32, unit: Unit) -> LineView {
    LineView {
        name: name.to_string(),
        class: class.to_string(),
        d: path(values, max, W, H),
        words: summary(values, unit),
    }
}

/// A chart of lines sharing a scale from 0 to `max`.
fn chart(
    title: &str,
    key: &str,
    unit: Unit,
    max: f32,
    reach: &str,
    lines: Vec<LineView>,
) -> ChartView {
    ChartView {
        title: title.to_string(),
        key: key.to_string(),
        top: unit.show(max),
        bottom: unit.show(0.0),
        reach: reach.to_string(),
        lines,
    }
}

/// A node page's charts: CPU, RAM, network in/out, IO delay.
pub fn draw(history: &NodeHistory) -> NodeCharts {
    let p = &history.rows;
    let reach = match (p.first(), p.last()) {
        (Some(a), Some(b)) => format!("{} ago", span(b.time - a.time)),
        _ => "now".to_string(),
    };
    let ram = column(p, |r| gib(r.memtotal))
        .into_iter()
        .flatten()
        .fold(0.0f32, f32::max);
    let cpu = column(p, |r| percent(r.cpu));
    let used = column(p, |r| gib(r.memused));
    let (net_in, net_out) = (column(p, |r| r.netin), column(p, |r| r.netout));
    let io = column(p, |r| percent(r.iowait));
    let net_max = net_in
        .iter()
        .chain(&net_out)
        .flatten()
        .copied()
        .fold(0.0f32, f32::max)
        * 1.1;
    let percent = Unit::Percent;
    NodeCharts {
        node: history.node.clone(),
        timeframe: history.timeframe,
        points: p.len(),
        charts: vec![
            chart(
                "CPU",
                "cpu",
                percent,
                100.0,
                &reach,
                vec![line("CPU usage", "line-a", &cpu, 100.0, percent)],
            ),
            chart(
                "RAM",
                "ram",
                Unit::Gib,
                ram,
                &reach,
                vec![line("RAM used", "line-a", &used, ram, Unit::Gib)],
            ),
            chart(
                "Network",
                "network",
                Unit::BytesPerSec,
                net_max,
                &reach,
                vec![
                    line("in", "line-a", &net_in, net_max, Unit::BytesPerSec),
                    line("out", "line-b", &net_out, net_max, Unit::BytesPerSec),
                ],
            ),
            chart(
                "Disk IO delay",
                "io",
                percent,
                100.0,
                &reach,
                vec![line("IO delay", "line-b", &io, 100.0, percent)],
            ),
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pvedeck_domain::types::Timeframe;

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

    #[test]
    fn a_history_becomes_four_charts_and_two_sparklines() {
        let row = |time, cpu| RrdRow {
            time,
            cpu: Some(cpu),
            iowait: Some(0.01),
            memused: Some(4.0 * GIB),
            memtotal: Some(16.0 * GIB),
            netin: Some(2048.0),
            ..RrdRow::default()
        };
        let history = NodeHistory {
            node: "pve1".into(),
            timeframe: Timeframe::Hour,
            rows: vec![row(0, 0.10), row(4140, 0.20)],
        };
        let charts = draw(&history);
        let titles: Vec<&str> = charts.charts.iter().map(|c| c.title.as_str()).collect();
        assert_eq!(titles, ["CPU", "RAM", "Network", "Disk IO delay"]);
        assert_eq!(charts.charts[0].reach, "69 min ago");
        assert_eq!(charts.charts[1].top, "16 GiB");
        assert_eq!(
            charts.charts[2].lines[1].words, "no data",
            "a line Proxmox left out"
        );
        let s = sparks(&history);
        assert_eq!(
            s.cpu.words,
            "CPU, last hour: now 20%, average 15%, peak 20%"
        );
        assert_eq!(
            s.memory.words,
            "RAM, last hour: now 25%, average 25%, peak 25%"
        );
    }

    #[test]
    fn rows_become_percentages_and_gibibytes() {
        let row = RrdRow {
            time: 60,
            cpu: Some(0.25),
            memused: Some(2.0 * GIB),
            memtotal: Some(8.0 * GIB),
            ..RrdRow::default()
        };
        assert_eq!(column(&[row], |r| percent(r.cpu)), [Some(25.0)]);
        assert_eq!(column(&[row], |r| gib(r.memused)), [Some(2.0)]);
        assert_eq!(column(&[row], |r| gib(r.memtotal)), [Some(8.0)]);
        assert_eq!(
            column(&[row], |r| r.netin),
            [None],
            "a missing field is a gap, not a zero"
        );
    }
}
