use std::time::Duration;

use leptos::either::Either;
use leptos::prelude::*;

use crate::api::get_overview;
use crate::components::{node_card::NodeCard, vm_table::VmTable};

/// How often the overview asks the server again once hydrated.
const REFRESH: Duration = Duration::from_secs(2);

#[component]
pub fn Overview() -> impl IntoView {
    let (tick, set_tick) = signal(0u64);
    let overview = Resource::new(move || tick.get(), |_| get_overview());

    // Effects run in the browser only: the server renders once, the hydrated
    // page keeps itself current.
    Effect::new(move |_| {
        if let Ok(handle) = set_interval_with_handle(move || set_tick.update(|t| *t += 1), REFRESH)
        {
            on_cleanup(move || handle.clear());
        }
    });

    view! {
        <h1>"Cluster overview"</h1>
        <Transition fallback=|| view! { <p class="loading">"Reading the cluster…"</p> }>
            {move || Suspend::new(async move {
                match overview.await {
                    Ok(data) => Either::Left(view! {
                        <section class="nodes" aria-label="nodes">
                            {data.cluster.into_iter().map(|node| view! { <NodeCard node/> }).collect_view()}
                        </section>
                        <VmTable vms=data.list/>
                    }),
                    Err(e) => Either::Right(view! {
                        <p class="error" role="alert">"Cannot read the cluster: " {e.to_string()}</p>
                    }),
                }
            })}
        </Transition>
    }
}
