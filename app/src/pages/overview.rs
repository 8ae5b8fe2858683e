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
                // The sparklines are the default cluster's nodes' (the
                // first listed): another cluster's node of the same name
                // is another node.
                let default = d.clusters.first().map(|c| c.name.clone());
                d.list
                    .cluster
                    .into_iter()
                    .map(|n| {
                        let ours = default.as_ref().is_none_or(|c| *c == n.cluster);
                        let spark = sparks.iter().find(|s| ours && s.node == n.node).cloned();
                        (n, spark)
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    });
    let vms = Signal::derive(move || data().map(|d| d.list.list).unwrap_or_default());
    // Memos: every row of the table asks for the default cluster, which
    // must not copy the whole overview each time.
    let clusters = Memo::new(move |_| data().map(|d| d.clusters).unwrap_or_default());
    let default_cluster = Memo::new(move |_| clusters.with(|c| c.first().map(|c| c.name.clone())));
    // With several clusters the node cards are grouped under each one,
    // which says when it cannot be read and since when.
    let cluster_sections = move || {
        clusters.get().into_iter().map(|c| {
            let name = c.name.clone();
            let cards = move || {
                let name = name.clone();
                nodes
                    .get()
                    .into_iter()
                    .filter(move |(n, _)| n.cluster == name)
                    .collect::<Vec<_>>()
            };
            let state = if c.stale {
                format!(
                    "down: last read {}{}",
                    ago(c.age_ms),
                    c.failure.map(|f| format!(" — {f}")).unwrap_or_default()
                )
            } else {
                updated(c.age_ms)
            };
            let class = if c.stale { "cluster down" } else { "cluster" };
            view! {
                <section class=class aria-label=format!("cluster {}", c.name) data-cluster=c.name.clone()>
                    <h2>{format!("Cluster {}", c.name)} " " <span class="cluster-state">{state}</span></h2>
                    <div class="nodes">
                        <For each=cards key=|card| keys::node_card(card) let:card>
                            <NodeCard node=card.0 spark=card.1/>
                        </For>
                    </div>
                </section>
            }
        }).collect_view()
    };
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
        <Show
            when=move || clusters.with(Vec::is_empty)
            fallback=cluster_sections
        >
            <section class="nodes" aria-label="nodes">
                <For each=move || nodes.get() key=keys::node_card let:card>
                    <NodeCard node=card.0 spark=card.1/>
                </For>
            </section>
        </Show>
        <VmTable vms total filter confirming busy on_outcome default_cluster/>
        {pager}
    }
}

/// `12 s ago`, or `never` for a cluster not read yet.
fn ago(age_ms: u64) -> String {
    match age_ms {
        0 => "never".to_string(),
        ms => format!("{} s ago", ms / 1000),
    }
}

/// `updated 3 s ago`: how old the server's snapshot of the cluster was.
fn updated(age_ms: u64) -> String {
    match age_ms / 1000 {
        0 => "updated just now".to_string(),
        secs => format!("updated {secs} s ago"),
    }
}
