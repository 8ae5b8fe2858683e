use leptos::prelude::*;
use leptos_router::components::A;

#[component]
pub fn NotFound() -> impl IntoView {
    view! {
        <section class="not-found">
            <h1>"404 — page not found"</h1>
            <p>"Nothing lives at this address. " <A href="/">"Back to the cluster overview"</A></p>
        </section>
    }
}
