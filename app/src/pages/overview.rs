use std::time::Duration;

use leptos::prelude::*;
use pvedeck_domain::types::{ListFilter, Overview as Data};

use crate::api::get_overview;
use crate::components::node_card::NodeCard;
use crate::components::vm_actions::{Outcome, OutcomeNote};
use crate::components::vm_table::VmTable;
use crate::error::UiError;
use crate::keys;
use crate::refresh::Latest;

/// How often the overview asks the server again once hydrated.
const REFRESH: Duration = Duration::from_secs(2);

/// `/`: read on the server, then kept current by the `Live` island.
#[component]
pub fn Overview() -> impl IntoView {
    view! {
        <h1>"Cluster overview"</h1>
        <Suspense fallback=|| view! { <p class="loading">"Reading the cluster…"</p> }>
            {Suspend::new(async move {
                let initial = get_overview(ListFilter::All, 0).await.and_then(|a| a);
                view! { <Live initial/> }
            })}
        </Suspense>
    }
}

/// Everything on the overview that changes: in the browser it asks the
/// server again every `REFRESH`, after an action, and when the filter or the
/// page changes.
#[island(lazy)]
fn Live(initial: Result<Data, UiError>) -> impl IntoView {
    let overview = RwSignal::new(initial);
    // State that must outlive each refresh of the list.
    let filter = RwSignal::new(ListFilter::All);
    let page = RwSignal::new(0usize);
    let latest = Latest::default();
    let refresh = move || {
        let (filter, page) = (filter.get_untracked(), page.get_untracked());
        latest.load(
            async move { get_overview(filter, page).await.and_then(|a| a) },
            move |answer| overview.set(answer),
        );
    };
    // Another filter starts at its first page; either change reads again.
    Effect::new(move |previous: Option<(ListFilter, usize)>| {
        let now = (filter.get(), page.get());
        if let Some(was) = previous
            && was != now
        {
            if was.0 != now.0 && now.1 != 0 {
                // Runs this effect again, which reads.
                page.set(0);
            } else {
                refresh();
            }
        }
        now
    });
    // Effects run in the browser only: the server renders once, the hydrated
    // page keeps itself current.
    Effect::new(move |_| {
        if let Ok(handle) = set_interval_with_handle(refresh, REFRESH) {
            on_cleanup(move || handle.clear());
        }
    });

    let confirming = RwSignal::new(None::<u32>);
    let busy = RwSignal::new(None::<u32>);
    let outcome = RwSignal::new(None::<Outcome>);
    let on_outcome = Callback::new(move |o| {
        outcome.set(Some(o));
        refresh();
    });

    let data = move || overview.get().ok();
    // Each card with its sparklines (none for a node whose history cannot
    // be read).
    let nodes = Signal::derive(move || {
        data()
            .map(|d| {
                let sparks = d.sparks;
                d.list
                    .cluster
                    .into_iter()
                    .map(|n| {
                        let spark = sparks.iter().find(|s| s.node == n.node).cloned();
                        (n, spark)
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    });
    let vms = Signal::derive(move || data().map(|d| d.list.list).unwrap_or_default());
    let total = Signal::derive(move || data().map_or(0, |d| d.list.count));
    let pager = move || {
        data().filter(|d| d.pages > 1).map(|d| {
            let (shown, pages) = (d.page, d.pages);
            view! {
                <nav class="pager" aria-label="pages of VMs">
                    <button type="button" disabled=shown == 0 on:click=move |_| page.set(shown.saturating_sub(1))>
                        "Previous"
                    </button>
                    <span>{format!("page {} of {pages}", shown + 1)}</span>
                    <button type="button" disabled=shown + 1 >= pages on:click=move |_| page.set(shown + 1)>
                        "Next"
                    </button>
                </nav>
            }
        })
    };
    let freshness = move || {
        data().map(|d| {
            let class = if d.stale {
                "freshness stale"
            } else {
                "freshness"
            };
            view! {
                <p class=class data-age-ms=d.age_ms>
                    {updated(d.age_ms)}
                    {d.stale.then_some(" (stale)")}
                    {d.failure.map(|f| format!(" — cannot refresh: {f}"))}
                </p>
            }
        })
    };

    view! {
        <OutcomeNote outcome/>
        {freshness}
        {move || {
            overview.get().err().map(|e| view! {
                <p class="error" role="alert">"Cannot read the cluster: " {e.message}</p>
            })
        }}
        <section class="nodes" aria-label="nodes">
            <For each=move || nodes.get() key=keys::node_card let:card>
                <NodeCard node=card.0 spark=card.1/>
            </For>
        </section>
        <VmTable vms total filter confirming busy on_outcome/>
        {pager}
    }
}

/// `updated 3 s ago`: how old the server's snapshot of the cluster was.
fn updated(age_ms: u64) -> String {
    match age_ms / 1000 {
        0 => "updated just now".to_string(),
        secs => format!("updated {secs} s ago"),
    }
}
