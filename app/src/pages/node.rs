use leptos::either::Either;
use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};
use pvedeck_domain::types::Timeframe;

use crate::api::get_node_charts;
use crate::components::chart::Chart;

/// `/node/:name[?tf=hour|day|week]`: a node's CPU, RAM, network and IO
/// delay over time, as SVG the server draws. Not an island: a lazy island
/// here cost every page 6–12 KB of WASM through the bundle's split
/// (docs/development.md#bench-figures). A few lines of plain script
/// (`public/node-charts.js`, loaded by this page alone) read the page again
/// every minute and put the server's fresh charts in place of the old, with
/// no reload (a page that reloads itself loses the reader's place: WCAG
/// 2.2.1); a button pauses that. Without JavaScript the page is whole as
/// served, the Reload link reads it again and the timeframes are plain
/// links.
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
    let reload = format!("/node/{node}?tf={}", timeframe.as_str());
    view! {
        <h1>"Node " {node.clone()}</h1>
        <div class="chart-controls">
            <nav class="timeframes" aria-label="timeframe">{links}<a href=reload class="reload">"Reload"</a></nav>
            // Shown by the script that does the updating (WCAG 2.2.2: what
            // updates by itself can be paused).
            <button type="button" class="charts-pause" aria-pressed="false" hidden=true>
                "Pause updates"
            </button>
        </div>
        <script src="/node-charts.js" defer=true></script>
        <Suspense fallback=|| view! { <p class="loading">"Reading the node's history…"</p> }>
            {Suspend::new(async move {
                match get_node_charts(node, timeframe).await.and_then(|a| a) {
                    Ok(d) => Either::Left(view! {
                        <div class="charts" data-timeframe=d.timeframe.as_str() data-points=d.points>
                            {d.charts.into_iter().map(|chart| view! { <Chart chart/> }).collect_view()}
                        </div>
                    }),
                    Err(e) => Either::Right(view! {
                        <p class="error" role="alert">"Cannot read the node's history: " {e.message}</p>
                    }),
                }
            })}
        </Suspense>
    }
}
