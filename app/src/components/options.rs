use leptos::prelude::*;

/// The `<option>`s of a `<select>`, the current value selected.
pub fn options(values: Vec<String>, current: Signal<String>) -> impl IntoView {
    values
        .into_iter()
        .map(|value| {
            let shown = value.clone();
            let this = value.clone();
            view! { <option value=value selected=move || current.get() == this>{shown}</option> }
        })
        .collect_view()
}
