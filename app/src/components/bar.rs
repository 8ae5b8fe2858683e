use leptos::prelude::*;

use pvedeck_domain::format::{num, width};

/// A capacity bar: how much is allocated to VMs and how much is in use, each
/// also given as text (colour is never the only carrier).
#[component]
pub fn Bar(
    label: &'static str,
    /// % of capacity allocated (may pass 100 when over-committed).
    allocated: f64,
    /// % of capacity in use.
    used: f64,
    /// e.g. `6 / 32 vCPU`.
    detail: String,
) -> impl IntoView {
    let over = allocated > 100.0;
    view! {
        <div class="bar" class:over=over>
            <div class="bar-head">
                <span class="bar-label">{label}</span>
                <span class="bar-detail">{detail}</span>
            </div>
            <div
                class="bar-track"
                role="img"
                aria-label=format!("{label}: {}% allocated, {}% used", num(allocated), num(used))
            >
                <div class="bar-alloc" style=width(allocated)></div>
                <div class="bar-used" style=width(used)></div>
            </div>
            <div class="bar-foot">
                <span class="alloc-text">{format!("{}% allocated", num(allocated))}</span>
                <span class="used-text">{format!("{}% used", num(used))}</span>
            </div>
        </div>
    }
}
