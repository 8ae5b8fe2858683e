use leptos::prelude::*;
use pvedeck_domain::account::{Me, TokenInfo};

use crate::api::{get_me, get_tokens};
use crate::error::UiError;
use crate::pages::people::{Panel, People};

/// `/account`: who you are, what you hold against your quota, and your
/// personal API tokens (for scripts and `pvedeck-cli`).
#[component]
pub fn Account() -> impl IntoView {
    view! {
        <h1>"Your account"</h1>
        <Suspense fallback=|| view! { <p class="loading">"Reading your account…"</p> }>
            {Suspend::new(async move {
                let me = get_me().await.and_then(|a| a);
                let tokens = get_tokens().await.and_then(|a| a);
                view! { <AccountView me tokens/> }
            })}
        </Suspense>
    }
}

#[component]
fn AccountView(me: Result<Me, UiError>, tokens: Result<Vec<TokenInfo>, UiError>) -> impl IntoView {
    let me = match me {
        Ok(me) => me,
        Err(e) => return view! { <p class="error" role="alert">{e.message}</p> }.into_any(),
    };
    let Some(principal) = me.principal.clone() else {
        return view! { <p>"Not signed in: this server needs no sign-in, or you have not signed in."</p> }
            .into_any();
    };
    let groups = if principal.groups.is_empty() {
        "none".to_string()
    } else {
        principal.groups.join(", ")
    };
    let usage = match &me.allowance {
        Some(a) => a.used.against(a.quota),
        None => "no quota: admins are unlimited".to_string(),
    };
    view! {
        <dl class="facts">
            <dt>"Name"</dt><dd class="account-name">{principal.name.clone()}</dd>
            <dt>"Role"</dt><dd>{principal.role.as_str()}</dd>
            <dt>"Groups"</dt><dd>{groups}</dd>
            <dt>"Usage"</dt><dd class="usage">{usage}</dd>
        </dl>
        <h2>"API tokens"</h2>
        <p class="lead">
            "A personal token acts as you on /api and with pvedeck-cli "
            "(PVEDECK_TOKEN). It is shown once, when made; pvedeck keeps only its hash."
        </p>
        <People panel=Panel::Tokens(tokens)/>
    }
    .into_any()
}
