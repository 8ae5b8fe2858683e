use leptos::prelude::*;
use pvedeck_domain::account::AuditFilter;

use crate::api::get_audit;
use crate::pages::people::{Panel, People};

/// `/audit` (admins): every change, who made it, from where, and how it
/// ended; newest first, a hundred at a time.
#[component]
pub fn Audit() -> impl IntoView {
    view! {
        <h1>"Audit log"</h1>
        <Suspense fallback=|| view! { <p class="loading">"Reading the audit log…"</p> }>
            {Suspend::new(async move {
                let initial = get_audit(AuditFilter::default()).await.and_then(|a| a);
                view! { <People panel=Panel::Audit(initial)/> }
            })}
        </Suspense>
    }
}
