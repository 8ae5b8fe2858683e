use leptos::prelude::*;

/// One labelled input with its error next to it, and a note where the
/// server will change what was typed (a size it clamps).
#[component]
pub fn Field(
    id: &'static str,
    label: &'static str,
    value: RwSignal<String>,
    error: Signal<Option<String>>,
    #[prop(optional, into)] note: Signal<Option<String>>,
    #[prop(optional)] kind: Option<&'static str>,
    #[prop(optional)] hint: Option<&'static str>,
    #[prop(optional, into)] placeholder: Signal<String>,
    #[prop(optional, into)] disabled: Signal<bool>,
) -> impl IntoView {
    let error_id = format!("{id}-error");
    let described = error_id.clone();
    view! {
        <div class="field" class:invalid=move || error.get().is_some()>
            <label for=id>{label}</label>
            <input
                id=id
                name=id
                type=kind.unwrap_or("text")
                prop:value=move || value.get()
                placeholder=move || placeholder.get()
                aria-invalid=move || error.get().is_some().to_string()
                aria-describedby=described
                disabled=move || disabled.get()
                on:input=move |ev| value.set(event_target_value(&ev))
            />
            {hint.map(|h| view! { <p class="hint">{h}</p> })}
            <p class="field-note" id=format!("{id}-note") aria-live="polite">{move || note.get()}</p>
            <p class="field-error" id=error_id role="alert">{move || error.get()}</p>
        </div>
    }
}
