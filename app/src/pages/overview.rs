use std::time::Duration;

use leptos::prelude::*;

use crate::api::get_overview;
use crate::components::node_card::NodeCard;
use crate::components::vm_actions::{Outcome, OutcomeNote};
use crate::components::vm_table::VmTable;
use crate::types::{ListFilter, NodeSummary, VmSummary};

/// How often the overview asks the server again once hydrated.
const REFRESH: Duration = Duration::from_secs(2);

#[component]
pub fn Overview() -> impl IntoView {
    let (tick, set_tick) = signal(0u64);
    // State that must outlive each refresh of the list.
    let filter = RwSignal::new(ListFilter::All);
    let page = RwSignal::new(0usize);
    let overview = Resource::new(
        move || (tick.get(), filter.get(), page.get()),
        |(_, filter, page)| async move { get_overview(filter, page).await.and_then(|a| a) },
    );
    // Another filter starts at its first page.
    Effect::new(move |previous: Option<ListFilter>| {
        let now = filter.get();
        if previous.is_some_and(|p| p != now) {
            page.set(0);
        }
        now
    });

    // Effects run in the browser only: the server renders once, the hydrated
    // page keeps itself current.
    Effect::new(move |_| {
        if let Ok(handle) = set_interval_with_handle(move || set_tick.update(|t| *t += 1), REFRESH)
        {
            on_cleanup(move || handle.clear());
        }
    });

    let confirming = RwSignal::new(None::<u32>);
    let busy = RwSignal::new(None::<u32>);
    let outcome = RwSignal::new(None::<Outcome>);
    let on_outcome = Callback::new(move |o| {
        outcome.set(Some(o));
        set_tick.update(|t| *t += 1);
    });

    let data = move || overview.get().and_then(Result::ok);
    let nodes = Signal::derive(move || data().map(|d| d.list.cluster).unwrap_or_default());
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
        <h1>"Cluster overview"</h1>
        <OutcomeNote outcome/>
        <Transition fallback=|| view! { <p class="loading">"Reading the cluster…"</p> }>
            {freshness}
            {move || {
                overview.get().and_then(Result::err).map(|e| view! {
                    <p class="error" role="alert">"Cannot read the cluster: " {e.message}</p>
                })
            }}
            <section class="nodes" aria-label="nodes">
                <For each=move || nodes.get() key=|n: &NodeSummary| format!("{n:?}") let:node>
                    <NodeCard node/>
                </For>
            </section>
            <VmTable vms total filter confirming busy on_outcome/>
            {pager}
        </Transition>
    }
}

/// `updated 3 s ago`: how old the server's snapshot of the cluster was.
fn updated(age_ms: u64) -> String {
    match age_ms / 1000 {
        0 => "updated just now".to_string(),
        secs => format!("updated {secs} s ago"),
    }
}

/// Rows keyed by everything they show: an unchanged row keeps its DOM (and
/// the keyboard focus) across refreshes.
pub fn row_key(vm: &VmSummary) -> String {
    format!("{vm:?}")
}
