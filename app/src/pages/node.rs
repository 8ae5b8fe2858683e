use std::time::Duration;

use leptos::either::Either;
use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use crate::api::get_node_history;
use crate::components::chart::{Chart, Series, Unit};
use crate::refresh::Latest;
use crate::types::{HistoryPoint, NodeHistory, Timeframe, UiError};

/// How often the charts ask again once hydrated (Proxmox adds a row a
/// minute at most).
const REFRESH: Duration = Duration::from_secs(60);

/// `/node/:name[?tf=hour|day|week]`: a node's CPU, RAM, network and I/O
/// over time. The timeframes are plain links: the page works the same
/// without JavaScript.
#[component]
pub fn NodePage() -> impl IntoView {
    let node = use_params_map()
        .read_untracked()
        .get("name")
        .unwrap_or_default();
    let timeframe = use_query_map()
        .read_untracked()
        .get("tf")
        .and_then(|t| Timeframe::parse(&t))
        .unwrap_or_default();
    let links = Timeframe::ALL
        .into_iter()
        .map(|t| {
            let href = format!("/node/{node}?tf={}", t.as_str());
            let current = (t == timeframe).then_some("page");
            view! { <a href=href aria-current=current>{t.as_str()}</a> }
        })
        .collect_view();
    view! {
        <h1>"Node " {node.clone()}</h1>
        <nav class="timeframes" aria-label="timeframe">{links}</nav>
        <Suspense fallback=|| view! { <p class="loading">"Reading the node's history…"</p> }>
            {Suspend::new(async move {
                let initial = get_node_history(node.clone(), timeframe).await.and_then(|a| a);
                view! { <LiveNode node timeframe initial/> }
            })}
        </Suspense>
    }
}

/// The charts, read again every `REFRESH` in the browser.
#[island(lazy)]
fn LiveNode(
    node: String,
    timeframe: Timeframe,
    initial: Result<NodeHistory, UiError>,
) -> impl IntoView {
    let history = RwSignal::new(initial);
    let latest = Latest::default();
    Effect::new(move |_| {
        let node = node.clone();
        let refresh = move || {
            let node = node.clone();
            latest.load(
                async move { get_node_history(node, timeframe).await.and_then(|a| a) },
                move |answer| history.set(answer),
            );
        };
        if let Ok(handle) = set_interval_with_handle(refresh, REFRESH) {
            on_cleanup(move || handle.clear());
        }
    });
    move || match history.get() {
        Ok(h) => Either::Left(charts(&h)),
        Err(e) => Either::Right(view! {
            <p class="error" role="alert">"Cannot read the node's history: " {e.message}</p>
        }),
    }
}

fn column(
    points: &[HistoryPoint],
    pick: impl Fn(&HistoryPoint) -> Option<f32>,
) -> Vec<Option<f32>> {
    points.iter().map(pick).collect()
}

fn charts(history: &NodeHistory) -> impl IntoView + use<> {
    let p = &history.points;
    let reach = match (p.first(), p.last()) {
        (Some(a), Some(b)) => b.time - a.time,
        _ => 0,
    };
    let ram = p
        .iter()
        .filter_map(|p| p.memory_total)
        .fold(0.0f32, f32::max);
    let net_in = column(p, |p| p.net_in);
    let net_out = column(p, |p| p.net_out);
    let net_max = net_in
        .iter()
        .chain(&net_out)
        .flatten()
        .copied()
        .fold(0.0f32, f32::max)
        * 1.1;
    view! {
        <div class="charts" data-timeframe=history.timeframe.as_str() data-points=p.len()>
            <Chart
                title="CPU"
                unit=Unit::Percent
                max=100.0
                reach
                series=vec![Series { name: "CPU usage", class: "line-a", values: column(p, |p| p.cpu) }]
            />
            <Chart
                title="RAM"
                unit=Unit::Gib
                max=ram
                reach
                series=vec![Series { name: "RAM used", class: "line-a", values: column(p, |p| p.memory_used) }]
            />
            <Chart
                title="Network"
                unit=Unit::BytesPerSec
                max=net_max
                reach
                series=vec![
                    Series { name: "in", class: "line-a", values: net_in },
                    Series { name: "out", class: "line-b", values: net_out },
                ]
            />
            <Chart
                title="Disk IO delay"
                unit=Unit::Percent
                max=100.0
                reach
                series=vec![Series { name: "IO delay", class: "line-b", values: column(p, |p| p.iowait) }]
            />
        </div>
    }
}
