use leptos::prelude::*;

/// What the last action said: `(true, text)` a success, `(false, text)` a
/// refusal; nothing until then.
#[component]
pub fn Said(message: RwSignal<Option<(bool, String)>>) -> impl IntoView {
    move || {
        message.get().map(|(ok, text)| {
            view! { <p class=if ok { "note note-ok" } else { "note error" } role="status">{text}</p> }
        })
    }
}
