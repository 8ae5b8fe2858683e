use leptos::prelude::*;
use pvedeck_domain::account::{AuditEntry, AuditFilter};
use pvedeck_domain::format::utc;

use crate::api::get_audit;
use crate::error::UiError;

/// `/audit` (admins): every change, who made it, from where, and how it
/// ended; newest first, a hundred at a time.
#[component]
pub fn Audit() -> impl IntoView {
    view! {
        <h1>"Audit log"</h1>
        <Suspense fallback=|| view! { <p class="loading">"Reading the audit log…"</p> }>
            {Suspend::new(async move {
                let initial = get_audit(AuditFilter::default()).await.and_then(|a| a);
                view! { <AuditTable initial/> }
            })}
        </Suspense>
    }
}

#[island(lazy)]
fn AuditTable(initial: Result<Vec<AuditEntry>, UiError>) -> impl IntoView {
    let entries = RwSignal::new(initial);
    let user = RwSignal::new(String::new());
    let vmid = RwSignal::new(String::new());
    let filter = move |before: Option<u64>| AuditFilter {
        user: Some(user.get()).filter(|u| !u.trim().is_empty()),
        vmid: vmid.get().trim().parse().ok(),
        before,
    };
    let load = move |before: Option<u64>| {
        let asked = filter(before);
        leptos::task::spawn_local(async move {
            entries.set(get_audit(asked).await.and_then(|a| a));
        });
    };
    let search = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        load(None);
    };
    let older = move |_| {
        let last = entries.with(|e| e.as_ref().ok().and_then(|list| list.last()).map(|e| e.id));
        load(last);
    };
    let rows = move || entries.get().unwrap_or_default();
    view! {
        <form class="inline-form audit-filter" on:submit=search>
            <div class="field">
                <label for="audit-user">"User"</label>
                <input id="audit-user" type="text" prop:value=move || user.get()
                    on:input=move |ev| user.set(event_target_value(&ev))/>
            </div>
            <div class="field">
                <label for="audit-vm">"VM"</label>
                <input id="audit-vm" type="number" min="100" prop:value=move || vmid.get()
                    on:input=move |ev| vmid.set(event_target_value(&ev))/>
            </div>
            <button type="submit" class="primary">"Filter"</button>
        </form>
        {move || entries.get().err().map(|e| view! { <p class="error" role="alert">{e.message}</p> })}
        <div class="table-wrap" tabindex="0" role="region" aria-label="Audit log">
            <table class="audit-table">
                <thead>
                    <tr>
                        <th scope="col">"When (UTC)"</th>
                        <th scope="col">"Who"</th>
                        <th scope="col">"From"</th>
                        <th scope="col">"Action"</th>
                        <th scope="col">"Target"</th>
                        <th scope="col">"What"</th>
                        <th scope="col">"Outcome"</th>
                    </tr>
                </thead>
                <tbody>
                    <For each=rows key=|e| e.id let:entry>
                        <tr data-audit=entry.id>
                            <td>{utc(entry.at)}</td>
                            <td>{entry.user.clone()}</td>
                            <td>{entry.client.clone().unwrap_or_default()}</td>
                            <td>{entry.action.clone()}</td>
                            <td>{entry.target.clone().unwrap_or_default()}</td>
                            <td>{entry.summary.clone()}</td>
                            <td>{entry.outcome.clone()}</td>
                        </tr>
                    </For>
                </tbody>
            </table>
        </div>
        <p><button type="button" class="older" on:click=older>"Older entries"</button></p>
    }
}
